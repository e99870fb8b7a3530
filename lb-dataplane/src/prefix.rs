//! IP prefixes (`192.0.2.0/24`, `2001:db8::/32`): the allowed client prefixes of a VIP
//! and the outer source prefixes of the encapsulation.
//!
//! A leaf module: it imports nothing of this crate, so every layer may use it.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    str::FromStr,
};

/// An IP prefix: an address whose bits beyond `len` are zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

/// Why a text is not a prefix; the message names the text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PrefixError(String);

impl Prefix {
    /// The prefix `addr/len`.
    ///
    /// # Errors
    /// A length beyond the family's (32 or 128), or bits set beyond it (the message
    /// gives the prefix meant).
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, PrefixError> {
        let addr = addr.to_canonical();
        let max = Self::max_len(addr);
        if len > max {
            return Err(PrefixError(format!(
                "{addr}/{len}: the length of an {} prefix is at most {max}",
                family_name(addr)
            )));
        }
        let prefix = Self {
            addr: mask(addr, len),
            len,
        };
        if prefix.addr != addr {
            return Err(PrefixError(format!(
                "{addr}/{len} has bits set beyond its length (did you mean {prefix}?)"
            )));
        }
        Ok(prefix)
    }

    /// The prefix's address (bits beyond the length zero).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// Its length in bits.
    pub fn length(&self) -> u8 {
        self.len
    }

    /// Whether it is IPv4.
    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// Whether `addr` is inside it.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = addr.to_canonical();
        addr.is_ipv4() == self.is_ipv4() && mask(addr, self.len) == self.addr
    }

    /// The host bits' mask: the address bits beyond the length set.
    pub fn host_mask(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(
                u32::MAX.checked_shr(u32::from(self.len)).unwrap_or(0),
            )),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(
                u128::MAX.checked_shr(u32::from(self.len)).unwrap_or(0),
            )),
        }
    }

    fn max_len(addr: IpAddr) -> u8 {
        if addr.is_ipv4() { 32 } else { 128 }
    }
}

fn family_name(addr: IpAddr) -> &'static str {
    if addr.is_ipv4() { "IPv4" } else { "IPv6" }
}

/// `addr` with its bits beyond `len` cleared.
fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;

    /// `ADDR/LEN`, or a bare address (the host prefix, /32 or /128).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || {
            PrefixError(format!(
                "expected a prefix like \"192.0.2.0/24\" or \"2001:db8::/32\", got {text:?}"
            ))
        };
        let (addr, len) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let addr = addr.to_canonical();
        let len = match len {
            Some(l) if !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()) => {
                l.parse::<u8>().map_err(|_| bad())?
            }
            Some(_) => return Err(bad()),
            None => Self::max_len(addr),
        };
        Self::new(addr, len)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_with_their_length_or_as_hosts() {
        let p: Prefix = "192.0.2.0/24".parse().unwrap();
        assert_eq!((p.addr(), p.length()), ("192.0.2.0".parse().unwrap(), 24));
        assert!(p.contains("192.0.2.77".parse().unwrap()));
        assert!(!p.contains("192.0.3.1".parse().unwrap()));
        assert!(!p.contains("2001:db8::1".parse().unwrap()));
        assert_eq!("2001:db8::1".parse::<Prefix>().unwrap().length(), 128);
        assert_eq!(
            "::ffff:192.0.2.1".parse::<Prefix>().unwrap().to_string(),
            "192.0.2.1/32"
        );
        assert_eq!("0.0.0.0/0".parse::<Prefix>().unwrap().length(), 0);
        assert_eq!(
            "172.16.0.0/16".parse::<Prefix>().unwrap().host_mask(),
            "0.0.255.255".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            "2001:db8::/64".parse::<Prefix>().unwrap().host_mask(),
            "::ffff:ffff:ffff:ffff".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn bad_prefixes_are_named() {
        for (text, message) in [
            (
                "192.0.2.1/24",
                "192.0.2.1/24 has bits set beyond its length (did you mean 192.0.2.0/24?)",
            ),
            (
                "192.0.2.0/33",
                "192.0.2.0/33: the length of an IPv4 prefix is at most 32",
            ),
            (
                "192.0.2.0/",
                "expected a prefix like \"192.0.2.0/24\" or \"2001:db8::/32\", got \"192.0.2.0/\"",
            ),
            (
                "example.com/8",
                "expected a prefix like \"192.0.2.0/24\" or \"2001:db8::/32\", got \"example.com/8\"",
            ),
            (
                "10.0.0.0/+8",
                "expected a prefix like \"192.0.2.0/24\" or \"2001:db8::/32\", got \"10.0.0.0/+8\"",
            ),
        ] {
            assert_eq!(
                text.parse::<Prefix>().unwrap_err().to_string(),
                message,
                "{text}"
            );
        }
    }
}
