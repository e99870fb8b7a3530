//! The scheduler: runs every probed backend's probes in the tokio runtime and turns
//! their results into health states and batched transitions.
//!
//! - One task per backend: a probe every `interval` (a late probe delays the next one;
//!   probes never pile up), each bounded by its `timeout`.
//! - Bounded concurrency: at most `max_concurrent` probes are in flight at once (a
//!   semaphore); a probe waits for a permit, never a thread. Probes are async, so the
//!   control socket and table changes in the same runtime are never blocked.
//! - Jittered start: a VIP's backends start at a phase derived from the VIP (spreading
//!   VIPs over the interval), each backend within half a coalescing window of it; so
//!   backends of one VIP that fail together reach `fall` in the same round and their
//!   transitions land in one batch.
//! - Cancellation: removing a backend aborts its task (an in-flight probe is dropped
//!   and its socket closed) and forgets its state.
//! - Reloads: [`Scheduler::set`] with changed settings restarts the backend's task but
//!   keeps its health state (healthy or not, counters, damping history); unchanged
//!   settings change nothing.
//! - Output: each transition is logged once (with its reason) and sent to the
//!   coalescer ([`super::coalesce`]), whose [`Batch`]es are the scheduler's output.
//!
//! Must be started inside a tokio runtime (current-thread or multi-thread).

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    hash::{BuildHasher as _, Hash, RandomState},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use tokio::{
    sync::{Semaphore, mpsc},
    task::JoinHandle,
};

use super::{
    coalesce::{self, Batch, DEFAULT_WINDOW, Notice},
    damping::Damping,
    outcome::{Failure, ProbeResult, Stage},
    probe::{Probe, Prober, SetupError},
    settings::ProbeSettings,
    state::{BackendHealth, Event, HealthStatus, Thresholds},
    target::ProbeTarget,
};
use lb_maglev::BackendKey;

/// Default cap on probes in flight: 256. At 1,000 backends probed every second, a probe
/// may then take up to a quarter of a second on average before probes queue.
pub const DEFAULT_MAX_CONCURRENT: usize = 256;
/// Extra time the scheduler gives a [`Probe`] beyond its timeout before it gives up on
/// it (a guard against an implementation that ignores its timeout).
pub const PROBE_GUARD: Duration = Duration::from_secs(1);
/// Batches the consumer may leave unread before the coalescer waits.
const BATCH_QUEUE: usize = 16;

/// What a VIP identity must offer (the controller's `Vip` does).
pub trait VipId: Clone + Ord + Hash + fmt::Display + fmt::Debug + Send + Sync + 'static {}
impl<T: Clone + Ord + Hash + fmt::Display + fmt::Debug + Send + Sync + 'static> VipId for T {}

/// Scheduler settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Most probes in flight at once (at least 1).
    pub max_concurrent: usize,
    /// Coalescing window of transitions.
    pub coalesce_window: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            coalesce_window: DEFAULT_WINDOW,
        }
    }
}

/// How often and how patiently one backend is probed, and how its results count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Time between the starts of two probes (non-zero).
    pub interval: Duration,
    /// Longest a probe may take.
    pub timeout: Duration,
    /// Rise and fall.
    pub thresholds: Thresholds,
    /// Flap damping.
    pub damping: Damping,
}

impl From<&ProbeSettings> for Schedule {
    fn from(s: &ProbeSettings) -> Self {
        Self {
            interval: s.interval,
            timeout: s.timeout,
            thresholds: s.thresholds,
            damping: s.damping,
        }
    }
}

/// A backend's probe as configured: settings and target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSpec {
    /// The resolved settings.
    pub settings: ProbeSettings,
    /// Where the probes go.
    pub target: ProbeTarget,
}

/// The state a backend starts in when it is first scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Healthy until it has failed `fall` probes (daemon start; the default for added
    /// backends, so that adding a backend never waits for `rise` probes).
    AssumeHealthy,
    /// Unhealthy until it has passed `rise` probes.
    AssumeUnhealthy,
    /// Unhealthy until its first successful probe (a backend new to a running daemon
    /// with `initial = "down"`, see [`BackendHealth::start_down`]).
    Down,
}

/// One backend in [`Scheduler::snapshot`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BackendReport<V> {
    /// The VIP.
    pub vip: V,
    /// The backend.
    pub backend: BackendKey,
    /// `tcp`, `http`, `https` or `dns`; `None` for a custom [`Probe`].
    pub kind: Option<&'static str>,
    /// Where the probes go (`None` for a custom [`Probe`]).
    #[serde(serialize_with = "display_opt")]
    pub target: Option<ProbeTarget>,
    /// Its health.
    pub status: HealthStatus,
}

fn display_opt<S: serde::Serializer>(t: &Option<ProbeTarget>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.collect_str(t),
        None => s.serialize_none(),
    }
}

