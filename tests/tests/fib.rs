//! The FIB next-hop mode: `bpf_fib_lookup` on the outer destination picks the
//! neighbour's MAC and the interface's MAC from the kernel's tables. Runs
//! BPF_PROG_TEST_RUN from a thread inside a throw-away network namespace, with the
//! context's ingress interface set to a veth there.

use std::net::IpAddr;

use lb_common::{
    stats::Reason,
    types::{BACKEND_ACTIVE, NEXTHOP_FIB, PROTO_TCP},
};
use lb_dataplane::Dataplane as _;
use lb_tests::netns::NetNs;
use lb_tests::{
    fixture::{Lb, XDP_DROP, XDP_TX, default_config, fib_namespace, ifindex},
    packets::{self, CLIENT4, CLIENT6, Flow, GW_MAC, L4, LB_MAC, SYN, VIP4, VIP6, encapsulated},
};

/// Routes 198.51.101.0/24 via 192.0.2.253, which has no neighbour entry yet.
fn route_via_unresolved_neighbour(ns: &NetNs) {
    ns.ip(&[
        "route",
        "add",
        "198.51.101.0/24",
        "via",
        "192.0.2.253",
        "dev",
        "lb0",
    ])
    .expect("route");
}

/// Sets the neighbour entry of 192.0.2.253 to `mac`.
fn set_neighbour(ns: &NetNs, mac: &str) {
    ns.ip(&[
        "neigh",
        "replace",
        "192.0.2.253",
        "lladdr",
        mac,
        "nud",
        "permanent",
        "dev",
        "lb0",
    ])
    .expect("neigh");
}

#[test]
fn fib_mode_takes_macs_from_the_kernel_and_counts_unresolved_neighbours() {
    let ns = fib_namespace("lbt-fib").expect("netns");
    // A prefix whose next hop has no neighbour entry.
    route_via_unresolved_neighbour(&ns);

    let mut lb = Lb::standard();
    let mut cfg = default_config();
    cfg.nexthop_mode = NEXTHOP_FIB;
    // Gateway-mode MACs that must not be used.
    cfg.gateway_mac = [0x02, 0xee, 0xee, 0xee, 0xee, 0xee];
    cfg.if_mac = [0x02, 0xdd, 0xdd, 0xdd, 0xdd, 0xdd];
    lb.dp.set_config(&cfg).expect("config");

    let syn4 = Flow::new(CLIENT4, 40000, VIP4, 80).frame(L4::Tcp(SYN), &[]);
    let syn6 = Flow::new(CLIENT6, 40000, VIP6, 80).frame(L4::Tcp(SYN), &[]);
    ns.enter(|| {
        let lb0 = ifindex("lb0");
        assert_ne!(lb0, 0);
        for (frame, vip_id) in [(&syn4, 0), (&syn6, 2)] {
            let flow_backend = {
                let flow = if vip_id == 0 {
                    Flow::new(CLIENT4, 40000, VIP4, 80)
                } else {
                    Flow::new(CLIENT6, 40000, VIP6, 80)
                };
                lb.predict(vip_id, &flow, PROTO_TCP)
            };
            #[expect(clippy::cast_possible_truncation, reason = "fixture ids are small")]
            let backend: IpAddr = if vip_id == 0 {
                packets::backend4(flow_backend as u8).into()
            } else {
                packets::backend6(flow_backend as u8 - 10).into()
            };
            let out = lb.dp.test_run_with(frame, Some(lb0), 1).expect("run");
            assert_eq!(out.action, XDP_TX, "global {:?}", lb.global());
            assert_eq!(out.data, encapsulated(frame, backend, GW_MAC, LB_MAC));
        }

        // A backend whose next hop has no neighbour entry, and one with no route (a new
        // flow: the first one is pinned in conntrack).
        let syn4 = Flow::new(CLIENT4, 40001, VIP4, 80).frame(L4::Tcp(SYN), &[]);
        for (id, k_net) in [(1u32, 101u8), (2, 102)] {
            let addr = std::net::Ipv4Addr::new(198, 51, k_net, 11);
            lb.backend(id, addr, BACKEND_ACTIVE);
        }
        lb.table(0, &[1; 7]);
        let before = lb.global();
        let out = lb.dp.test_run_with(&syn4, Some(lb0), 1).expect("run");
        assert_eq!(out.action, XDP_DROP);
        assert_eq!(
            lb.counter(Reason::DropFibNoNeigh),
            before.get(Reason::DropFibNoNeigh) + 1
        );
        lb.table(0, &[2; 7]);
        let syn4 = Flow::new(CLIENT4, 40002, VIP4, 80).frame(L4::Tcp(SYN), &[]);
        let out = lb.dp.test_run_with(&syn4, Some(lb0), 1).expect("run");
        assert_eq!(out.action, XDP_DROP);
        assert_eq!(
            lb.counter(Reason::DropFibFail),
            before.get(Reason::DropFibFail) + 1
        );
    })
    .expect("enter netns");
}

