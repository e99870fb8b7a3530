//! Validated probe settings: what to probe ([`Check`]), how often and how patiently
//! ([`ProbeSettings`]), and their defaults. [`super::validate`] builds them from the
//! file's [`super::file::HealthFile`] tables.

use std::{fmt, ops::RangeInclusive, path::PathBuf, time::Duration};

use hickory_proto::rr::{Name, RecordType};

use super::{damping::Damping, state::Thresholds};

/// Default `interval_ms`: 2 s (HAProxy's default `inter`).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);
/// Default `timeout_ms`: 1 s, or half the interval when that is shorter.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
/// Default HTTP `path`.
pub const DEFAULT_HTTP_PATH: &str = "/";
/// Default HTTP `status`: 2xx and 3xx (HAProxy's `http-check expect` default).
pub const DEFAULT_HTTP_STATUS: RangeInclusive<u16> = 200..=399;
/// Default `dns_type`.
pub const DEFAULT_DNS_TYPE: RecordType = RecordType::A;

/// Where a probe is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// To the backend's own address (the default).
    #[default]
    Direct,
    /// To the VIP address, marked so that the TC egress program encapsulates it to the
    /// backend, as a client's packet would be (proves decapsulation and the VIP on the
    /// backend).
    Tunnel,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Direct => "direct",
            Mode::Tunnel => "tunnel",
        })
    }
}

/// How a backend new to a running daemon (added at run time or by a reload) starts:
/// the `initial` key. At daemon start every backend counts as healthy until it fails
/// `fall` probes, whatever this says, so that a restart never empties a VIP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Initial {
    /// Unhealthy until its first successful probe: no slots, so no new flow, before it
    /// (the default; HAProxy's `init-state down`, keepalived's alpha mode).
    #[default]
    Down,
    /// Healthy until it has failed `fall` probes: slots at once (HAProxy's
    /// `init-state fully-up`).
    Up,
}

impl fmt::Display for Initial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Initial::Down => "down",
            Initial::Up => "up",
        })
    }
}

/// The HTTP status codes that count as healthy: a non-empty union of ranges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusRanges(Vec<RangeInclusive<u16>>);

impl StatusRanges {
    /// The ranges, or `None` when `ranges` is empty.
    pub fn new(ranges: Vec<RangeInclusive<u16>>) -> Option<Self> {
        (!ranges.is_empty()).then_some(Self(ranges))
    }

    /// Whether `status` counts as healthy.
    pub fn contains(&self, status: u16) -> bool {
        self.0.iter().any(|r| r.contains(&status))
    }
}

impl Default for StatusRanges {
    fn default() -> Self {
        Self(vec![DEFAULT_HTTP_STATUS])
    }
}

impl fmt::Display for StatusRanges {
    /// The file form, e.g. `200-399` or `200,204,300-308`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if r.start() == r.end() {
                write!(f, "{}", r.start())?;
            } else {
                write!(f, "{}-{}", r.start(), r.end())?;
            }
        }
        Ok(())
    }
}

/// TLS settings of an `https` probe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsCheck {
    /// Verify the certificate chain and name (off by default: backends are addressed
    /// by IP and rarely hold a certificate for their address).
    pub verify: bool,
    /// Name for SNI and verification; `None`: the Host header's name, else the
    /// backend's address (no SNI is sent for an address).
    pub server_name: Option<String>,
    /// Trusted CA certificates (PEM); `None`: the system's trust store.
    pub ca_file: Option<PathBuf>,
}

/// An HTTP(S) GET.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpCheck {
    /// Path and query, starting with `/`.
    pub path: String,
    /// The statuses that count as healthy.
    pub status: StatusRanges,
    /// The Host header; `None`: the destination `address:port`.
    pub host: Option<String>,
    /// TLS for `https`; `None` for plain `http`.
    pub tls: Option<TlsCheck>,
}

/// A DNS query over UDP; any well-formed response with the query's id counts (even
/// NXDOMAIN or SERVFAIL: the server answered).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsCheck {
    /// The name queried (fully qualified).
    pub name: Name,
    /// The record type queried.
    pub record_type: RecordType,
}

/// What a probe does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// A TCP handshake, then a close with RST (no TIME_WAIT on the LB host).
    Tcp,
    /// An HTTP or HTTPS GET.
    Http(HttpCheck),
    /// A DNS query.
    Dns(DnsCheck),
}

impl Check {
    /// The `kind` key's value: `tcp`, `http`, `https` or `dns`.
    pub fn kind(&self) -> &'static str {
        match self {
            Check::Tcp => "tcp",
            Check::Http(h) if h.tls.is_some() => "https",
            Check::Http(_) => "http",
            Check::Dns(_) => "dns",
        }
    }
}

/// The resolved probe of one backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSettings {
    /// What to probe.
    pub check: Check,
    /// Where to send it.
    pub mode: Mode,
    /// Destination port (direct: on the backend's address; tunnel: on the VIP's).
    pub port: u16,
    /// Time between the starts of two probes.
    pub interval: Duration,
    /// Longest a probe may take (below `interval`).
    pub timeout: Duration,
    /// Rise and fall.
    pub thresholds: Thresholds,
    /// The VIP's flap damping.
    pub damping: Damping,
    /// How the backend starts when it is new to a running daemon.
    pub initial: Initial,
}
