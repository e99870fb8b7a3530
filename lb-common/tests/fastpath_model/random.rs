// SPDX-License-Identifier: MIT OR Apache-2.0
//! The property over random short sequences: two slots, one or two instances (two: a
//! fleet, where rule F1 keeps today's path), four TCP or UDP flows, table changes with
//! backends drained, downed and brought back, SYNs, ACKs, data and datagrams, cleaning
//! walks (committing at once or 5 s later), ECMP moves, daemon restarts, LRU
//! evictions from small conntrack capacities, and a lead of 3 s or none. The fast path must break no flow that
//! today's `conntrack::decide` keeps, except flows with a documented residual.

use lb_common::fastpath::{self, Liveness};
use proptest::prelude::*;

use super::model::{A, C, D, Design, Ev, S, Setup, run, worse_than_today};

/// One generated step: a gap, then an event.
#[derive(Clone, Debug)]
enum Step {
    Syn(usize),
    Seg(usize),
    /// New owners for the two slots (indexes into A, C, D), after backend `.1` takes
    /// state `.2` when `.1` is some.
    Change([usize; 2], Option<(usize, Liveness)>),
    Walk(usize, bool),
    Move(usize, usize),
    Restart(usize),
}

fn liveness() -> impl Strategy<Value = Liveness> {
    prop_oneof![
        Just(Liveness::Active),
        Just(Liveness::Draining),
        Just(Liveness::Down)
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..4usize).prop_map(Step::Syn),
        8 => (0..4usize).prop_map(Step::Seg),
        3 => ([0..3usize, 0..3usize], proptest::option::of((0..3usize, liveness())))
            .prop_map(|(owners, state)| Step::Change(owners, state)),
        2 => (0..2usize, any::<bool>()).prop_map(|(i, slow)| Step::Walk(i, slow)),
        1 => (0..4usize, 0..2usize).prop_map(|(f, i)| Step::Move(f, i)),
        1 => (0..2usize).prop_map(Step::Restart),
    ]
}

const IDS: [u32; 3] = [A, C, D];

/// Turns steps into timed events; a table names only active backends (as the
/// controller's tables do), the first active one standing in for any other.
fn events(ninst: usize, steps: &[(u64, Step)]) -> Vec<(u64, Ev)> {
    let mut states = [Liveness::Active; 3];
    let mut t = 0;
    let mut out = Vec::new();
    for (gap, step) in steps {
        t += gap;
        let inst = |i: &usize| i % ninst;
        match step {
            Step::Syn(f) => out.push((t, Ev::Syn(*f))),
            Step::Seg(f) => out.push((t, Ev::Seg(*f))),
            Step::Change(owners, state) => {
                if let Some((b, s)) = state {
                    states[*b] = *s;
                    out.push((t, Ev::State(IDS[*b], *s)));
                }
                let first = (0..3).find(|&b| states[b] == Liveness::Active);
                let pick = |o: usize| match (states[o], first) {
                    (Liveness::Active, _) => IDS[o],
                    (_, Some(b)) => IDS[b],
                    (_, None) => 0,
                };
                out.push((t, Ev::Tab(owners.map(pick).to_vec())));
            }
            Step::Walk(i, slow) => {
                let delay_ms = if *slow { 5_000 } else { 0 };
                out.push((
                    t,
                    Ev::Walk {
                        inst: inst(i),
                        delay_ms,
                    },
                ));
            }
            Step::Move(f, i) => out.push((t, Ev::Move(*f, inst(i)))),
            Step::Restart(i) => out.push((t, Ev::Restart(inst(i)))),
        }
    }
    out
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        1..=2usize,
        prop::array::uniform4((any::<bool>(), 0..2usize, 0..2usize)),
        1..=6usize,
        prop_oneof![Just(0usize), Just(1), Just(8)],
        prop_oneof![Just(1usize), Just(4), Just(1_024)],
        prop_oneof![Just(0u64), Just(3 * S)],
    )
        .prop_map(
            |(ninst, flows, lru_cap, exc_cap, syn_slots, lead_ns)| Setup {
                m: 2,
                ninst,
                lru_cap,
                exc_cap,
                syn_slots,
                owners: vec![A, C],
                flows: flows
                    .iter()
                    .map(|&(udp, slot, inst)| (udp, slot, inst % ninst))
                    .collect(),
                cfg: fastpath::Config {
                    lead_ns,
                    ..Setup::micro(4).cfg
                },
                ..Setup::micro(4)
            },
        )
}

/// Cases per run: `PROPTEST_CASES`, else 2,000.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

/// A gap between events (ms): mostly short, sometimes past the quiet time.
fn gap() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0..10_000u64, 4 => 0..40_000u64, 1 => 0..150_000u64]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Random sequences: the fast path breaks no flow today's design keeps, except
    /// documented residuals.
    #[test]
    fn random_sequences_break_nothing_today_keeps_except_residuals(
        setup in setup(),
        steps in prop::collection::vec((gap(), step()), 1..40),
    ) {
        let events = events(setup.ninst, &steps);
        let today = run(Design::Today, &setup, &events);
        let fast = run(Design::Fast, &setup, &events);
        let worse = worse_than_today(&today, &fast);
        prop_assert!(
            worse.is_empty(),
            "flows {:?} broken\ntoday {:#?}\nfast {:#?}",
            worse,
            today.flows,
            fast.flows
        );
    }

    /// Random sequences: the fast path as lb-ebpf runs it breaks no flow today's design
    /// keeps, except documented residuals.
    #[test]
    fn random_sequences_the_shipped_fast_path_breaks_nothing_today_keeps(
        setup in setup(),
        steps in prop::collection::vec((gap(), step()), 1..40),
    ) {
        let events = events(setup.ninst, &steps);
        let today = run(Design::Today, &setup, &events);
        let shipped = run(Design::Shipped, &setup, &events);
        let worse = worse_than_today(&today, &shipped);
        prop_assert!(
            worse.is_empty(),
            "flows {:?} broken\ntoday {:#?}\nshipped {:#?}",
            worse,
            today.flows,
            shipped.flows
        );
    }
}
