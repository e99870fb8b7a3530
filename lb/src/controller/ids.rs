//! Id allocation for VIPs and backends.
//!
//! - A VIP id indexes `TABLES` and `VIP_STATS`; a VIP keeps its id while configured and
//!   gets the same one back when re-added if it is still free.
//! - A backend id indexes `BACKENDS`; one id per (VIP, backend) pair, so that draining
//!   or removing a backend in one VIP never touches another VIP's flows. Conntrack
//!   entries store backend ids, so an id stays bound to its pair after the backend is
//!   removed (a tombstone): re-adding the backend gets the same id back, and other
//!   backends get fresh ids. Only when all `MAX_BACKENDS - 1` ids are bound is the
//!   oldest tombstone recycled (its flows have had the longest time to end).
//! - The tables survive a restart of the daemon in the controller's record
//!   ([`IdsRecord`]); an id that a recovered data plane uses but no record explains is
//!   kept as a tombstone of an unknown pair, so it is never handed to another backend
//!   before every other free id.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use lb_common::maps::{MAX_BACKENDS, MAX_VIPS};

use crate::config::Vip;
use lb_maglev::BackendKey;

/// Why an id could not be allocated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// All VIP ids are in use.
    #[error("all {MAX_VIPS} VIP ids are in use")]
    NoVipId,
    /// All backend ids are bound to live backends.
    #[error("all {} backend ids are in use", MAX_BACKENDS - 1)]
    NoBackendId,
}

/// The id tables. Cloned before a change is planned, so a failed change leaves the
/// original untouched.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ids {
    vips: BTreeMap<Vip, u32>,
    vips_in_use: BTreeMap<u32, Vip>,
    backends: HashMap<(Vip, BackendKey), u32>,
    /// Ids of live backends.
    live: BTreeSet<u32>,
    /// Tombstones: id → (pair, or `None` when unknown, removal sequence number).
    tombstones: BTreeMap<u32, (Option<(Vip, BackendKey)>, u64)>,
    removals: u64,
    next_backend: u32,
}

impl Ids {
    /// The id of `vip`, allocating one (its previous id if free, else the lowest free).
    ///
    /// # Errors
    /// [`IdError::NoVipId`].
    pub(crate) fn vip(&mut self, vip: Vip) -> Result<u32, IdError> {
        if let Some(&id) = self.vips.get(&vip) {
            match self.vips_in_use.get(&id) {
                Some(owner) if *owner == vip => return Ok(id),
                None => {
                    self.vips_in_use.insert(id, vip);
                    return Ok(id);
                }
                Some(_) => {}
            }
        }
        let id = (0..MAX_VIPS)
            .find(|id| !self.vips_in_use.contains_key(id))
            .ok_or(IdError::NoVipId)?;
        self.vips_in_use.insert(id, vip);
        self.vips.insert(vip, id);
        Ok(id)
    }

    /// Releases `vip`'s id (it stays remembered for a later re-add).
    pub(crate) fn release_vip(&mut self, vip: &Vip) {
        if let Some(id) = self.vips.get(vip)
            && self.vips_in_use.get(id) == Some(vip)
        {
            self.vips_in_use.remove(id);
        }
    }

    /// The id of backend `key` in `vip`, allocating one.
    ///
    /// # Errors
    /// [`IdError::NoBackendId`].
    pub(crate) fn backend(&mut self, vip: Vip, key: BackendKey) -> Result<u32, IdError> {
        let pair = (vip, key);
        if let Some(&id) = self.backends.get(&pair) {
            self.tombstones.remove(&id);
            self.live.insert(id);
            return Ok(id);
        }
        let id = self.fresh_backend_id()?;
        self.backends.insert(pair, id);
        self.live.insert(id);
        Ok(id)
    }

    fn fresh_backend_id(&mut self) -> Result<u32, IdError> {
        let max = MAX_BACKENDS - 1;
        for _ in 0..max {
            self.next_backend = self.next_backend % max + 1;
            let id = self.next_backend;
            if !self.live.contains(&id) && !self.tombstones.contains_key(&id) {
                return Ok(id);
            }
        }
        // Every id is bound: recycle the oldest tombstone.
        let (&id, &(pair, _)) = self
            .tombstones
            .iter()
            .min_by_key(|(_, (_, seq))| *seq)
            .ok_or(IdError::NoBackendId)?;
        self.tombstones.remove(&id);
        if let Some(pair) = pair {
            self.backends.remove(&pair);
        }
        Ok(id)
    }

