//! The FIB next-hop mode: `bpf_fib_lookup` on the outer destination picks the
//! neighbour's MAC and the interface's MAC from the kernel's tables. Runs
//! BPF_PROG_TEST_RUN from a thread inside a throw-away network namespace, with the
//! context's ingress interface set to a veth there.

use std::net::IpAddr;

use lb_common::{
    stats::Reason,
    types::{BACKEND_ACTIVE, NEXTHOP_FIB, PROTO_TCP},
};
use lb_tests::{
    fixture::{Lb, XDP_DROP, XDP_TX, default_config, fib_namespace, ifindex},
    packets::{self, CLIENT4, CLIENT6, Flow, GW_MAC, L4, LB_MAC, SYN, VIP4, VIP6, encapsulated},
};
use lb_user::dataplane::Dataplane as _;

#[test]
fn fib_mode_takes_macs_from_the_kernel_and_counts_unresolved_neighbours() {
    let ns = fib_namespace("lbt-fib").expect("netns");
    // A prefix whose next hop has no neighbour entry.
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
