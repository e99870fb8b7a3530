//! The daemon's health checks: the probe scheduler (`lb_health::scheduler`) on its
//! own runtime thread, kept equal to the applied configuration, and its batches of
//! transitions turned into table changes.
//!
//! - Runtime: the scheduler runs on a current-thread tokio runtime of its own thread
//!   (`lb-health`, [`HealthRuntime`]), not on the daemon's event loop. A probe's timer
//!   and its measured latency are then never delayed by a table rebuild, a reload or a
//!   control request on the event loop, and no probe (at most
//!   `health.max_concurrent_probes` in flight, all async) can delay those. The
//!   scheduler's own lock is held only to record a result or read a state.
//! - Targets ([`HealthChecks::sync`]): after every applied change (start, reload,
//!   `lb backend ...`) every configured backend with a probe is scheduled (its VIP's
//!   `[vip.health]`, or its own `[vip.backend.health]`; drained and administratively
//!   down backends are probed too, so that an operator sees whether they are healthy
//!   before undraining them); unchanged settings leave a backend's probes alone, changed
//!   ones restart them with its health state kept; backends no longer probed are
//!   forgotten, and one the controller still held unhealthy counts as healthy again.
//!   A tunnel-mode probe goes to the VIP marked with the backend's id, from the VIP
//!   family's encap source address (the backend answers there).
//! - Transitions: the scheduler logs each transition once, with its reason; each batch
//!   of one coalescing window ([`HealthChecks::apply`]) is one `Controller::set_health`,
//!   so one table change per VIP and batch, logged with its counts.
//! - Start: every backend counts as healthy until it has failed `fall` probes, so a
//!   restart never empties a VIP.
//! - New backends: one a running daemon adds (`lb backend add`, a reload, `lb
//!   overrides --clear`) with `initial = "down"` (the default) is held unhealthy by the
//!   change that adds it ([`crate::controller::Controller::apply_new_down`]) and its
//!   probes start down ([`Start::Down`]): it gets slots after its first successful
//!   probe, never before (HAProxy's `init-state down`, keepalived's alpha mode).

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use tokio::{runtime::Handle, sync::mpsc};
use tracing::{info, warn};

use crate::{
    config::{Config, Vip, VipProbes},
    control::{BackendHealth, HealthSummary, Status, TunnelProbes},
    controller::{ApplyError, ApplyReport, Controller},
};
use lb_dataplane::Dataplane;
use lb_health::{
    coalesce::Batch,
    scheduler::{ProbeSpec, Scheduler, Start},
    settings::Mode,
    target::ProbeTarget,
};
use lb_maglev::BackendKey;

