//! [`Service`]: the daemon's logic without the event loop — applying the file,
//! reloads, runtime changes from the control socket, status, stats and flow lookups.
//! Generic over the data plane, so it is unit-tested against the in-memory fake.

use std::{net::SocketAddr, path::PathBuf, time::Instant};

use lb_common::stats::{BackendStats, GlobalStats, Reason, VipStats};
use serde::{Deserialize, Serialize};

use crate::{
    config::{BackendState, Config, Loaded, Vip},
    control::{BackendAction, Request, Response},
    controller::{ApplyReport, Controller, Desired, report::Status},
    dataplane::Dataplane,
    maglev::BackendKey,
};

/// Settings that only take effect at start; a reload that changes them is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StartOnly {
    interface: String,
    xdp_mode: crate::config::XdpMode,
    control_socket: PathBuf,
    ct_capacity: u32,
    ct_syn_capacity: u32,
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
            hash_seed: c.hash_seed,
        }
    }

    /// Names of the settings that differ.
    fn changed(&self, other: &Self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.interface != other.interface {
            v.push("interface");
        }
        if self.xdp_mode != other.xdp_mode {
            v.push("xdp_mode");
        }
        if self.control_socket != other.control_socket {
            v.push("control_socket");
        }
        if self.ct_capacity != other.ct_capacity {
            v.push("conntrack.capacity");
        }
        if self.ct_syn_capacity != other.ct_syn_capacity {
            v.push("conntrack.syn_capacity");
        }
        if self.hash_seed != other.hash_seed {
            v.push("hash_seed");
        }
        v
    }
}

/// Counters at one instant.
#[derive(Clone)]
struct Sample {
    at: Instant,
    global: GlobalStats,
    vips: Vec<(u32, VipStats)>,
    backends: Vec<(u32, BackendStats)>,
}

/// One named counter with its rate.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Counter {
    /// Name.
    pub name: String,
    /// Value since the program was loaded.
    pub value: u64,
    /// Per second over the last sampling interval.
    pub rate: f64,
}

/// Per-VIP counters in `lb stats`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VipCounters {
    /// `ADDR:PORT/PROTO`.
    pub vip: String,
    /// Counters (packets, bytes, new_flows, ct_hits, ct_misses_non_syn,
    /// ct_stale_repicked, ct_udp_expired, drops, ct_syn_only_evicted).
    pub counters: Vec<Counter>,
    /// Per-backend counters.
    pub backends: Vec<BackendCounters>,
}

/// Per-backend counters in `lb stats`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BackendCounters {
    /// Address.
    pub backend: String,
    /// Packets forwarded.
    pub packets: Counter,
    /// Bytes forwarded.
    pub bytes: Counter,
}

/// `lb stats`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stats {
    /// Seconds the rates are computed over.
    pub interval_secs: f64,
    /// Global packets per verdict reason (non-zero ones).
    pub reasons: Vec<Counter>,
    /// Per VIP.
    pub vips: Vec<VipCounters>,
}

impl Stats {
    /// Packets forwarded to `backend` (canonical address text) of `vip`
    /// (`ADDR:PORT/PROTO`); 0 when either is not listed.
    pub fn backend_packets(&self, vip: &str, backend: &str) -> u64 {
        self.vips
            .iter()
            .find(|v| v.vip == vip)
            .and_then(|v| v.backends.iter().find(|b| b.backend == backend))
            .map_or(0, |b| b.packets.value)
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
    ) -> Result<(Self, ApplyReport), String> {
        let desired = Desired::from_config(&loaded.config, if_mac);
        let mut controller = Controller::new(dp);
        let report = controller.apply(&desired).map_err(|e| e.to_string())?;
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
    pub fn reload(&mut self, loaded: &Loaded) -> Result<ApplyReport, String> {
        let changed = self.start_only.changed(&StartOnly::of(&loaded.config));
        if !changed.is_empty() {
            return Err(format!(
                "{} changed: these settings take effect only at start (restart lb); nothing applied",
                changed.join(", ")
            ));
        }
        let desired = Desired::from_config(&loaded.config, self.if_mac);
        let report = self.controller.apply(&desired).map_err(|e| e.to_string())?;
        self.file_desired = desired;
        Ok(report)
    }

    /// Whether runtime changes make the running state differ from the file.
    pub fn differs_from_file(&self) -> bool {
        self.controller.applied() != Some(&self.file_desired)
    }

    /// Answers one control request; `log` receives the lines of any change applied.
    pub fn handle(&mut self, request: &Request, log: &mut dyn FnMut(&ApplyReport)) -> Response {
        match request {
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
            } => match self.backend(*action, vip, backend, *weight) {
                Ok(report) => {
                    log(&report);
                    Response::ok(&report.lines)
                }
                Err(e) => Response::error(e),
            },
            Request::Flow { vip, client } => {
                let result = vip.parse::<Vip>().and_then(|v| {
                    let c: SocketAddr = client
                        .parse()
                        .map_err(|_| format!("--client: expected ADDR:PORT, got {client:?}"))?;
                    self.controller.flow(&v, c).map_err(|e| e.to_string())
                });
                match result {
                    Ok(r) => Response::ok(r),
                    Err(e) => Response::error(e),
                }
            }
        }
    }

