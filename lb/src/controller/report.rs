//! What the controller reports: what a change did ([`ApplyReport`], one log line per
//! VIP), and the `lb status` part it knows (the VIPs, their tables and backends), built
//! from its applied state into the control protocol's types.

use std::{fmt, time::Duration};

use super::{AppliedVip, Controller, desired::VipSpec};
use crate::{
    config::{BackendState, Vip},
    control::{BackendStatus, PolicyStatus, VipStatus},
};
use lb_dataplane::Dataplane;
use lb_health::policy::Mode as PolicyMode;
use lb_maglev::Fingerprint;

/// What a successful change did, for the log and for `lb backend`'s answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ApplyReport {
    /// The VIPs whose table was built, in VIP order, then the VIPs removed.
    pub changes: Vec<VipChange>,
    /// Warnings of the table builder.
    pub warnings: Vec<String>,
    /// Data-plane operations run.
    pub operations: usize,
    /// How long each table install of the change took (ms): the new table written into
    /// the buffer no packet reads, then switched in.
    pub swaps_ms: Vec<f64>,
    /// VIPs whose multi-failure policy changed mode (panic, all down, back to
    /// normal), one line each.
    pub policy_changes: Vec<String>,
    /// Backends the change added that get slots only after their first successful
    /// probe (`initial = "down"`, see [`super::Controller::apply_new_down`]).
    pub awaiting_probe: Vec<(Vip, lb_maglev::BackendKey)>,
    /// Where the change's time went.
    pub timing: ApplyTiming,
}

/// Where a change's wall-clock time went, for the daemon's start breakdown (its log
/// line `start phases`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ApplyTiming {
    /// Planning the ids, entries and operations, while worker threads build the tables
    /// (`super::prebuild`): the plan ends when its last table is built.
    pub plan: Duration,
    /// Storing the controller's record of the next state in the data plane.
    pub record: Duration,
    /// Creating the new table buffers and putting them into `TABLES` and `TABLES_STD`
    /// (one batch each).
    pub buffers: Duration,
    /// Every other map write: the tables filled and switched in, the backends, the
    /// VIPs and their options.
    pub writes: Duration,
}

impl ApplyReport {
    /// Tables installed by the change.
    pub fn tables_changed(&self) -> usize {
        self.changes
            .iter()
            .filter(|c| matches!(c, VipChange::Table(_)))
            .count()
    }

    /// The log lines: one per entry of [`Self::changes`], then one per backend
    /// awaiting its first probe.
    pub fn lines(&self) -> Vec<String> {
        let waiting = self.awaiting_probe.iter().map(|(vip, key)| {
            format!(
                "VIP {vip}: backend {key} gets slots after its first successful probe \
                 (initial = \"down\")"
            )
        });
        self.changes
            .iter()
            .map(ToString::to_string)
            .chain(waiting)
            .collect()
    }
}

/// One VIP's part of a change; `Display` gives its log line.
#[derive(Clone, Debug, PartialEq)]
pub enum VipChange {
    /// A new table was installed.
    Table(TableChange),
    /// The VIP was removed.
    Removed(Vip),
}

/// A VIP's new table.
#[derive(Clone, Debug, PartialEq)]
pub struct TableChange {
    /// The VIP.
    pub vip: Vip,
    /// Its backends, in the table or not.
    pub backends: usize,
    /// Its backends in the table (active, weight > 0).
    pub in_table: usize,
    /// Table size M.
    pub table_size: u32,
    /// The table's fingerprint.
    pub fingerprint: Fingerprint,
    /// The table's generation.
    pub generation: u32,
    /// Build time (ms; about 0 when the table of another VIP of this change was reused).
    pub build_ms: f64,
    /// Slots whose backend differs from the previous table's (all of them after a
    /// resize); `None` for a new VIP.
    pub changed_slots: Option<usize>,
}

