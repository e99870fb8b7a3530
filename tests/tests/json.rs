//! `--json` of every verb parses and has the shape `docs/src/guide/json.md` documents for
//! it (one test per verb; the daemon's verbs each against a real `lb run` in a bed). Needs
//! the `lb` binary (`cargo build -p lb --bin lb`).

use std::{
    io::{BufRead as _, BufReader},
    net::SocketAddr,
    process::{Command, Stdio},
};

use lb_tests::{
    daemon::{Daemon, DaemonConfig, TempDir, backend_addr, lb_binary, vip_text},
    schema,
    testbed::{LB_IFACE, TestBed, TestBedOptions, vip_tcp},
};
use serde_json::Value;

/// Checks `text` (one JSON value) against the documented shape `name`.
fn matches(name: &str, text: &str) {
    let shapes = schema::documented().expect("docs/src/guide/json.md");
    let shape = shapes
        .get(name)
        .unwrap_or_else(|| panic!("docs/src/guide/json.md documents no `{name}`"));
    let value: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {text}"));
    schema::check(shape, &value).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
}

/// `lb ARGS` without a daemon; its standard output.
fn offline(args: &[&str]) -> String {
    let out = Command::new(lb_binary()).args(args).output().expect("lb");
    assert!(out.status.success(), "lb {args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// `[announce]` on, with the default table and protocol: the routes go into the bed's
/// LB namespace, whose routing tables are its own (no BIRD reads them here).
const ANNOUNCE: &str = "\n[announce]\nenabled = true\n";

fn with_daemon(f: impl FnOnce(&TestBed, &Daemon<'_>)) {
    with_config(&DaemonConfig::equal(1..=2), f);
}

fn with_config(config: &DaemonConfig, f: impl FnOnce(&TestBed, &Daemon<'_>)) {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let bed = TestBed::new(TestBedOptions {
        backends: 2,
        clients: 2,
        ..TestBedOptions::default()
    })
    .expect("bed");
    let lb = Daemon::start(&bed, config).expect("lb run");
    f(&bed, &lb);
}

#[test]
fn table_build_json_matches_the_schema() {
    matches(
        "lb table build",
        &offline(&[
            "table",
            "build",
            "--json",
            "--hash-fields",
            "src",
            "--flow",
            "192.0.2.7:40001",
            "198.51.100.11",
            "198.51.100.12=2",
        ]),
    );
}

#[test]
fn table_diff_json_matches_the_schema() {
    let text = offline(&[
        "table",
        "diff",
        "--json",
        "--old",
        "198.51.100.11",
        "--new",
        "198.51.100.11,198.51.100.12",
    ]);
    matches("lb table diff", &text);
}

#[test]
fn hash_json_matches_the_schema() {
    let text = offline(&[
        "hash",
        "--servers",
        "3",
        "--keys",
        "200",
        "--event",
        "add:S3",
        "--peer",
        "4",
        "--hot",
        "3",
        "--json",
    ]);
    matches("lb hash", &text);
}

#[test]
fn config_check_json_matches_the_schema_valid_or_not() {
    let dir = TempDir::new("lb-json-config-").expect("temp dir");
    let good = dir.path().join("good.toml");
    let text = "interface = \"eth0\"\n[encap]\nsource_v4 = \"192.0.2.1\"\n[[vip]]\n\
                address = \"203.0.113.10\"\nport = 80\nprotocol = \"tcp\"\n\
                [[vip.backend]]\naddress = \"198.51.100.11\"\n";
    std::fs::write(&good, text).expect("write");
    let good = good.to_str().expect("UTF-8 path");
    matches(
        "lb config check",
        &offline(&["config", "check", good, "--json"]),
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, text.replace("port = 80", "port = 80\ntable_size = 4")).expect("write");
    let out = Command::new(lb_binary())
        .args([
            "config",
            "check",
            bad.to_str().expect("UTF-8 path"),
            "--json",
        ])
        .output()
        .expect("lb");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    matches("lb config check", &text);
    assert!(text.contains("\"vip[0].table_size\""), "{text}");
}

#[test]
fn object_completions_and_manpage_json_match_the_schema() {
    matches("lb object", &offline(&["object", "--json"]));
    matches(
        "lb completions",
        &offline(&["completions", "bash", "--json"]),
    );
    matches("lb manpage", &offline(&["manpage", "--json"]));
    let dir = TempDir::new("lb-json-man-").expect("temp dir");
    let man = dir.path().join("man8");
    let man = man.to_str().expect("UTF-8 path");
    matches(
        "lb manpage --dir",
        &offline(&["manpage", "--json", "--dir", man]),
    );
}

#[test]
fn status_json_matches_the_schema() {
    with_daemon(|_, lb| matches("lb status", &lb.cli(&["status", "--json"]).expect("status")));
}

/// `lb status --json` with `[announce]` on: the announcement summary and each VIP's
/// `announce` are there, and say the addresses are announced.
#[test]
fn status_json_with_announcements_matches_the_schema() {
    let config = DaemonConfig {
        extra: ANNOUNCE.into(),
        ..DaemonConfig::equal(1..=2)
    };
    with_config(&config, |_, lb| {
        let text = lb.cli(&["status", "--json"]).expect("status");
        matches("lb status", &text);
        let status: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(status["announce"]["enabled"], true, "{text}");
        assert_eq!(
            status["announce"]["addresses"][0]["announced"], true,
            "{text}"
        );
        assert_eq!(status["vips"][0]["announce"]["announced"], true, "{text}");
    });
}

/// `lb vip withdraw|announce --json`: each action's answer, and the second withdrawal
/// answers that nothing changed.
#[test]
fn vip_json_of_both_actions_matches_the_schema() {
    let config = DaemonConfig {
        extra: ANNOUNCE.into(),
        ..DaemonConfig::equal(1..=2)
    };
    with_config(&config, |_, lb| {
        let vip = vip_text(false, true);
        for (action, changed, announced) in [
            ("withdraw", true, false),
            ("withdraw", false, false),
            ("announce", true, true),
        ] {
            let text = lb
                .cli(&["vip", action, "--json", "--vip", &vip])
                .expect("lb vip");
            matches("lb vip", &text);
            let change: Value = serde_json::from_str(&text).expect("JSON");
            assert_eq!(change["action"], action, "{text}");
            assert_eq!(change["changed"], changed, "{text}");
            assert_eq!(change["announced"], announced, "{text}");
            assert_eq!(change["withdrawn_by_operator"], !announced, "{text}");
        }
    });
}

#[test]
fn stats_json_matches_the_schema() {
    with_daemon(|_, lb| matches("lb stats", &lb.cli(&["stats", "--json"]).expect("stats")));
}

#[test]
fn flow_json_matches_the_schema() {
    with_daemon(|bed, lb| {
        let vip = vip_text(false, true);
        let client = SocketAddr::new(bed.client_addr(0, false), 40000).to_string();
        let text = lb
            .cli(&["flow", "--json", "--vip", &vip, "--client", &client])
            .expect("flow");
        matches("lb flow", &text);
        bed.tcp_exchange(client.parse().expect("addr"), vip_tcp(false), "x")
            .expect("a connection");
        let text = lb
            .cli(&["flow", "--json", "--vip", &vip, "--client", &client])
            .expect("flow of a pinned flow");
        matches("lb flow", &text);
    });
}

#[test]
fn config_diff_json_matches_the_schema_with_and_without_changes() {
    with_daemon(|_, lb| {
        let run = |args: &[&str]| {
            Command::new(lb_binary())
                .args(args)
                .arg("--socket")
                .arg(lb.socket_path())
                .output()
                .expect("lb")
        };
        let same = run(&["config", "diff", "--json"]);
        assert_eq!(same.status.code(), Some(0), "{same:?}");
        matches("lb config diff", &String::from_utf8_lossy(&same.stdout));
        let dir = TempDir::new("lb-json-diff-").expect("temp dir");
        let file = dir.path().join("lb.toml");
        let text = std::fs::read_to_string(lb.config_path()).expect("the daemon's file");
        let changed_text = text.replacen("weight = 1", "weight = 3", 1) + ANNOUNCE;
        std::fs::write(&file, changed_text).expect("write");
        let changed = run(&["config", "diff", "--json", file.to_str().expect("UTF-8")]);
        assert_eq!(changed.status.code(), Some(1), "{changed:?}");
        let out = String::from_utf8_lossy(&changed.stdout);
        matches("lb config diff", &out);
        let reloaded = lb.cli(&["reload", "--json"]).expect("lb reload");
        matches("lb config diff", &reloaded);
        assert!(
            out.contains("announce.enabled") && out.contains("\"weight_to\": 3"),
            "{out}"
        );
    });
}

#[test]
fn conn_list_json_matches_the_schema() {
    with_daemon(|bed, lb| {
        let text = lb.cli(&["conn", "list", "--json"]).expect("conn list");
        matches("lb conn list", &text);
        let client = SocketAddr::new(bed.client_addr(0, false), 40001);
        let _open = bed
            .tcp_connect(client, vip_tcp(false))
            .expect("a connection");
        let text = lb
            .cli(&["conn", "list", "--json"])
            .expect("conn list of a connection");
        matches("lb conn list", &text);
        assert!(text.contains("192.0.2.10:40001"), "{text}");
    });
}

#[test]
fn backend_json_of_every_action_matches_the_schema() {
    with_daemon(|_, lb| {
        let vip = vip_text(false, true);
        let b3 = backend_addr(3, false).to_string();
        let steps: [(&str, &[&str]); 7] = [
            ("add", &[]),
            ("weight", &["2"]),
            ("drain", &[]),
            ("undrain", &[]),
            ("drain", &["--timeout", "1h"]),
            ("drain", &["--keep"]),
            ("remove", &[]),
        ];
        for (action, extra) in steps {
            let mut args = vec!["backend", action, "--json", "--vip", &vip, "--backend", &b3];
            args.extend_from_slice(extra);
            let text = lb.cli(&args).expect("lb backend");
            matches("lb backend", &text);
            let change: Value = serde_json::from_str(&text).expect("JSON");
            assert_eq!(change["action"], action);
            let timed = extra.contains(&"--timeout");
            assert_eq!(change["drain_timeout_secs"].is_null(), !timed, "{text}");
            // `--keep` on a drained backend changes nothing but its pending removal.
            assert_eq!(change["changed"], !extra.contains(&"--keep"), "{text}");
            assert_eq!(change["after"].is_null(), action == "remove", "{text}");
        }
    });
}

#[test]
fn overrides_json_matches_the_schema() {
    with_daemon(|_, lb| {
        let vip = vip_text(false, true);
        let b2 = backend_addr(2, false).to_string();
        matches(
            "lb overrides",
            &lb.cli(&["overrides", "--json"]).expect("overrides"),
        );
        lb.cli(&["backend", "drain", "--vip", &vip, "--backend", &b2])
            .expect("drain");
        let text = lb.cli(&["overrides", "--json"]).expect("overrides");
        matches("lb overrides", &text);
        let listed: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(listed["overrides"][0]["backend"], b2.as_str(), "{text}");
        let text = lb
            .cli(&["overrides", "--clear", "--json"])
            .expect("overrides --clear");
        matches("lb overrides", &text);
        let cleared: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(cleared["overrides"], serde_json::json!([]), "{text}");
    });
}

/// `lb detach --json` after the daemon stopped (the datapath stays pinned and
/// attached until then, and so do the announcement routes, which it removes first).
#[test]
fn detach_json_matches_the_schema() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let bed = TestBed::new(TestBedOptions {
        backends: 1,
        clients: 1,
        ..TestBedOptions::default()
    })
    .expect("bed");
    let config = DaemonConfig {
        extra: ANNOUNCE.into(),
        ..DaemonConfig::equal(1..=1)
    };
    let lb = Daemon::start(&bed, &config).expect("lb run");
    lb.stop().expect("lb run stops");
    let binary = lb_binary();
    let out = bed
        .lb_ns()
        .exec(
            binary.to_str().expect("UTF-8 path"),
            &["detach", "--json", "--interface", LB_IFACE],
        )
        .expect("lb detach");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    matches("lb detach", &text);
    let detached: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(detached["detached"], true, "{text}");
    assert_eq!(detached["vips"], 4, "two VIPs of each family: {text}");
    assert_eq!(
        detached["routes_withdrawn"], 2,
        "one route per VIP address: {text}"
    );
}

#[test]
fn trace_json_lines_match_the_schema() {
    with_daemon(|bed, lb| {
        let mut child = Command::new(lb_binary())
            .args([
                "trace",
                "--json",
                "--count",
                "1",
                "--vip",
                &vip_text(false, true),
            ])
            .arg("--socket")
            .arg(lb.socket_path())
            .stdout(Stdio::piped())
            .spawn()
            .expect("lb trace");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        matches(
            "lb trace (first line)",
            &lines.next().expect("a line").expect("text"),
        );
        bed.tcp_exchange(
            SocketAddr::new(bed.client_addr(0, false), 0),
            vip_tcp(false),
            "x",
        )
        .expect("a connection");
        matches(
            "lb trace (each packet)",
            &lines.next().expect("a line").expect("text"),
        );
        assert!(child.wait().expect("exit").success());
    });
}
