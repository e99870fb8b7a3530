//! The backend agent (`lb_agent`) through BPF_PROG_TEST_RUN, with exact bytes: plain
//! decapsulation of IP-in-IP and GUE, and second-chance candidates (a real socket in the
//! test's namespace found, none found and the packet re-encapsulated to the next
//! candidate, a SYN, the loop guard, UDP, malformed packets), each with the counter it
//! must move.
//!
//! Set-up: a throw-away namespace ([`fib_namespace`]: `lb0` with 192.0.2.1/24 and
//! 2001:db8:c::1/64, the backends' prefixes routed via a neighbour of MAC 02:..:fe,
//! forwarding on) in which the test thread runs the agent with `lb0` as the ingress
//! interface; VIP4 and VIP6 on its loopback, with listeners on port 80.

use std::net::IpAddr;

use lb_common::{
    agent::{AgentReason, AgentStats},
    types::SecondChance,
};
use lb_dataplane::{Agent, AgentOptions};
use lb_tests::{
    fixture::{XDP_DROP, XDP_PASS, XDP_TX, fib_namespace, ifindex},
    packets::{
        self, ACK, CLIENT4, CLIENT6, Flow, GW_MAC, Gue, L4, LB_MAC, LocalConnection, Outer, SYN,
        VIP4, VIP6, encapsulated_with, with_candidates,
    },
};

/// The GUE port of the fixtures (the default).
const PORT: u16 = lb_common::types::GUE_DEFAULT_PORT;
/// The outer UDP source port of the fixtures.
const SPORT: u16 = 50_000;

/// The agent under test, its ingress interface and the counters before the last run.
struct Fixture {
    agent: Agent,
    ifindex: u32,
}

impl Fixture {
    fn new(options: AgentOptions) -> Self {
        assert!(lb_tests::is_root(), "privileged test: run as root");
        Self {
            agent: Agent::load(&options).expect("load lb_agent"),
            ifindex: ifindex("lb0"),
        }
    }

    fn stats(&self) -> AgentStats {
        self.agent.stats().expect("stats")
    }

    /// Runs `frame`; asserts `action` and that exactly `reason` moved by one; returns
    /// the output frame.
    fn expect(&mut self, frame: &[u8], action: u32, reason: AgentReason) -> Vec<u8> {
        let before = self.stats();
        let out = self
            .agent
            .test_run(frame, Some(self.ifindex))
            .expect("test run");
        let after = self.stats();
        let moved: Vec<&str> = AgentReason::ALL
            .iter()
            .filter(|r| after.get(**r) != before.get(**r))
            .map(|r| r.name())
            .collect();
        assert_eq!(moved, [reason.name()], "counters moved");
        assert_eq!(after.get(reason), before.get(reason) + 1);
        assert_eq!(out.action, action, "action of {}", reason.name());
        out.data
    }
}

fn gue() -> Outer {
    Outer {
        gue: Some(Gue {
            sport: SPORT,
            dport: PORT,
        }),
        ..Outer::default()
    }
}

/// `inner` encapsulated to `backend` (GUE when `gue`), from the gateway's MAC to
/// `lb0`'s.
fn outer(inner: &[u8], backend: IpAddr, gue_on: bool) -> Vec<u8> {
    let o = if gue_on { gue() } else { Outer::default() };
    encapsulated_with(inner, backend, LB_MAC, GW_MAC, &o)
}

/// `inner` as the backend's stack receives it: the outer frame's MACs, the inner
/// packet's EtherType and bytes.
fn delivered(inner: &[u8]) -> Vec<u8> {
    let mut out = LB_MAC.to_vec();
    out.extend_from_slice(&GW_MAC);
    out.extend_from_slice(&inner[12..]);
    out
}

/// The RFC 1071 checksum of an IPv4 header whose checksum field is zero.
fn ipv4_checksum(header: &[u8]) -> [u8; 2] {
    let mut sum: u32 = header
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    #[expect(clippy::cast_possible_truncation, reason = "folded to 16 bits")]
    (!(sum as u16)).to_be_bytes()
}

/// The offset of the UDP header of a GUE frame.
fn udp_at(frame: &[u8]) -> usize {
    if frame[12..14] == [0x08, 0x00] {
        34
    } else {
        54
    }
}

