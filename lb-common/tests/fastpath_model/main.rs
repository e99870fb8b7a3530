// SPDX-License-Identifier: MIT OR Apache-2.0
//! The fast path's model test (issue 30): every sequence of the simulation's
//! `micro.py` (CE1-CE11 with CE1b, CE2b, CE7b, and OK1-OK5) replayed against the real
//! decisions of lb-common, today's (`conntrack::decide`, `decide_syn`) beside the fast
//! path's (`fastpath::decide` and the cleaning), in a small model ([`model`]); and a
//! property test over random short sequences ([`random`]).
//!
//! Each test asserts that the fast path breaks no flow today's design keeps, or that
//! the break is a documented residual whose counter the decision incremented. Times
//! are the simulation's (ms after the origin) unless a test says why it shifts them:
//! the lead (3 s here, as the simulation's, rounded up to a tick of 2^30 ns) sends a
//! new SYN on a slot changed less than that ago to the slot's clean owner, and the quiet
//! time is counted from the change.

mod model;
mod random;

use lb_common::fastpath::Liveness;
use model::{A, C, D, Design, Ev, Fate, Residual, S, Setup, World, run, worse_than_today};

use lb_common::fastpath::Note;

/// Runs `events` in both designs; asserts the fast path is no worse than today, except
/// flows with residuals. Returns (today, fast).
fn both(setup: &Setup, events: &[(u64, Ev)]) -> (World, World) {
    let today = run(Design::Today, setup, events);
    let fast = run(Design::Fast, setup, events);
    let worse = worse_than_today(&today, &fast);
    assert!(
        worse.is_empty(),
        "flows {worse:?} broken: {:#?}",
        fast.flows
    );
    (today, fast)
}

fn fates(world: &World) -> Vec<Fate> {
    world.flows.iter().map(|f| f.fate).collect()
}

fn kept(n: usize) -> Vec<Fate> {
    vec![Fate::Kept; n]
}

/// CE1: a SYN retransmitted across a change: within the lead (3 s) of the slot's change
/// a new SYN goes to the clean owner, so the retransmission (at 1 s) is held on A and
/// the ACK follows it.
#[test]
fn ce1_syn_retransmitted_across_a_change_is_kept_by_the_lead() {
    let events = [
        (0, Ev::Syn(0)),
        (500, Ev::Tab(vec![C])),
        (1_000, Ev::Syn(0)),
        (1_100, Ev::Seg(0)),
        (2_000, Ev::Seg(0)),
    ];
    let (today, fast) = both(&Setup::micro(1), &events);
    assert_eq!((fates(&today), fates(&fast)), (kept(1), kept(1)));
    assert_eq!(fast.flows[0].trail, [A, A, A, A]);
}

/// CE1b: the retransmission comes after the lead (3 s, rounded up to a tick of 2^30 ns:
/// over by 4.3 s): it goes to C and splits the handshake. Residual R1, counted as
/// `fp_syn_maybe_split`.
#[test]
fn ce1b_syn_retransmitted_after_the_lead_is_residual_r1_counted() {
    let events = [
        (0, Ev::Syn(0)),
        (500, Ev::Tab(vec![C])),
        (5_500, Ev::Syn(0)),
        (5_600, Ev::Seg(0)),
        (6_500, Ev::Seg(0)),
    ];
    let (today, fast) = both(&Setup::micro(1), &events);
    assert_eq!(fates(&today), kept(1));
    assert_eq!(fates(&fast), [Fate::Broken]);
    assert_eq!(
        fast.flows[0].residuals,
        [Residual::Counted(Note::SynMaybeSplit)]
    );
    assert_eq!(fast.counter("fp_syn_maybe_split"), 1);
}

/// CE2: a second SYN wants the SYN cache slot of a live held SYN (one slot): it is not
/// overwritten; the second SYN is pinned at the SYN (`fp_syn_pinned`). Both kept. (Both
/// SYNs come within the duplicate-SYN window of the switch: `fp_syn_maybe_split`
/// counts them, an upper bound of residual R1.)
#[test]
fn ce2_a_live_held_syn_is_never_overwritten_both_handshakes_kept() {
    let setup = Setup {
        syn_slots: 1,
        ..Setup::micro(2)
    };
    let events = [
        (1_000, Ev::Tab(vec![C])),
        (10_000, Ev::Syn(0)),
        (10_100, Ev::Syn(1)),
        (10_200, Ev::Seg(0)),
        (10_300, Ev::Seg(1)),
        (11_000, Ev::Seg(0)),
        (11_000, Ev::Seg(1)),
    ];
    let (today, fast) = both(&setup, &events);
    assert_eq!((fates(&today), fates(&fast)), (kept(2), kept(2)));
    assert_eq!(fast.counter("fp_syn_pinned"), 1);
    assert_eq!(fast.counter("fp_syn_maybe_split"), 2);
}

