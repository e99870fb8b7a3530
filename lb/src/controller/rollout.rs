//! A two-phase rollout's first phase, *learn* (`lb reload --phase learn`; the book's
//! chapter "Several instances: what still breaks", rules R1, R2 and SC6 of
//! `lb_common::second_chance`): for each applied VIP with the second chance whose
//! table the next desired state changes (same size), the running table is published
//! again with the slots the next table moves marked pending with their next owner; the
//! owners, the controller's state and its tables do not change. The second phase,
//! *switch*, is an ordinary apply of the same desired state: any table published ends
//! the learn (R2).

use std::collections::BTreeMap;

use lb_dataplane::Dataplane;

use super::{ApplyError, Controller, Desired, Vip, health, plan};

/// One VIP's learn: the slots marked pending, and the generation of the table they
/// were marked in (a table published since ends it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Learned {
    /// Slots marked pending.
    pub pending: u32,
    /// The applied table's generation at the learn.
    pub generation: u32,
}

impl<D: Dataplane> Controller<D> {
    /// Rule R1 for `desired`: marks the slots its tables move pending on every applied
    /// second-chance VIP of the same table size (others are left as they are: a VIP
    /// without the second chance carries no candidate, a resized table has no owner to
    /// learn against). A VIP learned before whose table `desired` no longer changes is
    /// published again with nothing pending (the learn abandoned; 0 pending in the
    /// answer). The backend entries the next tables name and the data plane has
    /// none of (a backend added) are written first, as the switch writes them, so a
    /// pending owner keeps flows. Returns each VIP learned.
    ///
    /// # Errors
    /// A table that cannot be built, or a failed map write (the VIPs learned before it
    /// stay learned; the running tables' owners never change).
    pub fn learn(&mut self, desired: &Desired) -> Result<BTreeMap<Vip, Learned>, ApplyError> {
        let (effective, _) = health::effective(desired, &self.unhealthy);
        let plan = plan::plan(&self.state, &effective)?;
        for (id, entry) in plan.new_entries(&self.state) {
            self.dp
                .set_backend(id, &entry)
                .map_err(|error| ApplyError::Dataplane {
                    step: format!("writing backend id {id} for the learn"),
                    error: Box::new(error),
                    undo: String::new(),
                })?;
        }
        let mut learned = BTreeMap::new();
        for (vip, next) in &plan.next.vips {
            let Some(now) = self.state.vips.get(vip) else {
                continue;
            };
            if !now.spec.second_chance || now.slots.len() != next.slots.len() {
                continue;
            }
            // A file that no longer changes the table abandons an earlier learn: the
            // running table is published again with nothing pending.
            let abandon = now.slots == next.slots;
            if abandon && self.pending_rollout(vip).is_none() {
                continue;
            }
            let pending = self.dp.learn_table(now.id, &next.slots).map_err(|error| {
                ApplyError::Dataplane {
                    step: format!("learning the next table of {vip}"),
                    error: Box::new(error),
                    undo: String::new(),
                }
            })?;
            learned.insert(
                *vip,
                Learned {
                    pending,
                    generation: now.generation,
                },
            );
        }
        for (vip, l) in &learned {
            if l.pending == 0 {
                self.learned.remove(vip);
            } else {
                self.learned.insert(*vip, *l);
            }
        }
        Ok(learned)
    }

    /// The slots of `vip` a learn marked pending, while its table is the one they were
    /// marked in (rule R2: none once a table was published since).
    pub fn pending_rollout(&self, vip: &Vip) -> Option<u32> {
        let l = self.learned.get(vip)?;
        let applied = self.state.vips.get(vip)?;
        (applied.generation == l.generation).then_some(l.pending)
    }
}
