//! The datapath without its daemon: `lb status`, `lb stats`, `lb flow` and `lb conn
//! list` answered read-only from the pinned maps when no daemon answers on the control
//! socket (stopped cleanly with the datapath left in place, or killed).
//!
//! - Locating: the pin directory of this network namespace under `pin_dir`; the
//!   interface given, else the one whose owner note names the control socket asked
//!   for, else the only one pinned.
//! - Reading: [`KernelDataplane::open_read_only`] reopens every map from its pin (no
//!   program loaded, no lock taken, nothing written) and [`Controller::adopt`] recovers
//!   the applied state from the controller's record, as a restarting daemon would; the
//!   answers are then built by the daemon's own code.
//! - Saying so: every answer carries a [`DaemonAbsent`]: "daemon not running; datapath
//!   forwarding, generation N, state as of T", where N is the datapath's table epoch
//!   (tables installed since it was created) and T the time the last daemon stored
//!   its record (the last change it applied).
//!
//! What needs the daemon is absent or empty: health (no probes run), rates (one
//! sample), runtime changes, announcements, recent changes.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use serde::{Deserialize, Serialize};

use super::{
    connections::Latest,
    conns::{ConnFilter, Names, Query, answer},
    stats::{Sample, report},
};
use crate::{
    config::Vip,
    control::{ClientPrefix, ConnList, ConnState, FlowReport, Stats, Status},
    controller::{Controller, FlowError},
    defaults,
};
use lb_dataplane::{
    DataplaneError, KernelDataplane, WalkSettings,
    pinned::{PinDir, PinError},
};
use lb_maglev::BackendKey;

/// What an answer from the pins says about the daemon (`daemon` in the JSON output).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonAbsent {
    /// Always false: no daemon answered.
    pub running: bool,
    /// The one line the text output starts with.
    pub message: String,
    /// The datapath's table epoch: tables installed since it was created.
    pub generation: u64,
    /// When the last daemon stored the applied state (RFC 3339, UTC); `None` when the
    /// pins hold no record.
    pub state_as_of: Option<String>,
    /// Age of that state (seconds).
    pub state_age_secs: Option<u64>,
    /// The pin directory read.
    pub pin_dir: String,
    /// Its interface.
    pub interface: String,
    /// The pid of the daemon that last held the datapath (0 when unknown).
    pub last_pid: u32,
}