/// CE2b: the ACK comes 12 s after the SYN, past a 10 s hold: the flow's own held SYN
/// still decides (the hold only keeps other SYNs out). Kept.
#[test]
fn ce2b_a_handshake_longer_than_the_hold_is_kept_by_its_own_held_syn() {
    let mut setup = Setup::micro(1);
    setup.cfg.syn_hold_ns = 10 * S;
    let events = [
        (1_000, Ev::Tab(vec![C])),
        (10_000, Ev::Syn(0)),
        (22_000, Ev::Seg(0)),
        (23_000, Ev::Seg(0)),
    ];
    let (today, fast) = both(&setup, &events);
    assert_eq!((fates(&today), fates(&fast)), (kept(1), kept(1)));
    assert_eq!(fast.flows[0].trail, [C, C, C]);
}

/// CE3's events: f0 established on A, a change to C, then f1's handshake, both talking.
fn ce3_events() -> [(u64, Ev); 8] {
    [
        (0, Ev::Syn(0)),
        (100, Ev::Seg(0)),
        (1_000, Ev::Tab(vec![C])),
        (10_000, Ev::Syn(1)),
        (10_100, Ev::Seg(1)),
        (11_000, Ev::Seg(0)),
        (12_000, Ev::Seg(1)),
        (13_000, Ev::Seg(0)),
    ]
}

/// CE3: conntrack holds one entry. f1's handshake pin (C, not the clean owner) goes to
/// the exceptions map, which never evicts it; f0's miss pin (A) to the LRU. Both kept,
/// where today's LRU evicts f0's pin and breaks it.
#[test]
fn ce3_a_pin_the_miss_rule_cannot_rederive_is_never_evicted() {
    let setup = Setup {
        lru_cap: 1,
        exc_cap: 1,
        ..Setup::micro(2)
    };
    let events = ce3_events();
    let (today, fast) = both(&setup, &events);
    assert_eq!(fates(&today), [Fate::Broken, Fate::Kept]);
    assert_eq!(fates(&fast), kept(2));
}

/// CE3 with a full exceptions map (capacity 0): the handshake's ACK cannot pin, so the
/// held SYN stays and decides (`fp_held_kept`, residual R2 once it is overwritten).
#[test]
fn ce3_with_the_exceptions_map_full_the_held_syn_keeps_deciding_counted() {
    let setup = Setup {
        lru_cap: 1,
        exc_cap: 0,
        ..Setup::micro(2)
    };
    let events = ce3_events();
    let (_, fast) = both(&setup, &events);
    assert_eq!(fates(&fast), kept(2));
    assert_eq!(fast.counter("fp_held_kept"), 2);
}

/// CE3 through the data path as it ships: f1's SYN, after the lead, is pinned at once
/// (rule S4) in the exceptions map (rule M3), f0's miss pin goes to the LRU; both kept.
/// With the exceptions map full (capacity 0) f1's SYN is dropped (`fp_syn_dropped`,
/// residual R2: its client retransmits).
#[test]
fn ce3_the_shipped_data_path_routes_each_pin_by_m3() {
    for (exc_cap, dropped) in [(1, 0), (0, 1)] {
        let setup = Setup {
            lru_cap: 1,
            exc_cap,
            ..Setup::micro(2)
        };
        let events = ce3_events();
        let today = run(Design::Today, &setup, &events);
        let shipped = run(Design::Shipped, &setup, &events);
        assert!(worse_than_today(&today, &shipped).is_empty());
        assert_eq!(fates(&shipped), kept(2), "exceptions capacity {exc_cap}");
        assert_eq!(shipped.counter("fp_syn_dropped"), dropped);
    }
}

