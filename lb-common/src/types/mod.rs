// SPDX-License-Identifier: MIT OR Apache-2.0
//! Map keys and values shared by the XDP program and userspace, one file per map family:
//! the VIP maps, the affinity pins, the per-backend arrays, connection tracking (flow keys, conntrack
//! entries, SYN cache slots), fragment tracking, allowed source prefixes, the
//! table buffers' cells, the configuration, the benchmark harness's frame, and the
//! backend agent's configuration and second-chance candidates.
//! Everything is re-exported here: a type's path is `lb_common::types::Name` whichever
//! file defines it.
//!
//! Addresses are 16-byte arrays in network byte order; an IPv4 address occupies the first
//! four bytes and the other twelve are zero, and the `family` field ([`FAMILY_V4`] or
//! [`FAMILY_V6`]) tells which. Ports are in network byte order as on the wire (the
//! `u16` holds the two wire bytes in memory order). Other integers are in host byte order.
//! Every type documents its byte layout and is followed by a size assertion.

mod affinity;
mod agent;
mod backend;
mod bench;
mod config;
mod conntrack;
mod fragment;
mod source;
mod table;
mod vip;

pub use affinity::*;
pub use agent::*;
pub use backend::*;
pub use bench::*;
pub use config::*;
pub use conntrack::*;
pub use fragment::*;
pub use source::*;
pub use table::*;
pub use vip::*;

/// `family` value of an IPv4 key or entry.
pub const FAMILY_V4: u8 = 4;
/// `family` value of an IPv6 key or entry.
pub const FAMILY_V6: u8 = 6;

/// IP protocol number of TCP (IANA).
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP (IANA).
pub const PROTO_UDP: u8 = 17;
/// IP protocol number of ICMP (IANA).
pub const PROTO_ICMP: u8 = 1;
/// IP protocol number of ICMPv6 (IANA).
pub const PROTO_ICMPV6: u8 = 58;

#[cfg(test)]
mod tests;
