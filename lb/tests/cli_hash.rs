//! `lb hash` through the real binary: the text and JSON reports, key files, the SVG
//! plot (parsed), and bad input rejected with exit status 2 and the option named.

use std::{
    path::PathBuf,
    process::{Command, Output},
};

fn lb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lb"))
        .arg("hash")
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .expect("run the lb binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8 output")
}

/// A scratch file under the target directory, unique per test and process.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    dir.join(format!("cli-hash-{}-{name}", std::process::id()))
}

#[test]
fn text_report_has_every_section() {
    let out = lb(&[
        "--keys",
        "4000",
        "--event",
        "add:S5",
        "--event",
        "remove:S1",
        "--vnodes",
        "1,10,100",
        "--peer",
        "4",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("4000 keys (generated, seed 1), 4000 requests; 5 servers; hash xxh3"),
        "{stdout}"
    );
    for scheme in ["modn", "ring", "rendezvous", "jump", "maglev", "bounded"] {
        assert!(
            stdout.contains(&format!("\n{scheme:<10}  ")),
            "{scheme}: {stdout}"
        );
    }
    assert!(stdout.contains("\nevent add:S5 (6 servers after; added: S5; removed: -)\n"));
    assert!(stdout.contains("\nevent remove:S1 (4 servers after; added: -; removed: S1)\n"));
    assert!(
        stdout.contains("jump: S1 is not the last bucket"),
        "{stdout}"
    );
    assert!(stdout.contains("\nring by virtual nodes per server (V)\n"));
    assert!(stdout.contains("\nmembership: a peer with 4 servers (missing: S4; extra: -)\n"));
    // No counts given: no hot-key table.
    assert!(!stdout.contains("hot keys"));
    assert_eq!(text(&out.stderr), "");
}

#[test]
fn json_report_has_the_documented_fields() {
    let out = lb(&[
        "--json",
        "--keys",
        "2000",
        "--servers",
        "a,b=3",
        "--schemes",
        "ring,maglev",
        "--event",
        "add:c",
        "--vnodes",
        "10,50",
        "--zipf",
        "1",
        "--requests",
        "10000",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(json["keys"], 2000);
    assert_eq!(json["requests"], 10000);
    assert_eq!(json["servers"][1]["weight"], 3);
    let schemes = json["schemes"].as_array().unwrap();
    assert_eq!(schemes.len(), 2);
    assert_eq!(schemes[0]["scheme"], "ring");
    assert_eq!(schemes[0]["detail"], "V=50, 200 points");
    assert!(schemes[1]["ns_per_lookup"].as_f64().unwrap() > 0.0);
    assert!(schemes[1]["memory_bytes"].as_u64().unwrap() >= 4 * 65_537);
    let keys: u64 = schemes[1]["per_server"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["keys"].as_u64().unwrap())
        .sum();
    assert_eq!(keys, 2000);
    for field in ["min", "max", "mean", "sd", "max_avg", "sd_avg"] {
        assert!(schemes[0]["keys"][field].is_number(), "{field}");
    }
    let moved = &json["events"][0]["schemes"][0];
    assert_eq!(moved["scheme"], "ring");
    assert_eq!(moved["moved"], moved["to_added"]);
    assert_eq!(json["vnodes_sweep"].as_array().unwrap().len(), 2);
    assert_eq!(json["vnodes_sweep"][0]["points"], 40);
    assert_eq!(json["hot_keys"]["hottest"].as_array().unwrap().len(), 10);
    assert_eq!(json["membership"], serde_json::Value::Null);
}

#[test]
fn key_files_with_counts_show_hot_keys() {
    let path = scratch("counted.txt");
    let mut body = String::from("hot 5000\n");
    for i in 0..999 {
        body.push_str(&format!("user-{i} 5\n"));
    }
    std::fs::write(&path, body).unwrap();
    let out = lb(&[
        "--key-file",
        path.to_str().unwrap(),
        "--hot",
        "1",
        "--replicas",
        "5",
    ]);
    std::fs::remove_file(&path).unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("1000 keys ("), "{stdout}");
    assert!(stdout.contains(", 9995 requests;"), "{stdout}");
    assert!(stdout.contains("\nhot keys (requests per server, relative to weight)\n"));
    assert!(
        stdout.contains("  hot 5000 requests (50.03%)\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ring V=100 + 1 hottest on 5 replicas"),
        "{stdout}"
    );
}

#[test]
fn the_tutorials_hot_key_before_and_after_bounded_load_on_requests() {
    // 10,000 keys of one request on 10 servers: 1,000 a server; 5x is 5,000 requests.
    let args = [
        "--servers",
        "10",
        "--keys",
        "10000",
        "--hot-key",
        "5",
        "--schemes",
        "ring,bounded",
        "--epsilon",
        "0.1,0.25",
    ];
    let out = lb(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("10001 keys ("), "{stdout}");
    assert!(stdout.contains(", 15000 requests;"), "{stdout}");
    assert!(
        stdout.contains("\nhot key live-score: 5000 requests (33.33% of all; 5.00x the average"),
        "{stdout}"
    );
    assert!(stdout.contains("\n  before, ring V=100: S"), "{stdout}");
    assert!(
        stdout.contains("\n  requests bounded (epsilon 0.25): S"),
        "{stdout}"
    );
    let out = lb(&[&args[..], &["--json"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let bound = &json["request_bound"];
    assert_eq!(bound["rows"].as_array().unwrap().len(), 2);
    let hot = &bound["hot_key"];
    assert_eq!(hot["key"], "live-score");
    assert_eq!(hot["times_average"], 5.0);
    // The hot key's server has its own ~1,000 requests and the 5,000: about 4x the fair
    // 1,500 before; bounded on requests at 1.25, no server is above 1.25x (+ 1 request).
    assert!(hot["ring"]["load_avg"].as_f64().unwrap() > 3.5, "{hot}");
    assert!(hot["request_bound_max_avg"].as_f64().unwrap() <= 1.25 + 1.0 / 1500.0);
    let served: u64 = hot["request_bound"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(served, 5000);
    let path = scratch("hot.svg");
    let out = lb(&[&args[..], &["--plot", path.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(svg.contains("requests max/avg (requests bounded)"));
    assert!(svg.contains("requests max/avg (keys bounded)"));
    rejects(
        &["--hot-key", "0"],
        "'--hot-key <F>': \"0\" is not a number > 0",
    );
}

#[test]
fn replicas_with_zones_list_preferences_and_balance_copies() {
    let out = lb(&[
        "--servers",
        "6",
        "--keys",
        "3000",
        "--schemes",
        "ring",
        "--replicas",
        "3",
        "--zones",
        "S0=a,S1=a,S2=b,S3=b,S4=c,S5=c",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("\nreplicas: RF=3 on the ring V=100, the first 3 distinct servers clockwise, skipping a zone already chosen (zones a, b, c)\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("servers; 0 keys with two copies in one zone\n"),
        "{stdout}"
    );
    assert!(stdout.contains("preference list\n"), "{stdout}");
    rejects(&["--zones", "S0=a"], "--replicas");
    rejects(
        &["--replicas", "2", "--zones", "S0=a"],
        "lb hash: error: --zones: server \"S1\" has no zone",
    );
    rejects(
        &["--replicas", "2", "--zones", "S0"],
        "'--zones <LIST>': \"S0\" is not NAME=ZONE",
    );
    rejects(
        &["--replicas", "0"],
        "lb hash: error: --replicas: 0 replicas",
    );
}

#[test]
fn a_failed_servers_fan_out() {
    let out = lb(&[
        "--servers",
        "10",
        "--keys",
        "10000",
        "--fail",
        "S9",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = json["failure"]["rows"].as_array().unwrap();
    let schemes: Vec<&str> = rows.iter().map(|r| r["scheme"].as_str().unwrap()).collect();
    assert_eq!(
        schemes,
        ["ring V=1", "ring V=100", "rendezvous", "maglev", "jump"]
    );
    // One point a server: the successor takes everything; the others spread it over 9.
    assert_eq!(rows[0]["receivers"].as_array().unwrap().len(), 1);
    assert_eq!(rows[0]["largest_share"], 1.0);
    for row in &rows[1..] {
        assert_eq!(row["receivers"].as_array().unwrap().len(), 9, "{row}");
    }
    let out = lb(&["--servers", "10", "--keys", "2000", "--fail", "S3"]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("\nfailure of S3 (10 servers): who takes its keys\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\njump        not defined: S3 is bucket 3 of 0..9"),
        "{stdout}"
    );
    rejects(
        &["--fail", "S10"],
        "lb hash: error: --fail: no server \"S10\"",
    );
}

#[test]
fn the_plot_has_its_charts_with_their_bars_and_lines() {
    let path = scratch("plot.svg");
    let out = lb(&[
        "--keys",
        "3000",
        "--event",
        "add:S5",
        "--event",
        "remove:S4",
        "--vnodes",
        "1,10,100,1000",
        "--epsilon",
        "0.1,0.25,0.5",
        "--plot",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).ends_with(&format!("\nplot: {} (6 charts)\n", path.display())));
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the plot is well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(root.attribute("width"), Some("1000"));
    let texts: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or("").trim().to_owned())
        .collect();
    for label in [
        "keys per server (dashed: the fair share)",
        "keys moved by add:S5 (% of keys)",
        "keys moved by remove:S4 (% of keys)",
        "ring sd/avg against virtual nodes per server V",
        "bounded load: max/avg against epsilon",
        "the ring: each arc in the colour of the server that owns it (5000 points)",
        "to the new server",
        "between old servers",
        "ideal: the least any scheme moves, 16.7%",
        "theory: mod-N moves 83.3%",
        "theory sqrt((N-1)/(N*V))",
        "cap 1 + epsilon",
        "S0",
        "modn",
        "bounded",
        "maglev",
    ] {
        assert!(
            texts.iter().any(|t| t == label),
            "{label} missing: {texts:?}"
        );
    }
    // Bars of the first chart (450 px high): 5 servers x 6 schemes.
    let attr = |n: &roxmltree::Node<'_, '_>, name: &str| -> f64 {
        n.attribute(name).unwrap().parse().unwrap()
    };
    let bars = |from: f64, to: f64| {
        doc.descendants()
            .filter(|n| n.has_tag_name("rect"))
            .filter(|r| {
                r.attribute("fill") != Some("#FFFFFF") && r.attribute("fill") != Some("none")
            })
            .filter(|r| attr(r, "width") > 12.0 && attr(r, "height") > 0.5)
            .filter(|r| (from..to).contains(&attr(r, "y")))
            .count()
    };
    assert_eq!(bars(0.0, 450.0), 30);
    // Moved by add:S5: every scheme a part to the new server, mod-N one between old
    // servers too (zero-height parts are not drawn).
    assert_eq!(bars(450.0, 900.0), 7);
}

#[test]
fn png_plots_and_no_empty_chart() {
    let path = scratch("plot.png");
    let out = lb(&["--keys", "2000", "--plot", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    // Without an event or a V sweep, those charts are left out and the text says why.
    assert!(
        stdout.contains("(2 charts)\n  no --event: no keys-moved chart\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("one V: no sd/avg-against-V chart"),
        "{stdout}"
    );
    let png = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&png[12..16], b"IHDR");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    // The load chart (450 px) and the ring picture (700 px).
    assert_eq!((width, height), (1000, 1150));
}

/// Runs `lb hash ARGS` and expects exit status 2 and a message containing `needle`.
fn rejects(args: &[&str], needle: &str) {
    let out = lb(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_input_is_rejected_naming_the_option() {
    rejects(&["--servers", "0"], "'--servers <N|LIST>': 0 servers");
    rejects(
        &["--servers", "a,a"],
        "'--servers <N|LIST>': duplicate server \"a\"",
    );
    rejects(&["--vnodes", "0"], "'--vnodes <LIST>': 0 virtual nodes");
    rejects(
        &["--vnodes", "10,x"],
        "'--vnodes <LIST>': \"x\" is not a number",
    );
    rejects(
        &["--epsilon", "0"],
        "'--epsilon <LIST>': \"0\" is not a number > 0",
    );
    rejects(
        &["--epsilon=-0.5"],
        "'--epsilon <LIST>': \"-0.5\" is not a number > 0",
    );
    rejects(&["--schemes", "ring,ketchup"], "unknown scheme \"ketchup\"");
    rejects(&["--hash", "md5"], "'--hash <NAME>': unknown hash \"md5\"");
    rejects(&["--keys", "0"], "'--keys <N>'");
    rejects(
        &["--event", "drop:S1"],
        "'--event <EVENT>': event \"drop:S1\": unknown kind",
    );
    rejects(
        &["--event", "remove:S9"],
        "lb hash: error: --event: remove:S9: no server \"S9\"",
    );
    rejects(
        &["--hash", "flow", "--seed", "0x100000000"],
        "lb hash: error: --seed: 4294967296 is wider than the flow hash's 32-bit seed",
    );
    rejects(&["--table-size", "65536"], "'--table-size <M>'");
    rejects(
        &["--servers", "200", "--table-size", "101"],
        "lb hash: error: --table-size: maglev: ",
    );

    let empty = scratch("empty.txt");
    std::fs::write(&empty, "\n  \n").unwrap();
    rejects(
        &["--key-file", empty.to_str().unwrap()],
        "lb hash: error: --key-file: ",
    );
    let out = lb(&["--key-file", empty.to_str().unwrap()]);
    assert!(text(&out.stderr).ends_with("no keys (empty or blank file)\n"));
    std::fs::write(&empty, "a 1\nb two\n").unwrap();
    rejects(
        &["--key-file", empty.to_str().unwrap()],
        "line 2: count \"two\" of key \"b\"",
    );
    rejects(
        &["--key-file", empty.to_str().unwrap(), "--zipf", "1"],
        "line 2",
    );
    std::fs::write(&empty, "a 1\nb 2\n").unwrap();
    rejects(
        &["--key-file", empty.to_str().unwrap(), "--zipf", "1"],
        "lb hash: error: --zipf: the key file already gives request counts",
    );
    std::fs::remove_file(&empty).unwrap();
    rejects(
        &["--key-file", "/nonexistent/keys.txt"],
        "lb hash: error: --key-file: reading /nonexistent/keys.txt",
    );
    rejects(&["--keys", "10", "--key-file", "x"], "cannot be used with");
}

#[test]
fn the_tutorials_user_keys_count_requests_and_distinct_keys() {
    let out = lb(&[
        "--key-gen",
        "users",
        "--key-seed",
        "16",
        "--keys",
        "100000",
        "--hash",
        "fnv1a32-fmix32",
        "--schemes",
        "modn",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let shown = report.to_string();
    assert!(shown.contains("mulberry32 user:N, seed 16"), "{shown}");
    assert!(
        shown.contains("99993"),
        "the 7 repeated draws are not distinct keys: {shown}"
    );
    let wide = lb(&["--key-gen", "users", "--key-seed", "4294967296"]);
    assert_eq!(wide.status.code(), Some(2));
    assert!(
        text(&wide.stderr).contains("--key-seed"),
        "{}",
        text(&wide.stderr)
    );
}

#[test]
fn explain_shows_every_schemes_decision() {
    let out = lb(&[
        "--servers",
        "4",
        "--hash",
        "fnv1a32-fmix32",
        "--explain",
        "user:42",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("key user:42: hash fnv1a32-fmix32 = 599759890\n"),
        "{stdout}"
    );
    for line in [
        "modn: 599759890 mod 4 = 2: bucket 2 is S2",
        "  S2                     3833641293  0.892589  <- highest",
        "maglev: slot = 599759890 mod 65537 = 30803;",
        "  -> bucket 2 is S2",
        "bounded: 10001 keys",
    ] {
        assert!(stdout.contains(line), "{line:?} in\n{stdout}");
    }
    let out = lb(&[
        "--space",
        "1000",
        "--positions",
        "A=105,930",
        "B=290,610",
        "C=450,845",
        "--hash",
        "value",
        "--key-list",
        "500,930,950",
        "--schemes",
        "ring",
        "--explain",
        "950",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("950 is past the last point (6 of 6): wrap around to point 0 at 105 (A)"),
        "{stdout}"
    );
    let out = lb(&["--hash", "value", "--key-list", "5,user:1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--key-list: key 2: key \"user:1\" is not HASH or NAME=HASH"),
        "{}",
        text(&out.stderr)
    );
    let out = lb(&["--space", "100", "--positions", "A=105", "--explain", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("outside the hash space 0..100"));
}

#[test]
fn the_tour_runs_the_tutorial() {
    let out = lb(&["tour"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("== 1. The problem"), "{stdout}");
    assert!(stdout.contains("1000    10000   9394  10539      323     1.05    3.2%"));
    assert!(stdout.contains("\n$ lb hash --servers 4 --key-gen users"));
}

#[test]
fn flow_keys_hash_by_the_vips_hash_fields() {
    let hash_of = |extra: &[&str], key: &str| -> String {
        let mut args = vec!["--hash", "flow", "--seed", "7", "--servers", "3"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--explain", key]);
        let out = lb(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let first = stdout.lines().next().unwrap_or_default();
        first
            .rsplit_once("= ")
            .map(|(_, h)| h.to_owned())
            .unwrap_or_else(|| panic!("a hash in {first:?}"))
    };
    let (a, b) = ("192.0.2.7:40001", "192.0.2.7:40002");
    assert_ne!(hash_of(&[], a), hash_of(&[], b), "the 5-tuple: ports count");
    let src = ["--hash-fields", "src"];
    assert_eq!(hash_of(&src, a), hash_of(&src, b), "src: one client");
    assert_ne!(hash_of(&src, a), hash_of(&src, "192.0.2.8:40001"));
    let net = ["--hash-fields", "src", "--hash-source-prefix", "24"];
    assert_eq!(hash_of(&net, a), hash_of(&net, "192.0.2.99:1"), "a /24");
    rejects(
        &["--hash", "flow", "--hash-fields", "sh"],
        "unknown hash fields \"sh\"",
    );
    rejects(
        &["--hash", "flow", "--hash-source-prefix", "24"],
        "lb hash: error: --hash-source-prefix: applies only with --hash-fields src or src+dport, not 5-tuple",
    );
    rejects(
        &[
            "--hash",
            "flow",
            "--hash-fields",
            "src",
            "--hash-source-prefix",
            "33",
        ],
        "lb hash: error: --hash-source-prefix: expected a prefix length from 1 to 32 for VIP 203.0.113.10, got 33",
    );
}
