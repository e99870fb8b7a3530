//! The daemon's health checks end to end inside one process, without root: the service
//! over the in-memory data plane, real TCP probes to listeners on loopback addresses
//! (127.0.1.x stand for backends: a closed listener refuses, as a dead server's port
//! does), and the scheduler's batches applied as the event loop applies them.

use std::{
    net::TcpListener,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::mpsc;

use crate::{
    config::{Config, Vip},
    control::{BackendStatus, Status},
    controller::Controller,
    daemon::{service::Service, test_fixture::start_service},
};
use lb_dataplane::FakeDataplane;
use lb_health::{
    coalesce::Batch,
    damping::Damping,
    outcome::{Failure, ProbeResult},
    probe::Probe,
    scheduler::{Schedule, Start},
    state::Thresholds,
};
use lb_maglev::BackendKey;

/// Backend `k`'s loopback address.
fn addr(k: u8) -> String {
    format!("127.0.1.{k}")
}

/// A file with backends `ks` of the VIP, probed on `port` with `health` added to the
/// VIP's table.
fn file(ks: impl IntoIterator<Item = u8>, port: u16, health: &str) -> String {
    let mut s = "interface = \"eth0\"\n[encap]\nsource_v4 = \"192.0.2.1\"\n[[vip]]\naddress = \
         \"203.0.113.10\"\nport = 80\nprotocol = \"tcp\"\ntable_size = 1009\n"
        .to_owned();
    if port != 0 {
        s.push_str(&format!(
            "[vip.health]\nkind = \"tcp\"\nport = {port}\ninterval_ms = 100\ntimeout_ms = 50\n\
             rise = 2\nfall = 2\n{health}\n"
        ));
    }
    for k in ks {
        s.push_str(&format!("[[vip.backend]]\naddress = \"{}\"\n", addr(k)));
    }
    s
}

fn load(text: &str) -> Config {
    Config::from_toml(text)
        .unwrap_or_else(|e| panic!("{e}"))
        .config
}

/// A listener on backend `k`'s address and `port` (0: any free port).
fn listen(k: u8, port: u16) -> TcpListener {
    TcpListener::bind((addr(k).parse::<std::net::IpAddr>().unwrap(), port)).expect("bind")
}

fn start(text: &str) -> (Service<FakeDataplane>, mpsc::Receiver<Batch<Vip>>) {
    let config = load(text);
    let mut s = start_service(Controller::new(FakeDataplane::new()), text, None);
    let batches = s.start_health(tokio::runtime::Handle::current(), &config);
    (s, batches)
}

fn backend(status: &Status, k: u8) -> &BackendStatus {
    status.vips[0]
        .backends
        .iter()
        .find(|b| b.address == addr(k))
        .unwrap_or_else(|| panic!("no backend {k}"))
}

/// Applies batches until `done` holds for the status (at most `within`), then for a
/// further 300 ms (three coalescing windows: the batch of the transitions `done` saw
/// is applied too).
async fn until(
    s: &mut Service<FakeDataplane>,
    batches: &mut mpsc::Receiver<Batch<Vip>>,
    within: Duration,
    what: &str,
    done: impl Fn(&Status) -> bool,
) -> Status {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let status = s.status();
        if done(&status) {
            let settled = tokio::time::Instant::now() + Duration::from_millis(300);
            while let Ok(Some(batch)) = tokio::time::timeout_at(settled, batches.recv()).await {
                s.apply_health(&batch).expect("apply the batch");
            }
            return s.status();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "waited {within:?} for {what}: {status:#?}"
        );
        if let Ok(Some(batch)) =
            tokio::time::timeout(Duration::from_millis(20), batches.recv()).await
        {
            s.apply_health(&batch).expect("apply the batch");
        }
    }
}

fn state(status: &Status, k: u8) -> String {
    backend(status, k)
        .health
        .as_ref()
        .map_or_else(|| "not probed".to_owned(), |h| h.state.clone())
}