/// Rule S4's pins in a map that never evicts: after the lead a new connection's SYN on
/// a dirty slot is pinned at once to the owner (an exception). f0's handshake never
/// completes; a walk past the SYN hold deletes its pin, so f1's SYN finds room. Without
/// the walk the exceptions map (capacity 1) stays full and f1's SYN is dropped
/// (`fp_syn_dropped`, residual R2).
#[test]
fn s4_pins_of_handshakes_that_never_complete_expire_at_the_walk() {
    let setup = Setup {
        exc_cap: 1,
        ..Setup::micro(2)
    };
    let events = |walk: bool| {
        let mut events = vec![(0, Ev::Tab(vec![C])), (10_000, Ev::Syn(0))];
        if walk {
            events.push((
                90_000,
                Ev::Walk {
                    inst: 0,
                    delay_ms: 0,
                },
            ));
        }
        events.extend([
            (95_000, Ev::Syn(1)),
            (95_100, Ev::Seg(1)),
            (96_000, Ev::Seg(1)),
        ]);
        events
    };
    let shipped = run(Design::Shipped, &setup, &events(true));
    assert_eq!(shipped.counter("fp_syn_dropped"), 0);
    assert_eq!(shipped.flows[1].trail, [C, C, C]);
    let full = run(Design::Shipped, &setup, &events(false));
    assert_eq!(full.counter("fp_syn_dropped"), 1);
    assert!(full.flows[1].trail.is_empty(), "the SYN was dropped");
}

/// CE4: the walk reads the slot (candidate), then f0's miss pins A (not the owner) and
/// bumps the slot epoch; the commit's compare-and-swap fails. Kept. (Walk at 110 s, not
/// 102 s: the quiet time counts from the switch at 4 s.)
#[test]
fn ce4_a_pin_made_during_the_walk_aborts_its_commit() {
    let events = [
        (0, Ev::Syn(0)),
        (100, Ev::Seg(0)),
        (1_000, Ev::Tab(vec![C])),
        (
            110_000,
            Ev::Walk {
                inst: 0,
                delay_ms: 5_000,
            },
        ),
        (112_000, Ev::Seg(0)),
        (116_000, Ev::Seg(0)),
    ];
    let (today, fast) = both(&Setup::micro(1), &events);
    assert_eq!((fates(&today), fates(&fast)), (kept(1), kept(1)));
    assert_eq!(fast.counter("fp_clean_aborted"), 1);
    assert!(fast.dirty(0, 0));
}

/// CE5: the walk reads the slot (f0 pinned to the owner C: no foreign pin), then a
/// change to D lands before the commit: the epoch moved, the commit aborts, f0 keeps C.
#[test]
fn ce5_a_change_during_the_walk_aborts_its_commit() {
    let events = [
        (1_000, Ev::Tab(vec![C])),
        (50_000, Ev::Syn(0)),
        (50_100, Ev::Seg(0)),
        (
            110_000,
            Ev::Walk {
                inst: 0,
                delay_ms: 5_000,
            },
        ),
        (112_000, Ev::Tab(vec![D])),
        (120_000, Ev::Seg(0)),
    ];
    let (today, fast) = both(&Setup::micro(1), &events);
    assert_eq!((fates(&today), fates(&fast)), (kept(1), kept(1)));
    assert_eq!(fast.counter("fp_clean_aborted"), 1);
    assert_eq!(fast.flows[0].trail, [C, C, C]);
}

/// Two instances (a fleet): `Setup::micro` with `n` flows on instance 0.
fn fleet(n: usize) -> Setup {
    Setup {
        ninst: 2,
        ..Setup::micro(n)
    }
}

/// CE6: instances clean at different times, then an ECMP move. In a fleet without the
/// second chance the fast path is off (rule F1): today's behaviour, kept.
#[test]
fn ce6_fleet_rule_keeps_todays_behaviour_instances_cleaning_apart() {
    let events = [
        (1_000, Ev::Tab(vec![C])),
        (
            102_000,
            Ev::Walk {
                inst: 0,
                delay_ms: 0,
            },
        ),
        (105_000, Ev::Syn(0)),
        (105_100, Ev::Seg(0)),
        (110_000, Ev::Move(0, 1)),
        (111_000, Ev::Seg(0)),
        (
            130_000,
            Ev::Walk {
                inst: 1,
                delay_ms: 0,
            },
        ),
        (131_000, Ev::Seg(0)),
    ];
    let (today, fast) = both(&fleet(1), &events);
    assert_eq!((fates(&today), fates(&fast)), (kept(1), kept(1)));
}

