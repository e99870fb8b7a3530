//! The benchmark harness on two CPUs at once (the plumbing of `lb-bench --concurrent`):
//! two threads pinned to CPU 0 and CPU 1 run the harness at the same time, each on its
//! own flows; each CPU counts its own repetitions (`BENCH_FRAME` is per CPU), so every
//! repetition of both is a new flow. No timing is checked here (speed is lb-bench's).

use lb_common::types::{BENCH_FRAME_MAX, PROTO_TCP};
use lb_dataplane::{BenchSpec, BenchTarget, Dataplane as _};
use lb_tests::{
    cpus::at_once,
    fixture::{Lb, XDP_PASS, XDP_TX, round_robin},
    packets::{ACK, CLIENT4, Flow, L4, VIP4},
};

/// Offset of the IPv4 source address in the frame.
const V4_SRC: u32 = 26;

/// An ACK from `CLIENT4:sport` to VIP4:80, padded to the harness's frame size.
fn frame(sport: u16) -> Vec<u8> {
    let flow = Flow::new(CLIENT4, sport, VIP4, 80);
    let bare = flow.frame(L4::Tcp(ACK), &[]);
    flow.frame(L4::Tcp(ACK), &vec![0x61; BENCH_FRAME_MAX - bare.len()])
}

/// Whether CPUs 0 and 1 are online (else the tests have nothing to run on).
fn two_cpus() -> bool {
    // SAFETY: sysconf only reads.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if online < 2 {
        eprintln!("skipped: {online} CPU(s) online, two needed");
    }
    online >= 2
}

fn balancer() -> Lb {
    let mut lb = Lb::with_ct(65_536, 4_096);
    lb.backends(3, false);
    lb.table(0, &round_robin(65_537, &[1, 2, 3]));
    lb.vip(0, VIP4, 80, PROTO_TCP);
    lb
}

#[test]
fn two_cpus_at_once_each_pin_their_own_new_flows() {
    if !two_cpus() {
        return;
    }
    let mut lb = balancer();
    let frames = [frame(40_000), frame(40_001)];
    let spec = BenchSpec {
        vary_offset: V4_SRC,
        counter: Some(0),
        ..BenchSpec::default()
    };
    let repeat = 5_000;
    {
        let runner = lb
            .dp
            .bench_runner(BenchTarget::LoadBalancer, &frames[0], &spec)
            .expect("runner");
        let outs = at_once(&runner, &[0, 1], &[&frames[0], &frames[1]], repeat).expect("run");
        assert_eq!(outs.len(), 2);
        assert!(outs.iter().all(|o| o.action == XDP_TX), "{outs:?}");
    }
    // Every repetition of each CPU a new flow: its counter ran 0..repeat on its own
    // source port, without the other CPU's increments.
    let (entries, _) = lb.dp.conntrack_len().expect("ct size");
    assert_eq!(entries, 2 * repeat as usize);
    assert_eq!(lb.dp.bench_counter().expect("counter"), repeat);
    let stats = lb.dp.vip_stats(0).expect("stats");
    assert_eq!(stats.new_flows, 2 * u64::from(repeat));
}

#[test]
fn a_run_after_runs_at_once_continues_from_the_highest_counter() {
    if !two_cpus() {
        return;
    }
    let mut lb = balancer();
    let frames = [frame(40_000), frame(40_001)];
    let spec = BenchSpec {
        vary_offset: V4_SRC,
        counter: Some(0),
        ..BenchSpec::default()
    };
    {
        let runner = lb
            .dp
            .bench_runner(BenchTarget::Empty, &frames[0], &spec)
            .expect("runner");
        // CPU 1 alone: its counter reaches 300, CPU 0's stays at 0.
        let outs = at_once(&runner, &[1], &[&frames[1]], 300).expect("run");
        assert_eq!(outs[0].action, XDP_PASS);
    }
    // A run on CPU 0 that continues (no counter given) starts from 300, CPU 1's: its
    // flows are new although CPU 0 never counted.
    let cont = BenchSpec {
        counter: None,
        ..spec
    };
    {
        let runner = lb
            .dp
            .bench_runner(BenchTarget::LoadBalancer, &frames[0], &cont)
            .expect("runner");
        at_once(&runner, &[0], &[&frames[0]], 100).expect("run");
    }
    assert_eq!(lb.dp.bench_counter().expect("counter"), 400);
    assert_eq!(lb.dp.conntrack_len().expect("ct size").0, 100);
}

#[test]
fn runs_at_once_refuse_a_frame_count_that_differs_from_the_cpus() {
    if !two_cpus() {
        return;
    }
    let mut lb = balancer();
    let frame = frame(40_000);
    let runner = lb
        .dp
        .bench_runner(BenchTarget::Empty, &frame, &BenchSpec::default())
        .expect("runner");
    let err = at_once(&runner, &[0, 1], &[&frame], 1).expect_err("one frame for two CPUs");
    assert!(err.to_string().contains("one frame per CPU"), "{err}");
    let short = runner
        .run(&frame[..64], None, 1)
        .expect_err("a short frame");
    assert!(short.to_string().contains("exactly"), "{short}");
}