#[tokio::test]
async fn a_refusing_backend_leaves_and_returns_and_a_reload_keeps_its_state() {
    let up = listen(1, 0);
    let port = up.local_addr().unwrap().port();
    let text = file([1, 2, 3], port, "");
    let _three = listen(3, port);
    let (mut s, mut batches) = start(&text);
    let before = s.status().vips[0].fingerprint.clone();
    assert_eq!(state(&s.status(), 2), "healthy (assumed)", "the start rule");
    // Backend 2 has no listener: refused, unhealthy after two probes.
    let status = until(
        &mut s,
        &mut batches,
        Duration::from_secs(5),
        "2 unhealthy",
        |st| state(st, 2) == "unhealthy",
    )
    .await;
    let b2 = backend(&status, 2);
    assert_eq!((b2.slots, b2.dataplane_state.as_str()), (0, "down"));
    assert_eq!(b2.state, "active", "administratively untouched");
    let h = b2.health.as_ref().unwrap();
    assert_eq!(h.last_error.as_deref(), Some("connection refused"));
    assert_eq!((h.went_down, h.came_up, h.transitions), (1, 0, 1));
    assert_eq!(state(&status, 1), "healthy");
    assert!(
        backend(&status, 1)
            .health
            .as_ref()
            .unwrap()
            .last_latency_us
            .is_some()
    );
    assert_eq!(status.health.unhealthy, 1);
    assert_eq!((status.health.batches, status.health.table_changes), (1, 1));
    let id2 = b2.id;

    // A reload that changes the probe settings keeps every state.
    let changed = file([1, 2, 3], port, "flap_transitions = 0")
        .replace("interval_ms = 100", "interval_ms = 120");
    s.reload(&Config::from_toml(&changed).unwrap())
        .expect("reload");
    let status = s.status();
    assert_eq!(state(&status, 2), "unhealthy");
    assert_eq!(backend(&status, 2).slots, 0);
    assert_eq!(backend(&status, 2).health.as_ref().unwrap().went_down, 1);
    assert_eq!(state(&status, 1), "healthy");

    // Backend 2 comes back: same id, the table it had.
    let _two = listen(2, port);
    let status = until(
        &mut s,
        &mut batches,
        Duration::from_secs(5),
        "2 healthy",
        |st| state(st, 2) == "healthy",
    )
    .await;
    assert_eq!(status.vips[0].fingerprint, before, "the same table");
    assert_eq!(backend(&status, 2).id, id2, "the same id");
    assert_eq!(backend(&status, 2).dataplane_state, "active");
    drop(up);
}

#[tokio::test]
async fn a_backend_no_longer_probed_counts_as_healthy_again() {
    let one = listen(1, 0);
    let port = one.local_addr().unwrap().port();
    let (mut s, mut batches) = start(&file([1, 2], port, ""));
    until(
        &mut s,
        &mut batches,
        Duration::from_secs(5),
        "2 unhealthy",
        |st| state(st, 2) == "unhealthy",
    )
    .await;
    // Its own table says kind = "none".
    let text = file([1, 2], port, "") + "[vip.backend.health]\nkind = \"none\"\n";
    s.reload(&Config::from_toml(&text).unwrap())
        .expect("reload");
    let status = s.status();
    assert_eq!(state(&status, 2), "not probed");
    assert!(backend(&status, 2).slots > 0);
    assert_eq!(status.health.probed, 1);
}

/// Fifty of sixty backends stop answering at the same time: their transitions arrive
/// within one coalescing window, and the VIP's table changes once (the count is
/// printed; two batches could happen if a round straddled a window, never fifty).
#[tokio::test]
async fn fifty_backends_failing_together_change_the_table_once_or_twice() {
    let first = listen(1, 0);
    let port = first.local_addr().unwrap().port();
    let mut listeners: Vec<TcpListener> = (2..=60).map(|k| listen(k, port)).collect();
    listeners.insert(0, first);
    let (mut s, mut batches) = start(&file(1..=60, port, ""));
    // Let every backend pass its first probes.
    until(
        &mut s,
        &mut batches,
        Duration::from_secs(5),
        "all probed",
        |st| (1..=60).all(|k| state(st, k) == "healthy"),
    )
    .await;
    let before = s.status().health;
    listeners.truncate(10); // backends 11..=60 close their port
    let status = until(
        &mut s,
        &mut batches,
        Duration::from_secs(5),
        "50 unhealthy",
        |st| (11..=60).all(|k| state(st, k) == "unhealthy"),
    )
    .await;
    let tables = status.health.table_changes - before.table_changes;
    let batches_used = status.health.batches - before.batches;
    eprintln!("50 backends down together: {batches_used} batches, {tables} table changes");
    assert!((1..=2).contains(&tables), "{tables} table changes");
    assert!((1..=10).all(|k| backend(&status, k).slots > 0));
    assert!((11..=60).all(|k| backend(&status, k).slots == 0));
}

