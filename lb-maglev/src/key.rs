//! Backend identity: [`BackendKey`], the canonical key that Maglev hashes, sorts and
//! fingerprints, and its canonical text form.
//!
//! A backend is identified by its address and optional port, never by its position in a
//! list or an internal id: the key is what Maglev hashes into the backend's permutation,
//! so every instance given the same backends builds the same table, whatever their order
//! or ids. Two spellings of the same address are the same backend: `2001:db8::1` and
//! `2001:0db8:0:0::1`, and the IPv4-mapped IPv6 address `::ffff:198.51.100.11` and
//! `198.51.100.11`; otherwise one server listed twice would get two permutations and
//! two shares (BR-06.T2).
//!
//! The canonical text is produced here, not by `std`'s `Display` for addresses, so that
//! the bytes hashed into every table cannot change with the Rust version:
//! - IPv4: dotted decimal without leading zeros (`198.51.100.11`);
//! - IPv6: RFC 5952 section 4: lowercase hexadecimal, leading zeros of each 16-bit group
//!   removed, the longest run of two or more all-zero groups (the first one on a tie)
//!   replaced by `::`, never the mixed IPv4 notation (`2001:db8::1`, `::`, `64:ff9b::c633:640b`);
//! - with a port: `198.51.100.11:8080` and `[2001:db8::1]:80`.

use std::{
    cmp::Ordering,
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    str::FromStr,
};

use super::MaglevError;

/// Length in bytes of the longest canonical text,
/// `[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535`.
pub const MAX_KEY_TEXT_LEN: usize = 47;

/// The canonical identity of a backend: an IP address (IPv4-mapped IPv6 addresses are
/// stored as IPv4) and an optional port.
///
/// Build one from text with [`FromStr`] (`ADDR`, `ADDR:PORT`, `[V6ADDR]` or
/// `[V6ADDR]:PORT`; a bare IPv6 address never carries a port, so `2001:db8::1:80` is an
/// address) or from an [`IpAddr`] / [`SocketAddr`] with [`From`]. [`fmt::Display`] prints
/// the canonical text described in the module documentation; it parses back to an
/// equal key.
///
/// The port is part of the identity: `198.51.100.11:8080`, `198.51.100.11:8081` and
/// `198.51.100.11` are three backends, each with its own share of the table (BR-06.T3,
/// at table level; whether ports are allowed at all is the configuration's decision).
/// Port 0 carries no special meaning.
///
/// # Order
/// [`Ord`] sorts IPv4 before IPv6, then by address bytes in network order (numerically:
/// `198.51.100.2` < `198.51.100.11`), then no port before any port, then by port number.
/// Tables index backends in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BackendKey {
    /// Never an IPv4-mapped IPv6 address (those are stored as IPv4).
    ip: IpAddr,
    port: Option<u16>,
}

impl BackendKey {
    /// A key for `ip` with an optional `port`; an IPv4-mapped IPv6 address becomes IPv4.
    #[must_use]
    pub fn new(ip: IpAddr, port: Option<u16>) -> Self {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            IpAddr::V4(_) => ip,
        };
        Self { ip, port }
    }

    /// The backend's address (IPv4 for IPv4-mapped input).
    #[must_use]
    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// The backend's port, if one was given.
    #[must_use]
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// The canonical text in a stack buffer (no allocation): what is hashed and
    /// fingerprinted.
    #[must_use]
    pub fn canonical_text(&self) -> KeyText {
        let mut text = KeyText::default();
        match (self.ip, self.port) {
            (IpAddr::V4(v4), None) => text.push_ipv4(v4),
            (IpAddr::V4(v4), Some(port)) => {
                text.push_ipv4(v4);
                text.push(b':');
                text.push_decimal(port);
            }
            (IpAddr::V6(v6), None) => text.push_ipv6(v6),
            (IpAddr::V6(v6), Some(port)) => {
                text.push(b'[');
                text.push_ipv6(v6);
                text.push_str(b"]:");
                text.push_decimal(port);
            }
        }
        text
    }
}

impl From<IpAddr> for BackendKey {
    fn from(ip: IpAddr) -> Self {
        Self::new(ip, None)
    }
}

impl From<Ipv4Addr> for BackendKey {
    fn from(ip: Ipv4Addr) -> Self {
        Self::new(IpAddr::V4(ip), None)
    }
}

impl From<Ipv6Addr> for BackendKey {
    fn from(ip: Ipv6Addr) -> Self {
        Self::new(IpAddr::V6(ip), None)
    }
}

/// The IPv6 flow label and scope id of a [`SocketAddr`] are not part of the identity.
impl From<SocketAddr> for BackendKey {
    fn from(addr: SocketAddr) -> Self {
        Self::new(addr.ip(), Some(addr.port()))
    }
}

impl FromStr for BackendKey {
    type Err = MaglevError;

