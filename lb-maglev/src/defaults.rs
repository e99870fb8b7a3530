//! The Maglev builder's defaults: the table size, the permutation seed and a backend's
//! weight. `lb`'s configuration and CLI re-export them, so the one value lives here.
//!
//! A leaf module: it imports nothing of this crate (the table size is `lb_common`'s).

/// `maglev_seed` and `lb table --seed`: the seed of `h1`/`h2`, the ASCII bytes
/// `lbmaglev` read as a big-endian `u64` (0x6c62_6d61_676c_6576 =
/// 7,809,924,968,928,273,782). Every instance that should build the same tables must use
/// the same seed.
pub const MAGLEV_SEED: u64 = u64::from_be_bytes(*b"lbmaglev");

/// `vip.table_size` and `lb table --size`: the Maglev table size `M`, a prime (the size
/// the paper uses in its evaluation, section 5.3). Flows are spread in steps of
/// 1/65,537. The data plane's [`lb_common::maps::STD_TABLE_SIZE`], whose tables the
/// XDP program reads without a helper call.
pub const TABLE_SIZE: u32 = lb_common::maps::STD_TABLE_SIZE;

/// `vip.backend.weight`, a backend's weight in `lb table` without `=WEIGHT`, and in
/// `lb backend add` without `--weight`.
pub const WEIGHT: u32 = 1;
