//! The control protocol between `lb run` and the `lb` CLI verbs: every type on the wire
//! and both ends of the exchange.
//!
//! - Transport: a Unix stream socket (default `/run/lb/lb.sock`, mode 0600, so root
//!   only). One request per connection: the client writes one JSON [`Request`] line,
//!   the daemon answers one JSON [`Response`] line and closes. The one streaming
//!   request, [`Request::Trace`], is answered with a [`Response`] line per event until
//!   the client closes the connection ([`server::serve_streaming`], [`TraceStream`]).
//! - Typed arguments: a request carries a parsed [`Vip`], [`BackendKey`] and client
//!   address. The CLI parses them from its flags and names the flag when one is wrong;
//!   the daemon decodes them with the request and never parses operator text. A
//!   request it cannot decode is refused whole (`bad request: ...`).
//! - Typed answers: the answer's `data` decodes into the request's type
//!   ([`Status`], [`Stats`], the [`Change`] applied, [`FlowReport`], [`ConnList`]); [`Client`] does
//!   that, and returns the daemon's refusals as [`ClientError::Refused`].
//! - Bounds ([`server`]): the daemon reads at most [`MAX_REQUEST_BYTES`] of a request
//!   and gives a connection [`IDLE_TIMEOUT`] to deliver it, so a client can make it hold
//!   neither a large buffer nor an idle connection.
//!
//! Place in the layering: below the controller (which builds [`Status`] and
//! [`FlowReport`] from its state), the daemon (which serves the protocol) and the CLI
//! (which calls it); above `config` and `maglev`, whose [`Vip`] and [`BackendKey`] it
//! carries. It imports nothing from the modules above it.

mod announce;
mod answer;
mod change;
mod client;
mod conns;
mod diff;
mod health;
mod request;
pub mod server;
mod trace;

pub use announce::{AddressAnnouncement, AnnounceSummary, VipAction, VipAnnouncement, VipChange};
pub use answer::{
    BackendCounters, BackendStatus, ChangeOutcome, CleaningStatus, ConnectionCounts,
    ConntrackStatus, Counter, DatapathHealth, FlowAffinity, FlowReport, FlowSlot, GiveUpCount,
    Learned, LearnedVip, OverrideStatus, OverridesReport, Pin, PinStatus, RECENT_CHANGES, Response,
    SlotStatus, Stats, Status, VipCounters, VipStatus,
};
pub use change::{Change, TableUpdate};
pub use client::TraceStream;
pub use client::{CLIENT_TIMEOUT, Client, ClientError, MAX_ANSWER_BYTES, Transport, new_change_id};
pub use conns::{ClientPrefix, Conn, ConnList, ConnState, PinMap};
pub use diff::{BackendDelta, ConfigDiff, SettingChange, VipDiff};
pub use health::{BackendHealth, HealthSummary, NexthopStatus, PolicyStatus, TunnelProbes};
pub use request::{BackendAction, Request};
pub use server::{IDLE_TIMEOUT, MAX_REQUEST_BYTES};
pub use trace::{TraceClient, TraceEvent, TraceStarted, tcp_flags_text};

#[cfg(doc)]
use crate::config::Vip;
#[cfg(doc)]
use lb_maglev::BackendKey;

#[cfg(test)]
mod tests;