    /// Parses `ADDR`, `ADDR:PORT`, `[V6ADDR]` or `[V6ADDR]:PORT` (no surrounding
    /// whitespace, no IPv6 zone such as `%eth0`).
    ///
    /// # Errors
    /// [`MaglevError::InvalidAddress`] naming the text.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || MaglevError::InvalidAddress {
            text: text.to_owned(),
        };
        if text.contains('%') {
            return Err(invalid());
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(ip.into());
        }
        if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            return inner
                .parse::<Ipv6Addr>()
                .map(Self::from)
                .map_err(|_| invalid());
        }
        text.parse::<SocketAddr>()
            .map(Self::from)
            .map_err(|_| invalid())
    }
}

impl fmt::Display for BackendKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.canonical_text().as_str())
    }
}

impl Ord for BackendKey {
    /// IPv4 before IPv6, then the address as a big-endian number, then the port (none
    /// first).
    fn cmp(&self, other: &Self) -> Ordering {
        let address = match (self.ip, other.ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => a.to_bits().cmp(&b.to_bits()),
            (IpAddr::V6(a), IpAddr::V6(b)) => a.to_bits().cmp(&b.to_bits()),
            (IpAddr::V4(_), IpAddr::V6(_)) => Ordering::Less,
            (IpAddr::V6(_), IpAddr::V4(_)) => Ordering::Greater,
        };
        address.then(self.port.cmp(&other.port))
    }
}

impl PartialOrd for BackendKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl serde::Serialize for BackendKey {
    /// Serialized as its canonical text.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.canonical_text().as_str())
    }
}

impl<'de> serde::Deserialize<'de> for BackendKey {
    /// Deserialized from any text [`FromStr`] accepts.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A backend key's canonical text in a fixed buffer (see [`BackendKey::canonical_text`]).
#[derive(Clone, Copy)]
pub struct KeyText {
    buf: [u8; MAX_KEY_TEXT_LEN],
    len: u8,
}

impl KeyText {
    /// The text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Only ASCII bytes are ever pushed.
        std::str::from_utf8(self.as_bytes()).expect("KeyText holds ASCII")
    }

    /// The text's bytes (ASCII).
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

impl Default for KeyText {
    fn default() -> Self {
        Self {
            buf: [0; MAX_KEY_TEXT_LEN],
            len: 0,
        }
    }
}

impl fmt::Debug for KeyText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl KeyText {
    /// Appends one ASCII byte. The callers never exceed [`MAX_KEY_TEXT_LEN`] bytes in
    /// total (see [`BackendKey::canonical_text`]).
    fn push(&mut self, byte: u8) {
        self.buf[usize::from(self.len)] = byte;
        self.len += 1;
    }

    fn push_str(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.push(byte);
        }
    }

    /// Decimal, no leading zeros.
    fn push_decimal(&mut self, value: u16) {
        let mut digits = [0_u8; 5];
        let mut n = 0;
        let mut rest = value;
        loop {
            // rest % 10 < 10.
            digits[n] = b'0' + (rest % 10) as u8;
            n += 1;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        for &digit in digits[..n].iter().rev() {
            self.push(digit);
        }
    }

    /// Lowercase hexadecimal, no leading zeros.
    fn push_hex(&mut self, value: u16) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut started = false;
        for shift in [12, 8, 4, 0] {
            let nibble = usize::from(value >> shift & 0xf);
            if nibble != 0 || started || shift == 0 {
                self.push(HEX[nibble]);
                started = true;
            }
        }
    }

    /// Dotted decimal, no leading zeros.
    fn push_ipv4(&mut self, ip: Ipv4Addr) {
        for (n, octet) in ip.octets().into_iter().enumerate() {
            if n > 0 {
                self.push(b'.');
            }
            self.push_decimal(u16::from(octet));
        }
    }

    /// RFC 5952 section 4 text of an IPv6 address (always hexadecimal groups).
    fn push_ipv6(&mut self, ip: Ipv6Addr) {
        let groups = ip.segments();
        // The longest run of zero groups, the first one on a tie (RFC 5952 4.2.3); a
        // single zero group is not shortened (4.2.2).
        let (mut best_start, mut best_len) = (0, 0);
        let mut i = 0;
        while i < groups.len() {
            if groups[i] == 0 {
                let start = i;
                while i < groups.len() && groups[i] == 0 {
                    i += 1;
                }
                if i - start > best_len {
                    (best_start, best_len) = (start, i - start);
                }
            } else {
                i += 1;
            }
        }
        let (head, tail) = if best_len >= 2 {
            (
                &groups[..best_start],
                Some(&groups[best_start + best_len..]),
            )
        } else {
            (&groups[..], None)
        };
        self.push_groups(head);
        if let Some(tail) = tail {
            self.push_str(b"::");
            self.push_groups(tail);
        }
    }

    fn push_groups(&mut self, groups: &[u16]) {
        for (n, &group) in groups.iter().enumerate() {
            if n > 0 {
                self.push(b':');
            }
            self.push_hex(group);
        }
    }
}

#[cfg(test)]
mod tests;
