//! BPF_PROG_TEST_RUN fixtures of the data plane's rare paths (issue 16): ICMP "too big"
//! answers and echo replies, ICMP errors forwarded to the flow's backend, fragment
//! tracking, 802.1Q tags, per-flow outer headers and IPv4-in-IPv6, and allowed source
//! prefixes. Every expected frame is built independently with etherparse, checksums
//! included, and compared byte for byte; every packet moves exactly one verdict counter.
//!
//! Set-up as in `fixtures` ([`Lb::standard`]): VIP4:80/tcp (id 0), VIP4:53/udp (id 1),
//! VIP6:80/tcp (id 2), VIP6:53/udp (id 3) on round-robin tables over backends 1..=3
//! (IPv4) and 11..=13 (IPv6), gateway next hop, MTU 1500, ICMP answers on with the
//! daemon's default rate limit.
//!
//! | scenario | module |
//! |---|---|
//! | a DF segment one byte too big gets "fragmentation needed" with MTU - 20; IPv6 gets "packet too big" with MTU - 40; a first fragment's flags never leak into the answer; DF clear is dropped; rate limit (failure scenario BR-18) | [`too_big`] |
//! | echo requests to a VIP address answered, off by configuration, rate-limited | [`echo`] |
//! | a router's "fragmentation needed" / "packet too big" / "time exceeded" about a VIP flow goes to the backend that owns it, by conntrack, else by the table; bad quotes are dropped (BR-19) | [`errors`] |
//! | fragments in order and out of order, IPv6 fragment headers and atomic fragments, tracking-map eviction, payload never read as TCP (BR-22) | [`fragments`] |
//! | 802.1Q frames balanced and sent with their tag, priority tags, double tags passed (BR-23) | [`vlan`] |
//! | per-flow outer sources, flow labels, IPv4-in-IPv6 | [`outer`] |
//! | allowed source prefixes, narrowed while flows run | [`sources`] |
//! | GUE: exact bytes of both families and IPv4-in-IPv6, source ports from the flow hash, mixed tables, the MTU budget with 12 bytes more (issue 31) | [`gue`] |
//! | second-chance candidates: a dirty-slot miss carries the clean owner, unpinned; a clean slot, a conntrack hit, a SYN, a VIP without the second chance, an IP-in-IP owner and a removed clean owner carry none; IPv4 and IPv6 outer (issue 31) | [`candidates`] |

mod candidates;
mod echo;
mod errors;
mod fragments;
mod gue;
mod outer;
mod sources;
mod too_big;
mod vlan;

use std::net::IpAddr;

use lb_common::stats::{GlobalStats, Reason};
use lb_tests::{
    fixture::{Lb, XDP_PASS, XDP_TX},
    packets::{self, CLIENT4, CLIENT6, Flow, GW_MAC, LB_MAC, VIP4, VIP6, encapsulated},
};

/// The address of fixture backend `id` (1..=3 IPv4, 11..=13 IPv6).
fn backend_ip(id: u32) -> IpAddr {
    let k = u8::try_from(id % 10).expect("small id");
    if id > 10 {
        packets::backend6(k).into()
    } else {
        packets::backend4(k).into()
    }
}

fn flow4(sport: u16, dport: u16) -> Flow {
    Flow::new(CLIENT4, sport, VIP4, dport)
}

fn flow6(sport: u16, dport: u16) -> Flow {
    Flow::new(CLIENT6, sport, VIP6, dport)
}

/// Runs `frame`, asserts `action` and that exactly `reason` was counted (once, and
/// nothing else); returns the frame the program left.
fn expect(lb: &mut Lb, frame: &[u8], action: u32, reason: Reason) -> Vec<u8> {
    let before = lb.global();
    let out = lb.run(frame);
    let after = lb.global();
    assert_eq!(
        out.action,
        action,
        "expected {reason:?}; counted: {:?}",
        counted(&before, &after)
    );
    assert_eq!(
        counted(&before, &after),
        vec![reason],
        "exactly one reason per packet"
    );
    if action == XDP_PASS {
        assert_eq!(out.data, frame, "a passed frame leaves byte-identical");
    }
    out.data
}

/// The reasons counted between two snapshots.
fn counted(before: &GlobalStats, after: &GlobalStats) -> Vec<Reason> {
    Reason::ALL
        .into_iter()
        .flat_map(|r| {
            let n = after.get(r) - before.get(r);
            std::iter::repeat_n(r, usize::try_from(n).unwrap_or(0))
        })
        .collect()
}

/// Asserts `frame` is encapsulated to backend `id` with the exact expected bytes.
fn expect_forwarded(lb: &mut Lb, frame: &[u8], id: u32, reason: Reason) {
    let out = expect(lb, frame, XDP_TX, reason);
    assert_eq!(
        out,
        encapsulated(frame, backend_ip(id), GW_MAC, LB_MAC),
        "encapsulated bytes (to backend {id})"
    );
}
