//! The daemon's logic against the in-memory data plane.

use lb_common::stats::{BackendStats, Reason, VipStats};

use std::path::PathBuf;

use super::*;
use crate::daemon::test_fixture::{FILE, start_service, temp_dir};
use lb_dataplane::FakeDataplane;

fn start() -> Service<FakeDataplane> {
    start_on(FakeDataplane::new(), None)
}

/// A service over `dp` (adopted: its state recovered) keeping runtime changes in `state`.
fn start_on(dp: FakeDataplane, state: Option<StateFile>) -> Service<FakeDataplane> {
    start_with(dp, state, FILE)
}

fn start_with(dp: FakeDataplane, state: Option<StateFile>, file: &str) -> Service<FakeDataplane> {
    let (controller, _) = Controller::adopt(dp).unwrap();
    start_service(controller, file, state)
}

/// A fresh temporary state directory.
fn state_dir() -> PathBuf {
    temp_dir("lb-service-test")
}

/// Stops a service the way a restart does: the data plane survives (pinned), the
/// process state does not.
fn restart(s: Service<FakeDataplane>, state: Option<StateFile>) -> Service<FakeDataplane> {
    let mut s = s;
    let dp = std::mem::take(s.controller_mut().dataplane_mut());
    start_on(dp.restarted(), state)
}

fn vip(text: &str) -> Vip {
    text.parse().unwrap()
}

fn backend(action: BackendAction, address: &str) -> Request {
    Request::Backend {
        action,
        vip: vip("203.0.113.10:80/tcp"),
        backend: address.parse().unwrap(),
        weight: None,
        timeout_secs: None,
        keep: false,
    }
}

fn call(s: &mut Service<FakeDataplane>, r: &Request) -> Response {
    s.handle(r, &mut |_| {})
}

#[test]
fn runtime_changes_apply_and_survive_a_reload_of_the_same_file() {
    let mut s = start();
    assert!(!s.differs_from_file());
    let r = call(&mut s, &backend(BackendAction::Add, "198.51.100.13"));
    assert!(r.ok, "{:?}", r.error);
    assert!(s.differs_from_file());
    let status = s.status();
    assert!(status.differs_from_file);
    assert_eq!(status.vips[0].backends.len(), 3);
    assert_eq!(status.vips[0].generation, 2);
    let r = call(&mut s, &backend(BackendAction::Drain, "198.51.100.11"));
    assert!(r.ok);
    assert_eq!(s.status().vips[0].backends[0].state, "drain");
    assert_eq!(s.status().vips[0].backends[0].slots, 0);
    // A reload of the same file keeps the runtime changes (the merge rule).
    s.reload(&Config::from_toml(FILE).unwrap()).unwrap();
    assert!(s.differs_from_file());
    let status = s.status();
    assert_eq!(status.vips[0].backends.len(), 3);
    assert_eq!(status.vips[0].backends[0].runtime.as_deref(), Some("drain"));
    assert_eq!(status.overrides.len(), 2);
    // `lb overrides --clear` drops them and applies the file.
    let r = call(&mut s, &Request::Overrides { clear: true });
    assert!(r.ok, "{:?}", r.error);
    assert!(!s.differs_from_file());
    assert_eq!(s.status().vips[0].backends.len(), 2);
    assert!(s.status().overrides.is_empty());
}

