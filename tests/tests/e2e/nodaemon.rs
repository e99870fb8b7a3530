//! The datapath without its daemon (issue 32, stage 4): with the daemon killed
//! (SIGKILL) or stopped cleanly (SIGTERM, the datapath left in place), `lb status`,
//! `lb stats`, `lb flow` and `lb conn list` answer read-only from the pinned maps, say
//! that no daemon runs (first line in text, `daemon` in JSON) and exit 3; the
//! connections they show are the live ones. With nothing pinned they fail clearly.

use std::{net::SocketAddr, process::Output};

use serde_json::Value;

use lb_tests::{
    daemon::{Daemon, DaemonConfig, Stop, backend_addr, lb_binary, vip_text},
    testbed::{TestBed, backend_name, vip_tcp},
    traffic::{self, Ports},
};

use super::{bed, daemon};

/// `lb ARGS --socket <the daemon's>` run in the bed's LB namespace (where the pins are).
fn lb_in_ns(bed: &TestBed, lb: &Daemon<'_>, args: &[&str]) -> Output {
    let socket = lb.socket_path();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--socket", socket.to_str().expect("path")]);
    bed.lb_ns()
        .exec(lb_binary().to_str().expect("path"), &all)
        .expect("lb")
}

/// The JSON of an answer from the pins: exit 3, the `daemon` note.
fn from_pins(out: &Output, what: &str) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{what}: {out:?}");
    assert!(stderr.contains("daemon not running"), "{what}: {stderr}");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {out:?}"));
    let note = &v["daemon"];
    assert_eq!(note["running"], Value::Bool(false), "{what}: {v}");
    let message = note["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("daemon not running; datapath forwarding, generation ")
            && message.contains("state as of 20"),
        "{what}: {message}"
    );
    assert!(note["generation"].as_u64().is_some_and(|g| g > 0), "{v}");
    v
}

/// Every reading verb answers from the pins while no daemon runs; `live` are open
/// connections (client address, backend name).
fn check_reading_verbs(bed: &TestBed, lb: &Daemon<'_>, vip: &str, live: &[(SocketAddr, String)]) {
    let status = from_pins(&lb_in_ns(bed, lb, &["status", "--json"]), "lb status");
    let backends = status["vips"]
        .as_array()
        .expect("vips")
        .iter()
        .find(|v| v["vip"] == Value::String(vip.to_owned()))
        .and_then(|v| v["backends"].as_array())
        .unwrap_or_else(|| panic!("no {vip} in {status}"));
    for k in [1, 2] {
        let b = backends
            .iter()
            .find(|b| b["address"] == Value::String(backend_addr(k, false).to_string()))
            .unwrap_or_else(|| panic!("b{k} in {status}"));
        assert!(b["slots"].as_u64().is_some_and(|s| s > 0), "{b}");
    }
    let text = lb_in_ns(bed, lb, &["status"]);
    let first = String::from_utf8_lossy(&text.stdout);
    assert!(
        first.starts_with("daemon not running; datapath forwarding, generation "),
        "{first}"
    );
    let stats = from_pins(&lb_in_ns(bed, lb, &["stats", "--json"]), "lb stats");
    assert!(
        !stats["vips"].as_array().expect("vips").is_empty(),
        "{stats}"
    );
    for (client, backend) in live.iter().take(5) {
        let c = client.to_string();
        let flow = from_pins(
            &lb_in_ns(bed, lb, &["flow", "--vip", vip, "--client", &c, "--json"]),
            "lb flow",
        );
        let pinned = flow["pinned"]["backend"].as_str().unwrap_or_default();
        assert_eq!(backend_name_of(pinned), *backend, "flow of {c}: {flow}");
    }
    let conns = from_pins(
        &lb_in_ns(bed, lb, &["conn", "list", "--json"]),
        "lb conn list",
    );
    let listed: Vec<&str> = conns["connections"]
        .as_array()
        .expect("connections")
        .iter()
        .filter_map(|c| c["client"].as_str())
        .collect();
    for (client, _) in live {
        assert!(
            listed.contains(&client.to_string().as_str()),
            "{client} not in {conns}"
        );
    }
}

/// `b<k>` of a backend address.
fn backend_name_of(address: &str) -> String {
    let k = (1..=2)
        .find(|k| backend_addr(*k, false).to_string() == address)
        .unwrap_or(0);
    backend_name(k)
}

#[test]
fn reading_verbs_answer_from_the_pins_after_a_kill_and_a_clean_stop() {
    let bed = bed(2);
    let mut lb = daemon(&bed, &DaemonConfig::equal(1..=2));
    let vip = vip_text(false, true);
    let srcs = traffic::sources(&bed, 20, false, Ports::Kernel);
    let mut greeted = traffic::connect_all(&bed, &srcs, vip_tcp(false)).expect("connections");
    let live: Vec<(SocketAddr, String)> = greeted
        .iter()
        .map(|g| (g.conn.local_addr().expect("local"), g.backend.clone()))
        .collect();
    for stop in [Stop::Kill, Stop::Term] {
        lb.halt(stop);
        check_reading_verbs(&bed, &lb, &vip, &live);
        // The datapath forwards meanwhile: the live connections keep their backends.
        for g in &mut greeted {
            assert_eq!(g.conn.exchange("no daemon").expect("exchange"), g.backend);
        }
        lb.resume(&[]).expect("start again");
    }
    // With the daemon back, the answers are its own: exit 0, no note.
    let out = lb_in_ns(&bed, &lb, &["status", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(v.get("daemon").is_none(), "{v}");
    // Nothing pinned: a clear error, exit 1.
    lb.halt(Stop::Term);
    let detach = bed
        .lb_ns()
        .exec(
            lb_binary().to_str().expect("path"),
            &["detach", "--interface", lb_tests::testbed::LB_IFACE],
        )
        .expect("lb detach");
    assert!(detach.status.success(), "{detach:?}");
    let out = lb_in_ns(&bed, &lb, &["status"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stderr.contains("cannot reach the lb daemon")
            && stderr.contains("no datapath to read instead: no pinned datapath under"),
        "{stderr}"
    );
    lb.resume(&[]).expect("start again after the detach");
}
