//! One backend's health: the state machine that turns probe results into healthy /
//! unhealthy with hysteresis, flap damping and the facts `lb status` shows.
//!
//! Rules:
//! - hysteresis: a healthy backend becomes unhealthy after `fall` consecutive failed
//!   probes, an unhealthy one healthy after `rise` consecutive successes (HAProxy's
//!   `rise`/`fall`); a single result never flips the state unless the threshold is 1;
//! - start: a backend is healthy until it has failed `fall` times
//!   ([`BackendHealth::assume_healthy`]), so a daemon restart never empties a VIP while
//!   its first probes run; it is "assumed" until its first successful probe;
//! - a new backend of a running daemon with `initial = "down"`
//!   ([`BackendHealth::start_down`]) is unhealthy until its first successful probe,
//!   which alone makes it healthy (HAProxy's `init-state down`); from then on `rise`
//!   and `fall` apply;
//! - damping ([`super::damping`]): a change past the VIP's limit holds the backend
//!   unhealthy for the hold time. A change to unhealthy still happens (and starts the
//!   hold); a recovery during a hold is suppressed, reported once as [`Event::Held`].
//!
//! Pure: the caller passes the time of every event, so tests run on a fake clock.

use std::time::{Duration, Instant};

use super::{
    damping::{Damping, FlapHistory, Verdict},
    outcome::{Failure, ProbeResult},
};

/// Consecutive results needed to change state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Successes that make an unhealthy backend healthy (at least 1).
    pub rise: u32,
    /// Failures that make a healthy backend unhealthy (at least 1).
    pub fall: u32,
}

impl Thresholds {
    /// Default `rise`: 2 (HAProxy's default).
    pub const DEFAULT_RISE: u32 = 2;
    /// Default `fall`: 3 (HAProxy's default).
    pub const DEFAULT_FALL: u32 = 3;
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            rise: Self::DEFAULT_RISE,
            fall: Self::DEFAULT_FALL,
        }
    }
}

/// Why a backend changed state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// `consecutive` probes failed; `failure` is the last one's reason.
    Failed {
        /// The last failure.
        failure: Failure,
        /// Consecutive failures (at least `fall`).
        consecutive: u32,
    },
    /// `consecutive` probes succeeded.
    Recovered {
        /// Consecutive successes (at least `rise`).
        consecutive: u32,
    },
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Failed {
                failure,
                consecutive,
            } => write!(f, "{failure} ({consecutive} consecutive failed probes)"),
            Reason::Recovered { consecutive } => {
                write!(f, "{consecutive} consecutive successful probes")
            }
        }
    }
}

/// A change of a backend's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The new state.
    pub healthy: bool,
    /// When it happened.
    pub at: Instant,
    /// Why.
    pub reason: Reason,
    /// Set when this change started a flap-damping hold: the backend stays unhealthy
    /// until then, whatever its probes say.
    pub held_until: Option<Instant>,
}

/// What one probe result changed, if anything worth reporting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The backend changed state.
    Transition(Transition),
    /// The backend passed `rise` probes but flaps too much: it stays unhealthy until
    /// `until` (reported once per hold).
    Held {
        /// End of the hold.
        until: Instant,
        /// Changes counted in the damping window, the suppressed one included.
        changes: u32,
    },
}

/// The health of one backend.
#[derive(Clone, Debug)]
pub struct BackendHealth {
    healthy: bool,
    /// Healthy by the start rule, no probe has succeeded yet.
    assumed: bool,
    /// Started down ([`Self::start_down`]): the first successful probe makes it healthy.
    first_success_lifts: bool,
    since: Instant,
    successes: u32,
    failures: u32,
    last_probe: Option<Instant>,
    last_latency: Option<Duration>,
    last_error: Option<(Failure, Instant)>,
    last_reason: Option<Reason>,
    probes: u64,
    failed_probes: u64,
    went_down: u64,
    came_up: u64,
    flaps: FlapHistory,
}

impl BackendHealth {
    /// A backend that counts as healthy until it has failed `fall` probes (at daemon
    /// start, and for a backend added at run time).
    pub fn assume_healthy(now: Instant) -> Self {
        Self::new(now, true)
    }

    /// A backend that starts unhealthy and needs `rise` successes.
    pub fn assume_unhealthy(now: Instant) -> Self {
        Self::new(now, false)
    }

    /// A new backend that starts unhealthy and becomes healthy with its first
    /// successful probe (`initial = "down"`; HAProxy's `init-state down`, keepalived's
    /// alpha mode).
    pub fn start_down(now: Instant) -> Self {
        Self {
            first_success_lifts: true,
            ..Self::new(now, false)
        }
    }

    fn new(now: Instant, healthy: bool) -> Self {
        Self {
            healthy,
            assumed: true,
            first_success_lifts: false,
            since: now,
            successes: 0,
            failures: 0,
            last_probe: None,
            last_latency: None,
            last_error: None,
            last_reason: None,
            probes: 0,
            failed_probes: 0,
            went_down: 0,
            came_up: 0,
            flaps: FlapHistory::default(),
        }
    }

    /// Whether the backend counts as healthy now.
    pub fn is_healthy(&self) -> bool {
        self.healthy
    }

