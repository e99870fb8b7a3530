//! The second chance end to end (issue 31, stage 3): a flow that ECMP moves to a load
//! balancer instance without its pin, on a slot whose owner changed, reaches the
//! backend holding its socket through the candidate the instance names and the backend
//! agent that follows it. Privileged: a test bed whose backends run the agent with
//! forwarding between them ([`TestBedOptions::agent_forwarding`]), and two instances
//! of the data plane, one after the other on the bed's `lb0` (the second has none of
//! the first's pins, as another instance of a fleet).

use lb_common::{
    agent::AgentReason,
    types::{BACKEND_ACTIVE, GUE_DEFAULT_PORT, PROTO_TCP},
};
use lb_dataplane::Dataplane as _;
use lb_maglev::flow::addr_bytes;
use lb_tests::{
    fixture::vip_key,
    packets::{VIP4, backend4},
    testbed::{
        TCP_PORT, TestBed, TestBedOptions,
        lb::{BedLb, VIP4_TCP, backend_id},
        vip_tcp,
    },
    traffic::{self, Ports},
};

/// Connections opened through the first instance.
const CONNECTIONS: usize = 40;

/// Rewrites backends `ks`' IPv4 entries of `lb` to GUE to the default port.
fn gue(lb: &mut BedLb, ks: &[u8]) {
    for &k in ks {
        let (addr, family) = addr_bytes(backend4(k).into());
        lb.dp_mut()
            .set_backend(
                backend_id(k, false),
                &lb_common::types::BackendEntry {
                    addr,
                    family,
                    state: BACKEND_ACTIVE,
                    gue_port: GUE_DEFAULT_PORT.to_be(),
                },
            )
            .expect("GUE backend");
    }
}

/// The sum of `reason` over the bed's backends' agents.
fn agents(bed: &TestBed, reason: AgentReason) -> u64 {
    (1..=bed.backend_count())
        .map(|k| {
            bed.backend(k)
                .agent_stats()
                .expect("agent stats")
                .get(reason)
        })
        .sum()
}

#[test]
fn a_moved_flow_on_a_changed_slot_reaches_its_backend_through_the_candidate() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let bed = TestBed::new(TestBedOptions {
        backends: 2,
        clients: 16,
        agent_forwarding: true,
        ..TestBedOptions::default()
    })
    .expect("test bed");
    // Instance A, backends 1 and 2: the connections open and are pinned there.
    let mut a = BedLb::attach(&bed).expect("instance A");
    gue(&mut a, &[1, 2]);
    let srcs = traffic::sources(&bed, CONNECTIONS, false, Ports::Kernel);
    let mut greeted = traffic::connect_all(&bed, &srcs, vip_tcp(false)).expect("connections");
    drop(a);
    // Instance B, with no pin: the same table, then backend 3 added, which moves about a
    // third of the slots (dirty, their clean owner 1 or 2).
    let mut b = BedLb::attach(&bed).expect("instance B");
    gue(&mut b, &[1, 2]);
    assert_eq!(bed.add_backend().expect("backend 3"), 3);
    b.set_backends(&[1, 2, 3]).expect("backend 3 in the table");
    gue(&mut b, &[1, 2, 3]);
    let key = vip_key(VIP4.into(), TCP_PORT, PROTO_TCP);
    b.dp_mut()
        .set_second_chance(&key, VIP4_TCP, true)
        .expect("second chance");
    for (j, g) in greeted.iter_mut().enumerate() {
        for i in 0..2 {
            let answer = g
                .conn
                .exchange(&format!("line {i}"))
                .unwrap_or_else(|e| panic!("connection {j} broke: {e}"));
            assert_eq!(answer, g.backend, "connection {j} moved");
        }
    }
    let handed_on = agents(&bed, AgentReason::TxCandidate);
    let delivered = agents(&bed, AgentReason::DecapSocket);
    eprintln!(
        "{CONNECTIONS} connections kept; packets handed on to their candidate: {handed_on}, \
         delivered to a socket found: {delivered}"
    );
    assert!(
        handed_on > 0,
        "no connection's slot moved: the test proves nothing"
    );
    assert!(
        delivered >= handed_on,
        "every handed-on packet found its socket"
    );
    // Without the second chance the same instance breaks the moved connections: its
    // misses go to backend 3 alone, which resets them.
    b.dp_mut()
        .set_second_chance(&key, VIP4_TCP, false)
        .expect("second chance off");
    let mut broken = 0;
    for g in &mut greeted {
        let answer = g.conn.exchange("line 2").ok();
        broken += usize::from(answer.as_deref() != Some(g.backend.as_str()));
    }
    eprintln!("without the second chance: {broken} of {CONNECTIONS} broken");
    assert!(
        broken > 0,
        "the control: moved connections break without it"
    );
}
