//! `lb conn list` on the wire: the client filter ([`ClientPrefix`]) the request
//! carries, and the answer ([`ConnList`], one [`Conn`] per listed connection).

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

use lb_dataplane::prefix::Prefix;
pub use lb_dataplane::{ConnState, PinMap};

/// The client side of a listing filter: an address or a prefix (`ADDR[/LEN]`; a bare
/// address is the host prefix, /32 or /128). Its text form on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClientPrefix(pub Prefix);

impl FromStr for ClientPrefix {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        text.parse().map(Self).map_err(|e| format!("{e}"))
    }
}

impl fmt::Display for ClientPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for ClientPrefix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ClientPrefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// One listed connection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Conn {
    /// The client (`ADDR:PORT`, IPv6 in brackets).
    pub client: String,
    /// The VIP (`ADDR:PORT/PROTO`).
    pub vip: String,
    /// The backend's address, when the id is one of a configured VIP's backends.
    pub backend: Option<String>,
    /// The backend id the entry holds.
    pub backend_id: u32,
    /// `established`, `closing`, `expired` (UDP past its timeout) or `syn` (handshake
    /// not completed: a SYN held in the SYN cache, or a fast-path pin made at the SYN
    /// that no later packet has seen).
    #[schema(value_type = String, example = "established")]
    pub state: ConnState,
    /// Where the data plane keeps it: `conntrack` (a pin in the LRU conntrack maps),
    /// `exception` (the fast path's exceptions map, never evicted) or `syn_cache` (a
    /// held SYN).
    #[schema(value_type = String, example = "conntrack")]
    pub pin: PinMap,
    /// Seconds since the connection was pinned (TCP) or its SYN seen; `null` for UDP,
    /// whose entries keep only their last packet's time.
    pub age_secs: Option<f64>,
    /// Seconds since its last packet (about 1 s resolution).
    pub idle_secs: f64,
}

/// The answer to `lb conn list`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConnList {
    /// The connections listed (at most `limit`, in the maps' order).
    pub connections: Vec<Conn>,
    /// Connections that matched the filter (listed or not).
    pub matched: u64,
    /// The most listed.
    pub limit: usize,
    /// Entries read: both conntrack maps, the exceptions map and the SYN cache's held
    /// SYNs.
    pub walked: u64,
    /// Whether the SYN cache's held SYNs were read (state `syn`).
    pub syn_cache: bool,
    /// How long the walk took (ms).
    pub walk_ms: f64,
}
