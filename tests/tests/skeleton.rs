//! BPF_PROG_TEST_RUN: the program passes a frame untouched and counts it.

use lb_tests::packets;
use lb_user::dataplane::Dataplane;

const XDP_PASS: u32 = 2;

#[test]
fn passes_and_counts_every_packet() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let mut dp = Dataplane::load().expect("load");
    let frame = packets::tcp4_syn([192, 0, 2, 10], 40000, [203, 0, 113, 10], 80, &[]);
    let before = dp.global_stats().expect("stats").rx_packets;
    for _ in 0..10 {
        let out = dp.test_run(&frame).expect("test run");
        assert_eq!(out.action, XDP_PASS);
        assert_eq!(out.data, frame, "a passed frame leaves byte-identical");
    }
    let after = dp.global_stats().expect("stats").rx_packets;
    assert_eq!(after - before, 10);
}