/// A restart adopts the data plane: backend ids and tables are kept, nothing is
/// rewritten but the configuration element, and the runtime changes come back from the
/// state file.
#[test]
fn a_restart_keeps_ids_tables_and_runtime_changes() {
    let dir = state_dir();
    let state = || Some(StateFile::new(&dir, "eth0"));
    let mut s = start_on(FakeDataplane::new(), state());
    assert!(call(&mut s, &backend(BackendAction::Add, "198.51.100.13")).ok);
    assert!(call(&mut s, &backend(BackendAction::Drain, "198.51.100.11")).ok);
    let before = s.status();
    let s = restart(s, state());
    let after = s.status();
    assert_eq!(
        after.vips, before.vips,
        "same ids, table, generation, states"
    );
    assert_eq!(after.overrides, before.overrides);
    let written: Vec<_> = s
        .controller()
        .dataplane()
        .ops
        .iter()
        .filter(|op| !matches!(op, lb_dataplane::fake::Op::SetConfig))
        .collect();
    assert!(
        written.is_empty(),
        "only differences are written: {written:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// A backend added to the file while the daemon was down: at start the old backends
/// keep their ids, the new one gets a fresh id, and the table moves to the next
/// generation.
#[test]
fn a_backend_added_while_down_gets_a_fresh_id_and_the_others_keep_theirs() {
    let mut s = start();
    let ids: Vec<u32> = s.status().vips[0].backends.iter().map(|b| b.id).collect();
    let dp = std::mem::take(s.controller_mut().dataplane_mut());
    let more = format!("{FILE}[[vip.backend]]\naddress = \"198.51.100.14\"\n");
    let s = start_with(dp.restarted(), None, &more);
    let status = s.status();
    let after: Vec<u32> = status.vips[0].backends.iter().map(|b| b.id).collect();
    assert_eq!(&after[..2], &ids[..]);
    assert!(!ids.contains(&after[2]));
    assert_eq!(status.vips[0].generation, 2);
}

/// Requests the daemon refuses for what they ask (a request with unreadable arguments
/// never decodes: see `control::tests` and the CLI's argument tests).
#[test]
fn bad_requests_get_clear_errors_and_change_nothing() {
    let mut s = start();
    let ops = s.controller().dataplane().ops.len();
    let cases = [
        (
            Request::Backend {
                action: BackendAction::Add,
                vip: vip("203.0.113.10:81/tcp"),
                backend: "198.51.100.13".parse().unwrap(),
                weight: None,
                timeout_secs: None,
                keep: false,
            },
            "VIP 203.0.113.10:81/tcp is not configured",
        ),
        (
            backend(BackendAction::Add, "198.51.100.11"),
            "backend 198.51.100.11 is already in VIP 203.0.113.10:80/tcp (active (weight 1)); \
             to change its weight: lb backend weight --vip 203.0.113.10:80/tcp --backend \
             198.51.100.11 N",
        ),
        (
            backend(BackendAction::Remove, "198.51.100.99"),
            "backend 198.51.100.99 is not in VIP 203.0.113.10:80/tcp",
        ),
        (
            backend(BackendAction::Add, "2001:db8::1"),
            "backend 2001:db8::1 cannot be added to VIP 203.0.113.10:80/tcp: not of the VIP's address family",
        ),
        (
            Request::Flow {
                vip: vip("203.0.113.10:80/tcp"),
                client: "[2001:db8::10]:40000".parse().unwrap(),
            },
            "client [2001:db8::10]:40000 is not of the address family of VIP 203.0.113.10:80/tcp",
        ),
    ];
    for (request, expected) in cases {
        let r = call(&mut s, &request);
        assert!(!r.ok);
        assert_eq!(r.error.as_deref(), Some(expected));
    }
    assert_eq!(s.controller().dataplane().ops.len(), ops);
}

#[test]
fn a_reload_that_needs_a_restart_or_fails_changes_nothing() {
    let mut s = start();
    let ops = s.controller().dataplane().ops.len();
    let moved = FILE.replace("eth0", "eth1");
    assert_eq!(
        s.reload(&Config::from_toml(&moved).unwrap())
            .unwrap_err()
            .to_string(),
        "interface changed: these settings take effect only at start (restart lb); nothing applied"
    );
    let reseeded = format!("hash_seed = 7\n{FILE}");
    assert_eq!(
        s.reload(&Config::from_toml(&reseeded).unwrap())
            .unwrap_err()
            .to_string(),
        "hash_seed changed: these settings take effect only at start (restart lb); nothing applied"
    );
    s.controller_mut().dataplane_mut().fail_after(0);
    let more = FILE.replace("198.51.100.12", "198.51.100.14");
    let err = s
        .reload(&Config::from_toml(&more).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("the previous state is kept"), "{err}");
    assert_eq!(s.controller().dataplane().ops.len(), ops);
    assert_eq!(s.status().vips[0].backends[1].address, "198.51.100.12");
}

#[test]
fn stats_report_counters_and_rates() {
    let mut s = start();
    let ids: Vec<u32> = s.status().vips[0].backends.iter().map(|b| b.id).collect();
    s.tick();
    {
        let dp = s.controller_mut().dataplane_mut();
        dp.global.counters[Reason::TxEncap as usize] = 100;
        dp.vip_counters.insert(
            0,
            VipStats {
                packets: 100,
                new_flows: 10,
                ..VipStats::default()
            },
        );
        dp.backend_counters.insert(
            ids[0],
            BackendStats {
                packets: 60,
                bytes: 6000,
                new_flows: 0,
            },
        );
    }
    std::thread::sleep(Duration::from_millis(20));
    let stats = s.stats().unwrap();
    assert!(stats.interval_secs > 0.0);
    assert_eq!(stats.reasons.len(), 1);
    assert_eq!(
        (stats.reasons[0].name.as_str(), stats.reasons[0].value),
        ("tx_encap", 100)
    );
    assert!(stats.reasons[0].rate > 0.0);
    let vip = &stats.vips[0];
    assert_eq!(vip.counters[0].value, 100);
    assert_eq!(vip.backends[0].packets.value, 60);
    assert!(vip.backends[0].packets.rate > 0.0);
    assert_eq!(vip.backends[1].packets.value, 0);
}

/// Light traffic: packets counted before the last tick still show in the rate, which
/// covers the window since the first tick, not the time since the last.
#[test]
fn stats_rates_cover_the_window_not_the_last_tick() {
    let mut s = start();
    s.tick();
    std::thread::sleep(Duration::from_millis(20));
    s.controller_mut().dataplane_mut().vip_counters.insert(
        0,
        VipStats {
            packets: 5,
            ..VipStats::default()
        },
    );
    s.tick();
    let stats = s.stats().unwrap();
    assert!(stats.interval_secs >= 0.02, "{}", stats.interval_secs);
    let packets = &stats.vips[0].counters[0];
    assert_eq!((packets.name.as_str(), packets.value), ("packets", 5));
    assert!(packets.rate > 0.0, "{}", packets.rate);
}

/// `lb status` has each VIP's allowed source prefixes, sorted; none: every client.
#[test]
fn status_shows_the_allowed_sources_of_each_vip() {
    let file = FILE.replace(
        "table_size = 1009\n",
        "table_size = 1009\nallowed_sources = [\"198.18.0.0/15\", \"192.0.2.0/24\"]\n",
    );
    let status = start_with(FakeDataplane::new(), None, &file).status();
    assert_eq!(
        status.vips[0].allowed_sources,
        ["192.0.2.0/24", "198.18.0.0/15"]
    );
    assert!(start().status().vips[0].allowed_sources.is_empty());
}

#[test]
fn flow_and_status_requests_answer() {
    let mut s = start();
    let r = call(&mut s, &Request::Status);
    assert!(r.ok);
    let status: Status = serde_json::from_value(r.data.unwrap()).unwrap();
    assert_eq!(status.interface, "eth0");
    let r = call(
        &mut s,
        &Request::Flow {
            vip: vip("203.0.113.10:80/tcp"),
            client: "192.0.2.10:40000".parse().unwrap(),
        },
    );
    assert!(r.ok, "{:?}", r.error);
}
