//! `lb table` through the real binary: output on stdout, warnings and errors on stderr,
//! exit status (no root needed).

use std::process::{Command, Output};

fn lb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lb"))
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .expect("run the lb binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8 output")
}

#[test]
fn build_text_shows_counts_shares_fingerprint_and_time() {
    let out = lb(&[
        "table",
        "build",
        "198.51.100.13",
        "198.51.100.11",
        "198.51.100.12",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("table_size 65537, seed 7809924968928273782, 3 backends"));
    assert!(stdout.contains("\n198.51.100.11           1    21846   33.334%   33.333%\n"));
    assert!(stdout.contains("\n198.51.100.13           1    21845   33.332%   33.333%\n"));
    assert!(stdout.contains("min 21845, max 21846, mean 21845.67, max/avg 1.0000\n"));
    // The golden fingerprint of tests/maglev_cases.rs.
    assert!(stdout.contains(
        "fingerprint e1a47af508cef7d9ce174b35ae9e4b1afd5d11427745db26a02e2e68fa3d33d6 (v1)\n"
    ));
    assert!(stdout.contains("build time "));
    assert_eq!(text(&out.stderr), "");
}

#[test]
fn build_json_has_the_documented_fields() {
    let out = lb(&[
        "table",
        "build",
        "--size",
        "1009",
        "--seed",
        "42",
        "--json",
        "[2001:db8::1]:80=3",
        "198.51.100.11=1",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(json["size"], 1009);
    assert_eq!(json["seed"], 42);
    assert!(json["build_ms"].is_f64());
    assert_eq!(json["fingerprint"].as_str().map(str::len), Some(64));
    let backends = json["backends"].as_array().unwrap();
    assert_eq!(backends[0]["key"], "198.51.100.11");
    assert_eq!(backends[1]["key"], "[2001:db8::1]:80");
    assert_eq!(backends[1]["weight"], 3);
    let slots: u64 = backends.iter().map(|b| b["slots"].as_u64().unwrap()).sum();
    assert_eq!(slots, 1009);
    assert_eq!(json["warnings"], serde_json::json!([]));
}

#[test]
fn diff_reports_changed_slots() {
    let old = "198.51.100.11,198.51.100.12,198.51.100.13,198.51.100.14";
    let new = "198.51.100.11,198.51.100.12,198.51.100.14";
    let out = lb(&["table", "diff", "--old", old, "--new", new]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("removed (1): 198.51.100.13\nadded (0): -\n"),
        "{stdout}"
    );
    assert!(stdout.contains("slots changed: "), "{stdout}");
    assert!(
        stdout.contains("  lost by removed backends: 16384 (25.000%)\n"),
        "{stdout}"
    );

    let out = lb(&["table", "diff", "--json", "--old", old, "--new", new]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let changed = json["changed"].as_u64().unwrap();
    let common = json["changed_between_common"].as_u64().unwrap();
    assert_eq!(json["lost_by_removed"], 16_384);
    assert_eq!(changed, 16_384 + common);
    assert_eq!(json["gained_by_added"], 0);
    assert_eq!(json["removed"], serde_json::json!(["198.51.100.13"]));
    assert!(json["changed_between_common_fraction"].as_f64().unwrap() < 0.01);
}

#[test]
fn warnings_go_to_stderr() {
    let out = lb(&[
        "table",
        "build",
        "--size",
        "101",
        "198.51.100.11",
        "198.51.100.12",
    ]);
    assert!(out.status.success());
    assert_eq!(
        text(&out.stderr),
        "warning: table_size 101 < 100 × backends (2): expect imbalance\n"
    );
}

#[test]
fn errors_exit_non_zero_and_name_the_argument() {
    for (args, expected) in [
        (
            &["table", "build", "--size", "65536", "198.51.100.11"][..],
            "invalid value '65536' for '--size <M>': table_size 65536 is not prime",
        ),
        (
            &["table", "build", "--size", "10000019", "198.51.100.11"][..],
            "for '--size <M>': table_size 10000019 exceeds maximum 4000037",
        ),
        (
            &[
                "table",
                "build",
                "--size",
                "2",
                "198.51.100.11",
                "198.51.100.12",
                "198.51.100.13",
            ],
            "lb table: error: invalid --size 2: table_size 2 is smaller than backend count 3",
        ),
        (
            &["table", "build", "198.51.100.11", "198.51.100.11=3"],
            "lb table: error: invalid BACKEND list: duplicate backend 198.51.100.11",
        ),
        (
            &["table", "build", "198.51.100.11=abc"],
            "invalid weight \"abc\" for backend 198.51.100.11",
        ),
        (
            &[
                "table",
                "diff",
                "--old",
                "198.51.100.11",
                "--new",
                "nonsense",
            ],
            "for '--new <LIST>': invalid backend address \"nonsense\"",
        ),
    ] {
        let out = lb(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
