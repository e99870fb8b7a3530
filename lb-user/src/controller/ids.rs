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

use std::collections::{BTreeMap, BTreeSet, HashMap};

use lb_common::maps::{MAX_BACKENDS, MAX_VIPS};

use crate::{config::Vip, maglev::BackendKey};

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
    /// Tombstones: id → (pair, removal sequence number).
    tombstones: BTreeMap<u32, ((Vip, BackendKey), u64)>,
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
        self.backends.remove(&pair);
        Ok(id)
    }

    /// Marks backend `key` of `vip` removed: its id becomes a tombstone.
    pub(crate) fn release_backend(&mut self, vip: Vip, key: BackendKey) {
        if let Some(&id) = self.backends.get(&(vip, key)) {
            self.live.remove(&id);
            self.removals += 1;
            self.tombstones.insert(id, ((vip, key), self.removals));
        }
    }
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
