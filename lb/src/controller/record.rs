//! The controller's record, and the recovery of its state from a data plane that a
//! previous daemon left pinned.
//!
//! What the maps cannot tell is recorded: the id tables (which (VIP, backend) pair
//! each backend id stands for, tombstones included: conntrack entries store ids) and,
//! per VIP, the spec its installed table was built from and that table's generation.
//! [`Controller::apply`](super::Controller::apply) stores the record of the *next*
//! state before it writes the first map, so whatever a crash interrupts, the record
//! binds every id the maps may use.
//!
//! Recovery ([`recover`]) trusts the maps over the record: a VIP is applied when it has
//! a `VIPS` entry; its table is what is installed; backend entries are read back. The
//! recorded spec of a VIP is used only when the installed table has the recorded
//! generation *and* equals the table the spec builds; otherwise the VIP is marked
//! `unverified` and the next change rebuilds its table (at the next generation), with
//! the ids its installed table uses bound to the backends' addresses. Without a usable
//! record, every id in use in `BACKENDS` that no table explains is reserved, so it is
//! never given to another backend first.
//!
//! The record keeps, per VIP, the [`OwnersDigest`] and the [`Fingerprint`] of the
//! table its spec built, and once the table algorithm's version
//! ([`FINGERPRINT_VERSION`]). Recovery then recognises an installed table by its
//! owners' digest, read back through the recorded ids, without building it (at 500
//! VIPs of M = 65,537: about 50 ms where the builds took about 1 s). A record without
//! digests (of an earlier build, or of another algorithm version) has its tables
//! built on worker threads ([`prebuild::Builds`]) and compared slot by slot; the next
//! change stores the digests.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
};

use lb_common::{
    hash_fields::HashFields,
    maps::MAX_BACKENDS,
    types::{BACKEND_ACTIVE, BACKEND_DRAINING, BACKEND_UNUSED, PROTO_TCP, PROTO_UDP, VipKey},
};
use serde::{Deserialize, Serialize};

use super::{
    AppliedVip, State,
    desired::{BackendSpec, VipSpec},
    ids::{Ids, IdsRecord},
    prebuild::{self, TableKey, table_key},
    table::{self, OWNERS_VERSION, OwnerIndex, OwnersDigest, Recorded, TableFacts},
};
use crate::config::{BackendState, Protocol, Vip};
use lb_dataplane::prefix::Prefix;
use lb_dataplane::{Adopted, Dataplane, DataplaneError, InstalledTable};
use lb_health::policy::FailurePolicy;
use lb_maglev::flow::ip_of_bytes;
use lb_maglev::{BackendKey, FINGERPRINT_VERSION, Fingerprint, MaglevTable};

/// Version of the record's format.
const RECORD_VERSION: u32 = 1;

/// The stored form (JSON). Fields added after version 1 are optional, so that each
/// build reads the other's record (serde ignores fields it does not know).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    version: u32,
    maglev_seed: u64,
    ids: IdsRecord,
    vips: Vec<VipRecord>,
    /// The [`FINGERPRINT_VERSION`] of the builder that made the recorded tables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    table_version: Option<u32>,
    /// The [`OWNERS_VERSION`] of the recorded owners' digests. Digests are compared
    /// only under this build's two versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owners_version: Option<u32>,
}

impl Record {
    /// Whether the recorded digests are of this build's table algorithm and encoding.
    fn digests_comparable(&self) -> bool {
        self.table_version == Some(FINGERPRINT_VERSION)
            && self.owners_version == Some(OWNERS_VERSION)
    }

    /// Whether the record lacks what this build records: digests it can compare, for
    /// every VIP.
    fn outdated(&self) -> bool {
        !self.digests_comparable() || self.vips.iter().any(|v| v.recorded(true).is_none())
    }

    /// The entries by VIP and VIP id.
    fn entries(&self) -> HashMap<(Vip, u32), &VipRecord> {
        self.vips.iter().map(|v| ((v.vip, v.id), v)).collect()
    }

    /// Every backend id the record binds.
    fn ids_in_use(&self) -> Vec<u32> {
        let ids = Ids::from_record(&self.ids);
        (1..MAX_BACKENDS).filter(|id| ids.is_bound(*id)).collect()
    }
}

