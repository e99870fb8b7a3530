//! Backend lifecycle at runtime: `lb backend weight`, `drain --timeout|--keep`, and
//! what each change answers.

use super::*;
use crate::{
    control::Change,
    daemon::test_fixture::{FILE, start_service},
};
use lb_dataplane::{Census, ConnectionCounts, FakeDataplane};

fn start() -> Service<FakeDataplane> {
    let (controller, _) = Controller::adopt(FakeDataplane::new()).unwrap();
    start_service(controller, FILE, None)
}

fn request(action: BackendAction, address: &str, weight: Option<u32>) -> Request {
    flags(action, address, weight, None, false)
}

fn flags(
    action: BackendAction,
    address: &str,
    weight: Option<u32>,
    timeout_secs: Option<u64>,
    keep: bool,
) -> Request {
    Request::Backend {
        action,
        vip: "203.0.113.10:80/tcp".parse().unwrap(),
        backend: address.parse().unwrap(),
        weight,
        timeout_secs,
        keep,
    }
}

fn drain(address: &str, timeout_secs: Option<u64>, keep: bool) -> Request {
    flags(BackendAction::Drain, address, None, timeout_secs, keep)
}

/// The change's answer; panics on a refusal.
fn call(s: &mut Service<FakeDataplane>, r: &Request) -> Change {
    let r = s.handle(r, &mut |_| {});
    assert!(r.ok, "{:?}", r.error);
    serde_json::from_value(r.data.unwrap()).unwrap()
}

fn refusal(s: &mut Service<FakeDataplane>, r: &Request) -> String {
    let r = s.handle(r, &mut |_| {});
    assert!(!r.ok);
    r.error.unwrap()
}

/// The backends of the VIP: (address, state, weight).
fn backends(s: &Service<FakeDataplane>) -> Vec<(String, String, u32)> {
    s.status().vips[0]
        .backends
        .iter()
        .map(|b| (b.address.clone(), b.state.clone(), b.weight))
        .collect()
}

/// A census with `n` open connections to backend `address`.
fn census(s: &Service<FakeDataplane>, address: &str, n: u64) -> Census {
    counted(
        s,
        address,
        ConnectionCounts {
            established: n,
            ..ConnectionCounts::default()
        },
    )
}

/// A census with `counts` for backend `address`.
fn counted(s: &Service<FakeDataplane>, address: &str, counts: ConnectionCounts) -> Census {
    let id = s.status().vips[0]
        .backends
        .iter()
        .find(|b| b.address == address)
        .unwrap()
        .id;
    let mut c = Census::default();
    c.backends.insert(id, counts);
    c
}

/// `weight` sets the weight, keeps the state and answers the change, the slots moved
/// and the new generation; the change is a runtime override.
#[test]
fn weight_changes_the_weight_and_answers_what_moved() {
    let mut s = start();
    let c = call(
        &mut s,
        &request(BackendAction::Weight, "198.51.100.11", Some(3)),
    );
    assert_eq!(
        c.summary,
        "backend 198.51.100.11 of VIP 203.0.113.10:80/tcp: active (weight 1) -> active (weight 3)"
    );
    assert!(c.changed);
    assert_eq!(c.tables.len(), 1);
    assert_eq!(c.tables[0].generation, 2);
    let moved = c.tables[0].slots_moved.unwrap();
    assert!(moved > 0 && moved < 1009, "{moved}");
    assert!(c.lines[0].contains("generation 2") && c.lines[0].contains("slots changed owner"));
    assert_eq!(c.after.unwrap().weight, 3);
    assert_eq!(s.status().overrides[0].change, "active (weight 3)");
    // On a drained backend the state stays.
    call(&mut s, &drain("198.51.100.12", None, false));
    let c = call(
        &mut s,
        &request(BackendAction::Weight, "198.51.100.12", Some(5)),
    );
    assert_eq!(
        c.summary,
        "backend 198.51.100.12 of VIP 203.0.113.10:80/tcp: drain (weight 1) -> drain (weight 5)"
    );
    assert_eq!(backends(&s)[1], ("198.51.100.12".into(), "drain".into(), 5));
    // The same weight again changes nothing and says so.
    let c = call(
        &mut s,
        &request(BackendAction::Weight, "198.51.100.12", Some(5)),
    );
    assert!(!c.changed);
    assert!(
        c.summary.ends_with(": unchanged, drain (weight 5)"),
        "{}",
        c.summary
    );
}

