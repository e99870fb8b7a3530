//! Flap damping: a backend that changes state more than `max_transitions` times within
//! `window` is held unhealthy for `hold`, so that a backend bouncing between healthy and
//! unhealthy stops moving flows (every change rebuilds its VIP's table and re-picks its
//! flows).
//!
//! The idea is BGP route flap damping's (RFC 2439: suppress a route that changes too
//! often), with a counting window instead of a decaying penalty: an operator reads
//! "5 changes within 60 s" more easily than a figure of merit.

use std::{collections::VecDeque, time::Duration};

use std::time::Instant;

/// Damping settings of a VIP's backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Damping {
    /// The most state changes allowed within `window`; one more holds the backend
    /// unhealthy. 0 turns damping off.
    pub max_transitions: u32,
    /// The window the changes are counted in.
    pub window: Duration,
    /// How long a flapping backend is held unhealthy.
    pub hold: Duration,
}

impl Damping {
    /// Default `flap_transitions`: 4. At the default probe timing (2 s interval, rise 2,
    /// fall 3) one down-and-up cycle takes at least 10 s, so two full cycles within a
    /// minute pass and the fifth change is held.
    pub const DEFAULT_MAX_TRANSITIONS: u32 = 4;
    /// Default `flap_window_secs`: 60 s.
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
    /// Default `flap_hold_secs`: 60 s, as long as the window: a held backend returns
    /// with an empty history.
    pub const DEFAULT_HOLD: Duration = Duration::from_secs(60);
    /// Damping turned off.
    pub const OFF: Damping = Damping {
        max_transitions: 0,
        window: Self::DEFAULT_WINDOW,
        hold: Self::DEFAULT_HOLD,
    };
}

impl Default for Damping {
    fn default() -> Self {
        Self {
            max_transitions: Self::DEFAULT_MAX_TRANSITIONS,
            window: Self::DEFAULT_WINDOW,
            hold: Self::DEFAULT_HOLD,
        }
    }
}

/// What [`FlapHistory::on_transition`] decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The change happens.
    Allow,
    /// The change is one too many: the backend is held unhealthy until this instant.
    Hold {
        /// End of the hold.
        until: Instant,
        /// Changes counted in the window, this one included.
        changes: u32,
    },
}

/// One backend's recent state changes and hold.
#[derive(Clone, Debug, Default)]
pub(super) struct FlapHistory {
    /// Instants of the changes within the window, oldest first.
    recent: VecDeque<Instant>,
    held_until: Option<Instant>,
    holds: u64,
}

impl FlapHistory {
    /// The end of the hold, while it lasts at `now`.
    pub(super) fn held(&self, now: Instant) -> Option<Instant> {
        self.held_until.filter(|&until| now < until)
    }

    /// How many holds this backend has had.
    pub(super) fn holds(&self) -> u64 {
        self.holds
    }

    /// Counts a state change the state machine wants to make at `now`.
    pub(super) fn on_transition(&mut self, now: Instant, damping: &Damping) -> Verdict {
        if damping.max_transitions == 0 {
            return Verdict::Allow;
        }
        while let Some(&first) = self.recent.front() {
            if now.saturating_duration_since(first) >= damping.window {
                self.recent.pop_front();
            } else {
                break;
            }
        }
        if self.recent.len() >= usize::try_from(damping.max_transitions).unwrap_or(usize::MAX) {
            let changes = u32::try_from(self.recent.len() + 1).unwrap_or(u32::MAX);
            self.recent.clear();
            let until = now + damping.hold;
            self.held_until = Some(until);
            self.holds += 1;
            return Verdict::Hold { until, changes };
        }
        self.recent.push_back(now);
        Verdict::Allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn damping() -> Damping {
        Damping {
            max_transitions: 2,
            window: Duration::from_secs(10),
            hold: Duration::from_secs(30),
        }
    }

    #[test]
    fn the_change_past_the_limit_is_held() {
        let t0 = Instant::now();
        let mut h = FlapHistory::default();
        assert_eq!(h.on_transition(t0, &damping()), Verdict::Allow);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(h.on_transition(t1, &damping()), Verdict::Allow);
        let t2 = t0 + Duration::from_secs(2);
        let until = t2 + Duration::from_secs(30);
        assert_eq!(
            h.on_transition(t2, &damping()),
            Verdict::Hold { until, changes: 3 }
        );
        assert_eq!(h.held(t2), Some(until));
        assert_eq!(h.held(until), None);
        assert_eq!(h.holds(), 1);
        // The hold cleared the history: the next change is allowed.
        assert_eq!(h.on_transition(until, &damping()), Verdict::Allow);
    }

    #[test]
    fn changes_older_than_the_window_do_not_count() {
        let t0 = Instant::now();
        let mut h = FlapHistory::default();
        for i in 0..20 {
            let t = t0 + Duration::from_secs(6 * i);
            assert_eq!(h.on_transition(t, &damping()), Verdict::Allow, "change {i}");
        }
    }

    #[test]
    fn zero_turns_damping_off() {
        let t0 = Instant::now();
        let mut h = FlapHistory::default();
        for i in 0..100 {
            let t = t0 + Duration::from_millis(i);
            assert_eq!(h.on_transition(t, &Damping::OFF), Verdict::Allow);
        }
    }
}
