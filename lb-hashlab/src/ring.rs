//! The hash ring with virtual nodes: Karger et al., "Consistent Hashing and Random Trees",
//! STOC 1997, section 4, as ketama (last.fm, 2007) and Dynamo (DeCandia et al., SOSP
//! 2007, section 4.2) deploy it.
//!
//! Server `NAME` of weight `w` has `V * w` points, point `i` at `hash("NAME#i")` for `i`
//! in `0..V*w` (weight 0: no points). The owner of a key is the server of the first point
//! clockwise, the first point `>=` the key's hash (binary search), wrapping past the
//! largest point to the smallest; a key hash equal to a point belongs to that point. Two
//! servers whose points collide keep one point, the one of the lower name (byte order),
//! so the ring depends only on the set of (name, weight) pairs, never on the list order.
//! A key's preference list is the first `RF` distinct servers clockwise.
//!
//! Worked examples ([`Ring::build_params`]): a hash space `0..S` (`--space S`: every
//! position and key hash taken mod `S`) and explicit positions (`--positions
//! A=105,930`), which replace a server's hashed points whatever its weight.
//!
//! Memory: 12 bytes per point (an 8-byte position array searched by the lookup and a
//! 4-byte owner array). Lookup: one binary search, `log2(points)` probes.

use super::{hashes::KeyHash, scheme::Params, servers::Server};

/// Points a ring may hold: 2^26 (768 MiB of positions and owners).
pub const MAX_POINTS: u64 = 1 << 26;

/// Why a ring cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// `V` was 0.
    #[error("0 virtual nodes: every server needs at least one point")]
    NoVirtualNodes,
    /// No server has weight > 0.
    #[error("no server with weight > 0: the ring has no points")]
    NoPoints,
    /// `V * sum(weights)` is above [`MAX_POINTS`].
    #[error("{points} points (V x the sum of the weights) is more than {MAX_POINTS}")]
    TooManyPoints {
        /// The points asked for.
        points: u64,
    },
    /// An explicit position is outside the hash space `0..space`.
    #[error("position {position} of server {name:?} is outside the hash space 0..{space}")]
    OutsideSpace {
        /// The server.
        name: String,
        /// Its position.
        position: u64,
        /// The size of the hash space.
        space: u64,
    },
}

/// Explicit ring positions: `(server name, its points)`, as `--positions` gives them.
pub type Positions = Vec<(String, Vec<u64>)>;