/// One applied VIP.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct VipRecord {
    vip: Vip,
    id: u32,
    generation: u32,
    table_size: u32,
    backends: Vec<(BackendKey, BackendSpec)>,
    /// The owners' digest of the table `backends` built (none for a VIP recovered
    /// unverified).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owners: Option<OwnersDigest>,
    /// That table's fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fingerprint: Option<Fingerprint>,
}

impl VipRecord {
    /// What recovery may recognise this VIP's table by: the digests of the table its
    /// spec built, when `comparable` (see [`Record::digests_comparable`]). The
    /// fingerprint is trusted as recorded: it was computed with the owners' digest.
    fn recorded(&self, comparable: bool) -> Option<Recorded> {
        Some(Recorded {
            owners: self.owners.filter(|_| comparable)?,
            fingerprint: self.fingerprint?,
        })
    }

    /// The spec of `vip` this entry records, with `allowed_sources`, `fast_path`,
    /// `second_chance` and
    /// `hash` (which the maps hold). The policy is not recorded: it changes no table by
    /// itself (the plan compares table inputs), and the next apply brings the
    /// configured one.
    fn spec(
        &self,
        vip: &Vip,
        allowed_sources: Vec<Prefix>,
        fast_path: bool,
        second_chance: bool,
        hash: HashFields,
    ) -> VipSpec {
        let backends: BTreeMap<BackendKey, BackendSpec> = self.backends.iter().copied().collect();
        VipSpec {
            table_size: self.table_size,
            ipv6_backends: ipv6_backends(vip, &backends),
            // Not recorded: the backend entries hold it, and the next apply writes the
            // configured one (it changes no table).
            gue_port: 0,
            allowed_sources,
            fast_path,
            second_chance,
            hash,
            backends,
            policy: FailurePolicy::default(),
        }
    }
}

/// The record of `state`, encoded.
pub(super) fn encode(state: &State) -> Vec<u8> {
    let record = Record {
        version: RECORD_VERSION,
        maglev_seed: state.maglev_seed,
        ids: state.ids.to_record(),
        vips: state
            .vips
            .iter()
            .map(|(vip, v)| VipRecord {
                vip: *vip,
                id: v.id,
                generation: v.generation,
                table_size: v.spec.table_size,
                backends: v.spec.backends.iter().map(|(k, b)| (*k, *b)).collect(),
                owners: v.table.owners().filter(|_| !v.unverified),
                fingerprint: (!v.unverified).then(|| v.table.fingerprint()),
            })
            .collect(),
        table_version: Some(FINGERPRINT_VERSION),
        owners_version: Some(OWNERS_VERSION),
    };
    serde_json::to_vec(&record).unwrap_or_default()
}

/// What recovery found, for the log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Whether there was a data plane to adopt at all.
    pub adopted: bool,
    /// VIPs recovered with their recorded spec and table.
    pub verified: Vec<Vip>,
    /// VIPs whose table will be rebuilt by the next change.
    pub unverified: Vec<Vip>,
    /// Backend ids bound (live and tombstones).
    pub backend_ids: usize,
    /// Recorded tables built again to be checked (those the record has no digest of).
    pub tables_built: usize,
    /// Whether the record lacks what this build records (digests): the next apply
    /// stores it again, even when it writes nothing else.
    pub record_outdated: bool,
    /// Why the record could not be used, if it could not.
    pub record_problem: Option<String>,
}

impl Recovery {
    /// One line per fact, for the log.
    pub fn lines(&self) -> Vec<String> {
        if !self.adopted {
            return Vec::new();
        }
        let built = match self.tables_built {
            0 => String::new(),
            n => format!(" ({n} built again to be checked)"),
        };
        let mut out = vec![format!(
            "adopted the pinned datapath: {} VIPs with their tables{built}, {} backend ids kept",
            self.verified.len() + self.unverified.len(),
            self.backend_ids
        )];
        if let Some(problem) = &self.record_problem {
            out.push(format!(
                "the controller's record could not be used ({problem}): ids recovered from the tables, every other id in use reserved"
            ));
        }
        for vip in &self.unverified {
            out.push(format!(
                "VIP {vip}: the installed table is not the recorded one: it is rebuilt by this start"
            ));
        }
        out
    }
}