#[test]
fn fib_results_are_reused_for_the_cache_time_and_failures_are_not() {
    let ns = fib_namespace("lbt-fibc").expect("netns");
    route_via_unresolved_neighbour(&ns);
    let mut lb = Lb::standard();
    let mut cfg = default_config();
    cfg.nexthop_mode = NEXTHOP_FIB;
    // Long enough that no stall of a loaded machine expires an entry early; the test
    // shortens it when it wants entries to expire.
    cfg.nexthop_cache_ns = 10_000_000_000;
    lb.dp.set_config(&cfg).expect("config");
    let backend = std::net::Ipv4Addr::new(198, 51, 101, 11);
    lb.backend(1, backend, BACKEND_ACTIVE);
    lb.table(0, &[1; 7]);
    let new_mac = [0x02, 0, 0, 0, 0, 0xfd];
    ns.enter(|| {
        // The cache is per CPU: keep every packet on one.
        lb_tests::pin_to_cpu(0).expect("pin");
        let lb0 = ifindex("lb0");
        let send = |lb: &mut Lb, port: u16| {
            let frame = Flow::new(CLIENT4, port, VIP4, 80).frame(L4::Tcp(SYN), &[]);
            let out = lb.dp.test_run_with(&frame, Some(lb0), 1).expect("run");
            (out, frame)
        };
        // The packet from `port` is forwarded to the gateway's MAC `mac`.
        let forwards_via = |lb: &mut Lb, port: u16, mac: [u8; 6]| {
            let (out, frame) = send(lb, port);
            assert_eq!(
                out.data,
                encapsulated(&frame, backend.into(), mac, LB_MAC),
                "port {port}"
            );
        };
        // No neighbour yet: dropped, and the failure is not remembered...
        assert_eq!(send(&mut lb, 41000).0.action, XDP_DROP);
        // ...so the next packet after the neighbour appears is forwarded.
        set_neighbour(&ns, "02:00:00:00:00:fe");
        forwards_via(&mut lb, 41001, GW_MAC);
        // The neighbour's MAC changes: the cached result is used until it expires.
        set_neighbour(&ns, "02:00:00:00:00:fd");
        forwards_via(&mut lb, 41002, GW_MAC);
        // With a cache time of 100 ms, an entry ages out: the next packet after it
        // asks the FIB again. (Lowering the time also shortens the entry already
        // cached, which another test shows; nothing here must stay cached.)
        let mut cfg = cfg;
        cfg.nexthop_cache_ns = 100_000_000;
        lb.dp.set_config(&cfg).expect("config");
        set_neighbour(&ns, "02:00:00:00:00:fe");
        forwards_via(&mut lb, 41010, GW_MAC);
        set_neighbour(&ns, "02:00:00:00:00:fd");
        std::thread::sleep(std::time::Duration::from_millis(350));
        forwards_via(&mut lb, 41003, new_mac);
        // Cache time 0: every packet asks the FIB.
        cfg.nexthop_cache_ns = 0;
        lb.dp.set_config(&cfg).expect("config");
        set_neighbour(&ns, "02:00:00:00:00:fe");
        forwards_via(&mut lb, 41004, GW_MAC);
        // A backend id given another address does not reuse the old address's entry:
        // the new one's next hop has no neighbour, so the packet is dropped.
        cfg.nexthop_cache_ns = 10_000_000_000;
        lb.dp.set_config(&cfg).expect("config");
        assert_eq!(send(&mut lb, 41005).0.action, XDP_TX);
        ns.ip(&[
            "route",
            "add",
            "198.51.102.0/24",
            "via",
            "192.0.2.252",
            "dev",
            "lb0",
        ])
        .expect("route");
        lb.backend(1, std::net::Ipv4Addr::new(198, 51, 102, 11), BACKEND_ACTIVE);
        assert_eq!(send(&mut lb, 41006).0.action, XDP_DROP);
    })
    .expect("enter netns");
}

#[test]
fn lowering_the_cache_time_shortens_entries_already_cached() {
    let ns = fib_namespace("lbt-fibl").expect("netns");
    route_via_unresolved_neighbour(&ns);
    set_neighbour(&ns, "02:00:00:00:00:fe");
    let mut lb = Lb::standard();
    let mut cfg = default_config();
    cfg.nexthop_mode = NEXTHOP_FIB;
    cfg.nexthop_cache_ns = 10_000_000_000;
    lb.dp.set_config(&cfg).expect("config");
    let backend = std::net::Ipv4Addr::new(198, 51, 101, 11);
    lb.backend(1, backend, BACKEND_ACTIVE);
    lb.table(0, &[1; 7]);
    ns.enter(|| {
        lb_tests::pin_to_cpu(0).expect("pin");
        let lb0 = ifindex("lb0");
        let frame = Flow::new(CLIENT4, 41_100, VIP4, 80).frame(L4::Tcp(SYN), &[]);
        let out = lb.dp.test_run_with(&frame, Some(lb0), 1).expect("run");
        assert_eq!(
            out.data,
            encapsulated(&frame, backend.into(), GW_MAC, LB_MAC)
        );
        set_neighbour(&ns, "02:00:00:00:00:fd");
        cfg.nexthop_cache_ns = 100_000_000;
        lb.dp.set_config(&cfg).expect("config");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let out = lb.dp.test_run_with(&frame, Some(lb0), 1).expect("run");
        let new_mac = [0x02, 0, 0, 0, 0, 0xfd];
        assert_eq!(
            out.data,
            encapsulated(&frame, backend.into(), new_mac, LB_MAC)
        );
    })
    .expect("enter netns");
}
