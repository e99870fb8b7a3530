// SPDX-License-Identifier: MIT OR Apache-2.0
//! The backend agent's verdict reasons and their per-CPU counters (`AGENT_STATS`).
//!
//! Every frame the agent's program (`lb_agent`) sees increments exactly one
//! [`AgentReason`]; `lb agent stats` sums them over the CPUs.

use crate::{
    impl_pod,
    stats::{XDP_DROP, XDP_PASS, XDP_REDIRECT, XDP_TX},
};

/// Why the agent returned the verdict it did. Index into [`AgentStats::counters`].
///
/// `Pass*` pass the frame untouched, `Decap*` pass the inner packet (outer headers
/// stripped), `Tx*`/`Redirect*` forward the packet to its next candidate, `Drop*` drop
/// it. The program never returns `XDP_ABORTED`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AgentReason {
    /// Not an encapsulation the agent accepts (not IP-in-IP or GUE to the port, IP-in-IP
    /// when only GUE is accepted, an outer IPv4 header with options, an outer IPv6
    /// header with extension headers, a VLAN tag): untouched.
    PassNotEncapsulated = 0,
    /// No configuration written yet: untouched.
    PassNoConfig,
    /// An outer IPv4 fragment: untouched (the agent does not reassemble).
    PassOuterFragment,
    /// IP-in-IP, delivered.
    DecapIpip,
    /// GUE without candidates, delivered.
    DecapGue,
    /// GUE with candidates; this host has a TCP socket for the inner 4-tuple
    /// (established, a request socket, a valid SYN cookie through its listener):
    /// delivered.
    DecapSocket,
    /// GUE with candidates; a TCP SYN (a new connection is this host's): delivered.
    DecapSyn,
    /// GUE with candidates; not TCP (UDP keeps today's behaviour), or an inner header
    /// the agent does not parse (IPv4 options, IPv6 extension headers, a fragment):
    /// delivered.
    DecapNotTcp,
    /// GUE with candidates, all consumed already and no socket here: delivered (the
    /// loop guard: the chain ends here, the stack answers as without the agent).
    DecapExhausted,
    /// No socket here: forwarded to the next candidate (that candidate consumed) out of
    /// the receiving interface (`XDP_TX`).
    TxCandidate,
    /// As [`Self::TxCandidate`], out of another interface (`XDP_REDIRECT`).
    RedirectCandidate,
    /// A truncated or inconsistent outer IP, UDP or GUE header, or inner packet.
    DropMalformed,
    /// A GUE header the agent does not handle: a control message (C 1), a version
    /// other than 0, or extension flags.
    DropGueUnsupported,
    /// GUE private data that is not second-chance candidates, or inconsistent ones
    /// (count, used, Hlen).
    DropBadCandidates,
    /// No route to the next candidate (the FIB lookup failed).
    DropFibFail,
    /// A route to the next candidate, but its neighbour (MAC) is not resolved.
    DropFibNoNeigh,
    /// `bpf_xdp_adjust_head` failed.
    DropAdjustFail,
}

/// Number of [`AgentReason`] variants.
pub const AGENT_REASON_COUNT: usize = 17;

impl AgentReason {
    /// Every reason, in index order.
    pub const ALL: [AgentReason; AGENT_REASON_COUNT] = [
        AgentReason::PassNotEncapsulated,
        AgentReason::PassNoConfig,
        AgentReason::PassOuterFragment,
        AgentReason::DecapIpip,
        AgentReason::DecapGue,
        AgentReason::DecapSocket,
        AgentReason::DecapSyn,
        AgentReason::DecapNotTcp,
        AgentReason::DecapExhausted,
        AgentReason::TxCandidate,
        AgentReason::RedirectCandidate,
        AgentReason::DropMalformed,
        AgentReason::DropGueUnsupported,
        AgentReason::DropBadCandidates,
        AgentReason::DropFibFail,
        AgentReason::DropFibNoNeigh,
        AgentReason::DropAdjustFail,
    ];

    /// The XDP action of a frame counted under this reason (no wildcard: a new reason
    /// does not compile until it has one).
    pub const fn action(self) -> u32 {
        match self {
            AgentReason::PassNotEncapsulated
            | AgentReason::PassNoConfig
            | AgentReason::PassOuterFragment
            | AgentReason::DecapIpip
            | AgentReason::DecapGue
            | AgentReason::DecapSocket
            | AgentReason::DecapSyn
            | AgentReason::DecapNotTcp
            | AgentReason::DecapExhausted => XDP_PASS,
            AgentReason::TxCandidate => XDP_TX,
            AgentReason::RedirectCandidate => XDP_REDIRECT,
            AgentReason::DropMalformed
            | AgentReason::DropGueUnsupported
            | AgentReason::DropBadCandidates
            | AgentReason::DropFibFail
            | AgentReason::DropFibNoNeigh
            | AgentReason::DropAdjustFail => XDP_DROP,
        }
    }

    /// The counter's name (snake case, as `lb agent stats` shows it).
    pub const fn name(self) -> &'static str {
        match self {
            AgentReason::PassNotEncapsulated => "pass_not_encapsulated",
            AgentReason::PassNoConfig => "pass_no_config",
            AgentReason::PassOuterFragment => "pass_outer_fragment",
            AgentReason::DecapIpip => "decap_ipip",
            AgentReason::DecapGue => "decap_gue",
            AgentReason::DecapSocket => "decap_socket",
            AgentReason::DecapSyn => "decap_syn",
            AgentReason::DecapNotTcp => "decap_not_tcp",
            AgentReason::DecapExhausted => "decap_exhausted",
            AgentReason::TxCandidate => "tx_candidate",
            AgentReason::RedirectCandidate => "redirect_candidate",
            AgentReason::DropMalformed => "drop_malformed",
            AgentReason::DropGueUnsupported => "drop_gue_unsupported",
            AgentReason::DropBadCandidates => "drop_bad_candidates",
            AgentReason::DropFibFail => "drop_fib_fail",
            AgentReason::DropFibNoNeigh => "drop_fib_no_neigh",
            AgentReason::DropAdjustFail => "drop_adjust_fail",
        }
    }
}

/// The single element of the per-CPU `AGENT_STATS` array: one frame counter per
/// [`AgentReason`], indexed by `reason as usize`.
///
/// Layout: `AGENT_REASON_COUNT` × `u64` (136 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentStats {
    /// Frames per verdict reason.
    pub counters: [u64; AGENT_REASON_COUNT],
}
const _: () = assert!(size_of::<AgentStats>() == 8 * AGENT_REASON_COUNT);
impl_pod!(AgentStats);

impl AgentStats {
    /// The counter of `reason`.
    pub fn get(&self, reason: AgentReason) -> u64 {
        self.counters[reason as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_listed_in_index_order_with_a_unique_name() {
        for (i, r) in AgentReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
            for other in &AgentReason::ALL[..i] {
                assert_ne!(other.name(), r.name());
            }
            let prefix = r.name().split('_').next().unwrap();
            let expected = match prefix {
                "pass" | "decap" => XDP_PASS,
                "tx" => XDP_TX,
                "redirect" => XDP_REDIRECT,
                _ => XDP_DROP,
            };
            assert_eq!(r.action(), expected, "{}", r.name());
        }
    }
}
