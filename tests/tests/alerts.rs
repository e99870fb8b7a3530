//! What operators watch (issue 29, stage 4): the Grafana dashboard
//! (`dist/grafana/lb.json`) and the Prometheus alert rules
//! (`dist/prometheus/lb-alerts.yml`) the package ships.
//!
//! - `promtool check rules` accepts the rules and `promtool test rules` passes their
//!   series fixtures (`lb-alerts.test.yml`), which hold, for every alert, a case where it
//!   fires and one where it does not; every alert has a runbook in the book;
//! - the rules and the dashboard name only series the daemon exports (the metrics
//!   chapter's list);
//! - every query of the dashboard (its panels' and its variables'), run against a real
//!   Prometheus scraping a live `lb run`, returns samples, each a number.
//!
//! The last test is privileged and needs the `lb` binary; all need Debian's
//! `prometheus` (`cargo xtask setup`).

use std::{collections::BTreeSet, net::SocketAddr, time::Duration};

use lb_tests::{
    daemon::{Daemon, DaemonConfig, vip_text},
    prometheus::{
        PanelQuery, Prometheus, Sample, dashboard_queries, dist_dir, promtool, substitute,
    },
    testbed::{
        TestBed, TestBedOptions,
        health::{PortListener, TCP_PROBE_PORT},
        vip_tcp,
    },
    traffic::{self, Ports},
};

/// The book's chapter with a runbook per alert.
const RUNBOOKS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../docs/src/operations/alerts.md"
);

/// The metrics chapter, whose table lists every exported series.
const METRICS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/src/guide/metrics.md");

fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn dashboard() -> serde_json::Value {
    let text = read(&dist_dir().join("grafana/lb.json"));
    serde_json::from_str(&text).expect("lb.json is JSON")
}

/// The alert names of the rules file (`- alert: NAME`).
fn alert_names(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert:"))
        .map(|n| n.trim().to_owned())
        .collect()
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_series_fixtures() {
    let dir = dist_dir().join("prometheus");
    let checked = promtool(&dir, &["check", "rules", "lb-alerts.yml"]).expect("check rules");
    let rules = read(&dir.join("lb-alerts.yml"));
    let count = alert_names(&rules).len();
    assert!(count >= 7, "{count} alerts");
    assert!(
        checked.contains(&format!("SUCCESS: {count} rules found")),
        "{checked}"
    );
    let tested = promtool(&dir, &["test", "rules", "lb-alerts.test.yml"]).expect("test rules");
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// The alert each `exp_alerts` of the test file is for, and whether it expects any.
fn expectations(tests: &str) -> Vec<(String, bool)> {
    let lines: Vec<&str> = tests.lines().map(str::trim).collect();
    lines
        .windows(2)
        .filter_map(|w| {
            let name = w[0].strip_prefix("alertname:")?.trim().to_owned();
            let exp = w[1].strip_prefix("exp_alerts:")?.trim();
            Some((name, exp != "[]"))
        })
        .collect()
}

#[test]
fn every_alert_has_a_firing_and_a_quiet_case_and_a_runbook() {
    let dir = dist_dir().join("prometheus");
    let names = alert_names(&read(&dir.join("lb-alerts.yml")));
    let cases = expectations(&read(&dir.join("lb-alerts.test.yml")));
    let runbooks = read(std::path::Path::new(RUNBOOKS));
    for name in &names {
        for firing in [true, false] {
            assert!(
                cases.contains(&(name.clone(), firing)),
                "{name}: no case where it {}",
                if firing { "fires" } else { "stays quiet" }
            );
        }
        assert!(
            runbooks.contains(&format!("\n## {name}\n")),
            "{name}: no runbook heading in {RUNBOOKS}"
        );
    }
    for (name, _) in &cases {
        assert!(names.contains(name), "a test of an unknown alert {name}");
    }
}

/// The `lb_*` names in `text`, histogram suffixes (`_bucket`, `_sum`, `_count`) cut.
fn series_names(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|token| token.starts_with("lb_"))
        .map(|name| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name)
                .to_owned()
        })
        .collect()
}

#[test]
fn the_rules_and_the_dashboard_use_only_exported_series() {
    let exported = read(std::path::Path::new(METRICS));
    let rules = read(&dist_dir().join("prometheus/lb-alerts.yml"));
    let queries: String = dashboard_queries(&dashboard())
        .into_iter()
        .map(|q| q.expr + "\n")
        .collect();
    let used: BTreeSet<String> = series_names(&rules)
        .into_iter()
        .chain(series_names(&queries))
        .collect();
    assert!(used.len() >= 20, "{used:?}");
    let unknown: Vec<&String> = used
        .iter()
        .filter(|n| !exported.contains(&format!("`{n}`")) && !exported.contains(&format!("`{n}{{")))
        .collect();
    assert!(unknown.is_empty(), "not in {METRICS}: {unknown:?}");
}