/// The VIP a `VIPS` key names.
fn vip_of_key(key: &VipKey) -> Option<Vip> {
    let addr = ip_of_bytes(key.addr, key.family)?;
    let proto = match key.proto {
        PROTO_TCP => Protocol::Tcp,
        PROTO_UDP => Protocol::Udp,
        _ => return None,
    };
    Some(Vip::new(addr, u16::from_be(key.port), proto))
}

/// Whether the backends of `vip` are IPv6: those recovered say so, else the VIP's
/// family does.
fn ipv6_backends(vip: &Vip, backends: &BTreeMap<BackendKey, BackendSpec>) -> bool {
    backends
        .keys()
        .next()
        .map_or(vip.addr.is_ipv6(), |k| k.ip().is_ipv6())
}

/// A backend's state as a `BACKENDS` entry says.
fn state_of(entry_state: u8) -> BackendState {
    match entry_state {
        BACKEND_ACTIVE => BackendState::Active,
        BACKEND_DRAINING => BackendState::Drain,
        _ => BackendState::Down,
    }
}

/// The check of each recorded table against the installed one.
struct Checker {
    /// Whether the record's digests can be compared ([`Record::digests_comparable`]).
    comparable: bool,
    /// The builds of the recorded tables without a usable digest, under way.
    builds: prebuild::Builds,
    index: OwnerIndex,
    /// Tables built to be checked.
    built: usize,
}

impl Checker {
    /// Starts building, on worker threads, the tables of `entries` (the record's
    /// entries of the adopted VIPs, in the order they will be checked) that no digest
    /// recognises.
    fn start<'r>(record: Option<&Record>, entries: impl Iterator<Item = &'r VipRecord>) -> Self {
        let comparable = record.is_some_and(Record::digests_comparable);
        let mut keys: Vec<TableKey> = Vec::new();
        let mut wanted: HashMap<TableKey, usize> = HashMap::new();
        for r in entries.filter(|r| r.recorded(comparable).is_none()) {
            let key = table_key(&r.spec(&r.vip, Vec::new(), false, false, HashFields::default()));
            let count = wanted.entry(key.clone()).or_default();
            if *count == 0 {
                keys.push(key);
            }
            *count += 1;
        }
        let seed = record.map_or(0, |r| r.maglev_seed);
        Self {
            comparable,
            builds: prebuild::Builds::start(keys, wanted, seed),
            index: OwnerIndex::new(),
            built: 0,
        }
    }

    /// The facts and compact slots of `installed` when it is the table `spec` (as `r`
    /// recorded it) builds, with `ids` binding its backends: recognised by the
    /// recorded digest, or, without one, built and compared.
    fn check(
        &mut self,
        vip: &Vip,
        r: &VipRecord,
        spec: &VipSpec,
        ids: &Ids,
        installed: &[u32],
    ) -> Option<(Arc<TableFacts>, Arc<[u16]>)> {
        let id_of = |key: &BackendKey| ids.backend_id(vip, key);
        let key = table_key(spec);
        if let Some(recorded) = r.recorded(self.comparable) {
            // A digest that differs means another table: building the recorded spec
            // would give the recorded one again.
            let (facts, slots) = table::facts_of_installed(
                installed,
                &key.0,
                spec.table_size,
                id_of,
                recorded,
                &mut self.index,
            )?;
            return Some((Arc::new(facts), slots));
        }
        let taken = self.builds.take(&key).ok()?;
        self.built += usize::from(taken.fresh);
        let slots = table::compact_slots(&taken.table, spec.table_size, id_of)?;
        let same = slots.len() == installed.len()
            && slots
                .iter()
                .zip(installed)
                .all(|(&a, &b)| u32::from(a) == b);
        same.then_some((taken.facts, slots))
    }
}

/// Ids read back from a table, in the controller's compact form: an id beyond the
/// `BACKENDS` map (which the data plane never writes) names no backend.
fn compact(installed: &[u32]) -> Arc<[u16]> {
    installed
        .iter()
        .map(|&id| u16::try_from(id).unwrap_or(0))
        .collect()
}

