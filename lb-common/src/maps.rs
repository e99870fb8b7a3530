// SPDX-License-Identifier: MIT OR Apache-2.0
//! Names and limits of the maps and programs in the eBPF object.
//!
//! Map names are the symbol names in the object; userspace looks maps up by them, so they
//! are defined here once. Limits are compile-time map sizes unless stated otherwise.

/// Version of the meaning of the maps' keys and values. Sizes and map definitions are
/// compared by themselves when a restarted daemon adopts a pinned datapath; bump this
/// when a key or value changes meaning without changing size (a field renamed to another
/// use, a flag bit reassigned), so that a pinned datapath of the old meaning is refused.
pub const LAYOUT_VERSION: u32 = 6;

/// The load balancer's XDP program.
pub const XDP_PROGRAM: &str = "lb_xdp";
/// The load balancer's rare paths (later fragments, ICMP, "too big" answers): an XDP
/// program [`XDP_PROGRAM`] tail-calls through [`RARE_PROGS`], never attached itself.
pub const RARE_PROGRAM: &str = "lb_xdp_rare";
/// The load balancer's program for VLAN-tagged frames and first fragments, which
/// [`XDP_PROGRAM`] reaches by tail call ([`RARE_PROGS`] slot [`FULL_SLOT`]): the same
/// processing, with the tag stripped and put back and the fragment recorded, so that
/// the untagged unfragmented packets of `lb_xdp` carry neither.
pub const FULL_PROGRAM: &str = "lb_xdp_full";
/// [`RARE_PROGS`] slot of [`RARE_PROGRAM`].
pub const RARE_SLOT: u32 = 0;
/// [`RARE_PROGS`] slot of [`FULL_PROGRAM`].
pub const FULL_SLOT: u32 = 1;
/// An XDP program that returns `XDP_PASS` and does nothing else: the reference for
/// benchmarks ("ns over an empty program").
pub const EMPTY_PROGRAM: &str = "lb_empty";
/// The load balancer built without packet tracing (benchmark harness only): the
/// reference for what tracing costs while it is off.
pub const UNTRACED_PROGRAM: &str = "lb_xdp_untraced";
/// The TC egress program (`clsact`/TCX egress of the LB's interface) that encapsulates
/// tunnel-mode health probes: packets whose `skb->mark` is a probe mark
/// ([`crate::probe`]) go IP-in-IP to the backend the mark names.
pub const PROBE_PROGRAM: &str = "lb_probe_encap";
/// Benchmark harness: restores the frame from [`BENCH_FRAME`] before every repetition of
/// `BPF_PROG_TEST_RUN`, then tail-calls `BENCH_PROGS[0]`.
pub const BENCH_PROGRAM: &str = "lb_bench";
/// An XDP program that returns `XDP_TX` and does nothing else: the limit of the
/// live-frames packet-rate benchmark (benchmark harness only).
pub const TX_PROGRAM: &str = "lb_tx";
/// An XDP program that grows the headroom by an outer IPv4 header (20 bytes), writes
/// the Ethernet header in front and returns `XDP_TX`: the limit of a program that
/// encapsulates, in the live-frames packet-rate benchmark (benchmark harness only).
pub const TX_ENCAP_PROGRAM: &str = "lb_tx_encap";
/// An XDP program that returns `XDP_DROP`: attached to the veth peer that receives a
/// packet-rate benchmark's frames (benchmark harness only).
pub const SINK_PROGRAM: &str = "lb_sink";

