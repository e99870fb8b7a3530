//! The answer to a change (`lb backend add|remove|drain|undrain|weight`): [`Change`], what the
//! change did to the running state — each VIP's new table (slots moved, generation,
//! fingerprint), the backend as it is now, the warnings and the log lines.

use serde::{Deserialize, Serialize};

use super::{BackendAction, BackendStatus};

/// What a change did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Change {
    /// The request's action.
    pub action: BackendAction,
    /// The VIP (`ADDR:PORT/PROTO`).
    pub vip: String,
    /// The backend (canonical address).
    pub backend: String,
    /// What changed of the backend, in words (the text output's first line).
    pub summary: String,
    /// A timed drain's timeout (seconds): the backend is removed when its last
    /// connection ends or when this passes; `None` without a pending removal.
    pub drain_timeout_secs: Option<u64>,
    /// Whether anything was written to the data plane (false: it already was so).
    pub changed: bool,
    /// The backend after the change; `None` once removed.
    pub after: Option<BackendStatus>,
    /// The VIPs whose table was rebuilt (a drain or undrain rebuilds only its VIP's).
    pub tables: Vec<TableUpdate>,
    /// Warnings of the change (e.g. a VIP left without backends).
    pub warnings: Vec<String>,
    /// The daemon's log lines of the change (what the text output prints).
    pub lines: Vec<String>,
}

/// A VIP's new table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TableUpdate {
    /// The VIP.
    pub vip: String,
    /// Its generation (the previous plus one).
    pub generation: u32,
    /// Its fingerprint (hex).
    pub fingerprint: String,
    /// Table size M.
    pub table_size: u32,
    /// Backends of the VIP, and those of them in the table (active, weight > 0).
    pub backends: usize,
    /// Backends in the table.
    pub in_table: usize,
    /// Slots whose backend changed (all of them after a resize); `None` for a new VIP.
    pub slots_moved: Option<usize>,
    /// Build time (ms).
    pub build_ms: f64,
}
