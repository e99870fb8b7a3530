//! The tunnel-probe program `lb_probe_encap` on a real interface (privileged): a
//! namespace with a veth pair, the program attached to the egress of one end (`p0`, the
//! LB's interface), frames read raw on the other end (`p1`).
//!
//! - A UDP datagram to the VIP from a socket marked with backend 7's probe mark leaves
//!   as IPv4-in-IPv4 to backend 7: outer source = the encap source, outer destination
//!   = the backend, protocol 4, a valid header checksum, TTL 64, the gateway's MAC in
//!   gateway mode; the inner packet is the datagram as sent (to the VIP). The same
//!   holds for IPv6-in-IPv6.
//! - An unmarked datagram to the VIP leaves untouched.
//! - A mark naming a backend id without a `BACKENDS` entry is dropped and counted,
//!   never sent to the VIP's route.
//! - A backend entry with a GUE port: the probe leaves GUE-encapsulated (outer
//!   protocol 17, UDP to the port from the backend id's source port, checksum 0, the
//!   GUE header naming the inner protocol), IPv4 and IPv6.
//! - FIB mode: the neighbour's MAC becomes the destination; a backend whose neighbour
//!   is unknown makes the kernel resolve it (an ARP request for the backend leaves),
//!   where the XDP path would drop.
//!
//! Addresses: all inside the namespace, deleted on drop.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    time::{Duration, Instant},
};

use etherparse::{NetSlice, SlicedPacket};
use lb_common::{
    probe::probe_mark,
    types::{
        BACKEND_ACTIVE, BACKEND_DOWN, BackendEntry, CONFIG_VALID, FAMILY_V4, FAMILY_V6, LbConfig,
        NEXTHOP_FIB, NEXTHOP_GATEWAY, gue_source_port,
    },
};
use lb_dataplane::{Dataplane as _, KernelDataplane, LoadOptions};
use lb_tests::netns::NetNs;

const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x0a, 0x01];
const GATEWAY_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x0a, 0xfe];
const NEIGH_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x0a, 0x17];
const LB4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const LB6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 1);
const VIP4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xf, 0, 0, 0, 0, 0x10);
const BACKEND4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 17);
const UNRESOLVED4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 18);
const BACKEND6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 0x17);
const ETH_P_ALL: u16 = 0x0003;

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The namespace: `p0` (the LB side, program attached) and `p1` (the capture side).
fn namespace() -> NetNs {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let ns = NetNs::create("lbpe-").expect("namespace");
    let lb_mac = mac_text(LB_MAC);
    for args in [
        vec![
            "link", "add", "p0", "address", &lb_mac, "type", "veth", "peer", "name", "p1",
        ],
        vec!["link", "set", "p0", "up"],
        vec!["link", "set", "p1", "up"],
        vec!["addr", "add", "192.0.2.1/24", "dev", "p0"],
        vec!["addr", "add", "2001:db8:c::1/64", "dev", "p0", "nodad"],
        // The VIP's route leaves through p0 (as a default route to the router would).
        vec!["route", "add", "203.0.113.10/32", "dev", "p0"],
        vec!["route", "add", "2001:db8:f::10/128", "dev", "p0"],
        vec!["route", "add", "198.51.100.0/24", "dev", "p0"],
        vec!["route", "add", "2001:db8:b::/64", "dev", "p0"],
    ] {
        ns.ip(&args).expect("ip");
    }
    let gw = mac_text(GATEWAY_MAC);
    let neigh = mac_text(NEIGH_MAC);
    for (addr, mac) in [
        ("203.0.113.10", &gw),
        ("2001:db8:f::10", &gw),
        ("198.51.100.17", &neigh),
        ("2001:db8:b::17", &neigh),
    ] {
        ns.ip(&[
            "neigh",
            "replace",
            addr,
            "lladdr",
            mac,
            "dev",
            "p0",
            "nud",
            "permanent",
        ])
        .expect("neighbour");
    }
    ns.enter(|| {
        for path in [
            "/proc/sys/net/ipv4/conf/all/forwarding",
            "/proc/sys/net/ipv4/conf/p0/forwarding",
            "/proc/sys/net/ipv6/conf/all/forwarding",
        ] {
            std::fs::write(path, "1").expect(path);
        }
    })
    .expect("enter");
    ns
}

fn config(mode: u8) -> LbConfig {
    LbConfig {
        src_v4: LB4.octets(),
        src_v6: LB6.octets(),
        if_mac: LB_MAC,
        gateway_mac: GATEWAY_MAC,
        mtu: 1500,
        nexthop_mode: mode,
        flags: CONFIG_VALID,
        ..LbConfig::default()
    }
}

