//! The metrics tests' tools: a plain HTTP/1.0 GET from inside a namespace ([`get`]), a
//! real Prometheus server (Debian's `prometheus`) started in the LB namespace with a
//! generated configuration ([`Prometheus::start`]), its HTTP query API
//! ([`Prometheus::query`]), and `promtool check metrics` ([`promtool_check`]); for the
//! dashboard and alert rules of `dist/`: [`promtool`], the dashboard's queries
//! ([`dashboard_queries`]) and its variables' values ([`substitute`]).
//!
//! The server scrapes the daemon's endpoint every second, keeps its data in a temporary
//! directory, and is killed (and the directory removed) when the [`Prometheus`] is
//! dropped, also during a panic; as a backstop it gets SIGTERM when the thread that
//! started it exits (`PR_SET_PDEATHSIG`).

use std::{
    collections::BTreeMap,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    os::unix::process::CommandExt as _,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{
    daemon::{TempDir, die_with_parent},
    netns::NetNs,
};

/// The body of `GET path` from `addr`, asked from inside `ns` (`Accept`: `accept`, if
/// given). Fails unless the status is 200.
///
/// # Errors
/// Connection failures, a non-200 status.
pub fn get(
    ns: &NetNs,
    addr: SocketAddr,
    path: &str,
    accept: Option<&str>,
) -> anyhow::Result<String> {
    let request = format!(
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{}\r\n",
        accept
            .map(|a| format!("Accept: {a}\r\n"))
            .unwrap_or_default()
    );
    let raw = ns.enter(move || -> std::io::Result<Vec<u8>> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(request.as_bytes())?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)?;
        Ok(raw)
    })??;
    let text = String::from_utf8(raw).context("a non-UTF-8 answer")?;
    let (head, body) = text.split_once("\r\n\r\n").context("no header end")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!(
            "GET http://{addr}{path}: {}",
            head.lines().next().unwrap_or("")
        );
    }
    Ok(body.to_owned())
}

/// Runs `promtool check metrics` on `exposition`; its output when it refuses it.
///
/// # Errors
/// When promtool cannot run, or finds a problem (the message has its output).
pub fn promtool_check(exposition: &str) -> anyhow::Result<()> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting promtool (Debian package prometheus; cargo xtask setup installs it)")?;
    child
        .stdin
        .take()
        .context("promtool's stdin")?
        .write_all(exposition.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// One sample of an instant query: its labels and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The series' labels (`__name__` included).
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// A Prometheus server in a namespace; killed on drop.
pub struct Prometheus<'ns> {
    child: Child,
    ns: &'ns NetNs,
    api: SocketAddr,
    dir: TempDir,
}

/// Where the test's Prometheus listens in the LB namespace (its loopback).
pub const API: &str = "127.0.0.1:9090";

impl<'ns> Prometheus<'ns> {
    /// Starts `prometheus` in `ns`, scraping `target` (`HOST:PORT`, path `/metrics`)
    /// every second as job `lb`, and waits (up to 30 s) until its API answers.
    ///
    /// # Errors
    /// When it cannot start or does not answer; the message has its log.
    pub fn start(ns: &'ns NetNs, target: SocketAddr) -> anyhow::Result<Self> {
        let dir = TempDir::new("lb-prometheus-")?;
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: lb\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )?;
        let log = std::fs::File::create(dir.path().join("prometheus.log"))?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns.name(), "prometheus"])
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={API}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0);
        die_with_parent(&mut cmd);
        let child = cmd.spawn().context("starting prometheus")?;
        let server = Self {
            child,
            ns,
            api: API.parse().expect("a socket address"),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while get(ns, server.api, "/-/ready", None).is_err() {
            if Instant::now() > deadline {
                bail!("prometheus did not get ready; its log:\n{}", server.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(server)
    }

    /// Its log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// The instant query `expr` (at unix time `at`, or now): its samples.
    ///
    /// # Errors
    /// When the API fails or the query is refused.
    pub fn query(&self, expr: &str, at: Option<f64>) -> anyhow::Result<Vec<Sample>> {
        let mut path = format!("/api/v1/query?query={}", encode(expr));
        if let Some(t) = at {
            path.push_str(&format!("&time={t:.3}"));
        }
        let body = get(self.ns, self.api, &path, None)?;
        let answer: serde_json::Value = serde_json::from_str(&body)?;
        if answer["status"] != "success" {
            bail!("query {expr}: {body}");
        }
        let result = answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok(result
            .iter()
            .map(|r| Sample {
                labels: r["metric"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                            .collect()
                    })
                    .unwrap_or_default(),
                value: r["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN),
            })
            .collect())
    }

    /// Polls `expr` (up to `timeout`) until `done` holds for its samples; returns them.
    ///
    /// # Errors
    /// When the API fails, or `done` never held (the message has the last samples).
    pub fn wait(
        &self,
        expr: &str,
        timeout: Duration,
        done: impl Fn(&[Sample]) -> bool,
    ) -> anyhow::Result<Vec<Sample>> {
        let deadline = Instant::now() + timeout;
        loop {
            let samples = self.query(expr, None)?;
            if done(&samples) {
                return Ok(samples);
            }
            if Instant::now() > deadline {
                bail!("{expr}: still {samples:?} after {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Prometheus<'_> {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `text` percent-encoded for a URL's query (RFC 3986 unreserved characters kept).
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The current unix time (s), for [`Prometheus::query`]'s `at`.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The repository's `dist/` directory (the dashboard and the alert rules).
pub fn dist_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist")
}

/// Runs `promtool ARGS...` in `dir`; its output.
///
/// # Errors
/// When promtool cannot run or exits non-zero (the message has its output).
pub fn promtool(dir: &std::path::Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .context("starting promtool (Debian package prometheus; cargo xtask setup installs it)")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("promtool {}: {text}", args.join(" "));
    }
    Ok(text)
}

/// One PromQL query of a Grafana dashboard: where it is and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PanelQuery {
    /// The panel's title (or `variable NAME`).
    pub title: String,
    /// The query, with the dashboard's variables as written.
    pub expr: String,
}

/// Every `expr` of the dashboard's panels (rows' nested panels included), and each
/// query variable's `label_values(SELECTOR, LABEL)` as `count by (LABEL) (SELECTOR)`.
pub fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<PanelQuery> {
    fn panels(list: &serde_json::Value, out: &mut Vec<PanelQuery>) {
        for p in list.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or("").to_owned();
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    let (title, expr) = (title.clone(), expr.to_owned());
                    out.push(PanelQuery { title, expr });
                }
            }
            panels(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    panels(&dashboard["panels"], &mut out);
    for v in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let definition = v["definition"].as_str().unwrap_or("");
        let inner = definition
            .strip_prefix("label_values(")
            .and_then(|d| d.strip_suffix(')'));
        if let Some((selector, label)) = inner.and_then(|i| i.rsplit_once(',')) {
            out.push(PanelQuery {
                title: format!("variable {}", v["name"].as_str().unwrap_or("")),
                expr: format!("count by ({}) ({selector})", label.trim()),
            });
        }
    }
    out
}

/// `expr` with each `$name` of `values` replaced by its value, longest names first
/// (so `$__rate_interval` is not read as `$__range`'s prefix or the reverse).
pub fn substitute(expr: &str, values: &[(&str, &str)]) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    sorted.iter().fold(expr.to_owned(), |e, (name, value)| {
        e.replace(&format!("${name}"), value)
    })
}
