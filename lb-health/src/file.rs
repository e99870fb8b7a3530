//! The health-check tables as written in the configuration file: `[vip.health]` (a VIP's
//! probe, multi-failure policy and flap damping) and `[vip.backend.health]` (one
//! backend's overrides of the probe keys). Both deserialise into [`HealthFile`], every
//! field optional, unknown keys rejected; [`super::validate`] checks them and names the
//! key of every problem.
//!
//! Integers are read as `u64` and range-checked by validation (`expected a value from
//! 100 to 3600000, got 50`); a value of another type is serde's error at the key's path
//! (`invalid type: string "abc", expected u64`).

use serde::Deserialize;

/// A `health` table: the keys of a VIP's table and of a backend's override are the same;
/// the policy and damping keys are allowed only in the VIP's (see the book's health checks
/// chapter and `lb.example.toml` for every key with its default).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthFile {
    /// `tcp`, `http`, `https`, `dns` or `none`.
    #[serde(default)]
    pub kind: Option<String>,
    /// `direct` (to the backend's address) or `tunnel` (to the VIP, encapsulated to the
    /// backend).
    #[serde(default)]
    pub mode: Option<String>,
    /// Time between the starts of two probes (milliseconds).
    #[serde(default)]
    pub interval_ms: Option<u64>,
    /// How long one probe may take (milliseconds, below `interval_ms`).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Consecutive successes that make an unhealthy backend healthy.
    #[serde(default)]
    pub rise: Option<u64>,
    /// Consecutive failures that make a healthy backend unhealthy.
    #[serde(default)]
    pub fall: Option<u64>,
    /// Destination port of the probe.
    #[serde(default)]
    pub port: Option<u64>,
    /// `http`/`https`: the path (and query) of the GET.
    #[serde(default)]
    pub path: Option<String>,
    /// `http`/`https`: the status codes that count as healthy, e.g. `"200-399"` or
    /// `"200,204,300-308"`.
    #[serde(default)]
    pub status: Option<String>,
    /// `http`/`https`: the Host header.
    #[serde(default)]
    pub host: Option<String>,
    /// `https`: verify the backend's certificate.
    #[serde(default)]
    pub tls_verify: Option<bool>,
    /// `https`: the name sent in SNI and checked in the certificate.
    #[serde(default)]
    pub tls_server_name: Option<String>,
    /// `https` with `tls_verify`: PEM file of the trusted CA certificates.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// `dns`: the name to query.
    #[serde(default)]
    pub dns_name: Option<String>,
    /// `dns`: the record type to query (`A`, `AAAA`, `SOA`, ...).
    #[serde(default)]
    pub dns_type: Option<String>,
    /// `down` (a backend new to a running daemon waits for its first successful probe
    /// before it gets slots; the default) or `up` (slots at once).
    #[serde(default)]
    pub initial: Option<String>,
    /// VIP only: below this share of healthy weight (per cent), balance over all
    /// non-drained backends again (panic mode); 0 turns panic mode off.
    #[serde(default)]
    pub panic_threshold: Option<u64>,
    /// VIP only: what an all-unhealthy VIP does, `open` (all non-drained backends get
    /// slots) or `closed` (none do: new flows are dropped).
    #[serde(default)]
    pub all_down: Option<String>,
    /// VIP only: the most state changes a backend may make within `flap_window_secs`
    /// before it is held unhealthy; 0 turns damping off.
    #[serde(default)]
    pub flap_transitions: Option<u64>,
    /// VIP only: the window of `flap_transitions` (seconds).
    #[serde(default)]
    pub flap_window_secs: Option<u64>,
    /// VIP only: how long a flapping backend is held unhealthy (seconds).
    #[serde(default)]
    pub flap_hold_secs: Option<u64>,
}
