//! Live connections per backend in `lb status` and `lb stats`: the last conntrack walk
//! ([`Latest`]), which the daemon runs every `metrics.connections_interval_ms` on a
//! blocking thread (`lb_dataplane::ConntrackWalker`) and hands to the service.

use std::time::{Duration, Instant};

use crate::control::{ConnectionCounts, ConntrackStatus, Status};
use lb_dataplane::Census;

/// The last walk's result, with what `lb status` shows beside it.
#[derive(Clone, Debug)]
pub struct Latest {
    census: Option<(Census, Instant)>,
    /// Capacity of each conntrack map.
    capacity: u32,
    /// SYN cache slots.
    syn_capacity: u32,
    /// SYN cache parts (one until the interface is known).
    syn_parts: u32,
    /// Capacity of the fast path's exceptions map.
    exceptions_capacity: u32,
    /// The idle threshold the walk applied.
    idle: Duration,
}

impl Latest {
    /// No walk yet, for maps of `capacity` entries and `syn_capacity` SYN slots.
    pub fn new(capacity: u32, syn_capacity: u32, idle: Duration) -> Self {
        Self {
            census: None,
            capacity,
            syn_capacity,
            syn_parts: 1,
            exceptions_capacity: 0,
            idle,
        }
    }

    /// This, with an exceptions map of `capacity` entries (`EXCEPTIONS`).
    #[must_use]
    pub fn with_exceptions_capacity(mut self, capacity: u32) -> Self {
        self.exceptions_capacity = capacity;
        self
    }

    /// Records the SYN cache's parts, as the data plane split it for the interface
    /// (`KernelDataplane::syn_cache_parts`).
    pub fn set_syn_parts(&mut self, parts: u32) {
        self.syn_parts = parts;
    }

    /// Records a walk that ended now.
    pub fn set(&mut self, census: Census) {
        self.census = Some((census, Instant::now()));
    }

    /// The idle threshold the walks apply.
    pub fn idle(&self) -> Duration {
        self.idle
    }

    /// When the last walk ended, if one did.
    pub fn walked_at(&self) -> Option<Instant> {
        self.census.as_ref().map(|(_, at)| *at)
    }

    /// The last walk, if any.
    pub fn census(&self) -> Option<&Census> {
        self.census.as_ref().map(|(c, _)| c)
    }

    /// Backend id `id`'s connections (zeros for an id without entries), once a walk
    /// ran.
    pub fn of(&self, id: u32) -> Option<ConnectionCounts> {
        self.census()
            .map(|c| c.backends.get(&id).copied().unwrap_or_default())
    }

    /// The occupancy part of `lb status` and `lb stats`.
    pub fn conntrack(&self) -> Option<ConntrackStatus> {
        let (c, at) = self.census.as_ref()?;
        Some(ConntrackStatus {
            v4_entries: c.v4_entries,
            v6_entries: c.v6_entries,
            capacity: self.capacity,
            syn_slots_used: c.syn_slots_used,
            syn_capacity: self.syn_capacity,
            syn_parts: self.syn_parts,
            exceptions_entries: c.exceptions_entries,
            exceptions_capacity: self.exceptions_capacity,
            walk_ms: c.took.as_secs_f64() * 1e3,
            age_secs: at.elapsed().as_secs_f64(),
            idle_secs: self.idle.as_secs(),
        })
    }

    /// Adds the connections of every backend and the occupancy to `status`.
    pub fn annotate(&self, status: &mut Status) {
        status.conntrack = self.conntrack();
        for b in status.vips.iter_mut().flat_map(|v| v.backends.iter_mut()) {
            b.connections = self.of(b.id);
        }
        // VIPs with affinity (marked by the controller): their live pins.
        for v in status.vips.iter_mut().filter(|v| v.affinity_pins.is_some()) {
            v.affinity_pins = self
                .census()
                .map(|c| c.affinity.get(&v.id).copied().unwrap_or(0));
        }
    }
}