/// Why the pins could not answer.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// Nothing is pinned for this network namespace (or not for the interface asked).
    #[error("no pinned datapath under {dir}{}", .interface.as_ref().map_or(String::new(), |i| format!(" for interface {i}")))]
    NoPins {
        /// Where it was looked for.
        dir: String,
        /// The interface asked for.
        interface: Option<String>,
    },
    /// Several interfaces are pinned and none is the socket's.
    #[error("several datapaths are pinned under {dir} ({}): name one with --interface", .interfaces.join(", "))]
    Ambiguous {
        /// Where.
        dir: String,
        /// The interfaces pinned.
        interfaces: Vec<String>,
    },
    /// A daemon holds the datapath's lock but does not answer on the socket.
    #[error(
        "a daemon holds the datapath of {interface} (pid {pid}, control socket {socket}) but does not answer"
    )]
    Held {
        /// The interface.
        interface: String,
        /// Its pid.
        pid: u32,
        /// Its socket.
        socket: String,
    },
    /// The pin directory cannot be used.
    #[error(transparent)]
    Pin(#[from] PinError),
    /// The maps cannot be read.
    #[error("reading the pinned datapath: {0}")]
    Dataplane(#[from] DataplaneError),
}

/// A pinned datapath opened for reading.
pub struct Offline {
    controller: Controller<KernelDataplane>,
    /// What every answer says about the daemon.
    pub note: DaemonAbsent,
}

/// The interfaces pinned under `pin_dir` in this network namespace.
fn pinned_interfaces(base: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(base)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().join("meta").exists())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Opens the datapath pinned under `pin_dir` for reading (see the module
/// documentation): `interface`, else the one last held by the daemon of `socket`, else
/// the only one.
///
/// # Errors
/// See [`OfflineError`].
pub fn open(
    socket: &Path,
    pin_dir: &Path,
    interface: Option<&str>,
) -> Result<Offline, OfflineError> {
    // The namespace's directory: that of any interface, without the interface.
    let probe = PinDir::locate(pin_dir, "-", false)?;
    let base = probe
        .path()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let shown = probe
        .shown()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let no_pins = || OfflineError::NoPins {
        dir: shown.display().to_string(),
        interface: interface.map(ToOwned::to_owned),
    };
    let names = pinned_interfaces(&base);
    let chosen = match interface {
        Some(i) => names
            .iter()
            .find(|n| *n == i)
            .cloned()
            .ok_or_else(no_pins)?,
        None => choose(&names, pin_dir, socket, &shown)?.ok_or_else(no_pins)?,
    };
    let dir = PinDir::locate(pin_dir, &chosen, false)?;
    let owner = dir.owner_note().unwrap_or_default();
    if dir.held() {
        return Err(OfflineError::Held {
            interface: chosen,
            pid: owner.pid,
            socket: owner.socket,
        });
    }
    let as_of = dir.record_time();
    let pin_shown = dir.shown().display().to_string();
    let dp = KernelDataplane::open_read_only(dir)?;
    let generation = u64::from(dp.table_epoch());
    let (controller, _) = Controller::adopt(dp)?;
    let note = note(generation, as_of, pin_shown, chosen, owner.pid);
    Ok(Offline { controller, note })
}

/// The interface among `names` whose owner note names `socket`, else the only one.
fn choose(
    names: &[String],
    pin_dir: &Path,
    socket: &Path,
    shown: &Path,
) -> Result<Option<String>, OfflineError> {
    let wanted = socket.to_string_lossy();
    for name in names {
        let dir = PinDir::locate(pin_dir, name, false)?;
        if dir.owner_note().is_some_and(|o| o.socket == wanted) {
            return Ok(Some(name.clone()));
        }
    }
    match names {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        _ => Err(OfflineError::Ambiguous {
            dir: shown.display().to_string(),
            interfaces: names.to_vec(),
        }),
    }
}

/// The note of a datapath of table epoch `generation` whose record was stored at
/// `as_of`.
fn note(
    generation: u64,
    as_of: Option<SystemTime>,
    pin_dir: String,
    interface: String,
    last_pid: u32,
) -> DaemonAbsent {
    let age = as_of.and_then(|t| SystemTime::now().duration_since(t).ok());
    let stamp = as_of.map(rfc3339);
    let when = match (&stamp, age) {
        (Some(s), Some(a)) => format!("{s} ({} s ago)", a.as_secs()),
        (Some(s), None) => s.clone(),
        _ => "unknown (no record pinned)".to_owned(),
    };
    DaemonAbsent {
        running: false,
        message: format!(
            "daemon not running; datapath forwarding, generation {generation}, state as of {when} \
             (read from the pins at {pin_dir}; no health checks run)"
        ),
        generation,
        state_as_of: stamp,
        state_age_secs: age.map(|a| a.as_secs()),
        pin_dir,
        interface,
        last_pid,
    }
}

/// `t` as RFC 3339 in UTC to the second, e.g. `2026-12-06T02:40:00Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(i64::try_from(days).unwrap_or(0));
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of day `z` since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, "chrono-Compatible Low-Level Date Algorithms").
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

impl Offline {
    /// `lb status` from the pins.
    pub fn status(&self) -> Status {
        let c = &self.controller;
        Status {
            interface: self.note.interface.clone(),
            mode: c
                .dataplane()
                .attached_mode()
                .map_or_else(|| "?".to_owned(), |m| m.to_string()),
            config_file: String::new(),
            differs_from_file: false,
            changes: 0,
            table_builds: 0,
            vips: c.vip_statuses(),
            health: crate::control::HealthSummary::default(),
            announce: crate::control::AnnounceSummary::default(),
            overrides: Vec::new(),
            pin_dir: Some(self.note.pin_dir.clone()),
            layout: None,
            migration: None,
            conntrack: None,
            cleaning: None,
            datapath: crate::control::DatapathHealth {
                degraded: true,
                problems: vec![self.note.message.clone()],
                ..crate::control::DatapathHealth::default()
            },
            recent_changes: Vec::new(),
        }
    }

    /// `lb stats` from the pins (counters since the datapath was created; no rates).
    ///
    /// # Errors
    /// A counter cannot be read.
    pub fn stats(&self) -> Result<Stats, DataplaneError> {
        let now = Sample::take(&self.controller)?;
        let idle = Duration::from_secs(u64::from(defaults::IDLE_SECS));
        Ok(report(
            &self.controller,
            &now,
            None,
            &Latest::new(0, 0, idle),
        ))
    }

    /// `lb flow` from the pins.
    ///
    /// # Errors
    /// As [`Controller::flow`].
    pub fn flow(&self, vip: &Vip, client: SocketAddr) -> Result<FlowReport, FlowError> {
        self.controller.flow(vip, client)
    }

    /// `lb conn list` from the pins, filtered as by the daemon: one walk of the maps
    /// on this thread.
    ///
    /// # Errors
    /// An unknown backend, or a failed walk.
    pub fn conns(
        &self,
        vip: Option<Vip>,
        backend: Option<BackendKey>,
        client: Option<ClientPrefix>,
        state: Option<ConnState>,
        limit: usize,
    ) -> Result<ConnList, String> {
        let query = Query {
            vip,
            backend,
            client,
            state,
            limit,
        };
        let vips = self.controller.vips();
        let filter = ConnFilter::resolve(&query, vips)?;
        let settings = WalkSettings {
            udp_timeout: Duration::from_secs(u64::from(defaults::UDP_TIMEOUT_SECS)),
            idle: Duration::from_secs(u64::from(defaults::IDLE_SECS)),
            syn_window: WalkSettings::SYN_WINDOW,
        };
        let walker = self
            .controller
            .dataplane()
            .conntrack_lister()
            .map_err(|e| format!("reading conntrack: {e}"))?;
        let listing = walker
            .list(&settings, true, |r| filter.keeps(r), query.limit)
            .map_err(|e| format!("reading conntrack: {e}"))?;
        Ok(answer(&listing, &Names::of(vips), query.limit))
    }
}

/// The pin directory `lb run` uses by default, for the reading verbs' `--pin-dir`.
pub fn default_pin_dir() -> PathBuf {
    PathBuf::from(defaults::PIN_DIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_796_515_200 + 2 * 3600 + 40 * 60 + 5);
        assert_eq!(rfc3339(t), "2026-12-06T02:40:05Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn the_note_says_the_daemon_is_not_running_with_generation_and_time() {
        let n = note(
            7,
            Some(SystemTime::now() - Duration::from_secs(90)),
            "/sys/fs/bpf/lb/netns-1/eth0".into(),
            "eth0".into(),
            42,
        );
        assert!(!n.running);
        assert!(
            n.message.starts_with(
                "daemon not running; datapath forwarding, generation 7, state as of 20"
            ),
            "{}",
            n.message
        );
        assert!(
            n.message.contains("(90 s ago)") || n.message.contains("(91 s ago)"),
            "{}",
            n.message
        );
        assert!(n.state_age_secs.is_some_and(|a| (90..=91).contains(&a)));
        let none = note(0, None, String::new(), "eth0".into(), 0);
        assert!(
            none.message
                .contains("state as of unknown (no record pinned)")
        );
    }
}