/// The controller state of the data plane `dp` adopted (see the module
/// documentation); a fresh data plane gives the empty state. The steps: read the
/// record ([`read_record`]), recover each VIP with a table ([`recover_vip`]), then
/// read back the backend entries ([`recover_entries`]).
///
/// # Errors
/// When the data plane's maps cannot be read.
pub(super) fn recover<D: Dataplane>(dp: &D) -> Result<(State, Recovery), DataplaneError> {
    let Some(adopted) = dp.adopted()? else {
        return Ok((State::default(), Recovery::default()));
    };
    let mut recovery = Recovery {
        adopted: true,
        ..Recovery::default()
    };
    let record = read_record(&adopted, &mut recovery);
    let mut state = State {
        maglev_seed: record.as_ref().map_or(0, |r| r.maglev_seed),
        ids: record
            .as_ref()
            .map(|r| Ids::from_record(&r.ids))
            .unwrap_or_default(),
        ..State::default()
    };
    let entries = record.as_ref().map(Record::entries).unwrap_or_default();
    let entry = |key: &VipKey, id: u32| Some(*entries.get(&(vip_of_key(key)?, id))?);
    let mut checker = Checker::start(
        record.as_ref(),
        adopted.vips.iter().filter_map(|(key, id)| entry(key, *id)),
    );
    let mut used_ids: BTreeSet<u32> = BTreeSet::new();
    let mut applied = BTreeSet::new();
    for (key, vip_id) in &adopted.vips {
        let Some(vip) = vip_of_key(key) else { continue };
        let Some(installed) = dp.table(*vip_id)? else {
            continue;
        };
        state.ids.bind_vip(vip, *vip_id);
        applied.insert(vip);
        let recorded = entry(key, *vip_id).filter(|r| r.generation == installed.generation);
        // The maps hold the source list the VIP has now: the next change is planned
        // from it.
        let allowed_sources = adopted
            .sources
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, prefixes)| prefixes.clone())
            .unwrap_or_default();
        let found = Found {
            vip,
            id: *vip_id,
            installed,
            allowed_sources,
            fast_path: dp.fast_path(*vip_id),
            second_chance: dp.second_chance(*vip_id),
            hash: dp.hash_fields(*vip_id),
        };
        let applied_vip = recover_vip(
            dp,
            &mut state,
            &mut recovery,
            &mut checker,
            recorded,
            found,
            &mut used_ids,
        )?;
        state.vips.insert(vip, applied_vip);
    }
    state.ids.keep_vips_in_use(&applied);
    recover_entries(dp, record.as_ref(), used_ids, &mut state)?;
    recovery.backend_ids = state.entries.len();
    recovery.tables_built = checker.built;
    recovery.record_outdated = record.as_ref().is_some_and(Record::outdated);
    Ok((state, recovery))
}

/// The record the data plane stored, when it can be used; otherwise says why not in
/// `recovery` (unless nothing was applied, when no record is expected).
fn read_record(adopted: &Adopted, recovery: &mut Recovery) -> Option<Record> {
    match adopted
        .record
        .as_deref()
        .map(serde_json::from_slice::<Record>)
    {
        None if adopted.vips.is_empty() => None,
        None => {
            recovery.record_problem = Some("none was stored".into());
            None
        }
        Some(Err(e)) => {
            recovery.record_problem = Some(format!("unreadable: {e}"));
            None
        }
        Some(Ok(r)) if r.version != RECORD_VERSION => {
            recovery.record_problem = Some(format!("format version {}", r.version));
            None
        }
        Some(Ok(r)) => Some(r),
    }
}

/// A VIP found in the maps with its installed table.
struct Found {
    vip: Vip,
    /// Its VIP id.
    id: u32,
    installed: InstalledTable,
    /// The source list the maps hold for it.
    allowed_sources: Vec<Prefix>,
    /// Whether its `VIPS` entry takes the fast path.
    fast_path: bool,
    /// Whether its `VIPS` entry offers second-chance candidates.
    second_chance: bool,
    /// The hash fields its `VIPS` entry carries.
    hash: HashFields,
}

