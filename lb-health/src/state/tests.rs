//! The state machine on a fake clock: every instant is `t0 + n` seconds.

use super::*;
use crate::outcome::Stage;

const TH: Thresholds = Thresholds { rise: 2, fall: 3 };

fn at(t0: Instant, secs: u64) -> Instant {
    t0 + Duration::from_secs(secs)
}

fn ok() -> ProbeResult {
    Ok(Duration::from_micros(250))
}

fn refused() -> ProbeResult {
    Err(Failure::Refused)
}

fn transition(event: Option<Event>) -> Transition {
    match event {
        Some(Event::Transition(t)) => t,
        other => panic!("expected a transition, got {other:?}"),
    }
}

/// Feeds one result per second from `start`, returning the events.
fn feed(
    h: &mut BackendHealth,
    t0: Instant,
    start: u64,
    results: &[ProbeResult],
    damping: &Damping,
) -> Vec<(u64, Option<Event>)> {
    results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let s = start + i as u64;
            (s, h.record(at(t0, s), r, TH, damping))
        })
        .collect()
}

#[test]
fn start_assumes_healthy_until_fall_failures() {
    let t0 = Instant::now();
    let mut h = BackendHealth::assume_healthy(t0);
    assert!(h.is_healthy());
    assert_eq!(h.status(t0).label(), "healthy (assumed)");
    assert_eq!(h.record(at(t0, 1), &refused(), TH, &Damping::OFF), None);
    assert_eq!(h.record(at(t0, 2), &refused(), TH, &Damping::OFF), None);
    assert!(h.is_healthy(), "two failures of three");
    let t = transition(h.record(at(t0, 3), &refused(), TH, &Damping::OFF));
    assert!(!t.healthy);
    assert_eq!(t.at, at(t0, 3));
    assert_eq!(
        t.reason,
        Reason::Failed {
            failure: Failure::Refused,
            consecutive: 3
        }
    );
    assert_eq!(
        t.reason.to_string(),
        "connection refused (3 consecutive failed probes)"
    );
    let s = h.status(at(t0, 5));
    assert_eq!(s.label(), "unhealthy");
    assert_eq!(s.since, Duration::from_secs(2));
    assert_eq!(s.last_error, Some(Failure::Refused));
    assert_eq!(s.went_down, 1);
}

#[test]
fn one_success_confirms_the_assumption() {
    let t0 = Instant::now();
    let mut h = BackendHealth::assume_healthy(t0);
    assert_eq!(h.record(at(t0, 1), &ok(), TH, &Damping::OFF), None);
    let s = h.status(at(t0, 1));
    assert_eq!(s.label(), "healthy");
    assert_eq!(s.last_latency, Some(Duration::from_micros(250)));
    assert_eq!(s.came_up, 0, "no change happened");
}

#[test]
fn hysteresis_ignores_runs_shorter_than_the_thresholds() {
    let t0 = Instant::now();
    let mut h = BackendHealth::assume_healthy(t0);
    // fail, fail, ok, fail, fail, ok...: never three failures in a row.
    let pattern: Vec<_> = (0..30)
        .map(|i| if i % 3 == 2 { ok() } else { refused() })
        .collect();
    assert!(
        feed(&mut h, t0, 1, &pattern, &Damping::OFF)
            .iter()
            .all(|(_, e)| e.is_none())
    );
    assert!(h.is_healthy());

    let mut h = BackendHealth::assume_unhealthy(t0);
    // ok, fail, ok, fail...: never two successes in a row.
    let pattern: Vec<_> = (0..30)
        .map(|i| if i % 2 == 0 { ok() } else { refused() })
        .collect();
    assert!(
        feed(&mut h, t0, 1, &pattern, &Damping::OFF)
            .iter()
            .all(|(_, e)| e.is_none())
    );
    assert!(!h.is_healthy());
}

#[test]
fn recovery_after_rise_successes() {
    let t0 = Instant::now();
    let mut h = BackendHealth::assume_unhealthy(t0);
    assert_eq!(h.record(at(t0, 1), &ok(), TH, &Damping::OFF), None);
    let t = transition(h.record(at(t0, 2), &ok(), TH, &Damping::OFF));
    assert!(t.healthy);
    assert_eq!(t.reason, Reason::Recovered { consecutive: 2 });
    assert_eq!(h.status(at(t0, 2)).came_up, 1);
}

#[test]
fn the_last_error_and_counters_survive_recovery() {
    let t0 = Instant::now();
    let mut h = BackendHealth::assume_healthy(t0);
    let timeout = Failure::Timeout {
        stage: Stage::Connect,
        after: Duration::from_secs(1),
    };
    for s in 1..=3 {
        h.record(at(t0, s), &Err(timeout.clone()), TH, &Damping::OFF);
    }
    h.record(at(t0, 4), &ok(), TH, &Damping::OFF);
    h.record(at(t0, 5), &ok(), TH, &Damping::OFF);
    let s = h.status(at(t0, 7));
    assert!(s.healthy);
    assert_eq!(s.last_error, Some(timeout));
    assert_eq!(s.last_error_ago, Some(Duration::from_secs(4)));
    assert_eq!(s.last_probe_ago, Some(Duration::from_secs(2)));
    assert_eq!((s.probes, s.failed_probes), (5, 3));
    assert_eq!((s.went_down, s.came_up), (1, 1));
    assert_eq!(s.since, Duration::from_secs(2));
    assert_eq!(
        s.last_reason.as_deref(),
        Some("2 consecutive successful probes")
    );
}

