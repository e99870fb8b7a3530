//! `lb conn list` on a running daemon (issue 32, stage 3): real TCP connections over
//! both families are listed with their client, VIP, backend and state, and each filter
//! (`--vip`, `--backend`, `--client` prefix, `--state`) and `--limit` keeps exactly the
//! connections it should.

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use lb::control::{ConnList, ConnState};
use lb_tests::{
    daemon::{Daemon, DaemonConfig, backend_addr, backend_of, vip_text},
    testbed::{backend_name, vip_tcp},
    traffic::{self, Greeted, Ports},
};

use super::{bed, daemon};

/// IPv4 and IPv6 connections opened.
const V4: usize = 12;
const V6: usize = 4;

fn list(lb: &Daemon<'_>, args: &[&str]) -> ConnList {
    let mut all = vec!["conn", "list", "--json"];
    all.extend_from_slice(args);
    let text = lb.cli(&all).expect("lb conn list");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Each open connection's client address and the backend number that answered it.
fn expected(greeted: &[Greeted]) -> BTreeMap<SocketAddr, u8> {
    greeted
        .iter()
        .map(|g| {
            let client = g.conn.local_addr().expect("local address");
            let k = (1..=2)
                .find(|&k| backend_name(k) == g.backend)
                .expect("a bed backend");
            (client, k)
        })
        .collect()
}

#[test]
fn conn_list_shows_real_connections_and_filters_them() {
    let bed = bed(2);
    let lb = daemon(&bed, &DaemonConfig::equal(1..=2));
    let mut greeted = traffic::connect_all(
        &bed,
        &traffic::sources(&bed, V4, false, Ports::Kernel),
        vip_tcp(false),
    )
    .expect("IPv4 connections");
    greeted.extend(
        traffic::connect_all(
            &bed,
            &traffic::sources(&bed, V6, true, Ports::Kernel),
            vip_tcp(true),
        )
        .expect("IPv6 connections"),
    );
    let want = expected(&greeted);

    // Everything: each connection once, on the backend that answered it, established.
    let all = list(&lb, &[]);
    assert!(all.syn_cache, "{all:?}");
    assert_eq!(all.matched, (V4 + V6) as u64, "{all:?}");
    let mut seen = BTreeMap::new();
    for c in &all.connections {
        let client: SocketAddr = c.client.parse().expect("client address");
        let k = backend_of(c.backend.as_deref().expect("a named backend")).expect("bed");
        assert_eq!(c.state, ConnState::Established, "{c:?}");
        let vip = vip_text(client.is_ipv6(), true);
        assert_eq!(c.vip, vip, "{c:?}");
        assert!(c.age_secs.is_some_and(|a| a < 120.0), "{c:?}");
        seen.insert(client, k);
    }
    assert_eq!(seen, want, "listed connections and backends");

    // --vip: the IPv6 VIP's connections only.
    let v6 = list(&lb, &["--vip", &vip_text(true, true)]);
    assert_eq!(v6.matched, V6 as u64, "{v6:?}");
    assert!(v6.connections.iter().all(|c| c.client.starts_with('[')));

    // --backend: b1's connections in every VIP.
    let b1 = backend_addr(1, false).to_string();
    let by_backend = list(&lb, &["--backend", &b1, "--vip", &vip_text(false, true)]);
    let b1_v4 = want.iter().filter(|(c, k)| **k == 1 && c.is_ipv4()).count() as u64;
    assert_eq!(by_backend.matched, b1_v4, "{by_backend:?}");
    assert!(
        by_backend
            .connections
            .iter()
            .all(|c| c.backend.as_deref() == Some(&b1))
    );

    // --client: a /31 holds the bed's clients 0 and 1 (192.0.2.10 and .11).
    let pair = list(&lb, &["--client", "192.0.2.10/31"]);
    let in_pair = want
        .keys()
        .filter(|c| c.ip().to_string() == "192.0.2.10" || c.ip().to_string() == "192.0.2.11")
        .count() as u64;
    assert_eq!(pair.matched, in_pair, "{pair:?}");
    assert!(in_pair >= 2, "the sources spread over the clients");

    // --limit: fewer rows, every match still counted.
    let limited = list(&lb, &["--limit", "3"]);
    assert_eq!(limited.connections.len(), 3);
    assert_eq!(limited.matched, (V4 + V6) as u64);

    // --state: a connection the client closes turns `closing`.
    let closed = greeted.remove(0);
    let closed_client = closed.conn.local_addr().expect("local address");
    drop(closed);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let closing = loop {
        let l = list(&lb, &["--state", "closing"]);
        if l.matched > 0 || std::time::Instant::now() > deadline {
            break l;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(closing.connections.len(), 1, "{closing:?}");
    assert_eq!(closing.connections[0].client, closed_client.to_string());
    let open = list(&lb, &["--state", "established"]);
    assert_eq!(open.matched, (V4 + V6 - 1) as u64, "{open:?}");

    // The text form: a table and the counts.
    let text = lb
        .cli(&["conn", "list", "--limit", "2"])
        .expect("lb conn list");
    eprintln!("{text}");
    assert!(text.starts_with("CLIENT"), "{text}");
    assert!(
        text.contains(&format!(
            "2 of {} matching connections (--limit 2)",
            V4 + V6
        )),
        "{text}"
    );
    let unknown = lb
        .cli(&["conn", "list", "--backend", "198.51.100.99"])
        .expect_err("a backend of no VIP");
    assert!(
        format!("{unknown:#}").contains("not a backend of any running VIP"),
        "{unknown:#}"
    );
    drop(greeted);
}