impl fmt::Display for VipChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = match self {
            VipChange::Removed(vip) => return write!(f, "VIP {vip}: removed"),
            VipChange::Table(t) => t,
        };
        write!(
            f,
            "VIP {}: {} backends ({} in the table), table {} slots, fingerprint {}, \
             generation {}, built in {:.2} ms",
            t.vip, t.backends, t.in_table, t.table_size, t.fingerprint, t.generation, t.build_ms
        )?;
        if let Some(changed) = t.changed_slots {
            #[expect(clippy::cast_precision_loss, reason = "a percentage for the log")]
            let pct = 100.0 * changed as f64 / f64::from(t.table_size.max(1));
            write!(f, "; {changed} slots changed owner ({pct:.2}%)")?;
        }
        Ok(())
    }
}

/// The `lb status` entry of `vip`, applied as `applied` (the effective state: health
/// and policy applied) from the operator's `admin` spec, balanced in `mode`.
fn vip_status(
    vip: &Vip,
    applied: &AppliedVip,
    admin: Option<&VipSpec>,
    mode: Option<&PolicyMode>,
) -> VipStatus {
    let table = &applied.table;
    let total = applied.slots.len().max(1);
    let slots_of = |key| {
        table
            .backends()
            .iter()
            .position(|b| b.key == key)
            .and_then(|i| table.slot_counts().get(i).copied())
            .filter(|_| !table.is_empty())
            .unwrap_or(0)
    };
    let backends = applied
        .spec
        .backends
        .iter()
        .map(|(key, spec)| {
            let slots = slots_of(*key);
            #[expect(clippy::cast_precision_loss, reason = "a share for display")]
            let share = f64::from(slots) / total as f64;
            let state = admin
                .and_then(|a| a.backends.get(key))
                .map_or(spec.state, |a| a.state);
            BackendStatus {
                address: key.to_string(),
                id: applied.backend_ids.get(key).copied().unwrap_or(0),
                state: state.to_string(),
                weight: spec.weight,
                slots,
                share,
                connections: None,
                dataplane_state: dataplane_state(spec.state).to_owned(),
                health: None,
                nexthop: None,
                runtime: None,
            }
        })
        .collect();
    VipStatus {
        vip: vip.to_string(),
        id: applied.id,
        table_size: applied.spec.table_size,
        generation: applied.generation,
        fingerprint: table
            .fingerprint()
            .with_hash_fields(applied.spec.hash)
            .to_string(),
        allowed_sources: applied
            .spec
            .allowed_sources
            .iter()
            .map(ToString::to_string)
            .collect(),
        backends,
        policy: mode.map(|m| PolicyStatus::new(m, &applied.spec.policy)),
        announce: None,
        slot_states: None,
        entry_cached: None,
        give_ups: Vec::new(),
        // A marker the last conntrack walk replaces with the count.
        affinity_pins: (applied.spec.hash.affinity_secs != 0).then_some(0),
        pending_rollout: None,
        owners_given_up: 0,
    }
}

/// What the data plane does with a backend in `state` (its `BACKENDS` state).
fn dataplane_state(state: BackendState) -> &'static str {
    match state {
        BackendState::Active => "active",
        BackendState::Drain => "draining",
        BackendState::Down => "down",
    }
}

impl<D: Dataplane> Controller<D> {
    /// The VIPs part of `lb status`.
    pub fn vip_statuses(&self) -> Vec<VipStatus> {
        self.vips()
            .iter()
            .map(|(vip, applied)| {
                let admin = self.applied().and_then(|d| d.vips.get(vip));
                let mut status = vip_status(vip, applied, admin, self.policy_mode(vip));
                status.pending_rollout = self.pending_rollout(vip);
                status.owners_given_up = self.dp.owners_given_up(applied.id);
                status.entry_cached = self
                    .dp
                    .fast_path(applied.id)
                    .then(|| self.dp.vip_cached(applied.id));
                status
            })
            .collect()
    }
}
