//! The scheduler with scripted probes on tokio's paused clock: detection and recovery
//! times, batching, bounded concurrency, cancellation and reloads.

use std::{
    future::Future,
    net::{IpAddr, Ipv4Addr},
    pin::Pin,
    sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
};

use super::*;

/// A scripted backend: up or down, each probe taking `delay`.
#[derive(Default)]
struct Fake {
    down: AtomicBool,
    hang: AtomicBool,
    delay_ms: AtomicU64,
    probes: AtomicU64,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    dropped: AtomicU64,
    /// Probes in flight over every fake sharing it, and the most seen.
    all: Option<Arc<(AtomicUsize, AtomicUsize)>>,
}

struct InFlight<'a>(&'a Fake, bool);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        if let Some(all) = &self.0.all {
            all.0.fetch_sub(1, Ordering::SeqCst);
        }
        if !self.1 {
            self.0.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Probe for Fake {
    fn probe(&self, _timeout: Duration) -> Pin<Box<dyn Future<Output = ProbeResult> + Send + '_>> {
        Box::pin(async move {
            self.probes.fetch_add(1, Ordering::SeqCst);
            let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_in_flight.fetch_max(n, Ordering::SeqCst);
            if let Some(all) = &self.all {
                let n = all.0.fetch_add(1, Ordering::SeqCst) + 1;
                all.1.fetch_max(n, Ordering::SeqCst);
            }
            let mut guard = InFlight(self, false);
            if self.hang.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            let delay = Duration::from_millis(self.delay_ms.load(Ordering::SeqCst));
            tokio::time::sleep(delay).await;
            guard.1 = true;
            if self.down.load(Ordering::SeqCst) {
                Err(Failure::Refused)
            } else {
                Ok(delay)
            }
        })
    }
}

fn key(i: u8) -> BackendKey {
    BackendKey::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, i)), None)
}

fn schedule(interval_ms: u64) -> Schedule {
    Schedule {
        interval: Duration::from_millis(interval_ms),
        timeout: Duration::from_millis(interval_ms / 2),
        thresholds: Thresholds { rise: 2, fall: 3 },
        damping: Damping::OFF,
    }
}

fn fake() -> Arc<Fake> {
    let f = Arc::new(Fake::default());
    f.delay_ms.store(1, Ordering::SeqCst);
    f
}

