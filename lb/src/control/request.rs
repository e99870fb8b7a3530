//! What a client asks the daemon: [`Request`], with typed arguments.

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use super::VipAction;
use crate::config::Vip;
use lb_maglev::BackendKey;

/// What `lb backend` does.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum BackendAction {
    /// Add a backend (active, with `--weight`, default 1).
    Add,
    /// Remove a backend: its flows are re-picked on the new table.
    Remove,
    /// Drain: no new flows, established flows stay (with `--timeout`, removed when the
    /// last one ends or the timeout passes, whichever is first).
    Drain,
    /// Undo a drain (and set `--weight` if given).
    Undrain,
    /// Set the weight, keeping the state.
    Weight,
}

impl BackendAction {
    /// The verb as typed: `add`, `remove`, `drain`, `undrain`, `weight`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Add => "add",
            Self::Remove => "remove",
            Self::Drain => "drain",
            Self::Undrain => "undrain",
            Self::Weight => "weight",
        }
    }
}

/// A request to the daemon, one JSON object tagged by `command`, e.g.
/// `{"command":"flow","vip":"203.0.113.10:80/tcp","client":"192.0.2.10:40000"}`.
/// Addresses travel in their text forms and are parsed when the request is decoded: a
/// request with an unreadable field is refused whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Request {
    /// `lb status`; answered with [`super::Status`].
    Status,
    /// `lb stats`; answered with [`super::Stats`].
    Stats,
    /// `lb backend ...`; answered with the [`super::Change`] applied.
    Backend {
        /// What to do.
        action: BackendAction,
        /// The VIP (`ADDR:PORT/PROTO` on the wire).
        vip: Vip,
        /// The backend (its canonical text on the wire).
        backend: BackendKey,
        /// Weight (add, undrain; required by weight).
        weight: Option<u32>,
        /// Drain: remove the backend after this many seconds, or once its last
        /// connection ends if that is first.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_secs: Option<u64>,
        /// Drain: stay drained (cancels a pending timed removal).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        keep: bool,
    },
    /// `lb trace`: answered with a stream of lines, a [`super::TraceStarted`] then one
    /// [`super::TraceEvent`] per traced packet, until the client closes the connection.
    Trace {
        /// Only packets to this VIP.
        vip: Option<Vip>,
        /// Only packets from this client (address, and port if given).
        client: Option<super::TraceClient>,
    },
    /// `lb overrides [--clear]`: lists the runtime changes in force, or drops them all
    /// and applies the file; answered with [`super::OverridesReport`].
    Overrides {
        /// Drop them all.
        clear: bool,
    },
    /// `lb flow`; answered with [`super::FlowReport`].
    Flow {
        /// The VIP.
        vip: Vip,
        /// The client's address and port (`ADDR:PORT`, IPv6 in brackets, on the wire).
        client: SocketAddr,
    },
    /// `lb conn list`; answered with [`super::ConnList`]. Every filter given must
    /// match.
    Conns {
        /// Only connections to this VIP.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vip: Option<Vip>,
        /// Only connections pinned to this backend (in `vip`, or in any VIP).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        backend: Option<BackendKey>,
        /// Only clients in this prefix.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client: Option<super::ClientPrefix>,
        /// Only connections in this state.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state: Option<super::ConnState>,
        /// The most connections listed (every match is counted).
        limit: usize,
    },
    /// `lb config diff`; answered with [`super::ConfigDiff`]: what a reload of `file`
    /// (an absolute path the daemon reads; default its own file) would change.
    ConfigDiff {
        /// The file.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file: Option<std::path::PathBuf>,
    },
    /// `lb reload`: the daemon reloads its file as on SIGHUP (whatever `reload` says);
    /// answered with the [`super::ConfigDiff`] the reload applies.
    Reload,
    /// `lb reload --phase learn`: the first phase of a two-phase rollout. The daemon
    /// reads its file and, on every VIP with the second chance whose table it changes
    /// (at the same size), marks the slots the next table moves pending with their
    /// next owner, without switching or applying anything else
    /// (`lb_common::second_chance`, rule SC6); answered with [`super::Learned`].
    /// [`Self::Reload`] is the second phase, *switch*.
    ReloadLearn,
    /// `lb fleet apply` (`PUT /v1/config`): `toml`'s top-level keys replace those of
    /// the daemon's file, which is written and reloaded as by [`Self::Reload`]
    /// (nothing is written when the result does not validate); answered with the
    /// [`super::ConfigDiff`] the reload applies. With `dry_run` the file is left alone
    /// and the answer is what the push would change.
    PushConfig {
        /// The pushed document (TOML).
        toml: String,
        /// Only compare.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        dry_run: bool,
    },
    /// `lb fleet apply --two-phase`'s first phase (`PUT /v1/config/learn`): `toml`'s
    /// top-level keys replace those of the daemon's file, as [`Self::PushConfig`]
    /// would, and the result is learned as by [`Self::ReloadLearn`]; nothing is
    /// written or applied. Answered with [`super::Learned`]; the second phase is
    /// [`Self::PushConfig`].
    PushLearn {
        /// The pushed document (TOML).
        toml: String,
    },
    /// `lb vip withdraw|announce`; answered with the log lines of what changed.
    Vip {
        /// What to do.
        action: VipAction,
        /// The VIP address (every VIP of it shares its route).
        address: IpAddr,
    },
}