    /// Records the result of a probe that ended at `now`.
    pub fn record(
        &mut self,
        now: Instant,
        result: &ProbeResult,
        thresholds: Thresholds,
        damping: &Damping,
    ) -> Option<Event> {
        self.probes += 1;
        self.last_probe = Some(now);
        match result {
            Ok(latency) => {
                self.last_latency = Some(*latency);
                self.assumed = false;
                self.failures = 0;
                self.successes = self.successes.saturating_add(1);
                let rise = if std::mem::take(&mut self.first_success_lifts) {
                    1
                } else {
                    thresholds.rise.max(1)
                };
                if self.healthy || self.successes < rise {
                    return None;
                }
                if self.flaps.held(now).is_some() {
                    return None;
                }
                match self.flaps.on_transition(now, damping) {
                    Verdict::Allow => Some(Event::Transition(self.change(
                        now,
                        true,
                        Reason::Recovered {
                            consecutive: self.successes,
                        },
                        None,
                    ))),
                    Verdict::Hold { until, changes } => Some(Event::Held { until, changes }),
                }
            }
            Err(failure) => {
                self.failed_probes += 1;
                self.last_error = Some((failure.clone(), now));
                self.successes = 0;
                self.failures = self.failures.saturating_add(1);
                if !self.healthy || self.failures < thresholds.fall.max(1) {
                    return None;
                }
                let held_until = match self.flaps.on_transition(now, damping) {
                    Verdict::Allow => None,
                    Verdict::Hold { until, .. } => Some(until),
                };
                Some(Event::Transition(self.change(
                    now,
                    false,
                    Reason::Failed {
                        failure: failure.clone(),
                        consecutive: self.failures,
                    },
                    held_until,
                )))
            }
        }
    }

    fn change(
        &mut self,
        now: Instant,
        healthy: bool,
        reason: Reason,
        held_until: Option<Instant>,
    ) -> Transition {
        self.healthy = healthy;
        self.assumed = false;
        self.since = now;
        if healthy {
            self.came_up += 1;
        } else {
            self.went_down += 1;
        }
        self.last_reason = Some(reason.clone());
        Transition {
            healthy,
            at: now,
            reason,
            held_until,
        }
    }

    /// What `lb status` shows, as seen at `now`.
    pub fn status(&self, now: Instant) -> HealthStatus {
        let ago = |t: Instant| now.saturating_duration_since(t);
        HealthStatus {
            healthy: self.healthy,
            assumed: self.assumed,
            held_for: self.flaps.held(now).map(|until| until - now),
            since: ago(self.since),
            last_reason: self.last_reason.as_ref().map(ToString::to_string),
            last_error: self.last_error.as_ref().map(|(f, _)| f.clone()),
            last_error_ago: self.last_error.as_ref().map(|&(_, t)| ago(t)),
            last_probe_ago: self.last_probe.map(ago),
            last_latency: self.last_latency,
            consecutive_successes: self.successes,
            consecutive_failures: self.failures,
            probes: self.probes,
            failed_probes: self.failed_probes,
            went_down: self.went_down,
            came_up: self.came_up,
            holds: self.flaps.holds(),
        }
    }
}

/// A backend's health as `lb status` shows it. Durations are ages at the time of the
/// snapshot; in JSON they are milliseconds (`_ms`), latency microseconds (`_us`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HealthStatus {
    /// Counts as healthy (gets table slots, subject to drain and the VIP's policy).
    pub healthy: bool,
    /// Healthy by the start rule: no probe has succeeded yet.
    pub assumed: bool,
    /// Remaining flap-damping hold, while held unhealthy.
    #[serde(rename = "held_ms", serialize_with = "ms_opt")]
    pub held_for: Option<Duration>,
    /// Age of the current state.
    #[serde(rename = "since_ms", serialize_with = "ms")]
    pub since: Duration,
    /// Why the last change happened.
    pub last_reason: Option<String>,
    /// The last failed probe's reason.
    pub last_error: Option<Failure>,
    /// Age of the last failed probe.
    #[serde(rename = "last_error_ago_ms", serialize_with = "ms_opt")]
    pub last_error_ago: Option<Duration>,
    /// Age of the last probe.
    #[serde(rename = "last_probe_ago_ms", serialize_with = "ms_opt")]
    pub last_probe_ago: Option<Duration>,
    /// Latency of the last successful probe.
    #[serde(rename = "last_latency_us", serialize_with = "us_opt")]
    pub last_latency: Option<Duration>,
    /// Current run of successes.
    pub consecutive_successes: u32,
    /// Current run of failures.
    pub consecutive_failures: u32,
    /// Probes run.
    pub probes: u64,
    /// Probes failed.
    pub failed_probes: u64,
    /// Changes to unhealthy.
    pub went_down: u64,
    /// Changes to healthy.
    pub came_up: u64,
    /// Flap-damping holds.
    pub holds: u64,
}

impl HealthStatus {
    /// One word or two for a table column: `healthy`, `healthy (assumed)`, `unhealthy`,
    /// `unhealthy (held)`.
    pub fn label(&self) -> &'static str {
        match (self.healthy, self.assumed, self.held_for.is_some()) {
            (true, true, _) => "healthy (assumed)",
            (true, false, _) => "healthy",
            (false, _, true) => "unhealthy (held)",
            (false, _, false) => "unhealthy",
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(millis(*d))
}

fn ms_opt<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&millis(*d)),
        None => s.serialize_none(),
    }
}

fn us_opt<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests;
