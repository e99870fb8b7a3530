//! The ring nginx's `hash KEY consistent` places (ngx_http_upstream_hash_module, its
//! ketama-compatible mode), following its published algorithm, so that a user can
//! predict nginx's choices on the same keys:
//!
//! - a server `host:port` (split at the last `:` followed by digits only; without one
//!   the port is empty) of weight `w` gets `160 * w` points; with
//!   `base = host + "\0" + port`, point `j` is `CRC-32(base + prev)`, `prev` being the
//!   previous point as 4 little-endian bytes (0 for the first);
//! - a key's hash is the CRC-32 (IEEE, as zlib) of the key;
//! - its server owns the first point at or after that hash, wrapping to the first point;
//!   of equal points the first in sorted order is kept.
//!
//! Not yet one of `lb hash`'s `--schemes`; the tests pin it to values computed by an
//! independent implementation (Python's zlib).

use super::{ring::Ring, servers::Server};

/// `(host, port)` of a server name as nginx splits it.
#[must_use]
pub fn host_port(name: &str) -> (&str, &str) {
    if let Some(rest) = name.strip_prefix("unix:") {
        return (rest, "");
    }
    match name.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => (host, port),
        _ => (name, ""),
    }
}

/// The points of `servers` as `(position, server index)`.
#[must_use]
pub fn points(servers: &[Server]) -> Vec<(u64, u32)> {
    let mut points = Vec::new();
    for (index, server) in (0_u32..).zip(servers) {
        let (host, port) = host_port(&server.name);
        let mut base = Vec::with_capacity(host.len() + port.len() + 5);
        base.extend_from_slice(host.as_bytes());
        base.push(0);
        base.extend_from_slice(port.as_bytes());
        let mut prev = 0_u32;
        for _ in 0..160 * u64::from(server.weight) {
            let mut hasher = crc32fast::Hasher::new();
            hasher.update(&base);
            hasher.update(&prev.to_le_bytes());
            prev = hasher.finalize();
            points.push((u64::from(prev), index));
        }
    }
    points
}

/// The ring of `servers` as nginx builds it; `None` when no server has weight > 0.
#[must_use]
pub fn ring(servers: &[Server]) -> Option<Ring> {
    Ring::with_points(points(servers))
}

/// The hash of a key: its CRC-32.
#[must_use]
pub fn key_hash(key: &[u8]) -> u64 {
    u64::from(crc32fast::hash(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_servers;

    #[test]
    fn splits_like_nginx() {
        assert_eq!(host_port("10.0.3.11:8080"), ("10.0.3.11", "8080"));
        assert_eq!(host_port("backend"), ("backend", ""));
        assert_eq!(host_port("unix:/tmp/s"), ("/tmp/s", ""));
        assert_eq!(host_port("[::1]:80"), ("[::1]", "80"));
    }

    #[test]
    fn matches_an_independent_implementation() {
        let servers = parse_servers("10.0.3.11:8080,10.0.3.12:8080,10.0.3.13:8080=2").unwrap();
        let ring = ring(&servers).unwrap();
        let (positions, owners) = ring.points_and_owners();
        assert_eq!(positions.len(), 640);
        assert_eq!(&positions[..3], [3_151_593, 7_121_219, 7_144_585]);
        assert_eq!(&owners[..3], [2, 0, 2]);
        for (key, hash, owner) in [
            ("user:42", 1_684_999_558, 0),
            ("foo", 2_356_372_769, 1),
            ("bar", 1_996_459_178, 2),
        ] {
            assert_eq!(key_hash(key.as_bytes()), hash, "{key}");
            assert_eq!(ring.lookup(hash), owner, "{key}");
        }
    }
}
