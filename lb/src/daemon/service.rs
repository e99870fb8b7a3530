//! [`Service`]: the daemon's logic without the event loop — applying the file merged
//! with the runtime changes ([`crate::controller::overrides`] has the merge rule),
//! reloads, runtime changes from the control socket (kept in the state file before
//! they are applied), status, stats and flow lookups. Generic over the data plane, so
//! it is unit-tested against the in-memory fake.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use tokio::{runtime::Handle, sync::mpsc};
use tracing::info;

use super::{
    announce::{self, Announcer},
    change,
    connections::Latest,
    drains::Drains,
    health::HealthChecks,
    nexthop::NexthopMonitor,
    state_file::{StateFile, StateFileError},
    stats::{self, Sample, Window},
};
use crate::{
    config::{BackendState, Config, HealthChecker, Loaded, Nexthop, Vip, XdpMode},
    control::{BackendAction, OverrideStatus, OverridesReport, Request, Response, Stats, Status},
    controller::{
        ApplyError, ApplyReport, BackendSpec, Controller, Desired, EditError, FlowError, Override,
        Overrides,
    },
    defaults,
};
use lb_dataplane::routes::IpRoutes;
use lb_dataplane::{Dataplane, DataplaneError};
use lb_health::coalesce::Batch;
use lb_maglev::BackendKey;

