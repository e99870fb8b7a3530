//! The exposition of a service over the in-memory data plane: series and labels, both
//! formats, and the lifecycle of a removed backend's series.

use std::time::Duration;

use lb_common::stats::{BackendStats, Reason, VipStats};

use super::*;
use crate::{
    config::Vip,
    control::{BackendAction, Request},
    controller::Controller,
    daemon::test_fixture::{FILE, start_service},
};
use lb_dataplane::{Census, FakeDataplane};

const VIP: &str = "vip=\"203.0.113.10:80/tcp\"";
const B11: &str = "backend=\"198.51.100.11\"";

fn start() -> Service<FakeDataplane> {
    start_service(Controller::new(FakeDataplane::new()), FILE, None)
}

fn backend(s: &mut Service<FakeDataplane>, action: BackendAction, address: &str) {
    let r = s.handle(
        &Request::Backend {
            action,
            vip: "203.0.113.10:80/tcp".parse().unwrap(),
            backend: address.parse().unwrap(),
            weight: None,
            timeout_secs: None,
            keep: false,
        },
        &mut |_| {},
    );
    assert!(r.ok, "{:?}", r.error);
}

fn scrape(s: &mut Service<FakeDataplane>, retention: Duration, openmetrics: bool) -> String {
    let snapshot = Snapshot::take(s, retention).unwrap();
    encode(snapshot, &Recorder::default(), openmetrics).0
}

fn id_of(s: &Service<FakeDataplane>, address: &str) -> u32 {
    s.status().vips[0]
        .backends
        .iter()
        .find(|b| b.address == address)
        .unwrap()
        .id
}