/// The events of CE7: a flow begun on a dirty slot of instance 0 moves to instance 1.
fn ce7_events() -> Vec<(u64, Ev)> {
    vec![
        (1_000, Ev::Tab(vec![C])),
        (10_000, Ev::Syn(0)),
        (10_100, Ev::Seg(0)),
        (20_000, Ev::Move(0, 1)),
        (21_000, Ev::Seg(0)),
    ]
}

/// CE7: with the fleet rule (fast path off in a fleet without the second chance) the
/// flow is kept as today.
#[test]
fn ce7_fleet_rule_keeps_a_flow_moved_after_beginning_dirty() {
    let (today, fast) = both(&fleet(1), &ce7_events());
    assert_eq!((fates(&today), fates(&fast)), (kept(1), kept(1)));
}

/// CE7, forced on in the fleet: instance 1 has no pin and sends the miss to the clean
/// owner A, breaking the flow. This is why rule F1 keeps the fast path off in fleets
/// until the second chance exists.
#[test]
fn ce7_forced_on_in_a_fleet_breaks_which_is_why_rule_f1_exists() {
    let forced = run(Design::FastForced, &fleet(1), &ce7_events());
    assert_eq!(fates(&forced), [Fate::Broken]);
}

/// CE7b: a flow begun before the change moves to the other instance. Today breaks it
/// (no pin there, the table says C); with the fleet rule the fast path is today.
#[test]
fn ce7b_today_breaks_a_flow_moved_after_a_change_and_so_does_the_fleet_rule() {
    let events = [
        (0, Ev::Syn(0)),
        (100, Ev::Seg(0)),
        (1_000, Ev::Tab(vec![C])),
        (20_000, Ev::Move(0, 1)),
        (21_000, Ev::Seg(0)),
    ];
    let (today, fast) = both(&fleet(1), &events);
    assert_eq!(
        (fates(&today), fates(&fast)),
        (vec![Fate::Broken], vec![Fate::Broken])
    );
    let forced = run(Design::FastForced, &fleet(1), &events);
    assert_eq!(fates(&forced), kept(1), "the miss rule would keep it");
}

/// CE8: instance 0 is withdrawn mid-dirty (its flows move to instance 1) and rejoins
/// (they move back). Fleet rule: today's behaviour, both flows kept.
#[test]
fn ce8_fleet_rule_keeps_flows_across_a_withdraw_and_rejoin() {
    let events = [
        (1_000, Ev::Tab(vec![C])),
        (10_000, Ev::Syn(0)),
        (10_100, Ev::Seg(0)),
        (20_000, Ev::Restart(0)),
        (20_000, Ev::Move(0, 1)),
        (20_000, Ev::Move(1, 1)),
        (25_000, Ev::Seg(0)),
        (30_000, Ev::Syn(1)),
        (30_100, Ev::Seg(1)),
        (40_000, Ev::Move(0, 0)),
        (40_000, Ev::Move(1, 0)),
        (45_000, Ev::Seg(1)),
    ];
    let (today, fast) = both(&fleet(2), &events);
    assert_eq!((fates(&today), fates(&fast)), (kept(2), kept(2)));
    let forced = run(Design::FastForced, &fleet(2), &events);
    assert!(fates(&forced).contains(&Fate::Broken), "why rule F1 exists");
}

/// CE8 on one instance: the daemon restarts mid-dirty, mid-lead (the pinned datapath
/// keeps the maps, and with them the slots and their lead); nothing breaks.
#[test]
fn ce8_one_instance_daemon_restart_mid_dirty_keeps_both_flows() {
    let events = [
        (0, Ev::Syn(1)),
        (100, Ev::Seg(1)),
        (1_000, Ev::Tab(vec![C])),
        (2_000, Ev::Restart(0)),
        (10_000, Ev::Syn(0)),
        (10_100, Ev::Seg(0)),
        (20_000, Ev::Restart(0)),
        (25_000, Ev::Seg(0)),
        (45_000, Ev::Seg(1)),
    ];
    let (today, fast) = both(&Setup::micro(2), &events);
    assert_eq!((fates(&today), fates(&fast)), (kept(2), kept(2)));
}