/// Why the daemon refused a reload or a request; the running state is kept.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A reload changes settings that only take effect at start.
    #[error(
        "{} changed: these settings take effect only at start (restart lb); nothing applied",
        .0.join(", ")
    )]
    StartOnly(Vec<&'static str>),
    /// The runtime change does not fit the VIP.
    #[error(transparent)]
    Edit(#[from] EditError),
    /// A flag of the request is missing, out of range or does not apply.
    #[error("{0}")]
    Flag(String),
    /// After the change the VIP's table would be smaller than its backends.
    #[error("table_size {table_size} is smaller than backend count {in_table}")]
    TableTooSmall {
        /// The VIP's table size.
        table_size: u32,
        /// Its backends in the table after the change.
        in_table: usize,
    },
    /// The change could not be applied.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// `lb flow` could not answer.
    #[error(transparent)]
    Flow(#[from] FlowError),
    /// The counters could not be read.
    #[error(transparent)]
    Counters(#[from] DataplaneError),
    /// The state file could not be read or written (nothing was applied).
    #[error(transparent)]
    State(#[from] StateFileError),
}

/// Settings that only take effect at start; a reload that changes them is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StartOnly {
    interface: String,
    xdp_mode: XdpMode,
    control_socket: PathBuf,
    pin_dir: PathBuf,
    state_dir: PathBuf,
    ct_capacity: u32,
    ct_syn_capacity: u32,
    frag_capacity: u32,
    affinity_capacity: u32,
    exceptions_capacity: u32,
    /// The flow hash places every flow in its table slot and SYN cache slot: changing
    /// it while flows run would split handshakes in flight and let an old conntrack
    /// entry outvote a reused 4-tuple's new SYN.
    hash_seed: u32,
    /// The metrics endpoint's address and the conntrack walk's settings.
    metrics: crate::config::MetricsConfig,
    /// The health checker's coalescing window and concurrency (its scheduler is
    /// started with them).
    health: HealthChecker,
}

impl StartOnly {
    fn of(c: &Config) -> Self {
        Self {
            metrics: c.metrics.clone(),
            interface: c.interface.clone(),
            xdp_mode: c.xdp_mode,
            control_socket: c.control_socket.clone(),
            pin_dir: c.pin_dir.clone(),
            state_dir: c.state_dir.clone(),
            ct_capacity: c.ct_capacity,
            ct_syn_capacity: c.ct_syn_capacity,
            frag_capacity: c.frag_capacity,
            affinity_capacity: c.affinity_capacity,
            exceptions_capacity: c.exceptions_capacity,
            hash_seed: c.hash_seed,
            health: c.health,
        }
    }

    /// Names of the settings that differ.
    fn changed(&self, other: &Self) -> Vec<&'static str> {
        [
            ("interface", self.interface != other.interface),
            ("xdp_mode", self.xdp_mode != other.xdp_mode),
            (
                "control_socket",
                self.control_socket != other.control_socket,
            ),
            ("pin_dir", self.pin_dir != other.pin_dir),
            ("state_dir", self.state_dir != other.state_dir),
            ("conntrack.capacity", self.ct_capacity != other.ct_capacity),
            (
                "conntrack.syn_capacity",
                self.ct_syn_capacity != other.ct_syn_capacity,
            ),
            (
                "conntrack.fragment_capacity",
                self.frag_capacity != other.frag_capacity,
            ),
            (
                "conntrack.persistence_capacity",
                self.affinity_capacity != other.affinity_capacity,
            ),
            (
                "conntrack.exceptions_capacity",
                self.exceptions_capacity != other.exceptions_capacity,
            ),
            ("hash_seed", self.hash_seed != other.hash_seed),
            ("metrics", self.metrics != other.metrics),
            (
                "health.coalesce_ms",
                self.health.coalesce_window != other.health.coalesce_window,
            ),
            (
                "health.max_concurrent_probes",
                self.health.max_concurrent != other.health.max_concurrent,
            ),
        ]
        .into_iter()
        .filter_map(|(name, differs)| differs.then_some(name))
        .collect()
    }
}

/// The daemon's state.
pub struct Service<D> {
    controller: Controller<D>,
    config_file: PathBuf,
    /// The file's configuration last applied (what `lb config diff` compares with).
    file_config: Config,
    file_desired: Desired,
    start_only: StartOnly,
    if_mac: [u8; 6],
    interface: String,
    mode: String,
    /// The counters of the last seconds, for the rates of `lb stats`.
    samples: Window,
    /// The last conntrack walk (live connections per backend).
    connections: Latest,
    /// The fast path's cleaning walks.
    cleanings: super::cleaning::Cleanings,
    /// The health checks, once started ([`Self::start_health`]).
    health: Option<HealthChecks>,
    /// The backends' next hops, once watched ([`Self::set_nexthop_monitor`]).
    nexthops: Option<NexthopMonitor>,
    /// The VIP addresses' announcement for BGP ([`announce`]).
    announce: Announcer,
    /// The runtime changes in force.
    overrides: Overrides,
    /// The timed drains' pending removals.
    drains: Drains,
    /// Where they are kept (`None`: not kept, in unit tests).
    state_file: Option<StateFile>,
    /// The pinned datapath's directory and layout stamp, for `lb status`.
    datapath: (Option<String>, Option<String>),
    /// What this start's migration of the pinned datapath did, for `lb status`.
    migration: Option<String>,
    /// Whether the pinned datapath is whole (the daemon's pin check, `pins`).
    datapath_health: crate::control::DatapathHealth,
    /// The last changes sent with an id and what became of them (`lb status`).
    recent_changes: std::collections::VecDeque<crate::control::ChangeOutcome>,
    detach_on_exit: bool,
}

/// The status form of an override.
fn override_status(o: &Override) -> OverrideStatus {
    OverrideStatus {
        vip: o.vip.to_string(),
        backend: o.backend.to_string(),
        change: o.describe(),
        file: o.describe_file(),
    }
}

impl<D: Dataplane> Service<D> {
    /// Applies `loaded` (read from `config_file`), merged with the runtime changes kept
    /// in `state_file`, through `controller` (fresh, or adopted from a pinned data
    /// plane: then only differences are written). `if_mac` is the interface's MAC.
    /// Returns the report and a line for each runtime change the file overrode.
    ///
    /// # Errors
    /// An unreadable or corrupt state file (nothing is applied), or a failed apply
    /// (nothing a packet could use is left half-written: the VIPs are written last).
    pub fn start(
        controller: Controller<D>,
        config_file: PathBuf,
        loaded: &Loaded,
        if_mac: [u8; 6],
        mode: String,
        state_file: Option<StateFile>,
    ) -> Result<(Self, ApplyReport, Vec<String>), ServiceError> {
        let stored = match &state_file {
            Some(f) => f.load()?,
            None => Overrides::default(),
        };
        let file_desired = Desired::from_config(&loaded.config, if_mac);
        let (desired, kept, dropped) = stored.merge(&file_desired);
        let mut controller = controller;
        let report = controller.apply(&desired)?;
        let service = Self {
            controller,
            config_file,
            file_config: loaded.config.clone(),
            file_desired,
            start_only: StartOnly::of(&loaded.config),
            if_mac,
            interface: loaded.config.interface.clone(),
            mode,
            samples: Window::default(),
            connections: Latest::new(
                loaded.config.ct_capacity,
                loaded.config.ct_syn_capacity,
                loaded.config.metrics.idle,
            )
            .with_exceptions_capacity(loaded.config.exceptions_capacity),
            cleanings: super::cleaning::Cleanings::default(),
            health: None,
            nexthops: None,
            overrides: kept,
            drains: Drains::default(),
            state_file,
            datapath: (None, None),
            migration: None,
            datapath_health: crate::control::DatapathHealth::default(),
            recent_changes: std::collections::VecDeque::new(),
            detach_on_exit: loaded.config.detach_on_exit,
            announce: Announcer::new(loaded.config.announce, Box::new(IpRoutes)),
        };
        if service.overrides != stored {
            service.persist(&service.overrides)?;
        }
        Ok((service, report, dropped))
    }

    /// Records the pinned datapath's directory and layout stamp for `lb status`.
    pub fn set_datapath(&mut self, pin_dir: Option<String>, layout: Option<String>) {
        self.datapath = (pin_dir, layout);
    }

    /// Records what this start's migration of the pinned datapath did (see
    /// `lb_dataplane::pinned::migrate::Migration`'s display), for `lb status`.
    pub fn set_migration(&mut self, migration: Option<String>) {
        self.migration = migration;
    }

    /// Records the SYN cache's parts for `lb status` and the metrics, once the data
    /// plane split it for the interface.
    pub fn set_syn_cache_parts(&mut self, parts: u32) {
        self.connections.set_syn_parts(parts);
    }

    /// Records what became of the change `request` sent with `id` (answered with
    /// `response`), keeping the last [`crate::control::RECENT_CHANGES`].
    pub fn record_change(&mut self, id: &str, request: &Request, response: &Response) {
        let command = match request {
            Request::Backend { .. } => "backend",
            Request::Vip { .. } => "vip",
            Request::Overrides { .. } => "overrides",
            _ => return,
        };
        if self.recent_changes.len() >= crate::control::RECENT_CHANGES {
            self.recent_changes.pop_front();
        }
        self.recent_changes
            .push_back(crate::control::ChangeOutcome {
                id: id.to_owned(),
                command: command.to_owned(),
                applied: response.ok,
                error: response.error.clone(),
            });
    }

    /// The pinned datapath's health, which the daemon's pin check keeps.
    pub fn datapath_health_mut(&mut self) -> &mut crate::control::DatapathHealth {
        &mut self.datapath_health
    }

    /// Whether the datapath is to be detached and its pins removed at exit.
    pub fn detach_on_exit(&self) -> bool {
        self.detach_on_exit
    }

    /// The runtime changes in force.
    pub fn overrides(&self) -> &Overrides {
        &self.overrides
    }

    /// Writes `overrides` to the state file, if there is one.
    fn persist(&self, overrides: &Overrides) -> Result<(), StateFileError> {
        match &self.state_file {
            Some(f) => f.save(overrides),
            None => Ok(()),
        }
    }

    /// Starts the health checks of `config` (the configuration [`Self::start`] applied)
    /// on the runtime of `handle` and schedules every probed backend; returns the
    /// receiver of their batches of transitions, for [`Self::apply_health`].
    pub fn start_health(&mut self, handle: Handle, config: &Config) -> mpsc::Receiver<Batch<Vip>> {
        let (checks, batches) = HealthChecks::start(handle, config);
        self.health = Some(checks);
        let report = self.sync_health();
        debug_assert!(report.operations == 0, "nothing is unhealthy at start");
        batches
    }

    /// Applies one batch of health transitions (one table change per VIP at most).
    ///
    /// # Errors
    /// The change could not be applied (the running state is kept; the health stays
    /// recorded and the next change applies it).
    pub fn apply_health(&mut self, batch: &Batch<Vip>) -> Result<ApplyReport, ServiceError> {
        let Some(health) = &self.health else {
            return Ok(ApplyReport::default());
        };
        Ok(health.apply(&mut self.controller, batch)?)
    }

    /// Schedules the probes of what the controller applied (see
    /// [`HealthChecks::sync`]); a backend no longer probed counts as healthy again.
    fn sync_health(&mut self) -> ApplyReport {
        let Some(health) = &self.health else {
            return ApplyReport::default();
        };
        let released = health.sync(&self.controller);
        let healthy = released.into_iter().map(|(vip, key)| (vip, key, true));
        self.controller.set_health(healthy).unwrap_or_else(|e| {
            tracing::error!("health: returning unprobed backends to their VIPs failed: {e}");
            ApplyReport::default()
        })
    }

    /// Applies `desired` (a change to the running state): once health checks run, a
    /// backend it adds whose probe in `config` (the VIP's, or its own) has `initial =
    /// "down"` gets slots only after its first successful probe
    /// ([`Controller::apply_new_down`]; [`HealthChecks::sync`] then starts its probes
    /// down).
    fn apply_new_down(
        &mut self,
        desired: &Desired,
        config: &Config,
    ) -> Result<ApplyReport, ApplyError> {
        if self.health.is_none() {
            return self.controller.apply(desired);
        }
        let probes: BTreeMap<Vip, &crate::config::VipProbes> =
            config.vips.iter().map(|v| (v.vip, &v.health)).collect();
        self.controller.apply_new_down(desired, |vip, key| {
            probes
                .get(vip)
                .and_then(|p| p.probe_of(key))
                .is_some_and(|p| p.initial == lb_health::settings::Initial::Down)
        })
    }

    /// The health checks, once started.
    pub fn health(&self) -> Option<&HealthChecks> {
        self.health.as_ref()
    }

    /// Watches the backends' next hops with `monitor` from now on.
    pub fn set_nexthop_monitor(&mut self, monitor: NexthopMonitor) {
        self.nexthops = Some(monitor);
        self.watch_nexthops();
    }

    /// Has the next-hop monitor watch the backends now applied (none in gateway mode).
    pub fn watch_nexthops(&self) {
        let Some(monitor) = &self.nexthops else {
            return;
        };
        let backends = self
            .controller
            .applied()
            .filter(|d| d.globals.nexthop == Nexthop::Fib)
            .map(|d| {
                d.vips
                    .iter()
                    .flat_map(|(vip, spec)| spec.backends.keys().map(|k| (vip.to_string(), k.ip())))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        monitor.watch(backends);
    }

    /// Records the attach mode in use (`native` or `skb`) for `lb status`.
    pub fn set_mode(&mut self, mode: String) {
        self.mode = mode;
    }

    /// The interface the program is attached to.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// The controller.
    pub fn controller(&self) -> &Controller<D> {
        &self.controller
    }

    /// The controller, mutably (to detach at shutdown).
    pub fn controller_mut(&mut self) -> &mut Controller<D> {
        &mut self.controller
    }

    /// Applies a reloaded file merged with the runtime changes (the merge rule of
    /// [`crate::controller::overrides`]); returns the report and a line for each
    /// runtime change the file overrode (dropped).
    ///
    /// # Errors
    /// Settings that need a restart changed, or the change failed (the running state is
    /// kept either way).
    pub fn reload(&mut self, loaded: &Loaded) -> Result<(ApplyReport, Vec<String>), ServiceError> {
        let changed = self.start_only.changed(&StartOnly::of(&loaded.config));
        if !changed.is_empty() {
            return Err(ServiceError::StartOnly(changed));
        }
        let file_desired = Desired::from_config(&loaded.config, self.if_mac);
        let (desired, kept, dropped) = self.overrides.merge(&file_desired);
        if kept != self.overrides {
            self.persist(&kept)?;
        }
        let before = self.controller.applied().cloned();
        let mut report = match self.apply_new_down(&desired, &loaded.config) {
            Ok(report) => report,
            Err(e) => {
                let _ = self.persist(&self.overrides);
                return Err(e.into());
            }
        };
        let mut applied = crate::controller::diff::diff(
            (&self.file_config, before.as_ref()),
            (&loaded.config, &desired),
            &report,
        );
        self.finish(&mut applied, loaded, Vec::new());
        for line in applied.lines() {
            info!("reload: {line}");
        }
        if !applied.changed {
            info!("reload: no change");
        }
        self.file_config = loaded.config.clone();
        self.file_desired = file_desired;
        self.overrides = kept;
        self.detach_on_exit = loaded.config.detach_on_exit;
        if let Some(health) = &mut self.health {
            health.configure(&loaded.config);
        }
        self.announce.configure(loaded.config.announce);
        let health = self.sync_health();
        merge(&mut report, health);
        Ok((report, dropped))
    }

    /// A two-phase rollout's first phase for a reloaded file (`lb reload --phase
    /// learn`, [`crate::controller::rollout`]): the file merged with the runtime
    /// changes, as [`Self::reload`] would apply it, is learned, not applied.
    ///
    /// # Errors
    /// Settings that need a restart changed, or the learn failed.
    pub fn learn(&mut self, loaded: &Loaded) -> Result<crate::control::Learned, ServiceError> {
        let changed = self.start_only.changed(&StartOnly::of(&loaded.config));
        if !changed.is_empty() {
            return Err(ServiceError::StartOnly(changed));
        }
        let file_desired = Desired::from_config(&loaded.config, self.if_mac);
        let (desired, _, _) = self.overrides.merge(&file_desired);
        let learned = self.controller.learn(&desired)?;
        let vips = learned
            .iter()
            .map(|(vip, l)| {
                if l.pending == 0 {
                    info!("reload --phase learn: {vip}: the earlier learn abandoned");
                } else {
                    info!(
                        "reload --phase learn: {vip}: {} slots pending their next owner",
                        l.pending
                    );
                }
                crate::control::LearnedVip {
                    vip: vip.to_string(),
                    pending_slots: l.pending,
                }
            })
            .collect();
        Ok(crate::control::Learned {
            file: self.config_file.display().to_string(),
            vips,
        })
    }

    /// The configuration file the daemon runs with.
    pub fn config_file(&self) -> &std::path::Path {
        &self.config_file
    }

    /// Whether a write of the file reloads it (`reload = "auto"`), as the file last
    /// applied says.
    pub fn reload_on_write(&self) -> bool {
        self.file_config.reload == crate::config::ReloadMode::Auto
    }

    /// Whether runtime changes make the running state differ from the file.
    pub fn differs_from_file(&self) -> bool {
        self.controller.applied() != Some(&self.file_desired)
    }

    /// Answers one control request; `log` receives the report of any change applied.
    pub fn handle(&mut self, request: &Request, log: &mut dyn FnMut(&ApplyReport)) -> Response {
        match *request {
            Request::Status => Response::ok(self.status()),
            Request::Stats => match self.stats() {
                Ok(s) => Response::ok(s),
                Err(e) => Response::error(e),
            },
            Request::Backend {
                action,
                vip,
                backend,
                weight,
                timeout_secs,
                keep,
            } => {
                let timeout = timeout_secs.map(Duration::from_secs);
                match self.backend_request(action, &vip, backend, weight, (timeout, keep)) {
                    Ok((report, before)) => {
                        log(&report);
                        let drain = self.drains.timeout_of(&vip, &backend);
                        Response::ok(change::change(
                            &self.controller,
                            change::Edit {
                                action,
                                vip: &vip,
                                key: backend,
                                before,
                                drain,
                            },
                            &report,
                        ))
                    }
                    Err(e) => Response::error(e),
                }
            }
            Request::Trace { .. } => {
                Response::error("lb trace is a stream: the daemon's event loop serves it")
            }
            Request::ReloadLearn => match Config::load(&self.config_file) {
                Err(e) => Response::error(format!("{}: {e}", self.config_file.display())),
                Ok(loaded) => match self.learn(&loaded) {
                    Ok(learned) => Response::ok(learned),
                    Err(e) => Response::error(e),
                },
            },
            Request::Reload | Request::PushConfig { .. } | Request::PushLearn { .. } => {
                Response::error(
                    "a reload signals the daemon's event loop: the event loop serves it",
                )
            }
            Request::ConfigDiff { ref file } => {
                let file = file.as_ref().unwrap_or(&self.config_file);
                match Config::load(file) {
                    Err(e) => Response::error(format!("{}: {e}", file.display())),
                    Ok(loaded) => match self.diff(&loaded, file) {
                        Ok(d) => Response::ok(d),
                        Err(e) => Response::error(e),
                    },
                }
            }
            Request::Conns { .. } => Response::error(
                "lb conn list walks the maps off the service: the daemon's event loop serves it",
            ),
            Request::Overrides { clear } => match self.list_or_clear(clear) {
                Ok((answer, report)) => {
                    if let Some(report) = &report {
                        log(report);
                    }
                    Response::ok(answer)
                }
                Err(e) => Response::error(e),
            },
            Request::Flow { vip, client } => match self.controller.flow(&vip, client) {
                Ok(r) => Response::ok(r),
                Err(e) => Response::error(e),
            },
            Request::Vip { action, address } => {
                let serving = announce::serving(&self.controller);
                match self.announce.request(action, address, &serving) {
                    Ok(lines) => Response::ok(lines),
                    Err(e) => Response::error(e),
                }
            }
        }
    }

    /// `lb overrides [--clear]`.
    fn list_or_clear(
        &mut self,
        clear: bool,
    ) -> Result<(OverridesReport, Option<ApplyReport>), ServiceError> {
        if !clear {
            return Ok((
                OverridesReport {
                    overrides: self.overrides.items().map(override_status).collect(),
                    lines: Vec::new(),
                },
                None,
            ));
        }
        let count = self.overrides.items().count();
        self.persist(&Overrides::default())?;
        let file_desired = self.file_desired.clone();
        let file_config = self.file_config.clone();
        let report = match self.apply_new_down(&file_desired, &file_config) {
            Ok(report) => report,
            Err(e) => {
                let _ = self.persist(&self.overrides);
                return Err(e.into());
            }
        };
        self.overrides.clear();
        let mut lines = vec![format!(
            "cleared {count} runtime change(s): the file applies"
        )];
        lines.extend(report.lines());
        Ok((
            OverridesReport {
                overrides: Vec::new(),
                lines,
            },
            Some(report),
        ))
    }

    /// `lb backend` with the drain's `(timeout, keep)`: checks the flags, applies the
    /// change and starts or cancels a timed drain. Returns the report and the backend
    /// as it was before.
    fn backend_request(
        &mut self,
        action: BackendAction,
        vip: &Vip,
        key: BackendKey,
        weight: Option<u32>,
        (timeout, keep): (Option<Duration>, bool),
    ) -> Result<(ApplyReport, Option<BackendSpec>), ServiceError> {
        if action != BackendAction::Drain && (timeout.is_some() || keep) {
            return Err(ServiceError::Flag(format!(
                "--timeout and --keep apply to drain only, not to {}",
                action.name()
            )));
        }
        if keep && timeout.is_some() {
            return Err(ServiceError::Flag(
                "--keep and --timeout exclude each other".to_owned(),
            ));
        }
        if timeout == Some(Duration::ZERO) {
            return Err(ServiceError::Flag(
                "--timeout 0: expected a duration above zero".to_owned(),
            ));
        }
        let before = self
            .controller
            .applied()
            .and_then(|d| d.backend(vip, &key))
            .copied();
        let report = self.backend(action, vip, key, weight)?;
        match (action, timeout) {
            (BackendAction::Drain, Some(t)) => self.drains.start(*vip, key, t, Instant::now()),
            (BackendAction::Drain, None) if !keep => {}
            (BackendAction::Weight, _) => {}
            _ => {
                self.drains.cancel(vip, &key);
            }
        }
        Ok((report, before))
    }

    /// `lb backend`: applies the change to the running state, after recording it in
    /// the state file (restored if the change fails).
    fn backend(
        &mut self,
        action: BackendAction,
        vip: &Vip,
        key: BackendKey,
        weight: Option<u32>,
    ) -> Result<ApplyReport, ServiceError> {
        let mut desired = self
            .controller
            .applied()
            .cloned()
            .unwrap_or_else(|| self.file_desired.clone());
        match action {
            BackendAction::Add => desired.add_backend(vip, key, weight.unwrap_or(defaults::WEIGHT)),
            BackendAction::Remove => desired.remove_backend(vip, &key),
            BackendAction::Drain => desired.set_backend(vip, &key, BackendState::Drain, weight),
            BackendAction::Undrain => desired.set_backend(vip, &key, BackendState::Active, weight),
            BackendAction::Weight => {
                let Some(w) = weight else {
                    return Err(ServiceError::Flag(
                        "lb backend weight needs the weight N (e.g. `lb backend weight --vip V --backend B 3`)"
                            .to_owned(),
                    ));
                };
                desired.set_weight(vip, &key, w)
            }
        }?;
        if let Some(spec) = desired.vips.get(vip) {
            let in_table = spec
                .backends
                .values()
                .filter(|b| b.state == BackendState::Active && b.weight > 0)
                .count();
            if usize::try_from(spec.table_size).is_ok_and(|m| m < in_table) {
                return Err(ServiceError::TableTooSmall {
                    table_size: spec.table_size,
                    in_table,
                });
            }
        }
        let mut next = self.overrides.clone();
        next.record(&self.file_desired, &desired, vip, &key);
        if next != self.overrides {
            self.persist(&next)?;
        }
        let file_config = self.file_config.clone();
        let mut report = match self.apply_new_down(&desired, &file_config) {
            Ok(report) => report,
            Err(e) => {
                let _ = self.persist(&self.overrides);
                return Err(e.into());
            }
        };
        self.overrides = next;
        let health = self.sync_health();
        merge(&mut report, health);
        Ok(report)
    }

    /// Records the last conntrack walk (live connections per backend).
    pub fn set_census(&mut self, census: lb_dataplane::Census) {
        self.connections.set(census);
        for line in self.end_drains(Instant::now()) {
            info!("{line}");
        }
    }

    /// Removes the backends whose timed drain has ended at `now` (the timeout passed,
    /// or the last walk found no connection); returns the log lines. A backend no longer
    /// drained (undrained, or changed by a reload) loses its pending removal.
    pub fn end_drains(&mut self, now: Instant) -> Vec<String> {
        let applied = self.controller.applied().cloned();
        self.drains.retain(|vip, key| {
            applied
                .as_ref()
                .and_then(|d| d.backend(vip, key))
                .is_some_and(|b| b.state == BackendState::Drain)
        });
        let ids: BTreeMap<(String, String), u32> = self
            .controller
            .vip_statuses()
            .into_iter()
            .flat_map(|v| {
                let vip = v.vip;
                v.backends
                    .into_iter()
                    .map(move |b| ((vip.clone(), b.address), b.id))
            })
            .collect();
        let connections = |vip: &Vip, key: &BackendKey| {
            let id = ids.get(&(vip.to_string(), key.to_string()))?;
            let c = self.connections.of(*id)?;
            // A connection whose client sent a FIN or RST has ended (its entry lingers).
            Some(c.established + c.syn_only)
        };
        let ended = self
            .drains
            .take_ended(now, self.connections.walked_at(), connections);
        let mut lines = Vec::new();
        for (vip, key, ending) in ended {
            match self.backend(BackendAction::Remove, &vip, key, None) {
                Ok(report) => {
                    lines.push(format!(
                        "drain of backend {key} of VIP {vip} ended ({ending}): removed"
                    ));
                    lines.extend(report.lines());
                }
                Err(e) => lines.push(format!(
                    "drain of backend {key} of VIP {vip} ended ({ending}); removing it failed, it stays drained: {e}"
                )),
            }
        }
        lines
    }

    /// The last conntrack walk, with the capacities beside it.
    pub fn connections(&self) -> &Latest {
        &self.connections
    }

    /// The fast path's cleaning walks.
    pub fn cleanings(&self) -> &super::cleaning::Cleanings {
        &self.cleanings
    }

    /// The fast path's cleaning walks, to record one.
    pub fn cleanings_mut(&mut self) -> &mut super::cleaning::Cleanings {
        &mut self.cleanings
    }

    /// `lb status`.
    pub fn status(&self) -> Status {
        let mut vips = self.controller.vip_statuses();
        for v in &mut vips {
            let Ok(vip) = v.vip.parse::<Vip>() else {
                continue;
            };
            for b in &mut v.backends {
                if let Ok(key) = b.address.parse::<BackendKey>()
                    && let Some(o) = self.overrides.get(&vip, &key)
                {
                    b.runtime = Some(o.describe());
                }
            }
        }
        let mut status = Status {
            interface: self.interface.clone(),
            mode: self.mode.clone(),
            config_file: self.config_file.display().to_string(),
            differs_from_file: self.differs_from_file(),
            changes: self.controller.changes(),
            table_builds: self.controller.builds_total(),
            vips,
            overrides: self.overrides.items().map(override_status).collect(),
            pin_dir: self.datapath.0.clone(),
            layout: self.datapath.1.clone(),
            migration: self.migration.clone(),
            health: crate::control::HealthSummary::default(),
            announce: crate::control::AnnounceSummary::default(),
            conntrack: None,
            cleaning: None,
            datapath: self.datapath_health.clone(),
            recent_changes: self.recent_changes.iter().cloned().collect(),
        };
        self.announce.annotate(&mut status);
        self.connections.annotate(&mut status);
        self.cleanings.annotate(&mut status);
        if let Some(sample) = self.samples.newest() {
            for v in &mut status.vips {
                v.give_ups = stats::give_ups(sample, v.id);
            }
        }
        if let Some(health) = &self.health {
            health.annotate(&mut status, &self.controller);
        }
        if let Some(monitor) = &self.nexthops {
            for b in status.vips.iter_mut().flat_map(|v| &mut v.backends) {
                b.nexthop = b.address.parse().ok().and_then(|a| monitor.status(a));
            }
            let (now, total) = monitor.counts();
            status.health.nexthop_unresolved = now;
            status.health.nexthop_unresolved_total = total;
        }
        status
    }

    /// Records whether the data plane is attached (the announcement rule's first
    /// condition).
    pub fn set_attached(&mut self, attached: bool) {
        self.announce.set_attached(attached);
    }

    /// Applies the announcement rule to the VIPs as they are now and brings the
    /// announcement table in line (the daemon calls this after every change and every
    /// second).
    pub fn sync_announcements(&mut self) {
        let serving = announce::serving(&self.controller);
        self.announce.sync(&serving);
    }

    /// The announcements (to leave them as the data plane is left at exit).
    pub fn announcer_mut(&mut self) -> &mut Announcer {
        &mut self.announce
    }

    /// Records the counters, so that `lb stats` reports rates over the last
    /// [`stats::RATE_WINDOW`] (the daemon calls this every second).
    pub fn tick(&mut self) {
        if let Ok(s) = Sample::take(&self.controller) {
            self.samples.push(s);
        }
    }

    /// `lb stats`.
    ///
    /// # Errors
    /// When the counters cannot be read.
    pub fn stats(&self) -> Result<Stats, ServiceError> {
        let now = Sample::take(&self.controller)?;
        Ok(stats::report(
            &self.controller,
            &now,
            self.samples.oldest(),
            &self.connections,
        ))
    }
}

/// Appends what `extra` did to `report` (a change and the health change it caused).
fn merge(report: &mut ApplyReport, extra: ApplyReport) {
    report.changes.extend(extra.changes);
    report.warnings.extend(extra.warnings);
    report.policy_changes.extend(extra.policy_changes);
    report.awaiting_probe.extend(extra.awaiting_probe);
    report.swaps_ms.extend(extra.swaps_ms);
    report.operations += extra.operations;
}

/// Applies one batch from the event loop; `log` receives the change's report.
pub(super) fn apply_batch(
    service: &std::sync::Mutex<Service<lb_dataplane::KernelDataplane>>,
    batch: &Batch<Vip>,
    log: &mut dyn FnMut(&ApplyReport),
) {
    let mut service = service
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match service.apply_health(batch) {
        Ok(report) => log(&report),
        Err(e) => {
            tracing::error!("health: applying the batch failed, the running state is kept: {e}");
        }
    }
}

mod diff;
#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod tests;