/// The daemon's endpoint in the LB namespace (the default address).
const ENDPOINT: &str = "127.0.0.1:9469";

/// The dashboard's variables as the test sets them: one job, instance and VIP, and
/// windows that the test's few minutes of data fill.
fn variables(vip: &str) -> Vec<(&'static str, String)> {
    vec![
        ("job", "lb".to_owned()),
        ("instance", ENDPOINT.to_owned()),
        ("vip", vip.to_owned()),
        ("__rate_interval", "1m".to_owned()),
        ("__range", "5m".to_owned()),
    ]
}

/// The configuration: two backends with TCP probes on the IPv4 TCP VIP, `[announce]`
/// on, connections counted every 200 ms; `weight` is backend 2's.
fn config(weight: u32) -> DaemonConfig {
    let probe = format!(
        "kind = \"tcp\"\nport = {TCP_PROBE_PORT}\ninterval_ms = 200\ntimeout_ms = 100\n\
         rise = 2\nfall = 3\n"
    );
    DaemonConfig {
        metrics: "connections_interval_ms = 200".into(),
        extra: "\n[announce]\nenabled = true\n".into(),
        ..DaemonConfig::weighted([(1, 1), (2, weight)])
    }
    .with_health(&vip_text(false, true), &probe)
}

/// Opens `n` connections to the IPv4 TCP VIP, each with one exchange; keeps them open.
fn connections(bed: &TestBed, n: usize) -> Vec<traffic::Greeted> {
    let srcs = traffic::sources(bed, n, false, Ports::Kernel);
    let mut greeted = traffic::connect_all(bed, &srcs, vip_tcp(false)).expect("connections");
    for g in &mut greeted {
        assert_eq!(g.conn.exchange("x").expect("exchange"), g.backend);
    }
    greeted
}

/// Polls `q` (its variables substituted) until it returns samples, all numbers.
fn returns_data(prom: &Prometheus<'_>, q: &PanelQuery, vars: &[(&str, &str)]) -> Vec<Sample> {
    let expr = substitute(&q.expr, vars);
    assert!(
        !expr.contains('$'),
        "{}: a variable left in {expr}",
        q.title
    );
    prom.wait(&expr, Duration::from_secs(20), |s| {
        !s.is_empty() && s.iter().all(|s| s.value.is_finite())
    })
    .unwrap_or_else(|e| panic!("panel {:?}: {e:#}", q.title))
}

#[test]
fn every_dashboard_query_returns_data_from_a_live_daemon() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let bed = TestBed::new(TestBedOptions {
        backends: 2,
        clients: 8,
        ..TestBedOptions::default()
    })
    .expect("build the test bed");
    let _listeners: Vec<PortListener> = bed
        .backends()
        .map(|b| PortListener::open(b.ns(), TCP_PROBE_PORT).expect("listener"))
        .collect();
    let lb = Daemon::start(&bed, &config(1)).unwrap_or_else(|e| panic!("start lb run: {e:#}"));
    let endpoint: SocketAddr = ENDPOINT.parse().expect("an address");
    let prom = Prometheus::start(bed.lb_ns(), endpoint).expect("prometheus");
    prom.wait("up{job=\"lb\"}", Duration::from_secs(20), |s| {
        s.first().is_some_and(|s| s.value == 1.0)
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", prom.log()));
    // Traffic, then a reload that changes the table (a build, a swap, a change), then
    // traffic again, all inside the windows the queries use.
    let mut open = connections(&bed, 16);
    std::thread::sleep(Duration::from_secs(2));
    lb.write_config(&config(2)).expect("write lb.toml");
    lb.reload().expect("SIGHUP");
    prom.wait(
        "lb_reloads_total{result=\"applied\"}",
        Duration::from_secs(15),
        |s| s.first().is_some_and(|s| s.value >= 1.0),
    )
    .unwrap_or_else(|e| panic!("the reload: {e:#}\n{}", lb.log()));
    open.extend(connections(&bed, 16));
    std::thread::sleep(Duration::from_secs(2));

    let queries = dashboard_queries(&dashboard());
    assert!(queries.len() >= 30, "only {} queries", queries.len());
    let vip = vip_text(false, true);
    let vars = variables(&vip);
    let vars: Vec<(&str, &str)> = vars.iter().map(|(n, v)| (*n, v.as_str())).collect();
    for q in &queries {
        let samples = returns_data(&prom, q, &vars);
        eprintln!("{}: {} samples ({})", q.title, samples.len(), q.expr);
    }
    drop(open);
}
