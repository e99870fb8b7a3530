//! The ring as libketama places it (Last.fm, 2007; the memcached clients' "ketama"),
//! following its published algorithm, so that a user can predict those clients' choices
//! on the same keys:
//!
//! - server `i` of weight `w_i` (total `W`, `N` servers) gets
//!   `ks = floor(f32(w_i / W) * 40 * N)` MD5 digests, of the texts `"NAME-0"` ..
//!   `"NAME-(ks-1)"` (`NAME` is `host:port` in memcached clients), and each 16-byte digest
//!   gives 4 points, its bytes `4h .. 4h+3` read as a little-endian `u32` (`h` in 0..4):
//!   160 points per server with equal weights;
//! - a key's hash is the first 4 bytes of MD5(key), little-endian;
//! - its server owns the first point at or after that hash, wrapping to the first point.
//!
//! Not yet one of `lb hash`'s `--schemes`; the tests pin it to values computed by an
//! independent implementation (Python's hashlib).

use md5::{Digest, Md5};

use super::{ring::Ring, servers::Server};

/// The points of `servers` (weight 0: none) as `(position, server index)`.
#[must_use]
pub fn points(servers: &[Server]) -> Vec<(u64, u32)> {
    let total: u64 = servers.iter().map(|s| u64::from(s.weight)).sum();
    let active = servers.iter().filter(|s| s.weight > 0).count();
    let mut points = Vec::new();
    for (index, server) in (0_u32..).zip(servers) {
        if server.weight == 0 || total == 0 {
            continue;
        }
        // libketama computes the share as a float (single precision), then
        // floor(share * 40.0 * N) in double.
        #[expect(
            clippy::cast_possible_truncation,
            reason = "libketama's share is a single-precision float"
        )]
        let share = (f64::from(server.weight) / total as f64) as f32;
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a small non-negative count of digests"
        )]
        let digests = (f64::from(share) * 40.0 * active as f64).floor() as u32;
        for k in 0..digests {
            let digest = Md5::digest(format!("{}-{k}", server.name).as_bytes());
            for word in digest.chunks_exact(4) {
                let point = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
                points.push((u64::from(point), index));
            }
        }
    }
    points
}

/// The ring of `servers` as libketama builds it; `None` when no server has weight > 0.
#[must_use]
pub fn ring(servers: &[Server]) -> Option<Ring> {
    Ring::with_points(points(servers))
}

/// The hash of a key: the first 4 bytes of MD5(key), little-endian.
#[must_use]
pub fn key_hash(key: &[u8]) -> u64 {
    let digest = Md5::digest(key);
    u64::from(u32::from_le_bytes([
        digest[0], digest[1], digest[2], digest[3],
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_servers;

    #[test]
    fn matches_an_independent_implementation() {
        let servers = parse_servers("10.0.3.11:8080,10.0.3.12:8080,10.0.3.13:8080=2").unwrap();
        let points = points(&servers);
        assert_eq!(points.len(), 480);
        let heavy = points.iter().filter(|p| p.1 == 2).count();
        assert_eq!(heavy, 240);
        let ring = ring(&servers).unwrap();
        let (positions, owners) = ring.points_and_owners();
        assert_eq!(&positions[..3], [1_525_843, 6_306_969, 18_533_103]);
        assert_eq!(&owners[..3], [0, 2, 2]);
        for (key, hash, owner) in [
            ("user:42", 417_323_606, 2),
            ("foo", 3_675_831_724, 2),
            ("bar", 421_377_335, 2),
        ] {
            assert_eq!(key_hash(key.as_bytes()), hash, "{key}");
            assert_eq!(ring.lookup(hash), owner, "{key}");
        }
    }
}