    /// Marks backend `key` of `vip` removed: its id becomes a tombstone.
    pub(crate) fn release_backend(&mut self, vip: Vip, key: BackendKey) {
        if let Some(&id) = self.backends.get(&(vip, key)) {
            self.live.remove(&id);
            self.removals += 1;
            self.tombstones
                .insert(id, (Some((vip, key)), self.removals));
        }
    }

    /// Binds `vip` to `id` as in use (recovery from a data plane's `VIPS`).
    pub(crate) fn bind_vip(&mut self, vip: Vip, id: u32) {
        if let Some(old) = self.vips.insert(vip, id)
            && self.vips_in_use.get(&old) == Some(&vip)
        {
            self.vips_in_use.remove(&old);
        }
        self.vips_in_use.insert(id, vip);
    }

    /// Binds backend `key` of `vip` to `id`, live (recovery from a data plane's table).
    pub(crate) fn bind_backend(&mut self, vip: Vip, key: BackendKey, id: u32) {
        if let Some(old) = self.backends.insert((vip, key), id)
            && old != id
        {
            self.live.remove(&old);
        }
        self.tombstones.remove(&id);
        self.live.insert(id);
    }

    /// Whether `id` is bound (live or tombstone).
    pub(crate) fn is_bound(&self, id: u32) -> bool {
        self.live.contains(&id) || self.tombstones.contains_key(&id)
    }

    /// Keeps `id`, used by a recovered data plane for a pair no record names, from being
    /// handed out before every other free id.
    pub(crate) fn reserve_unknown(&mut self, id: u32) {
        if !self.is_bound(id) {
            self.tombstones.insert(id, (None, 0));
        }
    }

    /// The id of backend `key` of `vip`, if it has one (live or tombstone).
    pub(crate) fn backend_id(&self, vip: &Vip, key: &BackendKey) -> Option<u32> {
        self.backends.get(&(*vip, *key)).copied()
    }

    /// Marks only the VIPs of `applied` in use (recovery: a record written ahead of a
    /// change may name VIPs the data plane never got).
    pub(crate) fn keep_vips_in_use(&mut self, applied: &BTreeSet<Vip>) {
        self.vips_in_use.retain(|_, v| applied.contains(v));
    }

    /// The tables in their stored form.
    pub(crate) fn to_record(&self) -> IdsRecord {
        let mut backends: Vec<(Vip, BackendKey, u32)> = self
            .backends
            .iter()
            .map(|((v, k), id)| (*v, *k, *id))
            .collect();
        backends.sort();
        IdsRecord {
            vips: self.vips.iter().map(|(v, id)| (*v, *id)).collect(),
            vips_in_use: self.vips_in_use.keys().copied().collect(),
            backends,
            live: self.live.iter().copied().collect(),
            tombstones: self
                .tombstones
                .iter()
                .map(|(id, (pair, seq))| (*id, *pair, *seq))
                .collect(),
            removals: self.removals,
            next_backend: self.next_backend,
        }
    }

    /// The tables from their stored form.
    pub(crate) fn from_record(r: &IdsRecord) -> Self {
        let vips: BTreeMap<Vip, u32> = r.vips.iter().copied().collect();
        let vips_in_use = vips
            .iter()
            .filter(|(_, id)| r.vips_in_use.contains(id))
            .map(|(v, id)| (*id, *v))
            .collect();
        Self {
            vips,
            vips_in_use,
            backends: r
                .backends
                .iter()
                .map(|(v, k, id)| ((*v, *k), *id))
                .collect(),
            live: r.live.iter().copied().collect(),
            tombstones: r
                .tombstones
                .iter()
                .map(|(id, pair, seq)| (*id, (*pair, *seq)))
                .collect(),
            removals: r.removals,
            next_backend: r.next_backend,
        }
    }
}

/// A (VIP, backend) pair.
type Pair = (Vip, BackendKey);

