//! Maglev (Eisenbud et al., NSDI 2016, section 3.4) as the lab runs it: the project's own
//! builder, [`lb_maglev::MaglevTable`], and the data plane's lookup,
//! `table[hash mod M]`.
//!
//! The builder identifies backends by address ([`BackendKey`]). A server whose name is
//! an address (`198.51.100.11`, `[2001:db8::1]:80`) is that backend, so the lab's table
//! is the one `lb table build` prints for the same addresses, size and seed. Any other
//! name stands for the IPv6 address `2001:db8::/32` + the first 96 bits of the
//! XXH3-128 of the name (seed 0), a documentation address that only this lab uses.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv6Addr},
};

use super::servers::Server;
use lb_maglev::{Backend, BackendKey, MaglevError, MaglevTable};

/// A built Maglev table and the server of each backend.
#[derive(Clone)]
pub struct Maglev {
    table: MaglevTable,
    /// Server index of each table backend (the builder sorts backends by key).
    server_of_backend: Vec<u32>,
}

/// The backend key a server name stands for (module documentation).
#[must_use]
pub fn backend_key(name: &str) -> BackendKey {
    if let Ok(key) = name.parse::<BackendKey>() {
        return key;
    }
    let digest = xxhash_rust::xxh3::xxh3_128(name.as_bytes());
    let address = (0x2001_0db8_u128 << 96) | (digest >> 32);
    BackendKey::new(IpAddr::V6(Ipv6Addr::from(address)), None)
}

impl Maglev {
    /// Builds the table of `size` slots (a prime) with seed `seed` for `servers`;
    /// `Ok(None)` when no server has weight > 0 (an empty table).
    ///
    /// # Errors
    /// The builder's [`MaglevError`]: the size is not a prime in range or is below the
    /// server count, or two names stand for the same backend.
    pub fn build(servers: &[Server], size: u32, seed: u64) -> Result<Option<Self>, MaglevError> {
        let backends: Vec<Backend> = servers
            .iter()
            .map(|s| Backend::new(backend_key(&s.name), s.weight))
            .collect();
        let table = MaglevTable::build(&backends, size, seed)?;
        if table.is_empty() {
            return Ok(None);
        }
        let index: HashMap<BackendKey, u32> = backends
            .iter()
            .zip(0_u32..)
            .map(|(b, i)| (b.key, i))
            .collect();
        let server_of_backend = table.backends().iter().map(|b| index[&b.key]).collect();
        Ok(Some(Self {
            table,
            server_of_backend,
        }))
    }

    /// The owner (server index) of a key hash: `table[hash mod M]`.
    #[must_use]
    pub fn lookup(&self, hash: u64) -> usize {
        let slots = self.table.slots();
        // hash mod M < M <= MAX_TABLE_SIZE fits a usize.
        let slot = usize::try_from(hash % u64::from(self.table.size())).unwrap_or(0);
        self.server_of_backend[slots[slot] as usize] as usize
    }

    /// The table (for fingerprints and slot counts).
    #[must_use]
    pub fn table(&self) -> &MaglevTable {
        &self.table
    }

    /// Bytes the lookup reads: `M` 4-byte slots, the backends and the server map.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        size_of_val(self.table.slots())
            + size_of_val(self.table.backends())
            + size_of_val(self.server_of_backend.as_slice())
    }
}