/// Advances the paused clock by `ms` in steps of 10 ms, letting tasks run.
async fn advance(ms: u64) {
    for _ in 0..ms / 10 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Collects the batches that are ready.
fn drain(rx: &mut mpsc::Receiver<Batch<u32>>) -> Vec<Batch<u32>> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

#[tokio::test(start_paused = true)]
async fn failure_is_detected_within_fall_intervals_and_recovery_within_rise() {
    let (s, mut rx) = Scheduler::<u32>::start(SchedulerConfig::default());
    let b = fake();
    s.set_probe(1, key(1), schedule(1_000), b.clone(), Start::AssumeHealthy);
    advance(3_000).await;
    assert!(s.is_healthy(&1, &key(1)));
    assert!(drain(&mut rx).is_empty());

    b.down.store(true, Ordering::SeqCst);
    let failed_at = tokio::time::Instant::now();
    let mut detected = None;
    for _ in 0..600 {
        advance(10).await;
        if !s.is_healthy(&1, &key(1)) {
            detected = Some(failed_at.elapsed());
            break;
        }
    }
    // fall x interval + timeout, with a margin for the phase.
    let detected = detected.expect("never detected");
    assert!(
        detected <= Duration::from_millis(3 * 1_000 + 500 + 100),
        "{detected:?}"
    );
    advance(200).await;
    let batches = drain(&mut rx);
    assert_eq!(batches.len(), 1);
    let change = &batches[0].vips[&1][0];
    assert!(!change.healthy());
    let status = s.status(&1, &key(1)).unwrap();
    assert_eq!(status.last_error, Some(Failure::Refused));
    assert_eq!(status.went_down, 1);

    b.down.store(false, Ordering::SeqCst);
    let fixed_at = tokio::time::Instant::now();
    let mut recovered = None;
    for _ in 0..600 {
        advance(10).await;
        if s.is_healthy(&1, &key(1)) {
            recovered = Some(fixed_at.elapsed());
            break;
        }
    }
    let recovered = recovered.expect("never recovered");
    assert!(
        recovered <= Duration::from_millis(2 * 1_000 + 100),
        "{recovered:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_backend_failing_from_the_start_counts_as_healthy_until_fall_failures() {
    let (s, _rx) = Scheduler::<u32>::start(SchedulerConfig::default());
    let b = fake();
    b.down.store(true, Ordering::SeqCst);
    s.set_probe(1, key(1), schedule(1_000), b.clone(), Start::AssumeHealthy);
    assert!(s.is_healthy(&1, &key(1)));
    assert_eq!(s.status(&1, &key(1)).unwrap().label(), "healthy (assumed)");
    advance(1_100).await;
    assert!(b.probes.load(Ordering::SeqCst) >= 1);
    assert!(s.is_healthy(&1, &key(1)), "one failure of three");
    advance(3_000).await;
    assert!(!s.is_healthy(&1, &key(1)));
    // Unknown backends are not probed: healthy.
    assert!(s.is_healthy(&1, &key(9)));
}

/// Fifty backends of one VIP fail at the same moment: one batch (or very few), never one
/// per backend.
#[tokio::test(start_paused = true)]
async fn fifty_backends_failing_together_make_one_batch() {
    let (s, mut rx) = Scheduler::<u32>::start(SchedulerConfig::default());
    let fakes: Vec<_> = (1..=50).map(|_| fake()).collect();
    for (i, f) in fakes.iter().enumerate() {
        s.set_probe(
            7,
            key(u8::try_from(i + 1).unwrap()),
            schedule(1_000),
            f.clone(),
            Start::AssumeHealthy,
        );
    }
    // A second VIP's backend keeps its own batches apart.
    s.set_probe(8, key(1), schedule(1_000), fake(), Start::AssumeHealthy);
    advance(2_500).await;
    for f in &fakes {
        f.down.store(true, Ordering::SeqCst);
    }
    advance(6_000).await;
    let batches = drain(&mut rx);
    let down: usize = batches.iter().map(Batch::transitions).sum();
    assert_eq!(down, 50);
    assert!(batches.len() <= 2, "{} batches", batches.len());
    eprintln!("50 backends down together: {} batch(es)", batches.len());
    assert!(batches.iter().all(|b| b.vips.keys().eq([&7])));
    assert_eq!(s.health_of(&7).values().filter(|h| !**h).count(), 50);
}

#[tokio::test(start_paused = true)]
async fn probes_in_flight_never_exceed_the_bound_and_all_backends_are_probed() {
    let config = SchedulerConfig {
        max_concurrent: 8,
        ..SchedulerConfig::default()
    };
    let (s, _rx) = Scheduler::<u32>::start(config);
    let all = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
    let fakes: Vec<_> = (1..=100u8)
        .map(|_| {
            Arc::new(Fake {
                delay_ms: AtomicU64::new(50),
                all: Some(all.clone()),
                ..Fake::default()
            })
        })
        .collect();
    for (i, f) in fakes.iter().enumerate() {
        let i = u8::try_from(i).unwrap();
        s.set_probe(
            u32::from(i % 4),
            key(i),
            schedule(1_000),
            f.clone(),
            Start::AssumeHealthy,
        );
    }
    advance(5_000).await;
    let most = all.1.load(Ordering::SeqCst);
    assert_eq!(most, 8, "the bound is reached and never passed");
    for f in &fakes {
        assert!(
            f.most_in_flight.load(Ordering::SeqCst) <= 1,
            "one probe per backend at a time"
        );
        assert!(
            f.probes.load(Ordering::SeqCst) >= 3,
            "every backend gets probed"
        );
    }
    assert_eq!(s.len(), 100);
}

#[tokio::test(start_paused = true)]
async fn a_hung_probe_times_out_without_holding_up_others() {
    let (s, _rx) = Scheduler::<u32>::start(SchedulerConfig {
        max_concurrent: 1,
        ..SchedulerConfig::default()
    });
    let hung = fake();
    hung.hang.store(true, Ordering::SeqCst);
    let fine = fake();
    s.set_probe(
        1,
        key(1),
        schedule(1_000),
        hung.clone(),
        Start::AssumeHealthy,
    );
    s.set_probe(
        1,
        key(2),
        schedule(1_000),
        fine.clone(),
        Start::AssumeHealthy,
    );
    advance(10_000).await;
    assert!(!s.is_healthy(&1, &key(1)));
    let status = s.status(&1, &key(1)).unwrap();
    assert_eq!(
        status.last_error,
        Some(Failure::Timeout {
            stage: Stage::Probe,
            after: Duration::from_millis(500) + PROBE_GUARD,
        })
    );
    assert!(s.is_healthy(&1, &key(2)));
    assert!(
        fine.probes.load(Ordering::SeqCst) >= 5,
        "the one permit is shared"
    );
}

#[tokio::test(start_paused = true)]
async fn removal_cancels_the_probes_and_a_probe_in_flight() {
    let (s, _rx) = Scheduler::<u32>::start(SchedulerConfig::default());
    let b = fake();
    b.delay_ms.store(400, Ordering::SeqCst);
    s.set_probe(1, key(1), schedule(1_000), b.clone(), Start::AssumeHealthy);
    // Wait until a probe is in flight, then remove the backend.
    for _ in 0..200 {
        advance(10).await;
        if b.in_flight.load(Ordering::SeqCst) == 1 {
            break;
        }
    }
    assert_eq!(b.in_flight.load(Ordering::SeqCst), 1);
    assert!(s.remove(&1, &key(1)));
    advance(10).await;
    assert_eq!(b.in_flight.load(Ordering::SeqCst), 0);
    assert_eq!(b.dropped.load(Ordering::SeqCst), 1);
    let probes = b.probes.load(Ordering::SeqCst);
    advance(5_000).await;
    assert_eq!(b.probes.load(Ordering::SeqCst), probes);
    assert!(s.status(&1, &key(1)).is_none());
    assert!(!s.remove(&1, &key(1)));
}

#[tokio::test(start_paused = true)]
async fn retain_keeps_only_configured_backends() {
    let (s, _rx) = Scheduler::<u32>::start(SchedulerConfig::default());
    let fakes: Vec<_> = (1..=4u8).map(|_| fake()).collect();
    for (i, f) in fakes.iter().enumerate() {
        let i = u8::try_from(i).unwrap();
        s.set_probe(1, key(i), schedule(1_000), f.clone(), Start::AssumeHealthy);
    }
    s.retain(|_, b| *b == key(0) || *b == key(3));
    assert_eq!(s.len(), 2);
    advance(3_000).await;
    assert_eq!(fakes[1].probes.load(Ordering::SeqCst), 0);
    assert!(fakes[3].probes.load(Ordering::SeqCst) > 0);
}

/// A reload that changes a backend's probe settings keeps its health: an unhealthy
/// backend stays unhealthy (no transition) until the new probes pass `rise` times.
#[tokio::test(start_paused = true)]
async fn changed_settings_keep_the_health_state() {
    let (s, mut rx) = Scheduler::<u32>::start(SchedulerConfig::default());
    let b = fake();
    b.down.store(true, Ordering::SeqCst);
    s.set_probe(1, key(1), schedule(1_000), b.clone(), Start::AssumeHealthy);
    advance(5_000).await;
    assert!(!s.is_healthy(&1, &key(1)));
    assert_eq!(drain(&mut rx).len(), 1);

    let faster = fake();
    faster.down.store(true, Ordering::SeqCst);
    s.set_probe(
        1,
        key(1),
        schedule(500),
        faster.clone(),
        Start::AssumeHealthy,
    );
    assert!(!s.is_healthy(&1, &key(1)), "the reload kept the state");
    let before = s.status(&1, &key(1)).unwrap();
    assert_eq!(before.went_down, 1);
    let old = b.probes.load(Ordering::SeqCst);
    advance(3_000).await;
    assert_eq!(
        b.probes.load(Ordering::SeqCst),
        old,
        "the old probe stopped"
    );
    assert!(faster.probes.load(Ordering::SeqCst) >= 5);
    assert!(drain(&mut rx).is_empty(), "no transition from the reload");
    assert_eq!(s.status(&1, &key(1)).unwrap().went_down, 1);

    faster.down.store(false, Ordering::SeqCst);
    advance(1_500).await;
    assert!(s.is_healthy(&1, &key(1)));
}

#[tokio::test(start_paused = true)]
async fn a_flapping_backend_is_held_and_its_vip_rebuilt_rarely() {
    let (s, mut rx) = Scheduler::<u32>::start(SchedulerConfig::default());
    let b = fake();
    let sched = Schedule {
        interval: Duration::from_millis(100),
        timeout: Duration::from_millis(50),
        thresholds: Thresholds { rise: 1, fall: 1 },
        damping: Damping {
            max_transitions: 4,
            window: Duration::from_secs(60),
            hold: Duration::from_secs(30),
        },
    };
    s.set_probe(1, key(2), sched, b.clone(), Start::AssumeHealthy);
    // The backend toggles every 100 ms for two seconds.
    for i in 0..20 {
        b.down.store(i % 2 == 0, Ordering::SeqCst);
        advance(100).await;
    }
    b.down.store(false, Ordering::SeqCst);
    advance(1_000).await;
    let batches = drain(&mut rx);
    let changes: usize = batches.iter().map(Batch::transitions).sum();
    assert!(
        changes <= 5,
        "{changes} changes: damping holds after the fifth"
    );
    assert!(batches.len() <= 5, "{} batches", batches.len());
    assert!(!s.is_healthy(&1, &key(2)), "held although its probes pass");
    let status = s.status(&1, &key(2)).unwrap();
    assert_eq!(status.label(), "unhealthy (held)");
    assert_eq!(status.holds, 1);
    advance(30_000).await;
    assert!(s.is_healthy(&1, &key(2)), "back after the hold");
}

#[tokio::test(start_paused = true)]
async fn dropping_the_scheduler_stops_every_probe() {
    let (s, _rx) = Scheduler::<u32>::start(SchedulerConfig::default());
    let b = fake();
    s.set_probe(1, key(1), schedule(200), b.clone(), Start::AssumeHealthy);
    advance(1_000).await;
    drop(s);
    advance(10).await;
    let probes = b.probes.load(Ordering::SeqCst);
    advance(2_000).await;
    assert_eq!(b.probes.load(Ordering::SeqCst), probes);
}

#[tokio::test(start_paused = true)]
async fn snapshot_lists_backends_in_order() {
    let (s, _rx) = Scheduler::<u32>::start(SchedulerConfig::default());
    for (vip, b) in [(2, 1), (1, 3), (1, 2)] {
        s.set_probe(vip, key(b), schedule(1_000), fake(), Start::AssumeUnhealthy);
    }
    let order: Vec<_> = s.snapshot().iter().map(|r| (r.vip, r.backend)).collect();
    assert_eq!(order, [(1, key(2)), (1, key(3)), (2, key(1))]);
    let json = serde_json::to_value(&s.snapshot()[0]).unwrap();
    assert_eq!(json["backend"], "198.51.100.2");
    assert_eq!(json["kind"], serde_json::Value::Null);
    assert_eq!(json["status"]["healthy"], false);
}
