//! The announcement parts of the control protocol: what `lb vip withdraw|announce`
//! asks ([`VipAction`]) and answers ([`VipChange`]), and what `lb status` says about each VIP's announcement
//! ([`VipAnnouncement`]) and about every VIP address's route ([`AnnounceSummary`]).
//! Ages are milliseconds before the answer.

use serde::{Deserialize, Serialize};

/// What `lb vip` does with a VIP address.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum VipAction {
    /// Stop announcing the address from this instance (maintenance): its route leaves
    /// the announcement table, BGP withdraws it, the routers send its traffic to the
    /// other instances. The data plane keeps serving whatever still arrives.
    Withdraw,
    /// Undo a withdrawal: the address is announced again as soon as it is servable.
    Announce,
}

/// What `lb vip ACTION` did (its `--json` output; its text is `lines`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VipChange {
    /// The action asked.
    pub action: VipAction,
    /// The VIP address, canonical (`203.0.113.10`).
    pub address: String,
    /// Whether the operator's withdrawal changed (false: it already was so).
    pub changed: bool,
    /// Whether the address is withdrawn by the operator now.
    pub withdrawn_by_operator: bool,
    /// Whether its route is in the announcement table now.
    pub announced: bool,
    /// Why it is or is not announced (as `lb status` says).
    pub reason: String,
    /// The announcement table (`announce.table`).
    pub table: u32,
    /// What happened, in words: the text output.
    pub lines: Vec<String>,
}

/// A VIP's announcement in `lb status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VipAnnouncement {
    /// Whether its address's route is in the announcement table now.
    pub announced: bool,
    /// Whether this VIP alone makes its address servable (data plane attached, a
    /// usable backend, not withdrawn by the operator).
    pub servable: bool,
    /// Why, in words (`3 usable backends`, `no usable backend: all 3 in service are
    /// unhealthy`, `withdrawn by the operator`, ...).
    pub reason: String,
}

/// One VIP address's route in `lb status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AddressAnnouncement {
    /// The address (`203.0.113.10`).
    pub address: String,
    /// Its route's prefix (`203.0.113.10/32`, `2001:db8:f::10/128`).
    pub prefix: String,
    /// Whether the route is in the table (as last written; see `last_error`).
    pub announced: bool,
    /// Why it is or is not announced.
    pub reason: String,
    /// Withdrawn with `lb vip withdraw` (kept until `lb vip announce` or a restart).
    pub withdrawn_by_operator: bool,
    /// The VIPs of the address (`ADDR:PORT/PROTO`).
    pub vips: Vec<String>,
    /// Age of the current state (announced or not).
    pub since_ms: u64,
}

/// Announcements over all VIPs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AnnounceSummary {
    /// `announce.enabled`.
    pub enabled: bool,
    /// `announce.table`: the kernel routing table of the routes.
    pub table: u32,
    /// `announce.protocol`: the route protocol number of the routes.
    pub protocol: u8,
    /// Whether the data plane is attached (nothing is announced before).
    pub attached: bool,
    /// Every VIP address, in address order.
    pub addresses: Vec<AddressAnnouncement>,
    /// Routes added and removed since start.
    pub route_changes: u64,
    /// The last failure to write or read the table, if the last attempt failed.
    pub last_error: Option<String>,
}
