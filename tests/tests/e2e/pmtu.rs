//! Issue 16, path MTU end to end (failure scenarios BR-18 and BR-19).
//!
//! 1. The client's path carries 1,500-byte packets, as does the LB → backend path, so a
//!    full-size segment no longer fits once the LB adds its 20-byte outer header. With
//!    `icmp.too_big = false` a 1 MB upload stalls (bounded wait); with the LB's
//!    "fragmentation needed" answers the client learns a path MTU of 1,480 and the
//!    upload completes.
//! 2. A router between the backends and a client cannot forward a backend's 1,428-byte
//!    reply and sends "fragmentation needed, MTU 1400" to the VIP (the reply's source):
//!    the LB hands it to the backend that owns the flow, whose kernel learns the path
//!    MTU to the client; the other backends learn nothing.

use std::{
    io::{Read as _, Write as _},
    net::{IpAddr, SocketAddr},
    time::{Duration, Instant},
};

use etherparse::{Icmpv4Type, IpNumber, Ipv4Header, PacketBuilder, icmpv4};
use lb_tests::{
    daemon::{Daemon, DaemonConfig},
    netns::NetNs,
    packets::{CLIENT_MAC, LB_MAC, VIP4},
    testbed::{CLIENT_IFACE, TestBed, TestBedOptions, client, vip_tcp, vip_udp},
};

use super::daemon;

/// The upload.
const UPLOAD: usize = 1 << 20;

/// The PMTU `ip route get DST` shows in `ns` (a route exception), if any.
pub(super) fn learned_mtu(ns: &NetNs, dst: IpAddr) -> Option<u32> {
    let out = ns
        .exec("ip", &["-o", "route", "get", &dst.to_string()])
        .expect("ip route get");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == "mtu" {
            return words.next().and_then(|m| m.parse().ok());
        }
    }
    None
}

/// Uploads [`UPLOAD`] bytes and a newline from `src` to the TCP VIP and reads the
/// answering backend's name; every socket operation gives up after `timeout`.
fn upload(bed: &TestBed, src: SocketAddr, timeout: Duration) -> std::io::Result<String> {
    let conn = bed
        .client_ns()
        .enter(|| client::tcp_connect(src, vip_tcp(false), timeout))
        .expect("enter")?;
    let mut stream = conn.stream();
    let mut data = vec![b'x'; UPLOAD];
    data.push(b'\n');
    stream.write_all(&data)?;
    let mut reply = [0u8; 16];
    let n = stream.read(&mut reply)?;
    Ok(String::from_utf8_lossy(&reply[..n]).trim().to_owned())
}

/// The value of the global counter `name` in `lb stats`.
pub(super) fn counter(lb: &Daemon<'_>, name: &str) -> u64 {
    lb.reason(name).expect("lb stats")
}

#[test]
fn a_megabyte_upload_completes_thanks_to_the_generated_icmp_and_stalls_without() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let bed = TestBed::new(TestBedOptions {
        backends: 1,
        clients: 2,
        encap_headroom: false,
        ..TestBedOptions::default()
    })
    .expect("build the test bed");
    let mut off = DaemonConfig::equal([1]);
    off.extra = "\n[icmp]\ntoo_big = false\n".to_owned();
    let lb = daemon(&bed, &off);
    let started = Instant::now();
    let stalled = upload(
        &bed,
        (bed.client_addr(0, false), 0).into(),
        Duration::from_secs(3),
    );
    assert!(
        stalled.is_err(),
        "the upload got through without ICMP: {stalled:?}"
    );
    assert!(
        counter(&lb, "drop_too_big") > 0,
        "full-size segments dropped"
    );
    assert_eq!(learned_mtu(bed.client_ns(), VIP4.into()), None);
    eprintln!("without ICMP: stalled ({:?})", started.elapsed());
    lb.stop().expect("stop lb run");

    let lb = daemon(&bed, &DaemonConfig::equal([1]));
    let started = Instant::now();
    let done = upload(
        &bed,
        (bed.client_addr(1, false), 0).into(),
        Duration::from_secs(20),
    )
    .expect("the upload completes with the LB's ICMP answers");
    assert_eq!(done, "b1");
    eprintln!("with ICMP: 1 MB uploaded in {:?}", started.elapsed());
    assert!(counter(&lb, "tx_icmp_too_big") > 0);
    assert_eq!(
        learned_mtu(bed.client_ns(), VIP4.into()),
        Some(1480),
        "the client learned the MTU the LB announced"
    );
}

/// A router's "fragmentation needed" (from 192.0.2.200, next-hop MTU 1400) about the
/// UDP reply `VIP4:53 → client` of 1,428 bytes, quoting its IPv4 header and 8 bytes.
pub(super) fn router_frag_needed(client: SocketAddr) -> Vec<u8> {
    let IpAddr::V4(client_ip) = client.ip() else {
        unreachable!()
    };
    let mut quoted = Vec::new();
    let mut ip =
        Ipv4Header::new(1408, 63, IpNumber::UDP, VIP4.octets(), client_ip.octets()).expect("ip");
    ip.dont_fragment = true;
    ip.header_checksum = ip.calc_header_checksum();
    ip.write(&mut quoted).expect("write");
    quoted.extend_from_slice(&53u16.to_be_bytes());
    quoted.extend_from_slice(&client.port().to_be_bytes());
    quoted.extend_from_slice(&1408u16.to_be_bytes());
    quoted.extend_from_slice(&[0, 0]);
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
        .ipv4([192, 0, 2, 200], VIP4.octets(), 64)
        .icmpv4(Icmpv4Type::DestinationUnreachable(
            icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 },
        ))
        .write(&mut frame, &quoted)
        .expect("write");
    frame
}

#[test]
fn a_routers_frag_needed_reaches_the_backend_that_owns_the_flow() {
    let bed = super::bed(3);
    let lb = daemon(&bed, &DaemonConfig::equal(1..=3));
    let src: SocketAddr = (bed.client_addr(0, false), 41000).into();
    let owner = bed
        .udp_exchange(src, vip_udp(false), "hello")
        .expect("UDP exchange");
    let k: u8 = owner
        .strip_prefix('b')
        .and_then(|n| n.parse().ok())
        .expect("a backend name");
    let frame = router_frag_needed(src);
    bed.client_ns()
        .enter(|| client::send_frame(CLIENT_IFACE, &frame))
        .expect("enter")
        .expect("send the router's ICMP");
    let client_ip = src.ip();
    let deadline = Instant::now() + Duration::from_secs(5);
    while learned_mtu(bed.backend_ns(k), client_ip).is_none() {
        assert!(
            Instant::now() < deadline,
            "backend {k} did not learn the path MTU; tx_icmp_forward = {}",
            counter(&lb, "tx_icmp_forward")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(learned_mtu(bed.backend_ns(k), client_ip), Some(1400));
    for other in (1..=3).filter(|&o| o != k) {
        assert_eq!(
            learned_mtu(bed.backend_ns(other), client_ip),
            None,
            "backend {other} got another backend's ICMP"
        );
    }
    assert_eq!(counter(&lb, "tx_icmp_forward"), 1);
}
