//! Timed drains (`lb backend drain --timeout`): the backends to remove once their last
//! connection ends or their timeout passes, whichever is first.
//!
//! The daemon checks them after each conntrack walk, so a removal happens at the first
//! walk after its cause (`metrics.connections_interval_ms`). A drain ends on "no
//! connection" only from a walk taken after it began. Pending removals live in the
//! daemon's memory: after a restart the backend stays drained.

use std::{
    collections::BTreeMap,
    fmt,
    time::{Duration, Instant},
};

use crate::config::Vip;
use lb_maglev::BackendKey;

/// Why a timed drain ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// A walk found no connection to the backend.
    LastConnection,
    /// The timeout passed.
    Timeout(Duration),
}

impl fmt::Display for Ending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LastConnection => f.write_str("its last connection ended"),
            Self::Timeout(t) => write!(f, "its {} timeout passed", duration_text(*t)),
        }
    }
}

/// A duration in the words of `--timeout`: `90s`, `5m`, `2h`.
pub fn duration_text(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s >= 60 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// One pending removal.
#[derive(Clone, Copy, Debug)]
struct Pending {
    since: Instant,
    timeout: Duration,
}

/// The pending removals, by (VIP, backend).
#[derive(Clone, Debug, Default)]
pub struct Drains {
    pending: BTreeMap<(Vip, BackendKey), Pending>,
}

impl Drains {
    /// Starts (or restarts) a timed drain of `backend` at `now`.
    pub fn start(&mut self, vip: Vip, backend: BackendKey, timeout: Duration, now: Instant) {
        self.pending.insert(
            (vip, backend),
            Pending {
                since: now,
                timeout,
            },
        );
    }

    /// Cancels the pending removal of `backend`; whether there was one.
    pub fn cancel(&mut self, vip: &Vip, backend: &BackendKey) -> bool {
        self.pending.remove(&(*vip, *backend)).is_some()
    }

    /// The timeout of `backend`'s pending removal, if any.
    pub fn timeout_of(&self, vip: &Vip, backend: &BackendKey) -> Option<Duration> {
        self.pending.get(&(*vip, *backend)).map(|p| p.timeout)
    }

    /// Keeps only the pending removals `keep` accepts (those still drained).
    pub fn retain(&mut self, mut keep: impl FnMut(&Vip, &BackendKey) -> bool) {
        self.pending.retain(|(v, b), _| keep(v, b));
    }

    /// Takes the drains that have ended at `now`: the timeout passed, or the last walk
    /// (taken at `walk`) found no connection (`connections` gives a backend's count).
    pub fn take_ended(
        &mut self,
        now: Instant,
        walk: Option<Instant>,
        connections: impl Fn(&Vip, &BackendKey) -> Option<u64>,
    ) -> Vec<(Vip, BackendKey, Ending)> {
        let mut ended = Vec::new();
        for (&(vip, backend), p) in &self.pending {
            if now.saturating_duration_since(p.since) >= p.timeout {
                ended.push((vip, backend, Ending::Timeout(p.timeout)));
            } else if walk.is_some_and(|w| w >= p.since) && connections(&vip, &backend) == Some(0) {
                ended.push((vip, backend, Ending::LastConnection));
            }
        }
        for (vip, backend, _) in &ended {
            self.pending.remove(&(*vip, *backend));
        }
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Vip, BackendKey) {
        (
            "203.0.113.10:80/tcp".parse().unwrap(),
            "198.51.100.11".parse().unwrap(),
        )
    }

    /// The timeout ends a drain even with connections; until then, connections keep it.
    #[test]
    fn the_timeout_ends_a_drain_with_connections() {
        let (vip, b) = pair();
        let t0 = Instant::now();
        let mut d = Drains::default();
        d.start(vip, b, Duration::from_secs(300), t0);
        let busy = |_: &Vip, _: &BackendKey| Some(3);
        let at = |s| t0 + Duration::from_secs(s);
        assert!(d.take_ended(at(299), Some(at(299)), busy).is_empty());
        assert_eq!(
            d.take_ended(at(300), Some(at(300)), busy),
            [(vip, b, Ending::Timeout(Duration::from_secs(300)))]
        );
        assert!(d.timeout_of(&vip, &b).is_none(), "taken");
    }

    /// No connection ends a drain, but only in a walk taken after the drain began.
    #[test]
    fn the_last_connection_ends_a_drain_from_a_later_walk() {
        let (vip, b) = pair();
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut d = Drains::default();
        d.start(vip, b, Duration::from_secs(300), t0);
        let idle = |_: &Vip, _: &BackendKey| Some(0);
        let earlier = t0 - Duration::from_secs(1);
        assert!(d.take_ended(t0, Some(earlier), idle).is_empty());
        assert!(d.take_ended(t0, None, idle).is_empty());
        assert_eq!(
            d.take_ended(t0, Some(t0), idle),
            [(vip, b, Ending::LastConnection)]
        );
    }

    #[test]
    fn durations_read_as_the_flag_says_them() {
        let text = |s| duration_text(Duration::from_secs(s));
        assert_eq!(
            [text(90), text(300), text(7200), text(3660)],
            ["90s", "5m", "2h", "61m"]
        );
    }
}