/// The value of the sample whose line starts with `name{` and has every label of
/// `labels`.
fn value(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| labels.iter().all(|label| l.contains(label)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn series_carry_the_vip_and_backend_labels_in_both_formats() {
    let mut s = start();
    let id = id_of(&s, "198.51.100.11");
    {
        let dp = s.controller_mut().dataplane_mut();
        dp.global.counters[Reason::TxEncap as usize] = 7;
        dp.vip_counters.insert(
            0,
            VipStats {
                packets: 100,
                bytes: 6400,
                new_flows: 3,
                ct_hits: 97,
                ..VipStats::default()
            },
        );
        dp.backend_counters.insert(
            id,
            BackendStats {
                packets: 60,
                bytes: 3840,
                new_flows: 2,
            },
        );
    }
    let mut census = Census::default();
    census.backends.insert(
        id,
        ConnectionCounts {
            established: 5,
            idle: 1,
            closing: 2,
            syn_only: 1,
        },
    );
    s.set_census(census);
    for openmetrics in [false, true] {
        let text = scrape(&mut s, Duration::from_secs(600), openmetrics);
        let v = |name: &str, labels: &[&str]| value(&text, name, labels);
        assert_eq!(v("lb_vip_packets_total", &[VIP]), Some(100.0), "{text}");
        assert_eq!(v("lb_vip_bytes_total", &[VIP]), Some(6400.0));
        assert_eq!(
            v("lb_vip_conntrack_events_total", &[VIP, "event=\"hit\""]),
            Some(97.0)
        );
        assert_eq!(v("lb_backend_packets_total", &[VIP, B11]), Some(60.0));
        assert_eq!(v("lb_backend_new_flows_total", &[VIP, B11]), Some(2.0));
        assert_eq!(
            v("lb_backend_connections", &[B11, "state=\"established\""]),
            Some(5.0)
        );
        assert_eq!(v("lb_backend_connections_idle", &[B11]), Some(1.0));
        assert_eq!(v("lb_backend_state", &[B11, "state=\"active\""]), Some(1.0));
        assert_eq!(v("lb_backend_state", &[B11, "state=\"drain\""]), Some(0.0));
        assert_eq!(
            v(
                "lb_verdicts_total",
                &["reason=\"tx_encap\"", "action=\"XDP_TX\""]
            ),
            Some(7.0)
        );
        assert!(
            text.contains("lb_table_info{vip=\"203.0.113.10:80/tcp\",generation=\"1\""),
            "{text}"
        );
        assert!(text.contains("lb_build_info{version=\""));
        assert_eq!(text.ends_with("# EOF\n"), openmetrics);
    }
}

/// A removed backend's series stay, frozen, with state="removed", for the retention;
/// re-added, its counters continue (its id was kept for it); after the retention
/// they are gone.
#[test]
fn a_removed_backend_keeps_its_series_for_the_retention_then_they_go() {
    let mut s = start();
    let id = id_of(&s, "198.51.100.11");
    s.controller_mut().dataplane_mut().backend_counters.insert(
        id,
        BackendStats {
            packets: 60,
            ..BackendStats::default()
        },
    );
    backend(&mut s, BackendAction::Remove, "198.51.100.11");
    let long = Duration::from_secs(600);
    let text = scrape(&mut s, long, false);
    assert_eq!(value(&text, "lb_backend_packets_total", &[B11]), Some(60.0));
    assert_eq!(
        value(&text, "lb_backend_state", &[B11, "state=\"removed\""]),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            "lb_backend_state_transitions_total",
            &[B11, "to=\"removed\""]
        ),
        Some(1.0)
    );
    assert_eq!(value(&text, "lb_backend_weight", &[B11]), None);
    backend(&mut s, BackendAction::Add, "198.51.100.11");
    assert_eq!(id_of(&s, "198.51.100.11"), id, "the same id again");
    let text = scrape(&mut s, long, false);
    assert_eq!(
        value(&text, "lb_backend_packets_total", &[B11]),
        Some(60.0),
        "continues, never reset"
    );
    assert_eq!(
        value(
            &text,
            "lb_backend_state_transitions_total",
            &[B11, "to=\"active\""]
        ),
        Some(2.0)
    );
    backend(&mut s, BackendAction::Remove, "198.51.100.11");
    std::thread::sleep(Duration::from_millis(5));
    let text = scrape(&mut s, Duration::ZERO, false);
    assert_eq!(
        value(&text, "lb_backend_packets_total", &[B11]),
        None,
        "{text}"
    );
    assert!(value(&text, "lb_backend_packets_total", &["198.51.100.12"]).is_some());
}

#[test]
fn reloads_and_table_builds_are_recorded() {
    let recorder = Recorder::default();
    recorder.reload(ReloadResult::Applied);
    recorder.reload(ReloadResult::Invalid);
    recorder.reload(ReloadResult::Invalid);
    let mut s = start();
    let snapshot = Snapshot::take(&mut s, Duration::ZERO).unwrap();
    let text = encode(snapshot, &recorder, false).0;
    assert_eq!(
        value(&text, "lb_reloads_total", &["result=\"invalid\""]),
        Some(2.0)
    );
    assert!(text.contains("# TYPE lb_table_build_duration_seconds histogram"));
}

/// Counters with a label are exported for every label value from the start, at 0, so
/// the first reload or state change is seen by `increase()`.
#[test]
fn labelled_counters_are_exported_at_zero_before_their_first_event() {
    let mut s = start();
    let text = scrape(&mut s, Duration::ZERO, false);
    for result in ["applied", "invalid", "refused"] {
        let label = format!("result=\"{result}\"");
        assert_eq!(
            value(&text, "lb_reloads_total", &[&label]),
            Some(0.0),
            "{text}"
        );
    }
    for to in ["drain", "down", "unhealthy", "removed"] {
        let label = format!("to=\"{to}\"");
        assert_eq!(
            value(&text, "lb_backend_state_transitions_total", &[B11, &label]),
            Some(0.0),
            "{text}"
        );
    }
}

/// Health checks in the exposition: a backend whose probes failed is in state
/// `unhealthy` (with the transition counted) and back to `active` when they pass; the
/// health checker's own counters of a probed backend and the VIP's policy mode are
/// exported.
#[test]
fn backend_health_and_policy_mode_are_exported() {
    let mut s = start();
    let vip: Vip = "203.0.113.10:80/tcp".parse().unwrap();
    let b11 = || (vip, "198.51.100.11".parse().unwrap());
    let (v, k) = b11();
    s.controller_mut().set_health([(v, k, false)]).unwrap();
    let text = scrape(&mut s, Duration::from_secs(600), true);
    let state =
        |text: &str, st: &str| value(text, "lb_backend_state", &[B11, &format!("state=\"{st}\"")]);
    assert_eq!(state(&text, "unhealthy"), Some(1.0), "{text}");
    assert_eq!(state(&text, "active"), Some(0.0));
    assert_eq!(
        value(
            &text,
            "lb_backend_state_transitions_total",
            &[B11, "to=\"unhealthy\""]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "lb_vip_policy_mode", &[VIP, "mode=\"normal\""]),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "lb_vip_policy_mode", &[VIP, "mode=\"panic\""]),
        Some(0.0)
    );
    let (v, k) = b11();
    s.controller_mut().set_health([(v, k, true)]).unwrap();
    let mut snapshot = Snapshot::take(&mut s, Duration::from_secs(600)).unwrap();
    for b in &mut snapshot.backends {
        b.health = Some(HealthSample {
            healthy: true,
            went_down: 1,
            came_up: 1,
            probes: 40,
            failed_probes: 3,
        });
    }
    let text = encode(snapshot, &Recorder::default(), true).0;
    assert_eq!(state(&text, "active"), Some(1.0), "{text}");
    assert_eq!(value(&text, "lb_backend_healthy", &[B11]), Some(1.0));
    assert_eq!(
        value(
            &text,
            "lb_backend_health_transitions_total",
            &[B11, "to=\"unhealthy\""]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "lb_backend_health_probes_total", &[B11]),
        Some(40.0)
    );
    assert_eq!(
        value(&text, "lb_backend_health_probe_failures_total", &[B11]),
        Some(3.0)
    );
}

/// With `[announce]` on, each VIP has a `lb_vip_announced` sample; with it off (the
/// file here), none. The announcer's routes are the kernel's, so the test sets the sample.
#[test]
fn the_announcement_of_each_vip_is_exported_when_announcements_are_on() {
    let mut s = start();
    let text = scrape(&mut s, Duration::from_secs(600), false);
    assert_eq!(value(&text, "lb_vip_announced", &[VIP]), None, "{text}");
    for announced in [true, false] {
        let mut snapshot = Snapshot::take(&mut s, Duration::from_secs(600)).unwrap();
        snapshot.vips[0].announced = Some(announced);
        let text = encode(snapshot, &Recorder::default(), true).0;
        assert_eq!(
            value(&text, "lb_vip_announced", &[VIP]),
            Some(f64::from(u8::from(announced))),
            "{text}"
        );
    }
}
