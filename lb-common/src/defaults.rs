// SPDX-License-Identifier: MIT OR Apache-2.0
//! Defaults the kernel side needs at compile time: the sizes the eBPF object declares for
//! the maps that userspace resizes at load time. Every other default lives in the `lb` crate's
//! `defaults` module, which re-exports these so that one table lists them all.

/// Default capacity of `CONNTRACK_V4` and of `CONNTRACK_V6`, each (entries; the daemon
/// sets `conntrack.capacity` at load time).
pub const CT_CAPACITY: u32 = 1_048_576;

/// Default slots of `SYN_CACHE` (a power of two; the daemon sets
/// `conntrack.syn_capacity` at load time): 16,384 slots of 64 bytes, 1 MiB, which stays
/// in a core's L2 cache (a SYN measured ~25 ns slower with 65,536 slots, 4 MiB, on a
/// 2 MiB L2). A slot only has to hold a SYN for one handshake round trip; with `n`
/// handshakes in flight a SYN loses its slot to another with probability about
/// `1 - e^(-n / slots)` (6 % at 1,000 in flight, 46 % at 10,000). That only matters if
/// the table changes during the handshake: its ACK is then picked from the current
/// table. Raise it for very high connection rates.
pub const CT_SYN_CAPACITY: u32 = 16_384;

const _: () = assert!(CT_SYN_CAPACITY.is_power_of_two());

/// Default entries of `FRAGMENTS` (the daemon sets `conntrack.fragment_capacity` at load
/// time): datagrams whose first fragment was seen and whose later fragments may still
/// come. 8,192 entries of 52 bytes (key and value), as Cilium's IPv4 fragment map; a
/// datagram whose entry is evicted before its last fragment loses the rest
/// (`drop_fragment`).
pub const FRAG_CAPACITY: u32 = 8_192;

/// Default entries of `AFFINITY` (the daemon sets `conntrack.persistence_capacity` at
/// load time): the clients of VIPs with a persistence timeout whose affinity pins are
/// kept, 65,536 entries of 40 bytes (key and value) over all such VIPs. An evicted
/// client's next connection follows the table (and pins it again).
pub const AFFINITY_CAPACITY: u32 = 65_536;

/// Default entries of `EXCEPTIONS` (the daemon sets `conntrack.exceptions_capacity` at
/// load time): the fast path's pins that the miss rule does not give again, over all
/// fast-path VIPs. 262,144 entries of 72 bytes (40-byte key, 32-byte value),
/// preallocated: about 36 MiB of kernel memory with the hash table's own per-entry
/// overhead (the map's `memlock`). A full map never evicts: a new exception is refused
/// and counted (residual R2 of the fast path).
pub const EXCEPTIONS_CAPACITY: u32 = 262_144;
