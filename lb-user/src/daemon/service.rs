//! [`Service`]: the daemon's logic without the event loop — applying the file,
//! reloads, runtime changes from the control socket, status, stats and flow lookups.
//! Generic over the data plane, so it is unit-tested against the in-memory fake.

use std::path::PathBuf;

use super::stats::{self, Sample};
use crate::{
    config::{BackendState, Config, Loaded, Vip, XdpMode},
    control::{BackendAction, Request, Response, Stats, Status},
    controller::{ApplyError, ApplyReport, Controller, Desired, EditError, FlowError},
    dataplane::{Dataplane, DataplaneError},
    defaults,
    maglev::BackendKey,
};

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
}

/// Settings that only take effect at start; a reload that changes them is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StartOnly {
    interface: String,
    xdp_mode: XdpMode,
    control_socket: PathBuf,
    ct_capacity: u32,
    ct_syn_capacity: u32,
    frag_capacity: u32,
    /// The flow hash places every flow in its table slot and SYN cache slot: changing
    /// it while flows run would split handshakes in flight and let an old conntrack
    /// entry outvote a reused 4-tuple's new SYN.
    hash_seed: u32,
}

impl StartOnly {
    fn of(c: &Config) -> Self {
        Self {
            interface: c.interface.clone(),
            xdp_mode: c.xdp_mode,
            control_socket: c.control_socket.clone(),
            ct_capacity: c.ct_capacity,
            ct_syn_capacity: c.ct_syn_capacity,
            frag_capacity: c.frag_capacity,
            hash_seed: c.hash_seed,
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
            ("conntrack.capacity", self.ct_capacity != other.ct_capacity),
            (
                "conntrack.syn_capacity",
                self.ct_syn_capacity != other.ct_syn_capacity,
            ),
            (
                "conntrack.fragment_capacity",
                self.frag_capacity != other.frag_capacity,
            ),
            ("hash_seed", self.hash_seed != other.hash_seed),
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
    file_desired: Desired,
    start_only: StartOnly,
    if_mac: [u8; 6],
    interface: String,
    mode: String,
    previous: Option<Sample>,
}

impl<D: Dataplane> Service<D> {
    /// Applies `loaded` (read from `config_file`) to a fresh controller of `dp`, which
    /// is attached to `interface` in `mode`; `if_mac` is the interface's MAC.
    ///
    /// # Errors
    /// When the first apply fails (nothing is left in the data plane's maps that a
    /// packet could use: the VIPs are written last).
    pub fn start(
        dp: D,
        config_file: PathBuf,
        loaded: &Loaded,
        if_mac: [u8; 6],
        mode: String,
    ) -> Result<(Self, ApplyReport), ApplyError> {
        let desired = Desired::from_config(&loaded.config, if_mac);
        let mut controller = Controller::new(dp);
        let report = controller.apply(&desired)?;
        Ok((
            Self {
                controller,
                config_file,
                file_desired: desired,
                start_only: StartOnly::of(&loaded.config),
                if_mac,
                interface: loaded.config.interface.clone(),
                mode,
                previous: None,
            },
            report,
        ))
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

    /// Applies a reloaded file, replacing runtime changes.
    ///
    /// # Errors
    /// Settings that need a restart changed, or the change failed (the running state is
    /// kept either way).
    pub fn reload(&mut self, loaded: &Loaded) -> Result<ApplyReport, ServiceError> {
        let changed = self.start_only.changed(&StartOnly::of(&loaded.config));
        if !changed.is_empty() {
            return Err(ServiceError::StartOnly(changed));
        }
        let desired = Desired::from_config(&loaded.config, self.if_mac);
        let report = self.controller.apply(&desired)?;
        self.file_desired = desired;
        Ok(report)
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
            } => match self.backend(action, &vip, backend, weight) {
                Ok(report) => {
                    log(&report);
                    Response::ok(report.lines())
                }
                Err(e) => Response::error(e),
            },
            Request::Flow { vip, client } => match self.controller.flow(&vip, client) {
                Ok(r) => Response::ok(r),
                Err(e) => Response::error(e),
            },
        }
    }

    /// `lb backend`: applies the change to the running state.
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
        Ok(self.controller.apply(&desired)?)
    }

    /// `lb status`.
    pub fn status(&self) -> Status {
        Status {
            interface: self.interface.clone(),
            mode: self.mode.clone(),
            config_file: self.config_file.display().to_string(),
            differs_from_file: self.differs_from_file(),
            changes: self.controller.changes(),
            table_builds: self.controller.builds_total(),
            vips: self.controller.vip_statuses(),
        }
    }

    /// Records the counters, so that the next `lb stats` reports rates over the time
    /// since (the daemon calls this every second).
    pub fn tick(&mut self) {
        if let Ok(s) = Sample::take(&self.controller) {
            self.previous = Some(s);
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
            self.previous.as_ref(),
        ))
    }
}

#[cfg(test)]
mod tests;
