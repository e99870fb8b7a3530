//! The identity of a VIP — (address, port, protocol) — and its text forms:
//! `203.0.113.10:80/tcp`, `[2001:db8:f::10]:53/udp`.

use std::{
    fmt,
    net::{IpAddr, SocketAddr},
    str::FromStr,
};

use lb_common::types::{PROTO_TCP, PROTO_UDP, VipKey};

use lb_maglev::flow::addr_bytes;

/// Transport protocol of a VIP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP (IP protocol 6).
    Tcp,
    /// UDP (IP protocol 17).
    Udp,
}

impl Protocol {
    /// IANA protocol number.
    pub const fn number(self) -> u8 {
        match self {
            Protocol::Tcp => PROTO_TCP,
            Protocol::Udp => PROTO_UDP,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        })
    }
}

impl FromStr for Protocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Ok(Protocol::Tcp),
            "udp" => Ok(Protocol::Udp),
            _ => Err(format!("expected \"tcp\" or \"udp\", got {s:?}")),
        }
    }
}

/// A VIP: address, port and protocol. Ordered by address, port, protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Vip {
    /// Address (an IPv4-mapped IPv6 address is stored as IPv4).
    pub addr: IpAddr,
    /// Destination port.
    pub port: u16,
    /// Protocol.
    pub proto: Protocol,
}

impl Vip {
    /// The VIP with its address canonicalised (IPv4-mapped IPv6 → IPv4).
    pub fn new(addr: IpAddr, port: u16, proto: Protocol) -> Self {
        Self {
            addr: addr.to_canonical(),
            port,
            proto,
        }
    }

    /// The `VIPS` map key of this VIP.
    pub fn key(&self) -> VipKey {
        let (addr, family) = addr_bytes(self.addr);
        VipKey {
            addr,
            port: self.port.to_be(),
            proto: self.proto.number(),
            family,
        }
    }

    /// Address and port as a socket address.
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.addr, self.port)
    }
}

impl fmt::Display for Vip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.socket_addr(), self.proto)
    }
}

impl FromStr for Vip {
    type Err = String;

    /// Parses `ADDR:PORT/PROTO` (IPv6 in brackets).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, proto) = s.rsplit_once('/').ok_or_else(|| {
            format!("expected ADDR:PORT/PROTO (e.g. 203.0.113.10:80/tcp), got {s:?}")
        })?;
        let addr: SocketAddr = addr.parse().map_err(|_| {
            format!("expected ADDR:PORT/PROTO, {addr:?} is not an address and port")
        })?;
        Ok(Vip::new(addr.ip(), addr.port(), proto.parse()?))
    }
}

impl serde::Serialize for Vip {
    /// Serialized as its text form, `ADDR:PORT/PROTO`.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Vip {
    /// Deserialized from any text [`FromStr`] accepts.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_both_families() {
        let v: Vip = "203.0.113.10:80/tcp".parse().unwrap();
        assert_eq!(v.to_string(), "203.0.113.10:80/tcp");
        let v: Vip = "[2001:0db8:f::0010]:53/UDP".parse().unwrap();
        assert_eq!(v.to_string(), "[2001:db8:f::10]:53/udp");
        let v: Vip = "[::ffff:203.0.113.10]:80/tcp".parse().unwrap();
        assert_eq!(v.to_string(), "203.0.113.10:80/tcp");
        assert!("203.0.113.10:80".parse::<Vip>().is_err());
        assert!("203.0.113.10/tcp".parse::<Vip>().is_err());
        assert!(
            "203.0.113.10:80/sctp"
                .parse::<Vip>()
                .unwrap_err()
                .contains("sctp")
        );
    }
}