fn backend(addr: IpAddr, state: u8) -> BackendEntry {
    let (addr, family) = match addr {
        IpAddr::V4(a) => {
            let mut b = [0; 16];
            b[..4].copy_from_slice(&a.octets());
            (b, FAMILY_V4)
        }
        IpAddr::V6(a) => (a.octets(), FAMILY_V6),
    };
    BackendEntry {
        addr,
        family,
        state,
        gue_port: 0,
    }
}

/// A raw socket receiving every frame of `p1`.
fn capture() -> OwnedFd {
    // SAFETY: plain socket(2)/bind(2) calls on a new descriptor we own.
    unsafe {
        let fd = libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK,
            i32::from(ETH_P_ALL.to_be()),
        );
        assert!(
            fd >= 0,
            "AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        );
        let fd = OwnedFd::from_raw_fd(fd);
        let name = std::ffi::CString::new("p1").expect("name");
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = u16::try_from(libc::AF_PACKET).expect("family");
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = i32::try_from(libc::if_nametoindex(name.as_ptr())).expect("ifindex");
        let len = u32::try_from(size_of::<libc::sockaddr_ll>()).expect("len");
        let rc = libc::bind(fd.as_raw_fd(), (&raw const sll).cast(), len);
        assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
        fd
    }
}

/// Frames received on `fd` within `wait`.
fn frames(fd: &OwnedFd, wait: Duration) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + wait;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 2048];
    while Instant::now() < deadline {
        // SAFETY: recv into a buffer we own, of the length passed.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        match usize::try_from(n) {
            Ok(n) => out.push(buf[..n].to_vec()),
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    out
}

/// Sends `payload` to `dest` from a socket marked with `mark` (if any).
fn send(dest: SocketAddr, mark: Option<u32>, payload: &[u8]) {
    let any: SocketAddr = if dest.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(any).expect("bind");
    if let Some(mark) = mark {
        // SAFETY: setsockopt with a u32 of the length passed, on a socket we own.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_MARK,
                (&raw const mark).cast(),
                4,
            )
        };
        assert_eq!(rc, 0, "SO_MARK: {}", std::io::Error::last_os_error());
    }
    socket.send_to(payload, dest).expect("send");
}

/// The frame's outer and inner IP headers, if it is IP-in-IP.
struct Encapsulated {
    dst_mac: [u8; 6],
    outer_src: IpAddr,
    outer_dst: IpAddr,
    ttl: u8,
    inner_dst: IpAddr,
    payload: Vec<u8>,
    checksum_ok: bool,
}

fn decode(frame: &[u8]) -> Option<Encapsulated> {
    let outer = SlicedPacket::from_ethernet(frame).ok()?;
    let dst_mac = outer.link.as_ref()?.to_header()?.ethernet2()?.destination;
    let (outer_src, outer_dst, ttl, checksum_ok, inner) = match outer.net? {
        NetSlice::Ipv4(ip) if ip.header().protocol().0 == 4 => {
            let h = ip.header().to_header();
            let ok = h.calc_header_checksum() == h.header_checksum;
            (
                IpAddr::V4(h.source.into()),
                IpAddr::V4(h.destination.into()),
                h.time_to_live,
                ok,
                SlicedPacket::from_ip(ip.payload().payload).ok()?,
            )
        }
        NetSlice::Ipv6(ip) if ip.header().next_header().0 == 41 => {
            let h = ip.header().to_header();
            (
                IpAddr::V6(h.source.into()),
                IpAddr::V6(h.destination.into()),
                h.hop_limit,
                true,
                SlicedPacket::from_ip(ip.payload().payload).ok()?,
            )
        }
        _ => return None,
    };
    let inner_dst = match inner.net? {
        NetSlice::Ipv4(ip) => IpAddr::V4(ip.header().destination_addr()),
        NetSlice::Ipv6(ip) => IpAddr::V6(ip.header().destination_addr()),
        _ => return None,
    };
    let payload = match inner.transport? {
        etherparse::TransportSlice::Udp(u) => u.payload().to_vec(),
        _ => return None,
    };
    Some(Encapsulated {
        dst_mac,
        outer_src,
        outer_dst,
        ttl,
        inner_dst,
        payload,
        checksum_ok,
    })
}

/// A UDP frame to `dst` carrying `payload`, not encapsulated.
fn plain_udp_to(frame: &[u8], dst: IpAddr, payload: &[u8]) -> bool {
    let Ok(p) = SlicedPacket::from_ethernet(frame) else {
        return false;
    };
    let to = match p.net {
        Some(NetSlice::Ipv4(ip)) => IpAddr::V4(ip.header().destination_addr()),
        Some(NetSlice::Ipv6(ip)) => IpAddr::V6(ip.header().destination_addr()),
        _ => return false,
    };
    matches!(p.transport, Some(etherparse::TransportSlice::Udp(u)) if to == dst && u.payload() == payload)
}

