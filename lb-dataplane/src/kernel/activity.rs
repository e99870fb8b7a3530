//! The activity tick (`ACTIVITY_TICK`): the daemon's copy of the conntrack clock's tick
//! (`lb_common::types::ct_ticks`, about 1.07 s), refreshed about once a second. An
//! established flow's packet copies it into its pin (`CtEntry::seen_ticks`, what the
//! live connection counts read as "idle") instead of reading the clock, which is a
//! helper call on every packet. While no daemon runs, the tick stays where the last one
//! left it; the program reads the clock itself only while the map holds 0.

use aya::maps::{Array, MapData};
use lb_common::{maps, types::ct_ticks};

use super::walk::conntrack_now_ns;
use crate::{DataplaneError, map_err};

/// The writer of `ACTIVITY_TICK`, with a map handle of its own (a duplicate of the
/// object's descriptor), so that a task can refresh it without holding the data plane.
pub struct ActivityClock {
    tick: Array<MapData, u32>,
}

impl ActivityClock {
    pub(super) fn new(tick: Array<MapData, u32>) -> Self {
        Self { tick }
    }

    /// Writes the current tick (never 0, which means "no tick").
    ///
    /// # Errors
    /// [`DataplaneError::Map`] when the update fails.
    pub fn refresh(&mut self) -> Result<(), DataplaneError> {
        self.set(ct_ticks(conntrack_now_ns()).max(1))
    }

    /// Writes `tick` (0: the program reads the clock itself).
    ///
    /// # Errors
    /// [`DataplaneError::Map`] when the update fails.
    pub fn set(&mut self, tick: u32) -> Result<(), DataplaneError> {
        self.tick
            .set(0, tick, 0)
            .map_err(map_err(maps::ACTIVITY_TICK, "update"))
    }
}