/// `BPF_MAP_TYPE_ARRAY` of one [`crate::types::LbConfig`].
pub const CONFIG: &str = "CONFIG";
/// `BPF_MAP_TYPE_HASH`: [`crate::types::VipKey`] → [`crate::types::VipEntry`].
pub const VIPS: &str = "VIPS";
/// `BPF_MAP_TYPE_ARRAY` of [`VIP_FILTER_WORDS`] `u64`: a bitmap with one bit set for
/// every VIP ([`crate::hash::vip_filter_bit`]). A packet whose bit is clear is not for a
/// VIP and passes without a hash-map lookup; a set bit only means "maybe", and the
/// packet goes on to the exact lookups. Userspace sets a VIP's bit before writing its
/// `VIPS` entry and clears it only after removing the entry (bits are only ever added
/// or removed for VIPs that are absent), so no VIP is ever filtered out.
pub const VIP_FILTER: &str = "VIP_FILTER";
/// `BPF_MAP_TYPE_ARRAY`: VIP id → [`crate::types::VipInfo`], the VIP a pin's
/// `vip_id` stands for. A conntrack hit whose VIP still matches is forwarded without
/// the `VIPS` lookup.
pub const VIP_INFO: &str = "VIP_INFO";
/// `BPF_MAP_TYPE_ARRAY` of `u64`, indexed like [`VIP_FILTER`]: a set bit means some VIP
/// whose filter bit it is takes the fast path ([`crate::types::VIP_FAST_PATH`]). A
/// packet whose bit is clear takes today's path with no `VIPS` lookup before its
/// conntrack lookup.
pub const FAST_FILTER: &str = "FAST_FILTER";
/// `BPF_MAP_TYPE_ARRAY` of [`VIP_CACHE_SLOTS`] [`crate::types::VipCacheSlot`], indexed
/// by a VIP key's [`crate::hash::vip_filter_bit`], mmapable ([`VIP_CACHE_FLAGS`]): a
/// copy of `VIPS` entries that a fast-path packet reads without a hash-map lookup
/// (an array lookup is inlined by the verifier, a hash-map lookup is a call). A slot
/// serves a packet only when `VIP_INFO` confirms it
/// ([`crate::types::VipCacheSlot::entry_for`]); otherwise the packet looks `VIPS` up.
pub const VIP_CACHE: &str = "VIP_CACHE";
/// Slots of [`VIP_CACHE`]: one per filter bit (16 bytes each, 1 MiB). Of two VIPs with
/// the same bit, one is cached; the other takes the `VIPS` lookup.
pub const VIP_CACHE_SLOTS: u32 = VIP_FILTER_BITS;
/// Flags of [`VIP_CACHE`]: `BPF_F_MMAPABLE` (0x400), so that userspace changes a slot's
/// flags and epoch with one 8-byte store (a map update copies bytes one by one).
pub const VIP_CACHE_FLAGS: u32 = 0x400;
/// `BPF_MAP_TYPE_HASH`: [`crate::types::VipAddrKey`] → `u32` (number of VIPs on the
/// address). Consulted only for packets whose port cannot be read (fragments, truncated
/// L4), to tell "for a VIP address" from "for someone else".
pub const VIP_ADDRS: &str = "VIP_ADDRS";
/// `BPF_MAP_TYPE_ARRAY_OF_MAPS` of [`TABLE_SLOTS`] entries: each VIP has two table
/// buffers, at indexes `2 * vip_id` (buffer A) and `2 * vip_id + 1` (buffer B); its
/// [`crate::types::VipEntry`] says which one is live. Each inner map is one complete
/// Maglev table (see [`TABLE_HEADER_LEN`]).
///
/// The cost of a read: tables of the default size ([`STD_TABLE_SIZE`]) are in
/// [`TABLES_STD`] instead, whose cells the program reads without a helper call. A table
/// of another size is read here with two calls, one for the header (its size M), one
/// for the cell: with `BPF_F_INNER_MAP` the kernel cannot inline the inner lookup.
///
/// Why two buffers: replacing an inner map from userspace makes the kernel wait for an
/// RCU grace period inside the system call (`maybe_wait_bpf_programs()`), several
/// milliseconds. Instead userspace writes the new table into the buffer no packet reads
/// (through mmap), then switches the VIP entry to it with one hash-map update: a packet
/// sees the whole old or the whole new table. Before a buffer is written again,
/// userspace waits for a grace period, so no packet can still be reading it.
pub const TABLES: &str = "TABLES";
/// `BPF_MAP_TYPE_ARRAY_OF_MAPS` of [`TABLE_SLOTS`] entries, indexed as [`TABLES`]: the
/// table buffers of [`STD_TABLE_SIZE`] slots, for the VIPs whose entry has
/// [`crate::types::VIP_TABLE_STD`]. Its inner maps all have one size, so they are
/// created without `BPF_F_INNER_MAP` ([`STD_TABLE_MAP_FLAGS`]) and the kernel inlines
/// the lookup of a cell: the program reads slot `hash % STD_TABLE_SIZE` with no helper
/// call and no header read. A buffer of another size is in [`TABLES`]; a buffer is in
/// one of the two at a time. New in layout 6.
pub const TABLES_STD: &str = "TABLES_STD";
/// `BPF_MAP_TYPE_ARRAY`: backend id → [`crate::types::BackendEntry`]. Id 0 means "none".
pub const BACKENDS: &str = "BACKENDS";
/// `BPF_MAP_TYPE_LRU_HASH`: [`crate::types::FlowKey4`] → [`crate::types::CtEntry`] for
/// established IPv4 flows (TCP flows past the SYN, and UDP flows). IPv4 has its own map
/// because the kernel hashes the whole key on every lookup (jhash, three rounds per 12
/// bytes): the 16-byte key costs one round where the 40-byte one costs three.
pub const CONNTRACK_V4: &str = "CONNTRACK_V4";
/// `BPF_MAP_TYPE_LRU_HASH`: [`crate::types::FlowKey`] → [`crate::types::CtEntry`] for
/// established IPv6 flows.
pub const CONNTRACK_V6: &str = "CONNTRACK_V6";
/// `BPF_MAP_TYPE_HASH`: [`crate::types::FlowKey`] → [`crate::types::CtEntry`], the
/// fast path's *exceptions* (rule M3 of `crate::fastpath`): the pins of flows on dirty
/// slots of fast-path VIPs that the miss rule does not give again (a TCP pin naming
/// another backend than the slot's clean owner, every UDP pin). Unlike the conntrack
/// maps it never evicts: a full map refuses the insert, and the data path counts the
/// give-up (residual R2: `fp_syn_dropped`, `fp_held_kept`, `fp_unpinned`). Both
/// families, one 40-byte key: it holds few entries, read only on dirty slots. Its
/// entries go when their slot turns clean and, for a SYN's pin whose handshake never
/// completed, past the SYN hold (the daemon's cleaning walk). Sized at load time
/// (`conntrack.exceptions_capacity`, default
/// [`crate::defaults::EXCEPTIONS_CAPACITY`]); new in layout 4.
pub const EXCEPTIONS: &str = "EXCEPTIONS";
/// `BPF_MAP_TYPE_ARRAY` of [`crate::types::SynEntry`], split into one part per CPU: the
/// backend chosen for each TCP SYN, in the flow's slot of its CPU's part
/// ([`crate::syn_cache::slot_index`]), until the handshake's ACK on the same CPU promotes
/// it into conntrack (an ACK on another CPU takes the table). A direct-mapped array instead of an LRU
/// map: recording a SYN is one write to a cache-resident slot (no lock, no eviction
/// walk), and a SYN flood only overwrites other held SYNs, never pins, so it cannot
/// evict established flows (BR-16 in `docs/src/operations/failure-scenarios.md`). Concurrent writers
/// are detected by the slot's tag.
pub const SYN_CACHE: &str = "SYN_CACHE";
/// Per CPU, backend id → [`crate::types::NextHopEntry`], the `bpf_fib_lookup` result of
/// the backend's address reused for `LbConfig::nexthop_cache_ns` (FIB mode). The helper
/// walks the routing and neighbour tables on every call, which costs more than the rest
/// of the packet path; a per-CPU entry needs no lock and no atomics. A
/// `BPF_MAP_TYPE_ARRAY` of one row per CPU ([`CPU_ROW_LEN`], [`cpu_rows_entries`]),
/// not a `PERCPU_ARRAY`: see [`BACKEND_STATS`].
pub const NEXTHOP_CACHE: &str = "NEXTHOP_CACHE";
/// `BPF_MAP_TYPE_ARRAY`: VIP id → one `u64`, the epoch of the VIP's table the program
/// last saw (high 32 bits) and when it first saw it (low 32 bits, the conntrack clock in
/// 2^30 ns units): one 64-bit word, so a reader never pairs one epoch with another's
/// time. A SYN looks conntrack up only within
/// [`crate::conntrack::DUPLICATE_SYN_WINDOW_NS`] of that time. Written by the program
/// only, when it sees a new epoch (a table change), so it stays in the CPUs' caches.
pub const TABLE_SEEN: &str = "TABLE_SEEN";
/// Per-CPU array of one `u64`: the theoretical arrival time (ns, on the conntrack clock)
/// of the CPU's next new conntrack pin, the state of the rate limit of new pins
/// (`crate::types::LbConfig::new_pin_interval_ns`). Per CPU: no lock, no atomics, and a
/// flood on one CPU does not take the others' budget.
pub const NEW_PIN_RATE: &str = "NEW_PIN_RATE";
/// `BPF_MAP_TYPE_LRU_HASH`: [`crate::types::AffinityKey`] →
/// [`crate::types::AffinityEntry`], the affinity pins of the clients of VIPs with a
/// persistence timeout (`crate::affinity`): the backend a client's new connections go
/// to, and when it last opened one. Shared by all CPUs and both families; sized at load
/// time (`conntrack.persistence_capacity`, default
/// [`crate::defaults::AFFINITY_CAPACITY`]). LRU: a full map evicts the least recently
/// used client, whose next connection follows the table.
pub const AFFINITY: &str = "AFFINITY";
/// `BPF_MAP_TYPE_ARRAY`: VIP id → `u64`, the VIP's affinity timeout (ns; 0: none). Read
/// only for a new connection of a VIP whose entry has [`crate::types::VIP_AFFINITY`].
pub const AFFINITY_TIMEOUT: &str = "AFFINITY_TIMEOUT";
/// `BPF_MAP_TYPE_LRU_HASH`: [`crate::types::FragKey`] → [`crate::types::FragEntry`],
/// the backend the first fragment of each recent IP datagram to a VIP went to; later
/// fragments (no ports) look their datagram up and follow it. Small (the default
/// [`crate::defaults::FRAG_CAPACITY`], sized at load time): an entry only has to live
/// while its datagram's fragments are in flight, and LRU eviction drops the oldest.
pub const FRAGMENTS: &str = "FRAGMENTS";
/// `BPF_MAP_TYPE_LPM_TRIE`: [`crate::types::SourceData`] (after the 32-bit prefix
/// length) → `u32` (1): the allowed client prefixes of every VIP that has a list.
/// One trie for all VIPs and both families: the VIP key is the start of the matched
/// data (see [`crate::types::VIP_KEY_BITS`]).
pub const SOURCE_RANGES: &str = "SOURCE_RANGES";
/// `BPF_MAP_TYPE_ARRAY` of [`VIP_FILTER_WORDS`] `u64`, indexed like [`VIP_FILTER`]: a bit
/// is set while some VIP with that bit has allowed source prefixes. A packet whose bit
/// is clear skips the trie lookup; the check costs nothing unless the configuration
/// has lists at all (`CONFIG_SOURCE_RANGES`).
pub const SOURCE_FILTER: &str = "SOURCE_FILTER";
/// `BPF_MAP_TYPE_ARRAY`: VIP id → `u32`, 1 while the VIP has allowed source prefixes.
/// Read after a trie miss: the VIP sharing a set [`SOURCE_FILTER`] bit with a
/// restricted VIP, but without a list, is not refused.
pub const SOURCE_RESTRICTED: &str = "SOURCE_RESTRICTED";
/// Per-CPU array of [`ICMP_RATE_KINDS`] `u64`: the rate limiter of the ICMP messages the
/// program sends (index 0: too big; 1: echo replies), each the theoretical arrival time
/// (ns) of the generic cell rate algorithm. Per CPU: no atomics on the packet path.
pub const ICMP_RATE: &str = "ICMP_RATE";
/// `BPF_MAP_TYPE_PROG_ARRAY` of two programs: [`RARE_PROGRAM`] in slot [`RARE_SLOT`] and
/// [`FULL_PROGRAM`] in slot [`FULL_SLOT`], which userspace puts there when it loads the
/// object. A tail call gives the rare paths a stack of their own (the verifier allows
/// 512 bytes for a whole chain of calls, and the fast path takes most of it), and each
/// program its own verifier budget. The kernel empties a program array when its last
/// file descriptor closes, so the loader keeps one.
pub const RARE_PROGS: &str = "RARE_PROGS";
/// Per-CPU array of one work note (kernel-only layout): what [`XDP_PROGRAM`] hands to
/// [`RARE_PROGRAM`] for the packet it tail-calls it with (the kind of work, the VLAN
/// tag it stripped, the too-big packet's sizes).
pub const RARE_WORK: &str = "RARE_WORK";
/// Per-CPU array of one scratch record (kernel-only layout): the `FRAGMENTS` key and
/// value a first fragment writes and the `SOURCE_RANGES` key of a source check, built
/// there rather than on the stack of the functions the load balancer calls, which the
/// verifier's 512 bytes for a chain of calls leave no room for.
pub const SCRATCH: &str = "SCRATCH";
/// `BPF_MAP_TYPE_ARRAY` of one `u32`: the current tick of the conntrack clock
/// ([`crate::types::ct_ticks`] of CLOCK_MONOTONIC_COARSE), written by the daemon about
/// once a second. An established flow's packet copies it into its pin
/// (`CtEntry::seen_ticks`) instead of reading the clock, a helper call on every packet;
/// 0 (no daemon has written it yet) makes the program read the clock itself.
pub const ACTIVITY_TICK: &str = "ACTIVITY_TICK";
/// Per-CPU array of one [`crate::stats::GlobalStats`].
pub const GLOBAL_STATS: &str = "GLOBAL_STATS";
/// Per-CPU array: VIP id → [`crate::stats::VipStats`].
pub const VIP_STATS: &str = "VIP_STATS";
/// Per CPU, backend id → [`crate::stats::BackendStats`]: a `BPF_MAP_TYPE_ARRAY` of one
/// row of [`CPU_ROW_LEN`] elements per possible CPU, CPU `c`'s element of id `i` at
/// `c * CPU_ROW_LEN + i`, sized at load ([`cpu_rows_entries`]). The kernel creates a
/// `PERCPU_ARRAY` with one per-CPU allocation per element: 65,536 of them took about
/// 60 ms a map at every first start; the plain array is one allocation of the same
/// memory (`docs/src/development/performance.md`, the start at scale).
pub const BACKEND_STATS: &str = "BACKEND_STATS";
/// `BPF_MAP_TYPE_ARRAY` of one [`crate::trace::TraceFilter`]: which VIP packets `lb trace`
/// records while `CONFIG_TRACE` is set. A separate map, read only when the flag is set,
/// so that tracing costs the fast path one test of a flag it has already loaded.
pub const TRACE_FILTER: &str = "TRACE_FILTER";
/// Per-CPU array of one [`crate::trace::TracedPacket`]: the traced packet the load
/// balancer hands to the trace program.
pub const TRACE_PACKET: &str = "TRACE_PACKET";
/// `BPF_MAP_TYPE_PROG_ARRAY` of one program: the trace program (`TRACE_PROGRAM`), which
/// the load balancer tail-calls for a traced packet, so that logging runs with a stack
/// of its own (the load balancer's leaves too little for aya-log's record).
pub const TRACE_PROGS: &str = "TRACE_PROGS";
/// The trace program: logs the packet in `TRACE_PACKET`, counts its reason, returns its
/// action.
pub const TRACE_PROGRAM: &str = "lb_trace";
/// `BPF_MAP_TYPE_RINGBUF` of aya-log's records (declared by `aya-log-ebpf`): the trace
/// records of `lb trace`.
pub const AYA_LOGS: &str = "AYA_LOGS";
/// Per-CPU array of one [`crate::probe::ProbeStats`]: what the probe program did.
pub const PROBE_STATS: &str = "PROBE_STATS";
/// Per-CPU array of one [`crate::types::BenchFrame`] (benchmark harness only): each CPU
/// restores its own copy and counts its own repetitions.
pub const BENCH_FRAME: &str = "BENCH_FRAME";
/// `BPF_MAP_TYPE_PROG_ARRAY` of one program: the program under benchmark.
pub const BENCH_PROGS: &str = "BENCH_PROGS";
/// `BPF_MAP_TYPE_ARRAY` of [`crate::types::BENCH_SEQ_MAX`] `u32`: the values the
/// harness stamps into the frame, one per repetition, to draw flows from a population
/// (benchmark harness only).
pub const BENCH_SEQ: &str = "BENCH_SEQ";

