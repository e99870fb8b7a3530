//! `lb conn list` in the daemon: the request's filter resolved against the running
//! VIPs ([`ConnFilter`]), a batched walk of the conntrack maps and the SYN cache on a
//! blocking thread over duplicated map descriptors
//! ([`lb_dataplane::ConntrackWalker::list`]), so the walk holds neither the service nor
//! the event loop, and its rows named (VIP, backend address) as [`Conn`]s.

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::{Arc, PoisonError},
    time::Duration,
};

use lb_common::types::{PROTO_TCP, PROTO_UDP, VipKey};
use lb_dataplane::{ConnListing, ConnRow, WalkSettings};
use lb_maglev::{
    BackendKey,
    flow::{addr_bytes, ip_of_bytes},
};
use tokio::sync::mpsc;

use super::Shared;
use crate::{
    config::Vip,
    control::{ClientPrefix, Conn, ConnList, ConnState, Response, server::Reply},
    controller::AppliedVip,
};

/// What `lb conn list` asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Query {
    /// Only connections to this VIP.
    pub vip: Option<Vip>,
    /// Only connections pinned to this backend.
    pub backend: Option<BackendKey>,
    /// Only clients in this prefix.
    pub client: Option<ClientPrefix>,
    /// Only connections in this state.
    pub state: Option<ConnState>,
    /// The most rows listed.
    pub limit: usize,
}

/// The request's filter in the maps' terms: keys, backend ids, address bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConnFilter {
    vip: Option<VipKey>,
    /// Backend ids (sorted): the backend in the VIP asked for, or in every VIP.
    backends: Option<Vec<u32>>,
    /// Family, network-order address bytes (masked) and prefix length.
    client: Option<(u8, [u8; 16], u8)>,
    state: Option<ConnState>,
}

impl ConnFilter {
    /// Resolves `query` against the running `vips`.
    ///
    /// # Errors
    /// A backend that no running VIP (or not the VIP asked for) has.
    pub(crate) fn resolve(query: &Query, vips: &Vips) -> Result<Self, String> {
        let backends = match query.backend {
            None => None,
            Some(b) => {
                let mut ids: Vec<u32> = vips
                    .iter()
                    .filter(|(v, _)| query.vip.is_none_or(|q| q == **v))
                    .filter_map(|(_, a)| a.backend_ids.get(&b).copied())
                    .collect();
                if ids.is_empty() {
                    return Err(match query.vip {
                        Some(v) => format!("backend {b} is not a backend of VIP {v}"),
                        None => format!("backend {b} is not a backend of any running VIP"),
                    });
                }
                ids.sort_unstable();
                Some(ids)
            }
        };
        Ok(Self {
            vip: query.vip.map(|v| v.key()),
            backends,
            client: query.client.map(|c| {
                let (addr, family) = addr_bytes(c.0.addr());
                (family, addr, c.0.length())
            }),
            state: query.state,
        })
    }

    /// Whether `row` passes every filter.
    pub(crate) fn keeps(&self, row: &ConnRow) -> bool {
        self.state.is_none_or(|s| s == row.state)
            && self.vip.is_none_or(|v| v == row.key.vip)
            && self
                .backends
                .as_ref()
                .is_none_or(|ids| ids.binary_search(&row.backend_id).is_ok())
            && self.client.as_ref().is_none_or(|(family, addr, len)| {
                *family == row.key.vip.family && prefix_matches(addr, &row.key.src, *len)
            })
    }
}

/// Whether the first `len` bits of `addr` equal `prefix`'s.
fn prefix_matches(prefix: &[u8; 16], addr: &[u8; 16], len: u8) -> bool {
    let (full, bits) = (usize::from(len / 8), len % 8);
    if prefix[..full] != addr[..full] {
        return false;
    }
    bits == 0 || {
        let mask = 0xffu8 << (8 - bits);
        (prefix[full] ^ addr[full]) & mask == 0
    }
}

/// The running VIPs, as the controller has them.
pub(crate) type Vips = std::collections::BTreeMap<Vip, AppliedVip>;

/// Names of backend ids and VIP keys.
#[derive(Clone, Debug, Default)]
pub(crate) struct Names {
    backends: HashMap<u32, BackendKey>,
}

impl Names {
    /// The names of the running `vips`' backends.
    pub(crate) fn of(vips: &Vips) -> Self {
        Self {
            backends: vips
                .values()
                .flat_map(|a| a.backend_ids.iter().map(|(k, id)| (*id, *k)))
                .collect(),
        }
    }

    /// The [`Conn`] of `row`.
    pub(crate) fn conn(&self, row: &ConnRow) -> Conn {
        let k = &row.key;
        let ip = |bytes| ip_of_bytes(bytes, k.vip.family).unwrap_or(IpAddr::from([0u8; 4]));
        let proto = match k.vip.proto {
            PROTO_TCP => "tcp".to_owned(),
            PROTO_UDP => "udp".to_owned(),
            p => format!("proto{p}"),
        };
        let secs = |ns: u64| Duration::from_nanos(ns).as_secs_f64();
        Conn {
            client: SocketAddr::new(ip(k.src), u16::from_be(k.sport)).to_string(),
            vip: format!(
                "{}/{proto}",
                SocketAddr::new(ip(k.vip.addr), u16::from_be(k.vip.port))
            ),
            backend: self.backends.get(&row.backend_id).map(|b| b.to_string()),
            backend_id: row.backend_id,
            state: row.state,
            pin: row.pin,
            age_secs: row.age_ns.map(secs),
            idle_secs: secs(row.idle_ns),
        }
    }
}