/// [`Ids`] as the controller's record stores them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct IdsRecord {
    /// VIP → its id (remembered after removal).
    vips: Vec<(Vip, u32)>,
    /// Ids of configured VIPs.
    vips_in_use: Vec<u32>,
    /// (VIP, backend) → id, live and tombstones.
    backends: Vec<(Vip, BackendKey, u32)>,
    /// Ids of live backends.
    live: Vec<u32>,
    /// Tombstones: id, pair (if known), removal sequence number.
    tombstones: Vec<(u32, Option<Pair>, u64)>,
    removals: u64,
    next_backend: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vip(port: u16) -> Vip {
        format!("203.0.113.10:{port}/tcp").parse().unwrap()
    }

    fn key(last: u8) -> BackendKey {
        format!("198.51.100.{last}").parse().unwrap()
    }

    #[test]
    fn backend_ids_are_stable_and_not_reused_after_removal() {
        let mut ids = Ids::default();
        let a = ids.backend(vip(80), key(1)).unwrap();
        let b = ids.backend(vip(80), key(2)).unwrap();
        assert_ne!(a, b);
        assert_eq!(ids.backend(vip(80), key(1)).unwrap(), a, "stable");
        ids.release_backend(vip(80), key(1));
        let c = ids.backend(vip(80), key(3)).unwrap();
        assert!(
            c != a && c != b,
            "a removed backend's id is not given to another"
        );
        assert_eq!(
            ids.backend(vip(80), key(1)).unwrap(),
            a,
            "re-added gets its id back"
        );
        // The same address in another VIP is another backend.
        assert_ne!(ids.backend(vip(443), key(1)).unwrap(), a);
        assert!(ids.backend(vip(80), key(1)).unwrap() > 0, "0 means none");
    }

    #[test]
    fn tombstones_are_recycled_oldest_first_when_ids_run_out() {
        let mut ids = Ids::default();
        let mut all = Vec::new();
        for i in 0..(MAX_BACKENDS - 1) {
            let k = BackendKey::from(std::net::IpAddr::from(std::net::Ipv4Addr::from(
                0x0a00_0000 + i,
            )));
            all.push((k, ids.backend(vip(80), k).unwrap()));
        }
        let extra: BackendKey = "192.0.2.99".parse().unwrap();
        assert_eq!(ids.backend(vip(80), extra), Err(IdError::NoBackendId));
        ids.release_backend(vip(80), all[5].0);
        ids.release_backend(vip(80), all[3].0);
        assert_eq!(
            ids.backend(vip(80), extra).unwrap(),
            all[5].1,
            "oldest tombstone"
        );
    }

    #[test]
    fn the_record_form_keeps_every_binding_and_the_allocation_order() {
        let mut ids = Ids::default();
        ids.vip(vip(80)).unwrap();
        let a = ids.backend(vip(80), key(1)).unwrap();
        let b = ids.backend(vip(80), key(2)).unwrap();
        ids.release_backend(vip(80), key(2));
        ids.reserve_unknown(40);
        let json = serde_json::to_string(&ids.to_record()).unwrap();
        let mut back = Ids::from_record(&serde_json::from_str(&json).unwrap());
        assert_eq!(back.backend(vip(80), key(1)).unwrap(), a, "live kept");
        assert_eq!(back.backend(vip(80), key(2)).unwrap(), b, "tombstone kept");
        let fresh = back.backend(vip(80), key(3)).unwrap();
        assert_eq!(
            fresh,
            ids.clone().backend(vip(80), key(3)).unwrap(),
            "same order"
        );
        assert!(![a, b, 40].contains(&fresh));
        assert_eq!(back.vip(vip(80)).unwrap(), 0);
    }

    #[test]
    fn vips_get_their_id_back_and_the_lowest_free_otherwise() {
        let mut ids = Ids::default();
        assert_eq!(ids.vip(vip(80)).unwrap(), 0);
        assert_eq!(ids.vip(vip(81)).unwrap(), 1);
        assert_eq!(ids.vip(vip(80)).unwrap(), 0, "stable while in use");
        ids.release_vip(&vip(80));
        assert_eq!(ids.vip(vip(82)).unwrap(), 0, "lowest free id");
        assert_eq!(ids.vip(vip(80)).unwrap(), 2, "its old id is taken");
    }
}
