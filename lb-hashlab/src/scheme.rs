//! [`SchemeKind`], the names `--schemes` accepts, and [`Scheme`], one built scheme behind
//! one interface: build from a server list, assign keys, memory, one lookup.

use std::fmt;

use super::{
    bounded, hashes::KeyHash, jump::Jump, maglev::Maglev, modn::ModN, rendezvous::Rendezvous,
    ring::Ring, servers::Server,
};
use lb_maglev::defaults;

/// The schemes of the lab, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SchemeKind {
    /// [`super::modn`].
    ModN,
    /// [`super::ring`].
    Ring,
    /// [`super::rendezvous`].
    Rendezvous,
    /// [`super::jump`].
    Jump,
    /// [`super::maglev`].
    Maglev,
    /// [`super::bounded`].
    Bounded,
    /// [`super::ketama`]: the ring libketama places, its own MD5 key hash.
    Ketama,
    /// [`super::nginx`]: the ring nginx's `hash ... consistent` places, CRC-32 key hash.
    Nginx,
}

impl SchemeKind {
    /// Every scheme, in report order.
    pub const ALL: [Self; 8] = [
        Self::ModN,
        Self::Ring,
        Self::Rendezvous,
        Self::Jump,
        Self::Maglev,
        Self::Bounded,
        Self::Ketama,
        Self::Nginx,
    ];

    /// The name `--schemes` uses.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::ModN => "modn",
            Self::Ring => "ring",
            Self::Rendezvous => "rendezvous",
            Self::Jump => "jump",
            Self::Maglev => "maglev",
            Self::Bounded => "bounded",
            Self::Ketama => "ketama",
            Self::Nginx => "nginx",
        }
    }

    /// Whether the scheme honours weights (mod-N and jump do not).
    #[must_use]
    pub fn is_weighted(self) -> bool {
        !matches!(self, Self::ModN | Self::Jump)
    }

    /// Whether the scheme numbers servers by list position (mod-N and jump); the others
    /// depend only on the set of (name, weight) pairs.
    #[must_use]
    pub fn is_positional(self) -> bool {
        matches!(self, Self::ModN | Self::Jump)
    }
}

impl fmt::Display for SchemeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SchemeKind {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.name() == text)
            .ok_or_else(|| {
                format!(
                    "unknown scheme {text:?}: modn, ring, rendezvous, jump, maglev, bounded, \
                     ketama or nginx"
                )
            })
    }
}

/// What every scheme is built with.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// The key hash (also of ring points and rendezvous pairs).
    pub hash: KeyHash,
    /// Ring points per unit of weight (ring and bounded).
    pub vnodes: u32,
    /// Bounded load's `epsilon` (> 0).
    pub epsilon: f64,
    /// Maglev table size `M` (a prime).
    pub table_size: u32,
    /// Maglev's backend hash seed.
    pub maglev_seed: u64,
    /// A small hash space `0..S` for worked examples: key hashes and ring positions are
    /// taken mod `S` (rendezvous scores are not). `None`: the hash's full width.
    pub space: Option<u64>,
    /// Explicit ring points of some servers (worked examples; [`super::ring`]).
    pub positions: super::ring::Positions,
}

impl Params {
    /// The hash of a key as every scheme but rendezvous sees it: [`KeyHash::key`], mod
    /// the space when there is one.
    #[must_use]
    pub fn key_hash(&self, key: &str) -> u64 {
        let h = self.hash.key(key);
        self.space.map_or(h, |s| h % s.max(1))
    }
}

impl Default for Params {
    /// XXH3 seed 0, `V` = 100, `epsilon` = 0.25, the controller's Maglev size and seed.
    fn default() -> Self {
        Self {
            hash: KeyHash::Xxh3 { seed: 0 },
            vnodes: 100,
            epsilon: 0.25,
            table_size: defaults::TABLE_SIZE,
            maglev_seed: defaults::MAGLEV_SEED,
            space: None,
            positions: Vec::new(),
        }
    }
}