/// The answer of a listing.
pub(crate) fn answer(listing: &ConnListing, names: &Names, limit: usize) -> ConnList {
    ConnList {
        connections: listing.rows.iter().map(|r| names.conn(r)).collect(),
        matched: listing.matched,
        limit,
        walked: listing.walked,
        syn_cache: true,
        walk_ms: listing.took.as_secs_f64() * 1e3,
    }
}

/// Starts a listing for `query`: the filter and names are taken under the service's
/// lock, the walk runs on a blocking thread, and the answer is the reply's one line.
pub(super) fn start(service: &Shared, query: Query) -> Reply {
    let prepared = {
        let s = service.lock().unwrap_or_else(PoisonError::into_inner);
        let vips = s.controller().vips();
        let settings = WalkSettings {
            udp_timeout: s
                .controller()
                .applied()
                .map_or(Duration::from_secs(30), |d| d.globals.udp_timeout),
            idle: s.connections().idle(),
            syn_window: WalkSettings::SYN_WINDOW,
        };
        ConnFilter::resolve(&query, vips).and_then(|filter| {
            let walker = s
                .controller()
                .dataplane()
                .conntrack_lister()
                .map_err(|e| format!("reading conntrack: {e}"))?;
            Ok((filter, Names::of(vips), walker, settings))
        })
    };
    let (filter, names, walker, settings) = match prepared {
        Ok(p) => p,
        Err(e) => return Reply::Once(Response::error(e)),
    };
    let (tx, rx) = mpsc::channel(1);
    let names = Arc::new(names);
    tokio::spawn(async move {
        let walked = tokio::task::spawn_blocking(move || {
            walker.list(&settings, true, |r| filter.keeps(r), query.limit)
        })
        .await;
        let response = match walked {
            Ok(Ok(listing)) => Response::ok(answer(&listing, &names, query.limit)),
            Ok(Err(e)) => Response::error(format!("reading conntrack: {e}")),
            Err(e) => Response::error(format!("the conntrack walk failed: {e}")),
        };
        let _ = tx.send(response).await;
    });
    Reply::Stream(rx)
}

#[cfg(test)]
mod tests {
    use lb_common::types::FlowKey;

    use super::*;

    fn row(src: [u8; 4], backend_id: u32, state: ConnState) -> ConnRow {
        let mut key = FlowKey::default();
        key.vip = "203.0.113.10:80/tcp".parse::<Vip>().expect("vip").key();
        key.src[..4].copy_from_slice(&src);
        key.sport = 40000u16.to_be();
        ConnRow {
            key,
            backend_id,
            state,
            pin: lb_dataplane::PinMap::Conntrack,
            age_ns: Some(3_000_000_000),
            idle_ns: 1_000_000_000,
        }
    }

    fn filter(vip: Option<&str>, client: Option<&str>, state: Option<ConnState>) -> ConnFilter {
        let query = Query {
            vip: vip.map(|v| v.parse().expect("vip")),
            backend: None,
            client: client.map(|c| c.parse().expect("prefix")),
            state,
            limit: 10,
        };
        ConnFilter::resolve(&query, &Vips::new()).expect("resolves")
    }

    #[test]
    fn filters_match_vip_client_prefix_and_state() {
        let r = row([192, 0, 2, 10], 1, ConnState::Established);
        assert!(filter(None, None, None).keeps(&r));
        assert!(filter(Some("203.0.113.10:80/tcp"), None, None).keeps(&r));
        assert!(!filter(Some("203.0.113.10:81/tcp"), None, None).keeps(&r));
        assert!(!filter(Some("203.0.113.10:80/udp"), None, None).keeps(&r));
        assert!(filter(None, Some("192.0.2.10"), None).keeps(&r));
        assert!(filter(None, Some("192.0.2.0/24"), None).keeps(&r));
        assert!(filter(None, Some("192.0.2.8/29"), None).keeps(&r));
        assert!(!filter(None, Some("192.0.2.0/29"), None).keeps(&r));
        assert!(!filter(None, Some("192.0.2.11"), None).keeps(&r));
        assert!(!filter(None, Some("2001:db8::/32"), None).keeps(&r));
        assert!(filter(None, Some("0.0.0.0/0"), None).keeps(&r));
        assert!(filter(None, None, Some(ConnState::Established)).keeps(&r));
        assert!(!filter(None, None, Some(ConnState::Syn)).keeps(&r));
    }

    #[test]
    fn an_unknown_backend_is_refused_by_name() {
        let query = Query {
            vip: None,
            backend: Some("10.0.0.1".parse().expect("backend")),
            client: None,
            state: None,
            limit: 10,
        };
        let e = ConnFilter::resolve(&query, &Vips::new()).expect_err("unknown");
        assert!(
            e.contains("10.0.0.1") && e.contains("any running VIP"),
            "{e}"
        );
    }

    #[test]
    fn rows_are_named() {
        let mut names = Names::default();
        names
            .backends
            .insert(1, "10.0.0.1".parse().expect("backend"));
        let c = names.conn(&row([192, 0, 2, 10], 1, ConnState::Established));
        assert_eq!(c.client, "192.0.2.10:40000");
        assert_eq!(c.vip, "203.0.113.10:80/tcp");
        assert_eq!(c.backend.as_deref(), Some("10.0.0.1"));
        assert_eq!((c.age_secs, c.idle_secs), (Some(3.0), 1.0));
        let gone = names.conn(&row([192, 0, 2, 10], 9, ConnState::Closing));
        assert_eq!((gone.backend, gone.backend_id), (None, 9));
    }
}
