//! The Maglev lookup-table builder and the flow selection it serves: a pure crate (no
//! aya, no I/O, no async) shared by the daemon, the hash lab and the offline `lb table`
//! CLI.
//!
//! Algorithm: Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
//! Balancer", NSDI 2016, section 3.4. Every backend `i` has a permutation of the `M`
//! slots given by `offset_i = h1(key_i) mod M` and `skip_i = h2(key_i) mod (M - 1) + 1`
//! (entry `j` is `(offset_i + j * skip_i) mod M`, a permutation because `M` is prime);
//! backends take turns claiming their next preferred empty slot until all `M` slots are
//! filled. Permutation entries are computed on the fly: O(M + N) memory, never an
//! `N x M` matrix.
//!
//! What this module adds to the paper, each in its own file:
//! - [`key`]: the canonical backend identity [`BackendKey`] (what is hashed, how
//!   backends are ordered);
//! - [`backend`]: [`Backend`] (key and weight) and the CLI form `ADDR[:PORT][=WEIGHT]`;
//! - [`size`]: table-size validation ([`MAX_TABLE_SIZE`]; the default size and seed are in
//!   [`crate::defaults`]);
//! - [`permutation`]: a backend's (offset, skip) pair, derived from its key by `h1`/`h2`
//!   ([`Permutation::for_key`]: seeded XXH3-128) or given explicitly;
//! - [`quota`]: weights to exact per-backend slot counts (largest remainder, at least one
//!   slot for every backend with weight > 0);
//! - [`fill`]: the turn schedule and the fill loop ([`fill_slots`] for explicit
//!   permutations, e.g. the paper's worked example); `walk`: the probe loop itself
//!   (scalar, and eight entries per step with AVX2);
//! - [`table`]: [`MaglevTable::build`], validation and warnings;
//! - [`fingerprint`]: the versioned SHA-256 [`Fingerprint`] of a table;
//! - [`diff`]: [`TableDiff`], what changes between two tables;
//! - [`flow`]: flow keys and the slot a flow selects, as the data plane computes it;
//! - [`defaults`]: the table size, seed and weight every caller defaults to.
//!
//! # Determinism
//! A table depends only on the set of (key, weight) pairs, the table size and the seed:
//! backends are sorted by key first, every computation uses fixed-width integers, and the
//! hash is a specified algorithm (XXH3) with an explicit seed. It does not depend on the
//! input order, the process, the platform or the standard library's formatting (keys are
//! rendered by this module, see [`BackendKey`]). [`fingerprint`] pins the result.

pub mod backend;
pub mod defaults;
pub mod diff;
pub mod error;
pub mod fill;
pub mod fingerprint;
pub mod flow;
pub mod key;
pub mod permutation;
pub mod quota;
pub mod size;
pub mod table;
mod walk;

pub use backend::{Backend, parse_backend_list};
pub use diff::TableDiff;
pub use error::MaglevError;
pub use fill::fill_slots;
pub use fingerprint::{FINGERPRINT_VERSION, Fingerprint};
pub use key::BackendKey;
pub use permutation::Permutation;
pub use size::{MAX_TABLE_SIZE, is_prime, validate_table_size};
pub use table::MaglevTable;
