//! `lb table build` with a VIP's hash fields predicts what the daemon does (issue 32):
//! for an IPv4 VIP hashing `src` with a /24 client prefix and an IPv6 VIP hashing
//! `src+dport` with a /64, its fingerprint is `lb status`'s and each `--flow`'s backend
//! is `lb flow`'s table backend and the backend that answered the real connection.
//! Without the options it predicts the 5-tuple, which the test also checks differs.

use std::{net::SocketAddr, process::Command};

use lb_tests::{
    daemon::{DaemonConfig, backend_addr, lb_binary, vip_text},
    testbed::{vip_tcp, vip_udp},
    traffic::{self, Ports},
};
use serde_json::Value;

use super::{bed, daemon};

/// `lb table build --json` of the bed's three backends of family `v6` for VIP `vip`
/// with `extra` options and the flows `clients`.
fn table_build(v6: bool, vip: SocketAddr, extra: &[&str], clients: &[SocketAddr]) -> Value {
    let flows: Vec<String> = clients.iter().map(ToString::to_string).collect();
    let backends: Vec<String> = (1..=3).map(|k| backend_addr(k, v6).to_string()).collect();
    let mut lb = Command::new(lb_binary());
    lb.args(["table", "build", "--json", "--vip", &vip.to_string()])
        .args(extra);
    if !flows.is_empty() {
        lb.arg("--flow").arg(flows.join(","));
    }
    let out = lb.args(&backends).output().expect("lb table build");
    assert!(out.status.success(), "lb table build: {out:?}");
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn table_build_with_the_hash_fields_predicts_lb_flow_the_fingerprint_and_the_backend() {
    let bed = bed(3);
    let mut config = DaemonConfig::equal(1..=3);
    let cases = [(false, "src", "24"), (true, "src+dport", "64")];
    for (v6, fields, prefix) in cases {
        config.vip_keys.push((
            vip_text(v6, true),
            format!("hash = \"{fields}\"\nhash_source_prefix = {prefix}"),
        ));
    }
    let lb = daemon(&bed, &config);
    let status = lb.status().expect("lb status");
    for (v6, fields, prefix) in cases {
        let vip = vip_text(v6, true);
        let srcs = traffic::sources(&bed, 16, v6, Ports::Kernel);
        let answered = traffic::greet_all(&bed, &srcs, vip_tcp(v6)).expect("connections");
        let clients: Vec<SocketAddr> = answered.iter().map(|(src, _)| *src).collect();
        let options = ["--hash-fields", fields, "--hash-source-prefix", prefix];
        let built = table_build(v6, vip_tcp(v6), &options, &clients);
        let shown = status.vips.iter().find(|v| v.vip == vip).expect("the VIP");
        assert_eq!(built["fingerprint"], shown.fingerprint.as_str(), "{vip}");
        assert_eq!(built["hash_fields"], fields);
        let plain = table_build(v6, vip_tcp(v6), &[], &clients);
        assert_ne!(
            plain["fingerprint"], built["fingerprint"],
            "the fields are covered"
        );
        for (i, (src, backend)) in answered.iter().enumerate() {
            let predicted = built["flows"][i]["backend"].as_str().expect("a backend");
            let report = lb.flow(&vip, *src).expect("lb flow");
            assert_eq!(
                report.table_backend.as_deref(),
                Some(predicted),
                "{vip} {src}"
            );
            assert_eq!(
                u64::from(report.slot),
                built["flows"][i]["slot"],
                "{vip} {src}"
            );
            let k: u8 = backend.trim_start_matches('b').parse().expect("b<k>");
            assert_eq!(predicted, backend_addr(k, v6).to_string(), "{vip} {src}");
        }
    }
    // The UDP VIPs keep the 5-tuple: their fingerprint is the plain table's.
    let udp = vip_text(false, false);
    let shown = status
        .vips
        .iter()
        .find(|v| v.vip == udp)
        .expect("the UDP VIP");
    let plain = table_build(false, vip_udp(false), &["--protocol", "udp"], &[]);
    assert_eq!(plain["fingerprint"], shown.fingerprint.as_str());
}