/// The health checker's runtime: a current-thread tokio runtime driven by its own
/// thread until dropped.
pub struct HealthRuntime {
    handle: Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HealthRuntime {
    /// Starts the thread `lb-health` and its runtime.
    ///
    /// # Errors
    /// When the runtime or the thread cannot be created.
    pub fn start() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("lb-health".to_owned())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok(Self {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The runtime's handle (to start the scheduler on it).
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }
}

impl Drop for HealthRuntime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The probes of every configured backend, and how their transitions reach the
/// controller.
pub struct HealthChecks {
    handle: Handle,
    scheduler: Scheduler<Vip>,
    /// Every VIP's probe settings, from the configuration last loaded.
    probes: BTreeMap<Vip, VipProbes>,
    source_v4: Option<Ipv4Addr>,
    source_v6: Option<Ipv6Addr>,
}

impl HealthChecks {
    /// Starts the scheduler on the runtime of `handle` with `config`'s settings;
    /// returns it with the receiver of its batches. Nothing is probed until
    /// [`Self::sync`].
    pub fn start(handle: Handle, config: &Config) -> (Self, mpsc::Receiver<Batch<Vip>>) {
        let (scheduler, batches) = {
            let _runtime = handle.enter();
            Scheduler::start(config.health.scheduler())
        };
        let mut checks = Self {
            handle,
            scheduler,
            probes: BTreeMap::new(),
            source_v4: None,
            source_v6: None,
        };
        checks.configure(config);
        (checks, batches)
    }

    /// Takes the probe settings of a (re)loaded configuration; [`Self::sync`] applies
    /// them.
    pub fn configure(&mut self, config: &Config) {
        self.probes = config
            .vips
            .iter()
            .map(|v| (v.vip, v.health.clone()))
            .collect();
        self.source_v4 = config.source_v4;
        self.source_v6 = config.source_v6;
    }

    /// Schedules every probed backend of what `controller` applied and forgets the
    /// others (see the module documentation). Returns the backends that are no longer
    /// probed but that the controller still holds unhealthy.
    pub fn sync<D: Dataplane>(&self, controller: &Controller<D>) -> Vec<(Vip, BackendKey)> {
        let Some(desired) = controller.applied() else {
            return Vec::new();
        };
        let _runtime = self.handle.enter();
        let mut probed = BTreeSet::new();
        let mut released = Vec::new();
        for (vip, spec) in &desired.vips {
            let ids = controller.vips().get(vip).map(|a| &a.backend_ids);
            for key in spec.backends.keys() {
                let Some(settings) = self.probes.get(vip).and_then(|p| p.probe_of(key)) else {
                    if controller.is_unhealthy(vip, key) {
                        released.push((*vip, *key));
                    }
                    continue;
                };
                let id = ids.and_then(|i| i.get(key)).copied().unwrap_or(0);
                let source = match (settings.mode, vip.addr) {
                    (Mode::Direct, _) => None,
                    (Mode::Tunnel, IpAddr::V4(_)) => self.source_v4.map(IpAddr::V4),
                    (Mode::Tunnel, IpAddr::V6(_)) => self.source_v6.map(IpAddr::V6),
                };
                let target = match ProbeTarget::select(
                    settings.mode,
                    vip.addr,
                    key.ip(),
                    id,
                    settings.port,
                    source,
                ) {
                    Ok(t) => t,
                    Err(e) => {
                        warn!(%vip, backend = %key, "not probed: {e}");
                        continue;
                    }
                };
                let spec = ProbeSpec {
                    settings: settings.clone(),
                    target,
                };
                // Held down by the change that added it (`initial = "down"`): its
                // probes start down too, and its first success lets it in. A backend
                // already scheduled keeps its state whatever this says.
                let start = if controller.is_unhealthy(vip, key) {
                    Start::Down
                } else {
                    Start::AssumeHealthy
                };
                match self.scheduler.set(*vip, *key, spec, start) {
                    Ok(()) => {
                        probed.insert((*vip, *key));
                    }
                    Err(e) => warn!(%vip, backend = %key, "not probed: {e}"),
                }
            }
        }
        self.scheduler
            .retain(|vip, key| probed.contains(&(*vip, *key)));
        released
    }

    /// Applies one batch of transitions: every changed backend's current health (the
    /// scheduler's, which a later probe may have changed again since the batch closed)
    /// goes to the controller in one change. Logs one line with the counts.
    ///
    /// # Errors
    /// As [`Controller::set_health`].
    pub fn apply<D: Dataplane>(
        &self,
        controller: &mut Controller<D>,
        batch: &Batch<Vip>,
    ) -> Result<ApplyReport, ApplyError> {
        let changes: Vec<(Vip, BackendKey, bool)> = batch
            .vips
            .iter()
            .flat_map(|(vip, changes)| {
                changes
                    .iter()
                    .map(|c| (*vip, c.backend, self.scheduler.is_healthy(vip, &c.backend)))
            })
            .collect();
        let down = changes.iter().filter(|c| !c.2).count();
        let report = controller.set_health(changes.iter().copied())?;
        info!(
            "health: {} transitions of {} backends ({} now unhealthy, {} healthy) in {} VIPs: \
             {} table changes",
            batch.transitions(),
            changes.len(),
            down,
            changes.len() - down,
            batch.vips.len(),
            report.tables_changed()
        );
        Ok(report)
    }

    /// Fills the health parts of `status`: each probed backend's health and the totals
    /// (with `controller`'s batch counts).
    pub fn annotate<D: Dataplane>(&self, status: &mut Status, controller: &Controller<D>) {
        let snapshot = self.scheduler.snapshot();
        let by_backend: BTreeMap<(String, String), BackendHealth> = snapshot
            .iter()
            .map(|r| {
                (
                    (r.vip.to_string(), r.backend.to_string()),
                    BackendHealth::from(r),
                )
            })
            .collect();
        for v in &mut status.vips {
            for b in &mut v.backends {
                b.health = by_backend.get(&(v.vip.clone(), b.address.clone())).cloned();
            }
        }
        let (batches, table_changes) = controller.health_changes();
        let tunnel = controller
            .dataplane()
            .probe_encap()
            .map(|(attached, s)| TunnelProbes {
                attached,
                encapsulated: s.encapsulated,
                dropped: s.dropped(),
            })
            .unwrap_or_default();
        status.health = HealthSummary {
            probed: snapshot.len(),
            unhealthy: snapshot.iter().filter(|r| !r.status.healthy).count(),
            transitions: snapshot
                .iter()
                .map(|r| r.status.went_down + r.status.came_up)
                .sum(),
            batches,
            table_changes,
            tunnel,
            ..status.health.clone()
        };
    }

    /// The scheduler (tests, benchmarks).
    pub fn scheduler(&self) -> &Scheduler<Vip> {
        &self.scheduler
    }
}

/// Attaches the tunnel-probe program to the egress of `iface`; a failure is a warning
/// (tunnel-mode probes then fail, and say so in `lb status`).
pub(super) fn attach_probe_program(dp: &mut lb_dataplane::KernelDataplane, iface: &str) {
    match dp.attach_probe_encap(iface) {
        Ok(()) => info!("tunnel-probe program attached to the egress of {iface}"),
        Err(e) => warn!(
            "tunnel-probe program not attached to {iface} ({e}): tunnel-mode probes will fail"
        ),
    }
}

/// Detaches the tunnel-probe program (at exit: nothing marks probes any more).
pub(super) fn detach_probe_program(dp: &mut lb_dataplane::KernelDataplane, iface: &str) {
    if dp.probe_encap_attached() {
        match dp.detach_probe_encap() {
            Ok(()) => info!("tunnel-probe program detached from {iface}"),
            Err(e) => warn!("detaching the tunnel-probe program from {iface}: {e}"),
        }
    }
}

#[cfg(test)]
mod tests;