/// `frame` (GUE with candidates) as the agent forwards it from `own` to `next` with
/// `used` candidates consumed: MACs from the FIB (the neighbour 02:..:fe, `lb0`'s
/// 02:..:01), outer source and destination, TTL 64, UDP checksum 0.
fn forwarded(frame: &[u8], own: IpAddr, next: IpAddr, used: u8) -> Vec<u8> {
    let mut out = frame.to_vec();
    out[..6].copy_from_slice(&GW_MAC);
    out[6..12].copy_from_slice(&LB_MAC);
    let udp = udp_at(frame);
    match (own, next) {
        (IpAddr::V4(own), IpAddr::V4(next)) => {
            out[22] = 64;
            out[26..30].copy_from_slice(&own.octets());
            out[30..34].copy_from_slice(&next.octets());
            out[24..26].copy_from_slice(&[0, 0]);
            let c = ipv4_checksum(&out[14..34]);
            out[24..26].copy_from_slice(&c);
        }
        (IpAddr::V6(own), IpAddr::V6(next)) => {
            out[21] = 64;
            out[22..38].copy_from_slice(&own.octets());
            out[38..54].copy_from_slice(&next.octets());
        }
        _ => panic!("one family"),
    }
    out[udp + 6..udp + 8].copy_from_slice(&[0, 0]);
    out[udp + 12 + 2] = used;
    out
}

fn b4(k: u8) -> IpAddr {
    packets::backend4(k).into()
}

fn b6(k: u8) -> IpAddr {
    packets::backend6(k).into()
}

/// Puts the VIPs on the namespace's loopback.
fn vips_on_loopback(ns: &lb_tests::netns::NetNs) {
    for args in [
        &["link", "set", "lo", "up"][..],
        &["addr", "add", "203.0.113.10/32", "dev", "lo"],
        &["addr", "add", "2001:db8:f::10/128", "dev", "lo", "nodad"],
    ] {
        ns.ip(args).expect("ip");
    }
}

#[test]
fn plain_decapsulation_delivers_the_inner_packet_of_ip_in_ip_and_gue() {
    let ns = fib_namespace("lbt-agent").expect("netns");
    ns.enter(|| {
        let mut fx = Fixture::new(AgentOptions::default());
        let v4 = Flow::new(CLIENT4, 40000, VIP4, 80).frame(L4::Tcp(ACK), b"x");
        let v6 = Flow::new(CLIENT6, 40000, VIP6, 80).frame(L4::Tcp(ACK), b"x");
        // 4-in-4, 6-in-6, 4-in-6, by IP-in-IP and by GUE.
        for (inner, backend) in [(&v4, b4(1)), (&v6, b6(1)), (&v4, b6(1))] {
            let ipip = outer(inner, backend, false);
            let out = fx.expect(&ipip, XDP_PASS, AgentReason::DecapIpip);
            assert_eq!(out, delivered(inner), "IP-in-IP to {backend}");
            let g = outer(inner, backend, true);
            let out = fx.expect(&g, XDP_PASS, AgentReason::DecapGue);
            assert_eq!(out, delivered(inner), "GUE to {backend}");
        }
        // Not encapsulated, or GUE to another port: untouched.
        fx.expect(&v4, XDP_PASS, AgentReason::PassNotEncapsulated);
        let mut other = outer(&v4, b4(1), true);
        other[34 + 3] ^= 1;
        assert_eq!(
            fx.expect(&other, XDP_PASS, AgentReason::PassNotEncapsulated),
            other
        );

        // GUE only (the e2e GUE tests' backends): IP-in-IP passes untouched.
        let mut gue_only = Fixture::new(AgentOptions {
            ipip: false,
            gue_port: Some(PORT),
        });
        let ipip = outer(&v4, b4(1), false);
        assert_eq!(
            gue_only.expect(&ipip, XDP_PASS, AgentReason::PassNotEncapsulated),
            ipip
        );
        let g = outer(&v6, b6(1), true);
        assert_eq!(
            gue_only.expect(&g, XDP_PASS, AgentReason::DecapGue),
            delivered(&v6)
        );
    })
    .expect("enter");
}

