//! What a change may do to a VIP with the fast path on (the book's chapter "The fast
//! path"): flows on its clean slots have no pins, so two changes would break them. A
//! new table size moves every flow, and none has a pin to keep it; so do new hash
//! fields (`vip.hash`, `vip.hash_source_prefix`). Turning the fast
//! path off while a slot is dirty hands that slot's unpinned flows to today's miss rule,
//! which takes the owner instead of their clean owner. Both are refused, with what to do.

use lb_dataplane::Dataplane;

use super::{Controller, desired::Desired, plan::ApplyError};

impl<D: Dataplane> Controller<D> {
    /// Refuses a change of `desired` that the fast path cannot make safely now.
    ///
    /// # Errors
    /// [`ApplyError::FastPath`] naming the VIP, why, and what to do; or a failed read
    /// of a table's slot states.
    pub(super) fn check_fast_path(&self, desired: &Desired) -> Result<(), ApplyError> {
        for (vip, spec) in &desired.vips {
            let Some(old) = self.state.vips.get(vip) else {
                continue;
            };
            let fast = old.spec.fast_path || spec.fast_path;
            if fast && old.spec.table_size != spec.table_size {
                return Err(ApplyError::FastPath {
                    vip: *vip,
                    reason: format!(
                        "table_size cannot change from {} to {} while the fast path is on: \
                         flows on clean slots have no pins, and a new size moves them. Set \
                         fast_path = false, wait conntrack.tcp_idle_secs (every flow gets a \
                         pin again at its next packet), then change the size",
                        old.spec.table_size, spec.table_size
                    ),
                });
            }
            if fast && old.spec.hash != spec.hash {
                return Err(ApplyError::FastPath {
                    vip: *vip,
                    reason: format!(
                        "hash cannot change from {:?} to {:?} (or its source prefix) while \
                         the fast path is on: flows on clean slots have no pins, and new \
                         hash fields move them. Set fast_path = false, wait \
                         conntrack.tcp_idle_secs, then change it",
                        old.spec.hash.fields.name(),
                        spec.hash.fields.name()
                    ),
                });
            }
            if old.spec.fast_path && !spec.fast_path {
                let dirty = self
                    .dp
                    .dirty_slots(old.id)
                    .map_err(|error| ApplyError::Dataplane {
                        step: format!("reading the slot states of VIP {vip}"),
                        error: Box::new(error),
                        undo: String::new(),
                    })?;
                if dirty > 0 {
                    return Err(ApplyError::FastPath {
                        vip: *vip,
                        reason: format!(
                            "the fast path cannot be turned off while {dirty} of its slots \
                             are dirty: their flows without a pin rely on the clean owner. \
                             The cleaning turns them clean conntrack.quiet_secs after their \
                             last change (lb status shows them); turn it off then"
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}
