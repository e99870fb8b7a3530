//! `lb table` from parsed arguments: text and JSON reports, warnings, and errors that
//! name the argument.

use clap::Parser;

use super::*;

#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    command: TableCommand,
}

/// Parses `lb table ARGS...` and runs it: (exit code, stdout, stderr).
fn lb_table(args: &[&str]) -> (i32, String, String) {
    let cli = match Cli::try_parse_from(std::iter::once("table").chain(args.iter().copied())) {
        Ok(cli) => cli,
        Err(err) => return (err.exit_code(), String::new(), err.to_string()),
    };
    match run(&TableArgs {
        command: cli.command,
    }) {
        Ok(output) => {
            let warnings: String = output
                .warnings
                .iter()
                .map(|w| format!("warning: {w}\n"))
                .collect();
            (0, output.text, warnings)
        }
        Err(e) => (2, String::new(), e.to_string()),
    }
}

#[test]
fn build_text() {
    let (code, out, err) = lb_table(&[
        "build",
        "--size",
        "7",
        "198.51.100.12",
        "198.51.100.11=2",
        "[2001:db8::1]:80=0",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "table_size 7, seed {}, 3 backends (2 with weight > 0)",
            defaults::MAGLEV_SEED
        )
    );
    assert_eq!(
        lines[2],
        "BACKEND               WEIGHT    SLOTS     SHARE     IDEAL"
    );
    assert_eq!(
        lines[3],
        "198.51.100.11              2        5   71.429%   66.667%"
    );
    assert_eq!(
        lines[4],
        "198.51.100.12              1        2   28.571%   33.333%"
    );
    assert_eq!(
        lines[5],
        "[2001:db8::1]:80           0        0    0.000%    0.000%"
    );
    assert_eq!(
        lines[7],
        "slots per backend with weight > 0: min 2, max 5, mean 3.50, max/avg 1.4286"
    );
    assert!(lines[8].starts_with("fingerprint ") && lines[8].ends_with(" (v1)"));
    assert!(lines[9].starts_with("build time ") && lines[9].ends_with(" ms"));
    assert_eq!(
        err,
        "warning: table_size 7 < 100 × backends (2): expect imbalance\n"
    );
}

