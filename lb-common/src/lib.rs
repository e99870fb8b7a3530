// SPDX-License-Identifier: MIT OR Apache-2.0
//! Types shared by the XDP program (`lb-ebpf`) and the userspace crates (`lb-dataplane`, `lb`).
//!
//! Everything here is `#![no_std]`, `#[repr(C)]` with explicit padding and a compile-time
//! size assertion, so the kernel and userspace agree on every byte. Byte order is stated
//! per field. With the `user` feature the map key and value types implement `aya::Pod`.
//!
//! Modules: [`maps`] (map names and limits), [`defaults`] (the map sizes the object
//! declares), [`types`] (map keys and values, one file per map family), [`stats`]
//! (counter layouts, verdict reasons and their XDP actions), [`probe`] (the socket mark
//! that sends a health probe to one backend), [`trace`] (the packet trace's filter and
//! decision codes), [`csum`] (the Internet checksum arithmetic of the XDP program, here
//! for host tests), and the two decisions both sides make,
//! written once: [`hash`] (the flow hash), [`hash_fields`] (a VIP's hash fields and the
//! table hash, which picks a flow's Maglev slot) and
//! [`conntrack`] (whether a flow's pin, a held SYN or the table chooses its backend),
//! [`affinity`] (whether a client's affinity pin or the table chooses a new
//! connection's backend), [`syn_cache`] (which slot holds a flow's SYN).
//! [`fastpath`] holds the fast path's slot state and decisions (issue 30), which the
//! data path decides by, and [`second_chance`] the candidates a packet offers the
//! backends' agent (issue 31).
//!
//! # Glossary
//!
//! The concepts both sides use, one word each; comments and docs in every crate use
//! these words.
//!
//! - **VIP**: a virtual service, address + port + protocol (TCP or UDP), that clients
//!   connect to ([`types::VipKey`]). Its *VIP id* indexes `VIP_INFO`, `VIP_STATS` and
//!   (times two) `TABLES`. A packet to a VIP address but another port or protocol is not
//!   VIP traffic.
//! - **Backend**: a server behind a VIP, identified by its address (`BackendKey` in
//!   lb-maglev). Each (VIP, backend) pair has its own *backend id*, an index into
//!   `BACKENDS`; id 0 means none.
//! - **Maglev table**: a VIP's array of M *slots* (M prime), each holding a backend id
//!   or 0 (Eisenbud et al., NSDI 2016, section 3.4). A new flow goes to the backend in
//!   slot `flow_hash % M`. Backends own slots in proportion to their weights.
//! - **Table buffer**: each VIP has two inner maps in `TABLES`, buffers A and B. The
//!   *live* buffer is the one the VIP's `VIPS` entry names; its table is the VIP's
//!   *current table*. A change writes the other buffer and then switches the entry to
//!   it; the buffer left is *stale* until an RCU *grace period* has passed, after which
//!   no packet can still read it.
//! - **Generation**: the controller's count of a VIP's table versions: 1 for a new VIP,
//!   one more for every new table built for it. It is stored in the table's header
//!   ([`types::TableHeader::generation`]), logged and shown by `lb status`, for operators;
//!   the XDP program never reads it.
//! - **Epoch**: the data plane's counter of table installs, over all VIPs: every install
//!   takes the next value, never 0 ([`types::VipEntry::epoch`]). It is written into the
//!   VIP's `VIPS` and `VIP_INFO` entries and recorded in every TCP pin and held SYN, so
//!   the program can tell whether a backend was chosen from the VIP's current table: it
//!   was if its epoch equals the VIP's. The epoch is not the generation, because that test
//!   needs a value that never repeats for a VIP id while pins carry it, and the
//!   generation repeats: it starts again at 1 when a VIP is removed and added again
//!   (often with the same VIP id), and an undone change re-installs the previous table
//!   under its old generation after a newer table was live for a moment. An epoch is
//!   given to one install only (it would take 2^32 installs to wrap).
//! - **Flow**: a 5-tuple and address family ([`types::FlowKey`], [`types::FlowKey4`]).
//!   Its **flow hash** ([`hash::flow_hash`], seeded by `hash_seed`) picks both its
//!   Maglev slot (`% M`) and its SYN cache slot (`& syn_cache_mask` within the CPU's
//!   part: [`syn_cache::slot_index`]).
//! - **Conntrack**: the two LRU hash maps `CONNTRACK_V4` and `CONNTRACK_V6`, shared by
//!   all CPUs, that keep established flows on their backends.
//! - **Pin**: a flow's conntrack entry ([`types::CtEntry`]): its backend id, VIP id,
//!   time, epoch and (TCP) initial sequence number. A flow is *pinned* once it has one.
//!   A pin *holds* while its VIP is the packet's, its backend is active or draining and
//!   (UDP) it is not idle past the timeout; a pin that does not hold is *re-picked*:
//!   overwritten with the current table's choice. A pin is *re-labelled* when the
//!   current table agrees with it: its epoch becomes the VIP's.
//! - **Affinity pin**: a client's entry in `AFFINITY` ([`types::AffinityEntry`]) on a
//!   VIP with a persistence timeout: the backend its new connections go to while it is
//!   not idle longer than the timeout and the backend is active (IPVS: a persistence
//!   template). A client is the source address cut to the VIP's prefix (and the port
//!   for `src+dport`): its *affinity fields* ([`affinity::key`]).
//! - **SYN cache**: the `SYN_CACHE` array, split into one part per CPU, in which the
//!   backend chosen for a TCP SYN waits, in the flow's slot of its CPU's part, for the
//!   handshake's ACK on the same CPU ([`syn_cache`]). A slot so
//!   filled is a **held SYN** ([`types::SynEntry`]); the ACK *promotes* it into a pin. A
//!   SYN never creates a pin, so a SYN flood can only overwrite other held SYNs (counted
//!   as `ct_syn_only_evicted`; lb-dataplane's `CtTable::SynOnly` names the same state).
//! - **Active**: a backend that owns slots and keeps its pins ([`types::BACKEND_ACTIVE`]).
//! - **Draining** (to *drain* a backend): no slots, so no new flows, but its pins hold
//!   until the flows end ([`types::BACKEND_DRAINING`]): `state = "drain"`, `lb backend
//!   drain`, or weight 0.
//! - **Down**: no slots and its pins no longer hold: its flows are re-picked on the
//!   current table ([`types::BACKEND_DOWN`]): `state = "down"` (an unhealthy backend
//!   will be down the same way once health checks drive the tables).
//! - **Removed**: a backend taken out of its VIP. Its `BACKENDS` entry is marked down,
//!   and its id stays bound to its (VIP, backend) pair as a *tombstone*, so no pin can
//!   ever name another backend through a reused id; added again, the backend gets its
//!   id back.
//! - **Next hop**: the neighbour an encapsulated packet is sent to, and its MAC: from
//!   `bpf_fib_lookup` in FIB mode (the backend itself when on-link, else a router),
//!   reused per CPU for `nexthop_cache_ns` (`NEXTHOP_CACHE`), or the configured gateway.
//! - **Encapsulation**: the outer IP header (IPv4-in-IPv4, IPv6-in-IPv6) addressed to
//!   the backend; the backend removes it and answers the client directly (direct server
//!   return, DSR).
#![no_std]

pub mod affinity;
pub mod agent;
pub mod conntrack;
pub mod csum;
pub mod defaults;
pub mod fastpath;
pub mod hash;
pub mod hash_fields;
pub mod maps;
pub mod probe;
pub mod second_chance;
pub mod stats;
pub mod syn_cache;
pub mod trace;
pub mod types;

/// Implements `aya::Pod` for plain-old-data map types on the userspace side.
macro_rules! impl_pod {
    ($($ty:ty),* $(,)?) => {
        $(
            // SAFETY: the type is repr(C), has explicit padding fields (no implicit
            // padding; see its size assertion) and every bit pattern is a valid value.
            #[cfg(feature = "user")]
            unsafe impl aya::Pod for $ty {}
        )*
    };
}
pub(crate) use impl_pod;