/// Maximum number of VIPs (size of `VIPS`, `VIP_STATS`, half of `TABLES`); VIP ids are
/// `0..MAX_VIPS`.
pub const MAX_VIPS: u32 = 1024;
/// Bits of `VIP_FILTER` (a power of two).
pub const VIP_FILTER_BITS: u32 = 65_536;
/// `u64` words of `VIP_FILTER`.
pub const VIP_FILTER_WORDS: u32 = VIP_FILTER_BITS / 64;
/// Entries of `TABLES`: two table buffers per VIP.
pub const TABLE_SLOTS: u32 = MAX_VIPS * 2;
/// Entries of [`ICMP_RATE`]: one rate limiter per kind of ICMP message sent.
pub const ICMP_RATE_KINDS: u32 = 2;
/// [`ICMP_RATE`] index of "fragmentation needed" / "packet too big".
pub const ICMP_RATE_TOO_BIG: u32 = 0;
/// [`ICMP_RATE`] index of echo replies.
pub const ICMP_RATE_ECHO: u32 = 1;
/// Most allowed source prefixes of all VIPs together (`SOURCE_RANGES` entries).
pub const MAX_SOURCE_RANGES: u32 = 65_536;
/// Size of `BACKENDS` and of a CPU's row of `BACKEND_STATS` and `NEXTHOP_CACHE`;
/// backend ids are `1..MAX_BACKENDS` (0 = none).
pub const MAX_BACKENDS: u32 = 65_536;
/// Elements of one CPU's row of the arrays laid out in CPU rows ([`BACKEND_STATS`],
/// [`NEXTHOP_CACHE`]): a backend id's range.
pub const CPU_ROW_LEN: u32 = MAX_BACKENDS;
/// The maps laid out in CPU rows, which userspace sizes at load with
/// [`cpu_rows_entries`].
pub const CPU_ROW_MAPS: [&str; 2] = [BACKEND_STATS, NEXTHOP_CACHE];