/// Why a scheme cannot be built for a server list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The ring's reason.
    #[error(transparent)]
    Ring(#[from] super::ring::RingError),
    /// The Maglev builder's reason.
    #[error(transparent)]
    Maglev(#[from] lb_maglev::MaglevError),
    /// No server (or no server with weight > 0 for weighted schemes).
    #[error("no server to place keys on")]
    NoServer,
}

/// One built scheme. Lookups return indices into the server list it was built from.
#[derive(Clone)]
pub enum Scheme {
    /// mod-N.
    ModN(ModN),
    /// The ring.
    Ring(Ring),
    /// Rendezvous.
    Rendezvous(Rendezvous),
    /// Jump.
    Jump(Jump),
    /// Maglev.
    Maglev(Box<Maglev>),
    /// Bounded load on a ring: the ring, the weights and `epsilon`.
    Bounded {
        /// The ring keys walk.
        ring: Ring,
        /// The servers (capacities follow their weights).
        servers: Vec<Server>,
        /// Capacity factor `1 + epsilon`.
        epsilon: f64,
    },
    /// libketama's ring.
    Ketama(Ring),
    /// nginx's ring.
    Nginx(Ring),
}

impl Scheme {
    /// Builds scheme `kind` over `servers` (distinct names, one with weight > 0).
    ///
    /// # Errors
    /// [`BuildError`]: `V` = 0 or too many points, a Maglev size that is not a usable
    /// prime, or two names standing for one Maglev backend.
    pub fn build(
        kind: SchemeKind,
        servers: &[Server],
        params: &Params,
    ) -> Result<Self, BuildError> {
        Ok(match kind {
            SchemeKind::ModN => Self::ModN(ModN::new(servers.len()).ok_or(BuildError::NoServer)?),
            SchemeKind::Ring => Self::Ring(Ring::build_params(servers, params.vnodes, params)?),
            SchemeKind::Rendezvous => {
                Self::Rendezvous(Rendezvous::new(servers, params.hash).ok_or(BuildError::NoServer)?)
            }
            SchemeKind::Jump => Self::Jump(Jump::new(servers.len()).ok_or(BuildError::NoServer)?),
            SchemeKind::Maglev => Self::Maglev(Box::new(
                Maglev::build(servers, params.table_size, params.maglev_seed)?
                    .ok_or(BuildError::NoServer)?,
            )),
            SchemeKind::Ketama => {
                Self::Ketama(super::ketama::ring(servers).ok_or(BuildError::NoServer)?)
            }
            SchemeKind::Nginx => {
                Self::Nginx(super::nginx::ring(servers).ok_or(BuildError::NoServer)?)
            }
            SchemeKind::Bounded => Self::Bounded {
                ring: Ring::build_params(servers, params.vnodes, params)?,
                servers: servers.to_vec(),
                epsilon: params.epsilon,
            },
        })
    }

    /// The server of one key (`hash` is its [`KeyHash::key`]). For bounded load, the
    /// key's first choice on the ring (placement needs every key: [`Scheme::assign`]).
    #[must_use]
    pub fn lookup(&self, key: &str, hash: u64) -> usize {
        match self {
            Self::ModN(m) => m.lookup(hash),
            Self::Ring(r) | Self::Bounded { ring: r, .. } => r.lookup(hash),
            Self::Rendezvous(r) => r.lookup(key),
            Self::Jump(j) => j.lookup(hash),
            Self::Maglev(m) => m.lookup(hash),
            Self::Ketama(r) => r.lookup(super::ketama::key_hash(key.as_bytes())),
            Self::Nginx(r) => r.lookup(super::nginx::key_hash(key.as_bytes())),
        }
    }

    /// The server of every key (`hashes[i]` the hash of `keys[i]`), in key order.
    #[must_use]
    pub fn assign(&self, keys: &[String], hashes: &[u64]) -> Vec<usize> {
        match self {
            Self::Bounded {
                ring,
                servers,
                epsilon,
            } => bounded::place(ring, servers, hashes, *epsilon),
            _ => keys
                .iter()
                .zip(hashes)
                .map(|(key, &hash)| self.lookup(key, hash))
                .collect(),
        }
    }

    /// Bytes the lookup reads; for bounded load the ring plus the placement of `keys`
    /// keys (4 bytes each).
    #[must_use]
    pub fn memory_bytes(&self, keys: usize) -> usize {
        match self {
            Self::ModN(m) => m.memory_bytes(),
            Self::Ring(r) => r.memory_bytes(),
            Self::Rendezvous(r) => r.memory_bytes(),
            Self::Jump(j) => j.memory_bytes(),
            Self::Maglev(m) => m.memory_bytes(),
            Self::Bounded { ring, .. } => ring.memory_bytes() + keys * size_of::<u32>(),
            Self::Ketama(r) | Self::Nginx(r) => r.memory_bytes(),
        }
    }
}