struct Entry {
    health: BackendHealth,
    schedule: Schedule,
    spec: Option<ProbeSpec>,
    generation: u64,
    task: JoinHandle<()>,
}

struct Shared<V> {
    entries: Mutex<HashMap<(V, BackendKey), Entry>>,
    notices: mpsc::UnboundedSender<Notice<V>>,
    permits: Arc<Semaphore>,
    config: SchedulerConfig,
    phases: RandomState,
}

impl<V: VipId> Shared<V> {
    fn lock(&self) -> MutexGuard<'_, HashMap<(V, BackendKey), Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a result of the task of `generation`; a stale task's result is dropped.
    fn record(&self, key: &(V, BackendKey), generation: u64, result: &ProbeResult) {
        let now = now();
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(key).filter(|e| e.generation == generation) else {
            return;
        };
        let (vip, backend) = key;
        match entry.health.record(
            now,
            result,
            entry.schedule.thresholds,
            &entry.schedule.damping,
        ) {
            None => {}
            Some(Event::Held { until, changes }) => tracing::warn!(
                %vip,
                %backend,
                "backend passes its probes but changed state {changes} times within {} s: \
                 held unhealthy for {} s",
                entry.schedule.damping.window.as_secs(),
                until.saturating_duration_since(now).as_secs()
            ),
            Some(Event::Transition(t)) => {
                if t.healthy {
                    tracing::info!(%vip, %backend, "backend healthy: {}", t.reason);
                } else if let Some(until) = t.held_until {
                    tracing::warn!(
                        %vip,
                        %backend,
                        "backend unhealthy: {}; it changed state more than {} times within \
                         {} s: held unhealthy for {} s",
                        t.reason,
                        entry.schedule.damping.max_transitions,
                        entry.schedule.damping.window.as_secs(),
                        until.saturating_duration_since(now).as_secs()
                    );
                } else {
                    tracing::warn!(%vip, %backend, "backend unhealthy: {}", t.reason);
                }
                // The coalescer ends only with the scheduler.
                let _ = self.notices.send(Notice {
                    vip: vip.clone(),
                    backend: *backend,
                    transition: t,
                });
            }
        }
    }

    /// Delay before a backend's first probe (see the module documentation).
    fn first_delay(&self, vip: &V, backend: &BackendKey, interval: Duration) -> Duration {
        let fraction = |hash: u64, of: Duration| {
            let nanos = u64::try_from(of.as_nanos()).unwrap_or(u64::MAX).max(1);
            Duration::from_nanos(hash % nanos)
        };
        let vip_phase = fraction(self.phases.hash_one(vip), interval);
        let spread = (self.config.coalesce_window / 2).min(interval);
        vip_phase + fraction(self.phases.hash_one((vip, backend)), spread)
    }
}

/// The clock of health states: tokio's (paused in tests), as a std instant.
fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// Runs probes for many backends; see the module documentation. Dropping it stops
/// every probe.
pub struct Scheduler<V: VipId> {
    shared: Arc<Shared<V>>,
    coalescer: JoinHandle<()>,
}