#[test]
fn second_chance_delivers_to_a_socket_here_and_forwards_the_rest_once_per_candidate() {
    let ns = fib_namespace("lbt-agent").expect("netns");
    vips_on_loopback(&ns);
    ns.enter(|| {
        let mut fx = Fixture::new(AgentOptions::default());
        for (vip, own, next, last) in [
            (IpAddr::from(VIP4), b4(1), b4(2), b4(3)),
            (IpAddr::from(VIP6), b6(1), b6(2), b6(3)),
        ] {
            let connection = LocalConnection::open(vip, 80).expect("connection");
            let flow = connection.flow;
            let sc = SecondChance::new(&[next, last]).expect("candidates");

            // Socket found: an ACK of the established connection is delivered.
            let inner = flow.frame(L4::Tcp(ACK), b"data");
            let frame = with_candidates(&outer(&inner, own, true), &sc);
            let out = fx.expect(&frame, XDP_PASS, AgentReason::DecapSocket);
            assert_eq!(out, delivered(&inner), "{vip}: socket found");

            // No socket (only the listener, and no valid SYN cookie): forwarded to the
            // first candidate, consumed.
            let stranger = Flow::new(flow.src, flow.sport.wrapping_add(1), vip, 80);
            let inner = stranger.frame(L4::Tcp(ACK), b"data");
            let frame = with_candidates(&outer(&inner, own, true), &sc);
            let out = fx.expect(&frame, XDP_TX, AgentReason::TxCandidate);
            assert_eq!(out, forwarded(&frame, own, next, 1), "{vip}: to {next}");

            // The next hop (the first candidate, no socket either) takes the second.
            let out2 = fx.expect(&out, XDP_TX, AgentReason::TxCandidate);
            assert_eq!(out2, forwarded(&out, next, last, 2), "{vip}: to {last}");

            // The last (every candidate consumed): delivered, never sent back.
            let out3 = fx.expect(&out2, XDP_PASS, AgentReason::DecapExhausted);
            let mut expected = out2[..12].to_vec();
            expected.extend_from_slice(&inner[12..]);
            assert_eq!(out3, expected, "{vip}: loop guard (the MACs it came with)");

            // A SYN stays where the load balancer sent it.
            let inner = stranger.frame(L4::Tcp(SYN), b"");
            let frame = with_candidates(&outer(&inner, own, true), &sc);
            let out = fx.expect(&frame, XDP_PASS, AgentReason::DecapSyn);
            assert_eq!(out, delivered(&inner), "{vip}: SYN");

            // UDP keeps today's behaviour: delivered.
            let inner = stranger.frame(L4::Udp, b"dns");
            let frame = with_candidates(&outer(&inner, own, true), &sc);
            let out = fx.expect(&frame, XDP_PASS, AgentReason::DecapNotTcp);
            assert_eq!(out, delivered(&inner), "{vip}: UDP");

            // A candidate that is this host is consumed without a hop.
            let inner = stranger.frame(L4::Tcp(ACK), b"");
            let selfish = SecondChance::new(&[own, last]).expect("candidates");
            let frame = with_candidates(&outer(&inner, own, true), &selfish);
            let out = fx.expect(&frame, XDP_TX, AgentReason::TxCandidate);
            assert_eq!(out, forwarded(&frame, own, last, 2), "{vip}: self skipped");
        }
    })
    .expect("enter");
}

#[test]
fn an_unreachable_candidate_and_malformed_packets_are_dropped_by_named_reasons() {
    let ns = fib_namespace("lbt-agent").expect("netns");
    ns.enter(|| {
        let mut fx = Fixture::new(AgentOptions::default());
        let flow = Flow::new(CLIENT4, 40000, VIP4, 80);
        let inner = flow.frame(L4::Tcp(ACK), b"x");
        let base = outer(&inner, b4(1), true);
        // No route to the candidate (the namespace routes only 198.51.100.0/24).
        let far = IpAddr::from([10, 99, 0, 1]);
        let sc = SecondChance::new(&[far]).expect("candidates");
        let frame = with_candidates(&base, &sc);
        let out = fx.expect(&frame, XDP_DROP, AgentReason::DropFibFail);
        assert_eq!(out, frame, "untouched");

        let sc = SecondChance::new(&[b4(2)]).expect("candidates");
        let good = with_candidates(&base, &sc);
        let gue = 34 + 8;
        let private = gue + 4;
        let mut cases: Vec<(Vec<u8>, AgentReason)> = Vec::new();
        // Truncated: in the UDP/GUE header, in the private data, in the inner TCP header.
        cases.push((good[..gue + 2].to_vec(), AgentReason::DropMalformed));
        cases.push((good[..private + 2].to_vec(), AgentReason::DropMalformed));
        cases.push((good[..good.len() - 20].to_vec(), AgentReason::DropMalformed));
        // Another kind of private data; `used` beyond `count`; Hlen disagreeing.
        let mut kind = good.clone();
        kind[private] = b'X';
        cases.push((kind, AgentReason::DropBadCandidates));
        let mut used = good.clone();
        used[private + 2] = 2;
        cases.push((used, AgentReason::DropBadCandidates));
        let mut count = good.clone();
        count[private + 1] = 2;
        cases.push((count, AgentReason::DropBadCandidates));
        // A control message; extension flags; an inner protocol other than IP.
        let mut control = good.clone();
        control[gue] |= 0x20;
        cases.push((control, AgentReason::DropGueUnsupported));
        let mut flags = good.clone();
        flags[gue + 2] = 0x80;
        cases.push((flags, AgentReason::DropGueUnsupported));
        let mut proto = base.clone();
        proto[gue + 1] = 47;
        cases.push((proto, AgentReason::DropGueUnsupported));
        for (frame, reason) in cases {
            fx.expect(&frame, XDP_DROP, reason);
        }
        // An outer fragment passes untouched.
        let mut frag = outer(&inner, b4(1), false);
        frag[20] |= 0x20;
        fx.expect(&frag, XDP_PASS, AgentReason::PassOuterFragment);
    })
    .expect("enter");
}