#[test]
fn build_json() {
    let (code, out, _) = lb_table(&[
        "build",
        "--json",
        "--seed",
        "0x10",
        "198.51.100.11",
        "198.51.100.12=3",
    ]);
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["size"], 65_537);
    assert_eq!(json["seed"], 16);
    assert_eq!(json["fingerprint"].as_str().unwrap().len(), 64);
    assert!(json["build_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(json["backends"][0]["key"], "198.51.100.11");
    assert_eq!(json["backends"][0]["weight"], 1);
    assert_eq!(json["backends"][0]["slots"], 16_384);
    assert_eq!(json["backends"][1]["slots"], 49_153);
    assert_eq!(json["warnings"], serde_json::json!([]));
}

#[test]
fn build_empty_table() {
    let (code, out, err) = lb_table(&["build", "198.51.100.11=0"]);
    assert_eq!(code, 0);
    assert!(out.contains("empty table: no backend with weight > 0, new flows are dropped"));
    assert!(err.contains("the table is empty"));
    let (_, out, _) = lb_table(&["build", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["min_slots"], serde_json::Value::Null);
}

#[test]
fn diff_text_and_json() {
    let old = "198.51.100.11,198.51.100.12,198.51.100.13";
    let new = "198.51.100.11,198.51.100.12,198.51.100.14";
    let (code, out, _) = lb_table(&["diff", "--size", "1009", "--old", old, "--new", new]);
    assert_eq!(code, 0);
    assert!(out.contains("removed (1): 198.51.100.13\n"), "{out}");
    assert!(out.contains("added (1): 198.51.100.14\n"), "{out}");
    assert!(out.contains("\nslots changed: "), "{out}");
    let (code, out, _) = lb_table(&[
        "diff", "--size", "1009", "--json", "--old", old, "--new", new,
    ]);
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let changed = json["changed"].as_u64().unwrap();
    assert!(changed > 0);
    assert_eq!(json["added"], serde_json::json!(["198.51.100.14"]));
    assert!((json["changed_fraction"].as_f64().unwrap() - changed as f64 / 1009.0).abs() < 1e-12);
    assert!(json["gained_by_added"].as_u64().unwrap() > 0);
}

#[test]
fn errors_name_the_argument() {
    let (code, _, err) = lb_table(&["build", "--size", "65536", "198.51.100.11"]);
    assert_eq!(code, 2);
    assert!(err.contains("'--size <M>'"), "{err}");
    assert!(err.contains("table_size 65536 is not prime"), "{err}");

    let (code, _, err) = lb_table(&[
        "build",
        "--size",
        "7",
        "198.51.100.1",
        "198.51.100.2",
        "198.51.100.3",
        "198.51.100.4",
        "198.51.100.5",
        "198.51.100.6",
        "198.51.100.7",
        "198.51.100.8",
    ]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        "invalid --size 7: table_size 7 is smaller than backend count 8"
    );

    let (code, _, err) = lb_table(&["build", "198.51.100.11", "::ffff:198.51.100.11"]);
    assert_eq!(code, 2);
    assert_eq!(err, "invalid BACKEND list: duplicate backend 198.51.100.11");

    let (code, _, err) = lb_table(&["build", "198.51.100.300"]);
    assert_eq!(code, 2);
    assert!(err.contains("'[BACKEND]...'"), "{err}");
    assert!(
        err.contains("invalid backend address \"198.51.100.300\""),
        "{err}"
    );

    let (code, _, err) = lb_table(&["build", "198.51.100.11=1.5"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("invalid weight \"1.5\" for backend 198.51.100.11"),
        "{err}"
    );

    let (code, _, err) = lb_table(&["diff", "--old", "198.51.100.11,x", "--new", ""]);
    assert_eq!(code, 2);
    assert!(
        err.contains("'--old <LIST>'") && err.contains("\"x\""),
        "{err}"
    );

    let (code, _, err) = lb_table(&[
        "diff",
        "--old",
        "",
        "--new",
        "198.51.100.11,198.51.100.11=2",
    ]);
    assert_eq!(code, 2);
    assert_eq!(err, "invalid --new list: duplicate backend 198.51.100.11");

    let (code, _, err) = lb_table(&["build", "--seed=-1"]);
    assert_eq!(code, 2);
    assert!(err.contains("'--seed <S>'"), "{err}");
}

#[test]
fn seeds_and_sizes_parse() {
    assert_eq!(parse_seed("0x6c626d61676c6576"), Ok(defaults::MAGLEV_SEED));
    assert_eq!(parse_seed("42"), Ok(42));
    assert!(parse_seed("0x").is_err());
    assert_eq!(parse_table_size("65537"), Ok(65_537));
    assert_eq!(
        parse_table_size("1"),
        Err("table_size must be a prime >= 2 (got 1)".to_owned())
    );
    assert!(
        parse_table_size("-7")
            .unwrap_err()
            .contains("\"-7\" is not a table size")
    );
}

#[test]
fn long_lists_are_summarised() {
    let keys: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
    assert_eq!(list(&keys[..2]), "k0, k1");
    assert!(list(&keys).ends_with("k9, and 2 more"));
    assert_eq!(list(&[]), "-");
}

#[test]
fn build_with_hash_fields_gives_the_vips_fingerprint_and_predicts_flows() {
    let backends = ["198.51.100.11", "198.51.100.12", "198.51.100.13"];
    let build = |extra: &[&str]| {
        let mut args = vec!["build", "--json", "--size", "1009"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&backends);
        let (code, out, err) = lb_table(&args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let plain = build(&[]);
    assert_eq!(plain["hash_fields"], "5-tuple");
    assert_eq!(plain["hash_source_prefix"], 0);
    assert_eq!(plain["flows"], serde_json::json!([]));
    let flows = "192.0.2.7:40001,192.0.2.9:40002,192.0.3.7:40001";
    let src = build(&[
        "--hash-fields",
        "src",
        "--hash-source-prefix",
        "24",
        "--flow",
        flows,
    ]);
    let table = MaglevTable::build(
        &backends.map(|b| b.parse().unwrap()),
        1009,
        defaults::MAGLEV_SEED,
    )
    .unwrap();
    let h = HashFields {
        fields: Fields::Src,
        prefix: 24,
        affinity_secs: 0,
    };
    assert_eq!(
        src["fingerprint"],
        table.fingerprint().with_hash_fields(h).to_string()
    );
    assert_ne!(src["fingerprint"], plain["fingerprint"]);
    assert_eq!(src["hash_source_prefix"], 24);
    // One /24 is one client: the same slot whatever the host and port.
    assert_eq!(src["flows"][0]["slot"], src["flows"][1]["slot"]);
    for (i, client) in flows.split(',').enumerate() {
        let f = &src["flows"][i];
        assert_eq!(f["client"], client);
        let key = lb_maglev::flow::flow_key(
            client.parse().unwrap(),
            "203.0.113.10:80".parse().unwrap(),
            lb_common::types::PROTO_TCP,
        )
        .unwrap();
        let slot = lb_maglev::flow::table_slot_of(&key, h, defaults::HASH_SEED, 1009).unwrap();
        assert_eq!(f["slot"], slot);
        assert_eq!(f["backend"], table.owner(slot).unwrap().key.to_string());
    }
    let (_, text, _) = lb_table(&[
        "build",
        "--hash-fields",
        "src",
        "--hash-source-prefix",
        "24",
        "--flow",
        "192.0.2.7:40001",
        "198.51.100.11",
    ]);
    assert!(
        text.contains("\nhash fields src, source prefix /24 (covered by the fingerprint)\n"),
        "{text}"
    );
    assert!(text.contains("\nflow 192.0.2.7:40001: slot "), "{text}");
    assert!(text.ends_with(", backend 198.51.100.11\n"), "{text}");
}

#[test]
fn hash_field_errors_name_the_option() {
    let (code, _, err) = lb_table(&["build", "--hash-source-prefix", "24", "198.51.100.11"]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        "invalid --hash-source-prefix: applies only with --hash-fields src or src+dport, not 5-tuple"
    );
    let (code, _, err) = lb_table(&[
        "build",
        "--vip",
        "[2001:db8::10]:80",
        "--hash-fields",
        "src",
        "--hash-source-prefix",
        "129",
        "198.51.100.11",
    ]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        "invalid --hash-source-prefix: expected a prefix length from 1 to 128 for VIP 2001:db8::10, got 129"
    );
    let (code, _, err) = lb_table(&["build", "--flow", "[2001:db8::7]:1", "198.51.100.11"]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        "invalid --flow [2001:db8::7]:1: not of the family of --vip 203.0.113.10:80"
    );
    let (code, _, err) = lb_table(&["build", "--hash-fields", "dst", "198.51.100.11"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown hash fields \"dst\""), "{err}");
    let (code, _, err) = lb_table(&["build", "--hash-seed", "0x100000000", "198.51.100.11"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("wider than the flow hash's 32-bit seed"),
        "{err}"
    );
}