/// CE9: A is drained and the slot moves to C. New UDP flows within the lead and the UDP
/// idle timeout of the switch go to the drained clean owner (residual R3, counted
/// `fp_udp_drained_clean_owner`); none after; the slot turns clean once their pins
/// expire.
#[test]
fn ce9_new_udp_flows_reach_a_drained_backend_only_within_its_stated_time_counted() {
    let mut setup = Setup::micro(30);
    setup.flows = vec![(true, 0, 0); 30];
    setup.states[0] = Liveness::Draining;
    let mut events = vec![(1_000, Ev::Tab(vec![C]))];
    for k in 0..30u64 {
        events.push((10_000 + 20_000 * k, Ev::Seg(usize::try_from(k).unwrap())));
        events.push((15_000 + 20_000 * k, Ev::Seg(usize::try_from(k).unwrap())));
    }
    for t in (30_000..700_000).step_by(30_000) {
        events.push((
            t,
            Ev::Walk {
                inst: 0,
                delay_ms: 0,
            },
        ));
    }
    let (_, fast) = both(&setup, &events);
    let to_a: Vec<usize> = (0..30).filter(|&f| fast.flows[f].sock == Some(A)).collect();
    assert_eq!(to_a, [0, 1, 2], "flows at 10, 30 and 50 s");
    assert_eq!(fast.counter("fp_udp_drained_clean_owner"), 3);
    // The stated time: the UDP idle timeout after the switch at 1 s.
    assert!(fates(&fast).iter().all(|&f| f == Fate::Kept));
    assert!(!fast.dirty(0, 0));
}

/// The events of CE10: an established flow's packet lands between the owner word and
/// the state word of a non-atomic write.
fn ce10_events() -> Vec<(u64, Ev)> {
    vec![
        (0, Ev::Syn(0)),
        (100, Ev::Seg(0)),
        (1_000, Ev::Tab(vec![C])),
        (1_000, Ev::Seg(0)),
        (2_000, Ev::Seg(0)),
    ]
}

/// CE10: with atomic publication (rule P1) the flow is kept, with or without a lead.
#[test]
fn ce10_atomic_publication_keeps_a_flow_through_the_write() {
    let mut setup = Setup::micro(1);
    setup.cfg.lead_ns = 0;
    let (today, fast) = both(&setup, &ce10_events());
    assert_eq!((fates(&today), fates(&fast)), (kept(1), kept(1)));
}

/// CE10: a non-atomic write (owner 1 ms before state) breaks the flow, with or
/// without a lead (the lead only steers SYNs): the reason for rule P1.
#[test]
fn ce10_a_non_atomic_write_breaks_the_flow_which_rule_p1_forbids() {
    for lead_ns in [0, 3 * S] {
        let mut setup = Setup {
            atomic: false,
            ..Setup::micro(1)
        };
        setup.cfg.lead_ns = lead_ns;
        let torn = run(Design::Fast, &setup, &ce10_events());
        assert_eq!(fates(&torn), [Fate::Broken], "lead {lead_ns} ns");
    }
}

/// The events of CE11: a flow idle from 0.1 s to 150 s across a change, a walk at
/// 110 s (after the quiet time of 100 s from the switch at 4 s).
fn ce11_events() -> Vec<(u64, Ev)> {
    vec![
        (0, Ev::Syn(0)),
        (100, Ev::Seg(0)),
        (1_000, Ev::Tab(vec![C])),
        (
            110_000,
            Ev::Walk {
                inst: 0,
                delay_ms: 0,
            },
        ),
        (150_000, Ev::Seg(0)),
    ]
}

/// CE11: with the quiet time at the TCP idle time of 1,800 s (rule C3) the walk does
/// not clean and the idle flow is kept.
#[test]
fn ce11_a_quiet_time_at_the_tcp_idle_time_keeps_an_idle_flow() {
    let mut setup = Setup::micro(1);
    setup.cfg.quiet_ns = 1_800 * S;
    setup.cfg.tcp_idle_ns = 1_800 * S;
    let (today, fast) = both(&setup, &ce11_events());
    assert_eq!((fates(&today), fates(&fast)), (kept(1), kept(1)));
}

/// CE11 with the TCP idle time (and quiet time) at 100 s: the flow, silent 150 s, is
/// past it; the slot is cleaned and the flow breaks: residual R5 (not counted by the LB).
#[test]
fn ce11_a_flow_silent_past_the_tcp_idle_time_is_residual_r5() {
    let (today, fast) = both(&Setup::micro(1), &ce11_events());
    assert_eq!(fates(&today), kept(1));
    assert_eq!(fates(&fast), [Fate::Broken]);
    assert_eq!(fast.flows[0].residuals, [Residual::Idle]);
    assert_eq!(fast.counter("fp_slots_cleaned"), 1);
}