/// The object loaded with next-hop `mode` and `backends` (id, address, state), the
/// probe program attached to `p0`, and a capture of `p1` (call inside the namespace).
fn attached(mode: u8, backends: &[(u32, IpAddr, u8)]) -> (KernelDataplane, OwnedFd) {
    let mut dp = KernelDataplane::load(LoadOptions {
        ct_capacity: 1024,
        ct_syn_capacity: 256,
        ..LoadOptions::default()
    })
    .expect("load the object");
    dp.set_config(&config(mode)).expect("config");
    for (id, addr, state) in backends {
        dp.set_backend(*id, &backend(*addr, *state))
            .expect("backend");
    }
    dp.attach_probe_encap("p0")
        .expect("attach the probe program");
    (dp, capture())
}

/// Sends `payload` to `vip` port 53 marked for backend `id`.
fn probe(vip: IpAddr, id: u32, payload: &[u8]) {
    send(
        (vip, 53).into(),
        Some(probe_mark(id).expect("mark")),
        payload,
    );
}

#[test]
fn marked_probes_leave_encapsulated_to_their_backend_and_others_untouched() {
    let ns = namespace();
    ns.enter(|| {
        // An unhealthy backend (8) is still probed: its entry is down, not unused.
        let (mut dp, cap) = attached(
            NEXTHOP_GATEWAY,
            &[
                (7, BACKEND4.into(), BACKEND_ACTIVE),
                (8, BACKEND6.into(), BACKEND_DOWN),
            ],
        );

        probe(VIP4.into(), 7, b"probe-7");
        probe(VIP6.into(), 8, b"probe-8");
        send((VIP4, 53).into(), None, b"unmarked");
        probe(VIP4.into(), 9, b"probe-9");
        let got = frames(&cap, Duration::from_millis(300));

        let enc: Vec<Encapsulated> = got.iter().filter_map(|f| decode(f)).collect();
        let four = enc
            .iter()
            .find(|e| e.payload == b"probe-7")
            .expect("backend 7's probe, encapsulated");
        assert_eq!(four.outer_src, IpAddr::from(LB4));
        assert_eq!(four.outer_dst, IpAddr::from(BACKEND4));
        assert_eq!(four.inner_dst, IpAddr::from(VIP4));
        assert_eq!(four.ttl, 64);
        assert!(four.checksum_ok, "outer IPv4 header checksum");
        assert_eq!(four.dst_mac, GATEWAY_MAC);
        let six = enc
            .iter()
            .find(|e| e.payload == b"probe-8")
            .expect("backend 8's probe, encapsulated");
        assert_eq!(six.outer_src, IpAddr::from(LB6));
        assert_eq!(six.outer_dst, IpAddr::from(BACKEND6));
        assert_eq!(six.inner_dst, IpAddr::from(VIP6));
        assert_eq!(six.dst_mac, GATEWAY_MAC);
        assert!(
            got.iter()
                .any(|f| plain_udp_to(f, VIP4.into(), b"unmarked")),
            "the unmarked datagram left untouched"
        );
        assert!(
            !got.iter().any(|f| plain_udp_to(f, VIP4.into(), b"probe-9")
                || decode(f).is_some_and(|e| e.payload == b"probe-9")),
            "a probe for an unknown backend left"
        );
        let stats = dp.probe_stats().expect("probe stats");
        assert_eq!(stats.encapsulated, 2, "{stats:?}");
        assert_eq!(stats.no_backend, 1, "{stats:?}");
        dp.detach_probe_encap().expect("detach");
        probe(VIP4.into(), 7, b"after");
        let after = frames(&cap, Duration::from_millis(200));
        assert!(
            after.iter().any(|f| plain_udp_to(f, VIP4.into(), b"after")),
            "detached: the marked datagram leaves as it was sent"
        );
    })
    .expect("enter the namespace");
}