/// Entries of an array laid out in CPU rows for `cpus` possible CPUs: one row of
/// [`CPU_ROW_LEN`] each; `None` when that overflows a map's `u32` size.
pub const fn cpu_rows_entries(cpus: u32) -> Option<u32> {
    CPU_ROW_LEN.checked_mul(cpus)
}

/// Cells before the slots in an inner table map: cell 0 is the header (the table size
/// M and its generation, [`crate::types::TableHeader`]); cell `TABLE_HEADER_LEN + i` is
/// slot `i`, its owner and state ([`crate::fastpath::SlotState`]). Every cell is a
/// 16-byte [`crate::types::TableCell`].
pub const TABLE_HEADER_LEN: u32 = 1;
/// Index of the header cell in an inner table map.
pub const TABLE_HEADER_INDEX: u32 = 0;
/// Largest table size M the data plane accepts (bounds the slot index the program
/// computes; the controller's own maximum must not exceed it).
pub const MAX_TABLE_SIZE: u32 = 4_194_301;
/// The table size M of the buffers in [`TABLES_STD`]: the default `table_size`
/// (`lb_maglev::defaults::TABLE_SIZE` is this constant), the size the Maglev paper
/// uses in its evaluation (section 5.3). A prime.
pub const STD_TABLE_SIZE: u32 = 65_537;
/// Flags of every inner map of [`TABLES_STD`]: `BPF_F_MMAPABLE` (0x400) only. Without
/// `BPF_F_INNER_MAP` every inner map must have the template's `max_entries`, exactly
/// [`STD_TABLE_SIZE`] + [`TABLE_HEADER_LEN`], and the kernel then inlines the program's
/// lookup of a cell (`array_map_gen_lookup`) instead of calling the helper.
pub const STD_TABLE_MAP_FLAGS: u32 = 0x400;
/// Flags of every inner table map of [`TABLES`]: `BPF_F_INNER_MAP` (0x1000: inner maps
/// may differ in `max_entries`, kernel 5.10+) | `BPF_F_MMAPABLE` (0x400: userspace fills
/// the table through mmap instead of one syscall per slot). The kernel requires every
/// inner map to have exactly the template's flags.
pub const TABLE_MAP_FLAGS: u32 = 0x1000 | 0x400;
/// Flags of the conntrack maps: none, i.e. the common LRU: any CPU can use the whole
/// capacity (each CPU keeps a small local free list, refilled from the shared lists in
/// batches). Not `BPF_F_NO_COMMON_LRU` (0x2): it splits the preallocated entries
/// evenly between the *possible* CPUs, so one CPU's flows could only use
/// `capacity / possible CPUs` entries (measured: 4,096 entries, 4,000 flows on one of
/// two CPUs, 2,048 kept). Inserts measured no slower here with the common lists.
pub const CT_MAP_FLAGS: u32 = 0;

/// The backend agent's XDP program (`lb agent run`, the counterpart of GLB's
/// `glb-redirect`): decapsulates IP-in-IP and GUE and follows second-chance candidates
/// ([`crate::agent`]). It shares the object with the load balancer but none of its maps.
pub const AGENT_PROGRAM: &str = "lb_agent";
/// The prefix of every map only the agent uses: not part of the load balancer's pinned
/// datapath (not pinned by `lb run`, not in its layout stamp).
pub const AGENT_MAP_PREFIX: &str = "AGENT_";
/// `BPF_MAP_TYPE_ARRAY` of one [`crate::types::AgentConfig`].
pub const AGENT_CONFIG: &str = "AGENT_CONFIG";
/// `BPF_MAP_TYPE_PERCPU_ARRAY` of one [`crate::agent::AgentStats`].
pub const AGENT_STATS: &str = "AGENT_STATS";
