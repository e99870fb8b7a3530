//! `lb trace`: the client filter of a [`super::Request::Trace`] ([`TraceClient`]) and
//! the lines the daemon streams back ([`TraceEvent`], one per traced packet, after a
//! first [`TraceStarted`]).

use std::{fmt, net::IpAddr, net::SocketAddr, str::FromStr};

use serde::{Deserialize, Serialize};

/// The client side of a trace filter: an address, and optionally its port
/// (`ADDR` or `ADDR:PORT`, IPv6 in brackets with a port).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceClient {
    /// The client's address.
    pub addr: IpAddr,
    /// The client's port, if only that one.
    pub port: Option<u16>,
}

impl FromStr for TraceClient {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(Self {
                addr: addr.ip().to_canonical(),
                port: Some(addr.port()),
            });
        }
        text.parse::<IpAddr>()
            .map(|addr| Self {
                addr: addr.to_canonical(),
                port: None,
            })
            .map_err(|_| {
                format!("expected ADDR or ADDR:PORT (IPv6 in brackets with a port), got {text:?}")
            })
    }
}

impl fmt::Display for TraceClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => SocketAddr::new(self.addr, port).fmt(f),
            None => self.addr.fmt(f),
        }
    }
}

impl Serialize for TraceClient {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TraceClient {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The first line of a trace: tracing is on with this filter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TraceStarted {
    /// The VIP filter (`ADDR:PORT/PROTO`), if any.
    pub vip: Option<String>,
    /// The client filter, if any.
    pub client: Option<String>,
}

/// One traced packet: what the XDP program decided for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TraceEvent {
    /// The VIP (`ADDR:PORT/PROTO`).
    pub vip: String,
    /// The client (`ADDR:PORT`).
    pub client: String,
    /// TCP flags, e.g. `SYN`, `ACK`, `FIN|ACK` (empty for UDP).
    pub tcp_flags: String,
    /// Which state chose: `conntrack-hit` (fast path), `conntrack-hit-full`, `syn`
    /// (table pick, remembered in the SYN cache), `syn-cache` (the handshake's held
    /// SYN), `conntrack-miss` (table pick, pinned), `none` (dropped before a choice).
    pub decision: String,
    /// The table slot read (`syn`, `conntrack-miss`).
    pub slot: Option<u32>,
    /// The backend's id (none when dropped before a choice).
    pub backend_id: Option<u32>,
    /// The backend's address, when the daemon knows the id.
    pub backend: Option<String>,
    /// The verdict reason, e.g. `tx_encap`, `drop_no_backend`.
    pub reason: String,
    /// The XDP action: `XDP_TX`, `XDP_REDIRECT`, `XDP_DROP` or `XDP_PASS`.
    pub action: String,
}

impl fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.client, self.vip)?;
        if !self.tcp_flags.is_empty() {
            write!(f, " [{}]", self.tcp_flags)?;
        }
        write!(f, ": {}", self.decision)?;
        if let Some(slot) = self.slot {
            write!(f, " slot {slot}")?;
        }
        match (&self.backend, self.backend_id) {
            (Some(addr), Some(id)) => write!(f, " -> backend {addr} (id {id})")?,
            (None, Some(id)) => write!(f, " -> backend id {id}")?,
            _ => {}
        }
        write!(f, "; {} {}", self.reason, self.action)
    }
}

/// TCP flags as text: the set bits of FIN, SYN, RST, PSH, ACK, URG, ECE, CWR
/// (RFC 9293, RFC 3168), `|`-separated.
pub fn tcp_flags_text(flags: u8) -> String {
    const NAMES: [&str; 8] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
    NAMES
        .iter()
        .enumerate()
        .filter(|(bit, _)| flags & (1 << bit) != 0)
        .map(|(_, name)| *name)
        .collect::<Vec<_>>()
        .join("|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_parse_with_or_without_a_port() {
        let c: TraceClient = "192.0.2.60".parse().unwrap();
        assert_eq!((c.to_string(), c.port), ("192.0.2.60".into(), None));
        let c: TraceClient = "192.0.2.60:40001".parse().unwrap();
        assert_eq!(c.port, Some(40001));
        let c: TraceClient = "[2001:db8::7]:53".parse().unwrap();
        assert_eq!(c.to_string(), "[2001:db8::7]:53");
        assert!("2001:db8::7".parse::<TraceClient>().unwrap().port.is_none());
        assert!(
            "bogus"
                .parse::<TraceClient>()
                .unwrap_err()
                .contains("\"bogus\"")
        );
    }

    #[test]
    fn flags_and_lines_read_as_text() {
        assert_eq!(tcp_flags_text(0x02), "SYN");
        assert_eq!(tcp_flags_text(0x11), "FIN|ACK");
        assert_eq!(tcp_flags_text(0), "");
        let e = TraceEvent {
            vip: "203.0.113.10:80/tcp".into(),
            client: "192.0.2.60:40001".into(),
            tcp_flags: "SYN".into(),
            decision: "syn".into(),
            slot: Some(12),
            backend_id: Some(3),
            backend: Some("198.51.100.12".into()),
            reason: "tx_encap".into(),
            action: "XDP_TX".into(),
        };
        assert_eq!(
            e.to_string(),
            "192.0.2.60:40001 -> 203.0.113.10:80/tcp [SYN]: syn slot 12 -> backend 198.51.100.12 (id 3); tx_encap XDP_TX"
        );
    }
}