#[test]
fn fib_mode_uses_the_neighbour_and_resolves_an_unknown_one() {
    let ns = namespace();
    ns.enter(|| {
        let (dp, cap) = attached(
            NEXTHOP_FIB,
            &[
                (7, BACKEND4.into(), BACKEND_ACTIVE),
                (5, UNRESOLVED4.into(), BACKEND_ACTIVE),
            ],
        );
        probe(VIP4.into(), 7, b"fib-7");
        probe(VIP4.into(), 5, b"fib-5");
        let got = frames(&cap, Duration::from_millis(500));
        let seven = got
            .iter()
            .filter_map(|f| decode(f))
            .find(|e| e.payload == b"fib-7")
            .expect("backend 7's probe, encapsulated");
        assert_eq!(seven.dst_mac, NEIGH_MAC, "the FIB's neighbour");
        assert_eq!(seven.outer_dst, IpAddr::from(BACKEND4));
        let arp_for_unresolved = got.iter().any(|f| {
            f.len() >= 42
                && f[12..14] == [0x08, 0x06]
                && f[20..22] == [0, 1]
                && f[38..42] == UNRESOLVED4.octets()
        });
        assert!(
            arp_for_unresolved,
            "no ARP request for the unresolved backend"
        );
        assert_eq!(dp.probe_stats().expect("stats").encapsulated, 2);
    })
    .expect("enter the namespace");
}

/// The GUE port of the GUE probe test.
const GUE_PORT: u16 = 6080;

/// The inner UDP payload of `frame` if it is GUE as the probe program sends it: outer
/// IPv4 (IPv6 when `v6`) of protocol 17 from the encap source, a valid IPv4 header
/// checksum, UDP from `sport` to [`GUE_PORT`] with checksum 0 and the length to the
/// frame's end, the GUE header `[0, inner protocol, 0, 0]`, then the datagram sent to
/// `vip`.
fn gue_payload(frame: &[u8], v6: bool, sport: u16, vip: IpAddr) -> Option<Vec<u8>> {
    let outer = SlicedPacket::from_ethernet(frame).ok()?;
    let (udp_at, inner_proto) = match outer.net? {
        NetSlice::Ipv4(ip) if !v6 && ip.header().protocol().0 == 17 => {
            let h = ip.header().to_header();
            assert_eq!(
                h.calc_header_checksum(),
                h.header_checksum,
                "outer checksum"
            );
            assert_eq!(IpAddr::from(h.source), IpAddr::from(LB4));
            (34, 4)
        }
        NetSlice::Ipv6(ip) if v6 && ip.header().next_header().0 == 17 => {
            assert_eq!(IpAddr::from(ip.header().source_addr()), IpAddr::from(LB6));
            (54, 41)
        }
        _ => return None,
    };
    let udp = frame.get(udp_at..udp_at + 12)?;
    let word = |i: usize| u16::from_be_bytes([udp[i], udp[i + 1]]);
    let udp_len = usize::from(word(4));
    if (word(0), word(2), udp_len, word(6)) != (sport, GUE_PORT, frame.len() - udp_at, 0)
        || udp[8..12] != [0, inner_proto, 0, 0]
    {
        return None;
    }
    let inner = SlicedPacket::from_ip(&frame[udp_at + 12..]).ok()?;
    let to = match inner.net? {
        NetSlice::Ipv4(ip) => IpAddr::V4(ip.header().destination_addr()),
        NetSlice::Ipv6(ip) => IpAddr::V6(ip.header().destination_addr()),
        _ => return None,
    };
    match inner.transport? {
        etherparse::TransportSlice::Udp(u) if to == vip => Some(u.payload().to_vec()),
        _ => None,
    }
}

#[test]
fn probes_to_a_gue_backend_leave_gue_encapsulated() {
    let ns = namespace();
    ns.enter(|| {
        let (mut dp, cap) = attached(NEXTHOP_GATEWAY, &[]);
        for (id, addr) in [(7, IpAddr::from(BACKEND4)), (8, BACKEND6.into())] {
            let entry = BackendEntry {
                gue_port: GUE_PORT.to_be(),
                ..backend(addr, BACKEND_ACTIVE)
            };
            dp.set_backend(id, &entry).expect("backend");
        }
        probe(VIP4.into(), 7, b"gue-7");
        probe(VIP6.into(), 8, b"gue-8");
        let got = frames(&cap, Duration::from_millis(300));
        // One flow per backend: the source port from the backend id.
        let (sport7, sport8) = (gue_source_port(7), gue_source_port(8));
        assert!(
            got.iter()
                .any(|f| gue_payload(f, false, sport7, VIP4.into()).as_deref() == Some(b"gue-7")),
            "backend 7's probe, GUE in IPv4"
        );
        assert!(
            got.iter()
                .any(|f| gue_payload(f, true, sport8, VIP6.into()).as_deref() == Some(b"gue-8")),
            "backend 8's probe, GUE in IPv6"
        );
        assert_eq!(dp.probe_stats().expect("stats").encapsulated, 2);
    })
    .expect("enter the namespace");
}