/// A probe that alternates between passing and failing while `flapping` is set, and
/// passes afterwards.
struct Flapper {
    flapping: AtomicBool,
    calls: AtomicUsize,
}

impl Probe for Flapper {
    fn probe(
        &self,
        _timeout: Duration,
    ) -> std::pin::Pin<Box<dyn Future<Output = ProbeResult> + Send + '_>> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let fail = self.flapping.load(Ordering::SeqCst) && n.is_multiple_of(2);
        Box::pin(async move {
            if fail {
                Err(Failure::Refused)
            } else {
                Ok(Duration::from_micros(50))
            }
        })
    }
}

/// BR-09.T5 (flapping): backend 2 toggles down and up ten times within a second. Table
/// changes are rate-limited (at most one per coalescing window: ten per second), flap
/// damping then holds the backend unhealthy, and the final table is the one of the
/// final health state.
#[tokio::test]
async fn br09_t5_a_flapping_backend_is_rate_limited_then_held() {
    let one = listen(1, 0);
    let port = one.local_addr().unwrap().port();
    let _three = listen(3, port);
    let (mut s, mut batches) = start(&file([1, 2, 3], port, ""));
    let healthy_table = s.status().vips[0].fingerprint.clone();
    let flapper = Arc::new(Flapper {
        flapping: AtomicBool::new(true),
        calls: AtomicUsize::new(0),
    });
    let vip: Vip = "203.0.113.10:80/tcp".parse().unwrap();
    let key: BackendKey = addr(2).parse().unwrap();
    let damping = Damping::default();
    {
        let _rt = tokio::runtime::Handle::current().enter();
        s.health().unwrap().scheduler().set_probe(
            vip,
            key,
            Schedule {
                interval: Duration::from_millis(50),
                timeout: Duration::from_millis(20),
                thresholds: Thresholds { rise: 1, fall: 1 },
                damping,
            },
            flapper.clone(),
            Start::AssumeHealthy,
        );
    }
    let started = Instant::now();
    let before = s.status().health;
    while started.elapsed() < Duration::from_secs(1) {
        if let Ok(Some(batch)) =
            tokio::time::timeout(Duration::from_millis(50), batches.recv()).await
        {
            s.apply_health(&batch).unwrap();
        }
    }
    flapper.flapping.store(false, Ordering::SeqCst);
    let status = until(&mut s, &mut batches, Duration::from_secs(2), "held", |st| {
        state(st, 2) == "unhealthy (held)"
    })
    .await;
    let tables = status.health.table_changes - before.table_changes;
    eprintln!("flapping for 1 s: {tables} table changes");
    assert!(tables <= 11, "{tables} table changes in about one second");
    let h = backend(&status, 2).health.clone().unwrap();
    assert_eq!(h.holds, 1);
    assert_eq!(
        h.went_down + h.came_up,
        u64::from(damping.max_transitions) + 1
    );
    // Drain what is still queued: the final table is the one without backend 2.
    while let Ok(Some(batch)) =
        tokio::time::timeout(Duration::from_millis(300), batches.recv()).await
    {
        s.apply_health(&batch).unwrap();
    }
    let status = s.status();
    assert_eq!(backend(&status, 2).slots, 0);
    assert_ne!(status.vips[0].fingerprint, healthy_table);
    let without_2 = {
        let text = file([1, 3], 0, "");
        let (s2, _) = start(&text);
        s2.status().vips[0].fingerprint.clone()
    };
    assert_eq!(
        status.vips[0].fingerprint, without_2,
        "the final state's table"
    );
}