    fn backend(
        &mut self,
        action: BackendAction,
        vip: &str,
        backend: &str,
        weight: Option<u32>,
    ) -> Result<ApplyReport, String> {
        let vip: Vip = vip.parse().map_err(|e| format!("--vip: {e}"))?;
        let key: BackendKey = backend
            .parse()
            .map_err(|e: crate::maglev::MaglevError| format!("--backend: {e}"))?;
        let mut desired = self
            .controller
            .applied()
            .cloned()
            .unwrap_or_else(|| self.file_desired.clone());
        match action {
            BackendAction::Add => {
                desired.add_backend(&vip, key, weight.unwrap_or(crate::defaults::WEIGHT))
            }
            BackendAction::Remove => desired.remove_backend(&vip, &key),
            BackendAction::Drain => desired.set_backend(&vip, &key, BackendState::Drain, weight),
            BackendAction::Undrain => desired.set_backend(&vip, &key, BackendState::Active, weight),
        }
        .map_err(|e| e.to_string())?;
        if let Some(spec) = desired.vips.get(&vip) {
            let in_table = spec
                .backends
                .values()
                .filter(|b| b.state == BackendState::Active && b.weight > 0)
                .count();
            if usize::try_from(spec.table_size).is_ok_and(|m| m < in_table) {
                return Err(format!(
                    "table_size {} is smaller than backend count {in_table}",
                    spec.table_size
                ));
            }
        }
        self.controller.apply(&desired).map_err(|e| e.to_string())
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

    fn sample(&self) -> Result<Sample, String> {
        let dp = self.controller.dataplane();
        let err = |e: crate::dataplane::DataplaneError| e.to_string();
        let mut vips = Vec::new();
        let mut backends = Vec::new();
        for applied in self.controller.vips().values() {
            vips.push((applied.id, dp.vip_stats(applied.id).map_err(err)?));
            for &id in applied.backend_ids.values() {
                backends.push((id, dp.backend_stats(id).map_err(err)?));
            }
        }
        Ok(Sample {
            at: Instant::now(),
            global: dp.global_stats().map_err(err)?,
            vips,
            backends,
        })
    }

    /// Records the counters, so that the next `lb stats` reports rates over the time
    /// since (the daemon calls this every second).
    pub fn tick(&mut self) {
        if let Ok(s) = self.sample() {
            self.previous = Some(s);
        }
    }

    /// `lb stats`.
    ///
    /// # Errors
    /// When the counters cannot be read.
    pub fn stats(&self) -> Result<Stats, String> {
        let now = self.sample()?;
        let prev = self.previous.as_ref();
        let secs = prev.map_or(0.0, |p| now.at.duration_since(p.at).as_secs_f64());
        let rate = |value: u64, old: Option<u64>| match old {
            #[expect(clippy::cast_precision_loss, reason = "a rate for display")]
            Some(old) if secs > 0.0 => value.saturating_sub(old) as f64 / secs,
            _ => 0.0,
        };
        let reasons = Reason::ALL
            .iter()
            .filter(|r| now.global.get(**r) > 0)
            .map(|r| Counter {
                name: r.name().to_owned(),
                value: now.global.get(*r),
                rate: rate(now.global.get(*r), prev.map(|p| p.global.get(*r))),
            })
            .collect();
        let find_vip = |s: &Sample, id: u32| s.vips.iter().find(|(i, _)| *i == id).map(|(_, v)| *v);
        let find_backend =
            |s: &Sample, id: u32| s.backends.iter().find(|(i, _)| *i == id).map(|(_, v)| *v);
        let vips = self
            .controller
            .vips()
            .iter()
            .map(|(vip, applied)| {
                let cur = find_vip(&now, applied.id).unwrap_or_default();
                let old = prev.and_then(|p| find_vip(p, applied.id));
                let fields = |v: &VipStats| {
                    [
                        ("packets", v.packets),
                        ("bytes", v.bytes),
                        ("new_flows", v.new_flows),
                        ("ct_hits", v.ct_hits),
                        ("ct_misses_non_syn", v.ct_misses_non_syn),
                        ("ct_stale_repicked", v.ct_stale_repicked),
                        ("ct_udp_expired", v.ct_udp_expired),
                        ("drops", v.drops),
                        ("ct_syn_only_evicted", v.ct_syn_only_evicted),
                    ]
                };
                let old_fields = old.as_ref().map(fields);
                let counters = fields(&cur)
                    .iter()
                    .enumerate()
                    .map(|(i, (name, value))| Counter {
                        name: (*name).to_owned(),
                        value: *value,
                        rate: rate(*value, old_fields.map(|f| f[i].1)),
                    })
                    .collect();
                let backends = applied
                    .backend_ids
                    .iter()
                    .map(|(key, &id)| {
                        let cur = find_backend(&now, id).unwrap_or_default();
                        let old = prev.and_then(|p| find_backend(p, id));
                        BackendCounters {
                            backend: key.to_string(),
                            packets: Counter {
                                name: "packets".to_owned(),
                                value: cur.packets,
                                rate: rate(cur.packets, old.map(|o| o.packets)),
                            },
                            bytes: Counter {
                                name: "bytes".to_owned(),
                                value: cur.bytes,
                                rate: rate(cur.bytes, old.map(|o| o.bytes)),
                            },
                        }
                    })
                    .collect();
                VipCounters {
                    vip: vip.to_string(),
                    counters,
                    backends,
                }
            })
            .collect();
        Ok(Stats {
            interval_secs: secs,
            reasons,
            vips,
        })
    }
}

#[cfg(test)]
mod tests;