impl<V: VipId> Scheduler<V> {
    /// Starts a scheduler with no backends and returns it with the receiver of its
    /// batches.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn start(config: SchedulerConfig) -> (Self, mpsc::Receiver<Batch<V>>) {
        let (notices, notices_rx) = mpsc::unbounded_channel();
        let (batches_tx, batches) = mpsc::channel(BATCH_QUEUE);
        let coalescer = tokio::spawn(coalesce::run(
            notices_rx,
            batches_tx,
            config.coalesce_window,
        ));
        let shared = Arc::new(Shared {
            entries: Mutex::new(HashMap::new()),
            notices,
            permits: Arc::new(Semaphore::new(config.max_concurrent.max(1))),
            config,
            phases: RandomState::new(),
        });
        (Self { shared, coalescer }, batches)
    }

    /// Probes `backend` of `vip` as `spec` says: adds it (in state `start`), or updates
    /// it. Unchanged settings change nothing; changed ones restart its probes and keep
    /// its health state.
    ///
    /// # Errors
    /// [`SetupError`] when the prober cannot be prepared; the backend's previous probe,
    /// if any, keeps running.
    pub fn set(
        &self,
        vip: V,
        backend: BackendKey,
        spec: ProbeSpec,
        start: Start,
    ) -> Result<(), SetupError> {
        let key = (vip, backend);
        if self
            .shared
            .lock()
            .get(&key)
            .is_some_and(|e| e.spec.as_ref() == Some(&spec))
        {
            return Ok(());
        }
        let prober = Prober::new(&spec.settings.check, spec.target)?;
        let schedule = Schedule::from(&spec.settings);
        self.install(key, schedule, Arc::new(prober), Some(spec), start);
        Ok(())
    }

    /// Probes `backend` of `vip` with a custom `probe` (always restarts its probes;
    /// keeps its health state if it was scheduled).
    pub fn set_probe(
        &self,
        vip: V,
        backend: BackendKey,
        schedule: Schedule,
        probe: Arc<dyn Probe>,
        start: Start,
    ) {
        self.install((vip, backend), schedule, probe, None, start);
    }

    fn install(
        &self,
        key: (V, BackendKey),
        schedule: Schedule,
        probe: Arc<dyn Probe>,
        spec: Option<ProbeSpec>,
        start: Start,
    ) {
        let delay = self.shared.first_delay(&key.0, &key.1, schedule.interval);
        let mut entries = self.shared.lock();
        let (health, generation) = match entries.remove(&key) {
            Some(old) => {
                old.task.abort();
                (old.health, old.generation + 1)
            }
            None => {
                let now = now();
                let health = match start {
                    Start::AssumeHealthy => BackendHealth::assume_healthy(now),
                    Start::AssumeUnhealthy => BackendHealth::assume_unhealthy(now),
                    Start::Down => BackendHealth::start_down(now),
                };
                (health, 0)
            }
        };
        let task = tokio::spawn(probe_loop(
            Arc::downgrade(&self.shared),
            key.clone(),
            generation,
            schedule,
            probe,
            delay,
        ));
        entries.insert(
            key,
            Entry {
                health,
                schedule,
                spec,
                generation,
                task,
            },
        );
    }

    /// Stops probing `backend` of `vip` and forgets its state. Returns whether it was
    /// scheduled.
    pub fn remove(&self, vip: &V, backend: &BackendKey) -> bool {
        let removed = self.shared.lock().remove(&(vip.clone(), *backend));
        removed.map(|e| e.task.abort()).is_some()
    }

    /// Keeps only the backends for which `keep` is true (after a reload).
    pub fn retain(&self, mut keep: impl FnMut(&V, &BackendKey) -> bool) {
        self.shared.lock().retain(|(vip, backend), entry| {
            let kept = keep(vip, backend);
            if !kept {
                entry.task.abort();
            }
            kept
        });
    }

    /// Whether `backend` of `vip` counts as healthy; a backend that is not probed does.
    pub fn is_healthy(&self, vip: &V, backend: &BackendKey) -> bool {
        self.shared
            .lock()
            .get(&(vip.clone(), *backend))
            .is_none_or(|e| e.health.is_healthy())
    }

    /// Health of every probed backend of `vip`.
    pub fn health_of(&self, vip: &V) -> BTreeMap<BackendKey, bool> {
        self.shared
            .lock()
            .iter()
            .filter(|((v, _), _)| v == vip)
            .map(|((_, b), e)| (*b, e.health.is_healthy()))
            .collect()
    }

    /// The status of `backend` of `vip`, if it is probed.
    pub fn status(&self, vip: &V, backend: &BackendKey) -> Option<HealthStatus> {
        let now = now();
        self.shared
            .lock()
            .get(&(vip.clone(), *backend))
            .map(|e| e.health.status(now))
    }

    /// Every probed backend, sorted by VIP and backend.
    pub fn snapshot(&self) -> Vec<BackendReport<V>> {
        let now = now();
        let mut reports: Vec<_> = self
            .shared
            .lock()
            .iter()
            .map(|((vip, backend), e)| BackendReport {
                vip: vip.clone(),
                backend: *backend,
                kind: e.spec.as_ref().map(|s| s.settings.check.kind()),
                target: e.spec.as_ref().map(|s| s.target),
                status: e.health.status(now),
            })
            .collect();
        reports.sort_by(|a, b| (&a.vip, a.backend).cmp(&(&b.vip, b.backend)));
        reports
    }

    /// Number of probed backends.
    pub fn len(&self) -> usize {
        self.shared.lock().len()
    }

    /// Whether no backend is probed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<V: VipId> Drop for Scheduler<V> {
    fn drop(&mut self) {
        for entry in self.shared.lock().values() {
            entry.task.abort();
        }
        self.coalescer.abort();
    }
}

/// One backend's probes, until aborted or the scheduler is gone.
async fn probe_loop<V: VipId>(
    shared: std::sync::Weak<Shared<V>>,
    key: (V, BackendKey),
    generation: u64,
    schedule: Schedule,
    probe: Arc<dyn Probe>,
    delay: Duration,
) {
    tokio::time::sleep(delay).await;
    let mut ticks = tokio::time::interval(schedule.interval.max(Duration::from_millis(1)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(permits) = shared.upgrade().map(|s| s.permits.clone()) else {
            return;
        };
        let Ok(permit) = permits.acquire_owned().await else {
            return;
        };
        let result = match tokio::time::timeout(
            schedule.timeout + PROBE_GUARD,
            probe.probe(schedule.timeout),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => Err(Failure::Timeout {
                stage: Stage::Probe,
                after: schedule.timeout + PROBE_GUARD,
            }),
        };
        drop(permit);
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.record(&key, generation, &result);
    }
}

#[cfg(test)]
mod tests;