/// The applied state of `found`: its recorded spec when `recorded` (of the installed
/// generation) builds the installed table, else what the installed table says
/// (unverified). Binds its backends' ids and adds the ids it uses to `used_ids`.
fn recover_vip<D: Dataplane>(
    dp: &D,
    state: &mut State,
    recovery: &mut Recovery,
    checker: &mut Checker,
    recorded: Option<&VipRecord>,
    found: Found,
    used_ids: &mut BTreeSet<u32>,
) -> Result<AppliedVip, DataplaneError> {
    let vip = found.vip;
    let verified = recorded.and_then(|r| {
        let spec = r.spec(
            &vip,
            found.allowed_sources.clone(),
            found.fast_path,
            found.second_chance,
            found.hash,
        );
        let (table, slots) = checker.check(&vip, r, &spec, &state.ids, &found.installed.slots)?;
        Some((spec, table, slots))
    });
    let Some((spec, table, slots)) = verified else {
        let applied = unverified_vip(dp, state, found, used_ids)?;
        recovery.unverified.push(vip);
        return Ok(applied);
    };
    let backend_ids: BTreeMap<BackendKey, u32> = spec
        .backends
        .keys()
        .filter_map(|k| state.ids.backend_id(&vip, k).map(|id| (*k, id)))
        .collect();
    for (k, id) in &backend_ids {
        state.ids.bind_backend(vip, *k, *id);
        used_ids.insert(*id);
    }
    recovery.verified.push(vip);
    Ok(AppliedVip {
        id: found.id,
        spec,
        table,
        slots,
        generation: found.installed.generation,
        backend_ids,
        unverified: false,
    })
}

/// What the installed table of `found` says: each id in it is a backend at its
/// entry's address. (A verified table uses only its backends' ids.)
fn unverified_vip<D: Dataplane>(
    dp: &D,
    state: &mut State,
    found: Found,
    used_ids: &mut BTreeSet<u32>,
) -> Result<AppliedVip, DataplaneError> {
    let Found {
        vip,
        id: vip_id,
        installed,
        allowed_sources,
        fast_path,
        second_chance,
        hash,
    } = found;
    let in_table = table::distinct_ids(&installed.slots);
    used_ids.extend(in_table.iter().copied());
    let mut backends = BTreeMap::new();
    let mut backend_ids = BTreeMap::new();
    for id in in_table {
        let entry = dp.backend(id)?;
        let Some(addr) = ip_of_bytes(entry.addr, entry.family) else {
            continue;
        };
        let key = BackendKey::from(addr);
        state.ids.bind_backend(vip, key, id);
        backend_ids.insert(key, id);
        backends.insert(
            key,
            BackendSpec {
                weight: 1,
                state: state_of(entry.state),
            },
        );
    }
    let size = u32::try_from(installed.slots.len()).unwrap_or(u32::MAX);
    let table = MaglevTable::build(&[], size, state.maglev_seed)
        .or_else(|_| MaglevTable::build(&[], crate::defaults::TABLE_SIZE, 0))
        .map_err(|e| DataplaneError::OutOfRange(e.to_string()))?;
    Ok(AppliedVip {
        id: vip_id,
        spec: VipSpec {
            table_size: size,
            ipv6_backends: ipv6_backends(&vip, &backends),
            // As in `VipRecord::spec`.
            gue_port: 0,
            allowed_sources,
            fast_path,
            second_chance,
            hash,
            backends,
            policy: FailurePolicy::default(),
        },
        table: Arc::new(TableFacts::of(&table)),
        slots: compact(&installed.slots),
        generation: installed.generation,
        backend_ids,
        unverified: true,
    })
}

/// Reads back the backend entries of every id the record binds or the tables use
/// (`used_ids`). Without a record, every id in use is kept from other backends.
fn recover_entries<D: Dataplane>(
    dp: &D,
    record: Option<&Record>,
    used_ids: BTreeSet<u32>,
    state: &mut State,
) -> Result<(), DataplaneError> {
    // Backend entries: every id the record binds or the tables use.
    let mut ids = used_ids;
    ids.extend(record.map(Record::ids_in_use).unwrap_or_default());
    if record.is_none() {
        // No record: every id in use is kept from other backends.
        for id in 1..MAX_BACKENDS {
            if dp.backend(id)?.state != BACKEND_UNUSED {
                state.ids.reserve_unknown(id);
                ids.insert(id);
            }
        }
    }
    for id in ids {
        let entry = dp.backend(id)?;
        if entry.state != BACKEND_UNUSED {
            state.entries.insert(id, entry);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