/// Parses one `--positions` item, `NAME=P[,P...]` (each `P` a decimal `u64`).
///
/// # Errors
/// No `=`, an empty name, no position or one that is not a decimal integer.
pub fn parse_positions(text: &str) -> Result<(String, Vec<u64>), String> {
    let (name, list) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected NAME=P[,P...]"))?;
    if name.is_empty() {
        return Err(format!("{text:?}: empty server name"));
    }
    let points = list
        .split(',')
        .map(|p| {
            p.trim().parse::<u64>().map_err(|_| {
                format!("{text:?}: position {p:?} of {name:?} is not an integer from 0")
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((name.to_owned(), points))
}

/// A built ring: sorted positions and their owners (indices into the server list the
/// ring was built from). Never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    positions: Vec<u64>,
    owners: Vec<u32>,
}

impl Ring {
    /// Builds the ring of `servers` (distinct names, the caller checks) with `vnodes`
    /// points per unit of weight, hashing point names with `hash`.
    ///
    /// # Errors
    /// [`RingError`]: `vnodes` is 0, no point at all, or too many points.
    pub fn build(servers: &[Server], vnodes: u32, hash: &KeyHash) -> Result<Self, RingError> {
        if vnodes == 0 {
            return Err(RingError::NoVirtualNodes);
        }
        let total: u64 = servers
            .iter()
            .map(|s| u64::from(vnodes) * u64::from(s.weight))
            .sum();
        if total == 0 {
            return Err(RingError::NoPoints);
        }
        if total > MAX_POINTS || u32::try_from(servers.len()).is_err() {
            return Err(RingError::TooManyPoints { points: total });
        }
        // (position, server index); total <= MAX_POINTS fits a usize.
        let mut points: Vec<(u64, u32)> = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
        let mut name = String::new();
        for (index, server) in (0_u32..).zip(servers) {
            for i in 0..u64::from(vnodes) * u64::from(server.weight) {
                name.clear();
                name.push_str(&server.name);
                name.push('#');
                name.push_str(&i.to_string());
                points.push((hash.bytes(name.as_bytes()), index));
            }
        }
        let name_of = |index: u32| servers[index as usize].name.as_bytes();
        points.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| name_of(a.1).cmp(name_of(b.1))));
        points.dedup_by_key(|point| point.0);
        Ok(Self::from_points(points))
    }

    /// The ring of `servers` as `params` asks: [`Ring::build`] with `vnodes` points per
    /// unit of weight, except that a server named in `params.positions` has exactly
    /// those points, and with `params.space` every hashed position is taken mod the space.
    ///
    /// # Errors
    /// [`RingError`]: as [`Ring::build`], or an explicit position outside the space.
    pub fn build_params(
        servers: &[Server],
        vnodes: u32,
        params: &Params,
    ) -> Result<Self, RingError> {
        if params.space.is_none() && params.positions.is_empty() {
            return Self::build(servers, vnodes, &params.hash);
        }
        if vnodes == 0 {
            return Err(RingError::NoVirtualNodes);
        }
        let mut points: Vec<(u64, u32)> = Vec::new();
        for (index, server) in (0_u32..).zip(servers) {
            let given = params
                .positions
                .iter()
                .find(|(name, _)| *name == server.name);
            if let Some((name, list)) = given {
                for &position in list {
                    if let Some(space) = params.space.filter(|&s| position >= s) {
                        return Err(RingError::OutsideSpace {
                            name: name.clone(),
                            position,
                            space,
                        });
                    }
                    points.push((position, index));
                }
                continue;
            }
            let count = u64::from(vnodes) * u64::from(server.weight);
            if count > MAX_POINTS {
                return Err(RingError::TooManyPoints { points: count });
            }
            for i in 0..count {
                let h = params.hash.bytes(format!("{}#{i}", server.name).as_bytes());
                points.push((params.space.map_or(h, |s| h % s), index));
            }
        }
        if points.is_empty() {
            return Err(RingError::NoPoints);
        }
        let name_of = |index: u32| servers[index as usize].name.as_bytes();
        points.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| name_of(a.1).cmp(name_of(b.1))));
        points.dedup_by_key(|point| point.0);
        Ok(Self::from_points(points))
    }

    /// The sorted positions and their owners (server indices), for worked examples.
    #[must_use]
    pub fn points_and_owners(&self) -> (&[u64], &[u32]) {
        (&self.positions, &self.owners)
    }

    /// A ring of explicit `(position, owner)` points (any order; the first of equal
    /// positions after a stable sort is kept), for tests and worked examples.
    /// `None` when `points` is empty.
    #[must_use]
    pub fn with_points(mut points: Vec<(u64, u32)>) -> Option<Self> {
        if points.is_empty() {
            return None;
        }
        points.sort_by_key(|point| point.0);
        points.dedup_by_key(|point| point.0);
        Some(Self::from_points(points))
    }

    fn from_points(points: Vec<(u64, u32)>) -> Self {
        let (positions, owners) = points.into_iter().unzip();
        Self { positions, owners }
    }

    /// The index of the first point `>=` `hash`, wrapping to 0 past the largest.
    #[must_use]
    pub fn first_point(&self, hash: u64) -> usize {
        let at = self.positions.partition_point(|&p| p < hash);
        if at == self.positions.len() { 0 } else { at }
    }

    /// The owner (server index) of a key hash.
    #[must_use]
    pub fn lookup(&self, hash: u64) -> usize {
        self.owners[self.first_point(hash)] as usize
    }

    /// The owners of every point clockwise from the key's first point, once round the
    /// ring (servers repeat: one entry per point).
    pub fn walk(&self, hash: u64) -> impl Iterator<Item = usize> + '_ {
        let start = self.first_point(hash);
        self.owners[start..]
            .iter()
            .chain(&self.owners[..start])
            .map(|&owner| owner as usize)
    }

    /// The preference list of a key hash: the first `rf` distinct servers clockwise
    /// (fewer when the ring has fewer servers).
    #[must_use]
    pub fn preference(&self, hash: u64, rf: usize) -> Vec<usize> {
        let mut list = Vec::with_capacity(rf);
        for owner in self.walk(hash) {
            if list.len() == rf {
                break;
            }
            if !list.contains(&owner) {
                list.push(owner);
            }
        }
        list
    }

    /// The number of points (after collisions).
    #[must_use]
    pub fn points(&self) -> usize {
        self.positions.len()
    }

    /// Bytes the lookup reads: positions and owners.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.positions.len() * size_of::<u64>() + self.owners.len() * size_of::<u32>()
    }
}