/// A weight without N, and drain flags on another verb, are refused naming the flag.
#[test]
fn lifecycle_flags_are_checked() {
    let mut s = start();
    assert_eq!(
        refusal(
            &mut s,
            &request(BackendAction::Weight, "198.51.100.11", None)
        ),
        "lb backend weight needs the weight N (e.g. `lb backend weight --vip V --backend B 3`)"
    );
    let timed_add = flags(BackendAction::Add, "198.51.100.13", None, Some(60), false);
    assert_eq!(
        refusal(&mut s, &timed_add),
        "--timeout and --keep apply to drain only, not to add"
    );
    assert_eq!(
        refusal(&mut s, &drain("198.51.100.11", Some(60), true)),
        "--keep and --timeout exclude each other"
    );
    assert_eq!(
        refusal(&mut s, &drain("198.51.100.11", Some(0), false)),
        "--timeout 0: expected a duration above zero"
    );
    assert_eq!(backends(&s)[0].1, "active", "nothing applied");
}

/// A timed drain ends at the first walk after it that finds no connection: the
/// backend is removed, and the removal is a runtime override.
#[test]
fn a_timed_drain_ends_with_the_last_connection() {
    let mut s = start();
    let c = call(&mut s, &drain("198.51.100.11", Some(300), false));
    assert_eq!(c.drain_timeout_secs, Some(300));
    assert!(
        c.summary.ends_with(
            "active (weight 1) -> drain (weight 1); removed when its last connection ends \
             or in 5m, whichever is first"
        ),
        "{}",
        c.summary
    );
    s.set_census(census(&s, "198.51.100.11", 2));
    assert_eq!(backends(&s).len(), 2, "connections keep it");
    // Connections whose client sent a FIN or RST have ended.
    let closing = ConnectionCounts {
        closing: 2,
        ..ConnectionCounts::default()
    };
    let ended = {
        s.connections.set(counted(&s, "198.51.100.11", closing));
        s.end_drains(Instant::now())
    };
    assert_eq!(
        ended[0],
        "drain of backend 198.51.100.11 of VIP 203.0.113.10:80/tcp ended (its last \
         connection ended): removed"
    );
    assert_eq!(backends(&s).len(), 1);
    assert_eq!(s.status().overrides[0].change, "removed");
    assert!(s.end_drains(Instant::now()).is_empty(), "ended once");
}

/// The timeout removes a backend that still has connections.
#[test]
fn a_timed_drain_ends_at_its_timeout() {
    let mut s = start();
    call(&mut s, &drain("198.51.100.11", Some(60), false));
    s.set_census(census(&s, "198.51.100.11", 5));
    assert!(s.end_drains(Instant::now()).is_empty());
    let ended = s.end_drains(Instant::now() + Duration::from_secs(61));
    assert_eq!(
        ended[0],
        "drain of backend 198.51.100.11 of VIP 203.0.113.10:80/tcp ended (its 1m timeout \
         passed): removed"
    );
    assert_eq!(backends(&s).len(), 1);
}

/// `--keep` and `undrain` cancel a pending removal; a plain drain leaves it.
#[test]
fn keep_and_undrain_cancel_a_timed_drain() {
    let mut s = start();
    let later = || Instant::now() + Duration::from_secs(120);
    call(&mut s, &drain("198.51.100.11", Some(60), false));
    let c = call(&mut s, &drain("198.51.100.11", None, false));
    assert_eq!(c.drain_timeout_secs, Some(60), "a plain drain keeps it");
    let c = call(&mut s, &drain("198.51.100.11", None, true));
    assert_eq!(c.drain_timeout_secs, None);
    assert!(s.end_drains(later()).is_empty());
    assert_eq!(backends(&s)[0].1, "drain", "--keep: stays drained");
    call(&mut s, &drain("198.51.100.11", Some(60), false));
    call(
        &mut s,
        &request(BackendAction::Undrain, "198.51.100.11", None),
    );
    assert!(s.end_drains(later()).is_empty());
    assert_eq!(backends(&s)[0].1, "active");
}