/// OK1: two changes between a dirty SYN and its ACK (C, then D, then back to A): the
/// held SYN decides. Kept.
#[test]
fn ok1_two_changes_between_a_dirty_syn_and_its_ack() {
    let events = [
        (1_000, Ev::Tab(vec![C])),
        (10_000, Ev::Syn(0)),
        (10_050, Ev::Tab(vec![D])),
        (10_080, Ev::Tab(vec![A])),
        (10_100, Ev::Seg(0)),
        (11_000, Ev::Seg(0)),
    ];
    let (today, fast) = both(&Setup::micro(1), &events);
    assert_eq!((fates(&today), fates(&fast)), (kept(1), kept(1)));
}

/// OK2: the SYN saw the slot clean, the ACK sees it dirty: the miss goes to the clean
/// owner. Kept.
#[test]
fn ok2_syn_saw_clean_ack_sees_dirty() {
    let events = [
        (0, Ev::Syn(0)),
        (50, Ev::Tab(vec![C])),
        (100, Ev::Seg(0)),
        (1_000, Ev::Seg(0)),
    ];
    let (today, fast) = both(&Setup::micro(1), &events);
    assert_eq!((fates(&today), fates(&fast)), (kept(1), kept(1)));
}

/// OK3: the SYN saw the slot dirty (held, to the owner C), the ACK sees it clean (the
/// walk, at 104.5 s after the switch at 4 s, cleaned it between). Kept.
#[test]
fn ok3_syn_saw_dirty_ack_sees_clean() {
    let events = [
        (1_000, Ev::Tab(vec![C])),
        (104_300, Ev::Syn(0)),
        (
            105_500,
            Ev::Walk {
                inst: 0,
                delay_ms: 0,
            },
        ),
        (105_600, Ev::Seg(0)),
        (106_000, Ev::Seg(0)),
    ];
    let (today, fast) = both(&Setup::micro(1), &events);
    assert_eq!((fates(&today), fates(&fast)), (kept(1), kept(1)));
    assert!(!fast.dirty(0, 0), "the walk cleaned the slot");
}

/// OK4: the slot changes A -> C -> D -> A while an old flow (f1, on A) idles and a new
/// one (f0, on C) is pinned; the walk at 200 s sees f0's pin naming C and leaves the slot
/// dirty. Both kept. (Both flows also send at 120 s: the model's TCP idle time is the
/// quiet time, 100 s, and a flow silent longer is residual R5, as CE11 shows.)
#[test]
fn ok4_a_change_back_to_the_original_owner_keeps_old_and_new_flows() {
    let events = [
        (0, Ev::Syn(1)),
        (100, Ev::Seg(1)),
        (1_000, Ev::Tab(vec![C])),
        (10_000, Ev::Syn(0)),
        (10_100, Ev::Seg(0)),
        (20_000, Ev::Tab(vec![D])),
        (30_000, Ev::Tab(vec![A])),
        (40_000, Ev::Seg(0)),
        (41_000, Ev::Seg(1)),
        (120_000, Ev::Seg(0)),
        (120_000, Ev::Seg(1)),
        (
            200_000,
            Ev::Walk {
                inst: 0,
                delay_ms: 0,
            },
        ),
        (201_000, Ev::Seg(0)),
        (202_000, Ev::Seg(1)),
    ];
    let (today, fast) = both(&Setup::micro(2), &events);
    assert_eq!((fates(&today), fates(&fast)), (kept(2), kept(2)));
    assert!(fast.dirty(0, 0));
}

/// OK5: two changes between a clean SYN and its ACK: the ACK's miss goes to the clean
/// owner A. Kept.
#[test]
fn ok5_two_changes_between_a_clean_syn_and_its_ack() {
    let events = [
        (0, Ev::Syn(0)),
        (30, Ev::Tab(vec![C])),
        (60, Ev::Tab(vec![D])),
        (100, Ev::Seg(0)),
        (1_000, Ev::Seg(0)),
    ];
    let (today, fast) = both(&Setup::micro(1), &events);
    assert_eq!((fates(&today), fates(&fast)), (kept(1), kept(1)));
}