#[test]
fn thresholds_of_one_flip_on_every_result() {
    let t0 = Instant::now();
    let one = Thresholds { rise: 1, fall: 1 };
    let mut h = BackendHealth::assume_healthy(t0);
    assert!(
        h.record(at(t0, 1), &refused(), one, &Damping::OFF)
            .is_some()
    );
    assert!(h.record(at(t0, 2), &ok(), one, &Damping::OFF).is_some());
    assert!(h.is_healthy());
}

/// A backend that bounces past the damping limit is held unhealthy, the hold is
/// reported once, and after the hold it recovers on its next successful probe.
#[test]
fn flapping_backend_is_held_unhealthy_and_reported_once() {
    let t0 = Instant::now();
    let damping = Damping {
        max_transitions: 4,
        window: Duration::from_secs(60),
        hold: Duration::from_secs(60),
    };
    let one = Thresholds { rise: 1, fall: 1 };
    let mut h = BackendHealth::assume_healthy(t0);
    let mut events = Vec::new();
    // down, up, down, up (four changes), then down: the fifth change starts the hold.
    for s in 1..=5 {
        let r = if s % 2 == 1 { refused() } else { ok() };
        events.push(h.record(at(t0, s), &r, one, &damping));
    }
    let fifth = transition(events.pop().unwrap());
    assert!(!fifth.healthy);
    assert_eq!(fifth.held_until, Some(at(t0, 65)));
    assert!(
        events
            .iter()
            .all(|e| matches!(e, Some(Event::Transition(_))))
    );
    // Successes during the hold do not bring it back, and nothing is reported.
    for s in 6..65 {
        assert_eq!(
            h.record(at(t0, s), &ok(), one, &damping),
            None,
            "second {s}"
        );
        assert!(!h.is_healthy());
    }
    assert_eq!(h.status(at(t0, 64)).label(), "unhealthy (held)");
    assert_eq!(h.status(at(t0, 64)).held_for, Some(Duration::from_secs(1)));
    let back = transition(h.record(at(t0, 65), &ok(), one, &damping));
    assert!(back.healthy);
    assert_eq!(h.status(at(t0, 65)).holds, 1);
}

#[test]
fn a_suppressed_recovery_reports_the_hold_once() {
    let t0 = Instant::now();
    let damping = Damping {
        max_transitions: 1,
        window: Duration::from_secs(60),
        hold: Duration::from_secs(30),
    };
    let one = Thresholds { rise: 1, fall: 1 };
    let mut h = BackendHealth::assume_healthy(t0);
    assert!(h.record(at(t0, 1), &refused(), one, &damping).is_some());
    // The recovery is the second change within the window: held.
    assert_eq!(
        h.record(at(t0, 2), &ok(), one, &damping),
        Some(Event::Held {
            until: at(t0, 32),
            changes: 2
        })
    );
    assert_eq!(h.record(at(t0, 3), &ok(), one, &damping), None);
    assert!(!h.is_healthy());
    assert!(transition(h.record(at(t0, 32), &ok(), one, &damping)).healthy);
}

#[test]
fn status_serialises_durations_as_milliseconds() {
    let t0 = Instant::now();
    let mut h = BackendHealth::assume_healthy(t0);
    h.record(at(t0, 1), &ok(), TH, &Damping::OFF);
    let json = serde_json::to_value(h.status(at(t0, 3))).unwrap();
    assert_eq!(json["since_ms"], 3000);
    assert_eq!(json["last_latency_us"], 250);
    assert_eq!(json["held_ms"], serde_json::Value::Null);
    assert_eq!(json["healthy"], true);
}

#[test]
fn started_down_it_waits_for_its_first_success_and_only_that() {
    let t0 = Instant::now();
    let mut h = BackendHealth::start_down(t0);
    assert!(!h.is_healthy());
    let failures = feed(
        &mut h,
        t0,
        1,
        &[refused(), refused(), refused()],
        &Damping::OFF,
    );
    assert!(failures.iter().all(|(_, e)| e.is_none()), "{failures:?}");
    assert!(!h.is_healthy(), "failing probes never let it in");
    let t = transition(h.record(at(t0, 4), &ok(), TH, &Damping::OFF));
    assert!(t.healthy, "one success is enough although rise is 2");
    assert_eq!(t.reason, Reason::Recovered { consecutive: 1 });
    // From then on the thresholds apply as to any backend.
    let down = feed(
        &mut h,
        t0,
        5,
        &[refused(), refused(), refused()],
        &Damping::OFF,
    );
    assert!(down[..2].iter().all(|(_, e)| e.is_none()));
    assert!(!transition(down[2].1.clone()).healthy);
    assert_eq!(
        h.record(at(t0, 8), &ok(), TH, &Damping::OFF),
        None,
        "rise = 2 again"
    );
    assert!(transition(h.record(at(t0, 9), &ok(), TH, &Damping::OFF)).healthy);
}
