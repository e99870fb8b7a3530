//! The affinity pins (`AFFINITY`): the client's pin `lb flow` reports, read and
//! decided as the XDP program decides it (`lb_common::affinity::decide`).

use aya::maps::MapError;
use lb_common::{
    affinity::{self, Affinity, AffinityLookups},
    maps,
    types::{BACKEND_ACTIVE, FlowKey},
};

use super::{KernelDataplane, lock, walk::conntrack_now_ns};
use crate::{AffinityPin, DataplaneError, map_err};

impl KernelDataplane {
    /// [`crate::Dataplane::lookup_affinity`]: the client's affinity pin of flow `key`,
    /// if its VIP has affinity and the client has one.
    pub(super) fn affinity_lookup(
        &self,
        key: &FlowKey,
    ) -> Result<Option<AffinityPin>, DataplaneError> {
        let (vip, secs) = {
            let tables = lock(&self.tables);
            let Some(vip) = tables.vip_entry(&key.vip)? else {
                return Ok(None);
            };
            (vip, tables.hash_fields(vip.vip_id).affinity_secs)
        };
        if !affinity::enabled(vip.flags) {
            return Ok(None);
        }
        let client = affinity::key(key, vip.vip_id, vip.flags);
        let entry = match self.affinity.get(&client, 0) {
            Ok(entry) => entry,
            Err(MapError::KeyNotFound) => return Ok(None),
            Err(e) => return Err(map_err(maps::AFFINITY, "lookup")(e)),
        };
        let now = conntrack_now_ns();
        let mut reads = Active {
            dp: self,
            error: None,
        };
        let decision = affinity::decide(
            &mut reads,
            Some(&entry),
            now,
            u64::from(secs) * 1_000_000_000,
        );
        if let Some(error) = reads.error {
            return Err(error);
        }
        Ok(Some(AffinityPin {
            backend_id: entry.backend_id,
            idle_ns: now.saturating_sub(entry.stamp_ns),
            timeout_secs: secs,
            decides: matches!(decision, Affinity::Pinned { .. }),
        }))
    }
}

/// The reads of the affinity decision: `BACKENDS`. The first failed read is kept in
/// `error`.
struct Active<'a> {
    dp: &'a KernelDataplane,
    error: Option<DataplaneError>,
}

impl AffinityLookups for Active<'_> {
    type Backend = u32;

    fn takes_new_flows(&mut self, id: u32) -> Option<u32> {
        match self.dp.backends.get(&id, 0) {
            Ok(b) => (b.state == BACKEND_ACTIVE).then_some(id),
            Err(MapError::OutOfBounds { .. }) => None,
            Err(e) => {
                self.error
                    .get_or_insert(map_err(maps::BACKENDS, "lookup")(e));
                None
            }
        }
    }
}
