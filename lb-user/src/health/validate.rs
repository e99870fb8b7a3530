//! From [`HealthFile`] tables to [`VipHealth`] and [`ProbeSettings`]: every key checked,
//! every problem collected (not just the first) with its key path, and a backend's
//! overrides merged over its VIP's table.
//!
//! The configuration validator calls [`VipHealth::from_file`] with the VIP table's path
//! (`vip[0].health`), then [`VipHealth::backend`] for each backend with the backend
//! table's path (`vip[0].backend[2].health`). Errors name the key that decides them:
//! `vip[0].health.timeout_ms: expected a value below interval_ms (500 ms), got 1000`.
//!
//! Rules beyond each key's own range:
//! - a VIP table that sets any probe key must set `kind` (`none` is a kind: the VIP's
//!   keys are then only defaults for backends that set their own kind);
//! - `timeout_ms` is below `interval_ms`; when a backend overrides one of the two, the
//!   error names the override;
//! - a key the effective kind does not use is an error in the table that sets it
//!   (`path` with `kind = "tcp"`); a backend that changes the kind ignores its VIP's
//!   keys of the other kind;
//! - `dns` needs `dns_name`; `ca_file` needs `tls_verify = true`;
//! - the policy and damping keys belong to the VIP's table only.
//!
//! `ca_file` is read and parsed here, so a missing or empty file is a configuration
//! error at start and on reload, not a failing probe later.

use std::{fmt, ops::RangeInclusive, path::PathBuf, str::FromStr as _, time::Duration};

use hickory_proto::rr::{Name, RecordType};
use hyper::http::{HeaderValue, uri::PathAndQuery};
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject as _};

use super::{
    damping::Damping,
    file::HealthFile,
    policy::{AllDown, FailurePolicy},
    settings::{
        Check, DEFAULT_DNS_TYPE, DEFAULT_HTTP_PATH, DEFAULT_INTERVAL, DEFAULT_TIMEOUT, DnsCheck,
        HttpCheck, Mode, ProbeSettings, StatusRanges, TlsCheck,
    },
    state::Thresholds,
};

const INTERVAL_MS: (u64, u64) = (100, 3_600_000);
const TIMEOUT_MS: (u64, u64) = (10, 3_599_999);
const RISE_FALL: (u64, u64) = (1, 100);
const PORT: (u64, u64) = (1, 65_535);
const PERCENT: (u64, u64) = (0, 100);
const FLAP_TRANSITIONS: (u64, u64) = (0, 1_000);
const FLAP_SECS: (u64, u64) = (1, 86_400);
const HTTP_STATUS: RangeInclusive<u16> = 100..=599;
/// Record types that cannot be asked for in one UDP query.
const DNS_TYPES_REFUSED: [RecordType; 3] = [RecordType::AXFR, RecordType::IXFR, RecordType::OPT];

/// A problem with one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Key path, e.g. `vip[0].health.timeout_ms`.
    pub path: String,
    /// What is wrong, naming the value.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The `kind` key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    None,
    Tcp,
    Http,
    Https,
    Dns,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::None => "none",
            Kind::Tcp => "tcp",
            Kind::Http => "http",
            Kind::Https => "https",
            Kind::Dns => "dns",
        }
    }
}

/// Which table a key was written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layer {
    Vip,
    Backend,
}

/// A key's checked value and where it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Set<T> {
    value: T,
    path: String,
    layer: Layer,
}

/// One table's probe keys, each checked on its own, with the path it was written at.
/// [`ProbeLayer::merge`] lays a backend's table over its VIP's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeLayer {
    kind: Option<Set<Kind>>,
    mode: Option<Set<Mode>>,
    interval: Option<Set<Duration>>,
    timeout: Option<Set<Duration>>,
    rise: Option<Set<u32>>,
    fall: Option<Set<u32>>,
    port: Option<Set<u16>>,
    path: Option<Set<String>>,
    status: Option<Set<StatusRanges>>,
    host: Option<Set<String>>,
    tls_verify: Option<Set<bool>>,
    tls_server_name: Option<Set<String>>,
    ca_file: Option<Set<PathBuf>>,
    dns_name: Option<Set<Name>>,
    dns_type: Option<Set<RecordType>>,
    /// Keys (names, not paths) whose values were refused: not "missing" either.
    refused: Vec<&'static str>,
}

impl ProbeLayer {
    /// This layer with every key that `over` sets replaced by `over`'s.
    #[must_use]
    pub fn merge(&self, over: &ProbeLayer) -> ProbeLayer {
        fn pick<T: Clone>(base: &Option<Set<T>>, over: &Option<Set<T>>) -> Option<Set<T>> {
            over.clone().or_else(|| base.clone())
        }
        ProbeLayer {
            kind: pick(&self.kind, &over.kind),
            mode: pick(&self.mode, &over.mode),
            interval: pick(&self.interval, &over.interval),
            timeout: pick(&self.timeout, &over.timeout),
            rise: pick(&self.rise, &over.rise),
            fall: pick(&self.fall, &over.fall),
            port: pick(&self.port, &over.port),
            path: pick(&self.path, &over.path),
            status: pick(&self.status, &over.status),
            host: pick(&self.host, &over.host),
            tls_verify: pick(&self.tls_verify, &over.tls_verify),
            tls_server_name: pick(&self.tls_server_name, &over.tls_server_name),
            ca_file: pick(&self.ca_file, &over.ca_file),
            dns_name: pick(&self.dns_name, &over.dns_name),
            dns_type: pick(&self.dns_type, &over.dns_type),
            refused: [self.refused.as_slice(), over.refused.as_slice()].concat(),
        }
    }

    /// Every key but `kind`: where it was set, and which kinds use it.
    fn keys(&self) -> [KeyUse<'_>; 14] {
        fn at<T>(s: &Option<Set<T>>) -> Option<(&str, Layer)> {
            s.as_ref().map(|s| (s.path.as_str(), s.layer))
        }
        fn probing(k: Kind) -> bool {
            k != Kind::None
        }
        fn http(k: Kind) -> bool {
            matches!(k, Kind::Http | Kind::Https)
        }
        fn https(k: Kind) -> bool {
            k == Kind::Https
        }
        fn dns(k: Kind) -> bool {
            k == Kind::Dns
        }
        const PROBING: &str = "a kind other than \"none\"";
        const HTTP: &str = "kind = \"http\" or \"https\"";
        const HTTPS: &str = "kind = \"https\"";
        const DNS: &str = "kind = \"dns\"";
        let k = |set, used, by| KeyUse { set, used, by };
        [
            k(at(&self.mode), probing, PROBING),
            k(at(&self.interval), probing, PROBING),
            k(at(&self.timeout), probing, PROBING),
            k(at(&self.rise), probing, PROBING),
            k(at(&self.fall), probing, PROBING),
            k(at(&self.port), probing, PROBING),
            k(at(&self.path), http, HTTP),
            k(at(&self.status), http, HTTP),
            k(at(&self.host), http, HTTP),
            k(at(&self.tls_verify), https, HTTPS),
            k(at(&self.tls_server_name), https, HTTPS),
            k(at(&self.ca_file), https, HTTPS),
            k(at(&self.dns_name), dns, DNS),
            k(at(&self.dns_type), dns, DNS),
        ]
    }

    /// Paths of the keys set in `layer` that `kind` does not use, with the kinds that
    /// use them.
    fn unused_by(&self, kind: Kind, layer: Layer) -> Vec<(&str, &'static str)> {
        self.keys()
            .into_iter()
            .filter_map(|k| match k.set {
                Some((path, l)) if l == layer && !(k.used)(kind) => Some((path, k.by)),
                _ => None,
            })
            .collect()
    }

    fn any_probe_key(&self) -> bool {
        self.keys().iter().any(|k| k.set.is_some())
    }
}

/// One key of a [`ProbeLayer`] as [`ProbeLayer::unused_by`] sees it.
struct KeyUse<'a> {
    /// Path and table, when set.
    set: Option<(&'a str, Layer)>,
    /// Whether a kind uses the key.
    used: fn(Kind) -> bool,
    /// The kinds that use it, for the message.
    by: &'static str,
}

/// A VIP's validated health table: the probe its backends inherit, the multi-failure
/// policy and flap damping. The default (no `health` table) probes nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VipHealth {
    layer: ProbeLayer,
    vip_port: u16,
    /// The probe of a backend without overrides; `None`: not probed (always healthy).
    pub probe: Option<ProbeSettings>,
    /// What the VIP does when backends fail.
    pub policy: FailurePolicy,
    /// Flap damping of its backends.
    pub damping: Damping,
}

impl VipHealth {
    /// Validates a VIP's `health` table (`None`: the VIP has none) at key path `prefix`
    /// (e.g. `vip[0].health`); `vip_port` is the default probe port.
    ///
    /// # Errors
    /// Every problem found, each naming its key.
    pub fn from_file(
        prefix: &str,
        file: Option<&HealthFile>,
        vip_port: u16,
    ) -> Result<Self, Vec<FieldError>> {
        let Some(file) = file else {
            return Ok(Self {
                vip_port,
                ..Self::default()
            });
        };
        let mut errors = Vec::new();
        let layer = parse_layer(prefix, file, Layer::Vip, &mut errors);
        let policy = parse_policy(prefix, file, &mut errors);
        let damping = parse_damping(prefix, file, &mut errors);
        if layer.kind.is_none() && !layer.refused.contains(&"kind") && layer.any_probe_key() {
            errors.push(FieldError {
                path: format!("{prefix}.kind"),
                message: "required when other probe keys are set: \"tcp\", \"http\", \"https\", \
                          \"dns\" or \"none\""
                    .to_owned(),
            });
        }
        let probe = resolve(&layer, Layer::Vip, vip_port, damping, &mut errors);
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Self {
            layer,
            vip_port,
            probe,
            policy,
            damping,
        })
    }

    /// The probe of one backend of this VIP: its `health` table (`None`: it has none)
    /// at key path `prefix` (e.g. `vip[0].backend[2].health`) merged over the VIP's;
    /// `backend_port` is its port, if it has one (the default probe port before the
    /// VIP's). `Ok(None)`: the backend is not probed.
    ///
    /// # Errors
    /// Every problem the backend's table causes, each naming its key. Problems of the
    /// VIP's own keys were reported by [`Self::from_file`] and are not repeated.
    pub fn backend(
        &self,
        prefix: &str,
        file: Option<&HealthFile>,
        backend_port: Option<u16>,
    ) -> Result<Option<ProbeSettings>, Vec<FieldError>> {
        let mut errors = Vec::new();
        let own = match file {
            Some(file) => {
                let own = parse_layer(prefix, file, Layer::Backend, &mut errors);
                refuse_vip_only_keys(prefix, file, &mut errors);
                own
            }
            None => ProbeLayer::default(),
        };
        let merged = self.layer.merge(&own);
        let port = backend_port.unwrap_or(self.vip_port);
        let mut resolved = Vec::new();
        let probe = resolve(&merged, Layer::Backend, port, self.damping, &mut resolved);
        let own_prefix = format!("{prefix}.");
        errors.extend(
            resolved
                .into_iter()
                .filter(|e| e.path.starts_with(&own_prefix)),
        );
        if errors.is_empty() {
            Ok(probe)
        } else {
            Err(errors)
        }
    }
}

/// Builds the probe of a merged layer; `checked` is the table whose unused keys are
/// reported.
fn resolve(
    m: &ProbeLayer,
    checked: Layer,
    default_port: u16,
    damping: Damping,
    errors: &mut Vec<FieldError>,
) -> Option<ProbeSettings> {
    let kind = m.kind.as_ref().map_or(Kind::None, |k| k.value);
    // A VIP's keys under `kind = "none"` are defaults for backends that set a kind.
    if !(checked == Layer::Vip && kind == Kind::None) {
        for (path, by) in m.unused_by(kind, checked) {
            errors.push(FieldError {
                path: path.to_owned(),
                message: format!("only used with {by} (kind is \"{}\")", kind.name()),
            });
        }
    }
    if kind == Kind::None {
        return None;
    }
    let interval = m.interval.as_ref().map_or(DEFAULT_INTERVAL, |s| s.value);
    let timeout = match &m.timeout {
        Some(t) => {
            if t.value >= interval && !m.refused.contains(&"interval_ms") {
                let by_interval = m
                    .interval
                    .as_ref()
                    .filter(|i| i.layer == Layer::Backend && t.layer == Layer::Vip);
                errors.push(match by_interval {
                    Some(i) => FieldError {
                        path: i.path.clone(),
                        message: format!(
                            "expected a value above timeout_ms ({} ms), got {}",
                            t.value.as_millis(),
                            interval.as_millis()
                        ),
                    },
                    None => FieldError {
                        path: t.path.clone(),
                        message: format!(
                            "expected a value below interval_ms ({} ms), got {}",
                            interval.as_millis(),
                            t.value.as_millis()
                        ),
                    },
                });
            }
            t.value
        }
        None => DEFAULT_TIMEOUT.min(interval / 2),
    };
    let check = match kind {
        Kind::None => return None,
        Kind::Tcp => Check::Tcp,
        Kind::Http | Kind::Https => Check::Http(http_check(m, kind, checked, errors)),
        Kind::Dns => match &m.dns_name {
            Some(name) => Check::Dns(DnsCheck {
                name: name.value.clone(),
                record_type: m.dns_type.as_ref().map_or(DEFAULT_DNS_TYPE, |t| t.value),
            }),
            None if m.refused.contains(&"dns_name") => return None,
            None => {
                let table = m
                    .kind
                    .as_ref()
                    .and_then(|k| k.path.strip_suffix(".kind"))
                    .unwrap_or_default();
                errors.push(FieldError {
                    path: format!("{table}.dns_name"),
                    message: "required with kind = \"dns\": the name to query".to_owned(),
                });
                return None;
            }
        },
    };
    Some(ProbeSettings {
        check,
        mode: m.mode.as_ref().map_or(Mode::Direct, |s| s.value),
        port: m.port.as_ref().map_or(default_port, |s| s.value),
        interval,
        timeout,
        thresholds: Thresholds {
            rise: m
                .rise
                .as_ref()
                .map_or(Thresholds::DEFAULT_RISE, |s| s.value),
            fall: m
                .fall
                .as_ref()
                .map_or(Thresholds::DEFAULT_FALL, |s| s.value),
        },
        damping,
    })
}

fn http_check(
    m: &ProbeLayer,
    kind: Kind,
    checked: Layer,
    errors: &mut Vec<FieldError>,
) -> HttpCheck {
    let tls = (kind == Kind::Https).then(|| {
        let verify = m.tls_verify.as_ref().is_some_and(|s| s.value);
        if let Some(ca) = &m.ca_file
            && !verify
            && ca.layer == checked
        {
            errors.push(FieldError {
                path: ca.path.clone(),
                message: "only used with tls_verify = true".to_owned(),
            });
        }
        TlsCheck {
            verify,
            server_name: m.tls_server_name.as_ref().map(|s| s.value.clone()),
            ca_file: m.ca_file.as_ref().map(|s| s.value.clone()),
        }
    });
    HttpCheck {
        path: m
            .path
            .as_ref()
            .map_or_else(|| DEFAULT_HTTP_PATH.to_owned(), |s| s.value.clone()),
        status: m
            .status
            .as_ref()
            .map_or_else(StatusRanges::default, |s| s.value.clone()),
        host: m.host.as_ref().map(|s| s.value.clone()),
        tls,
    }
}

/// Checks each probe key of one table on its own.
fn parse_layer(
    prefix: &str,
    f: &HealthFile,
    layer: Layer,
    errors: &mut Vec<FieldError>,
) -> ProbeLayer {
    let mut p = Parser {
        prefix,
        layer,
        errors,
        refused: Vec::new(),
    };
    let mut parsed = ProbeLayer {
        kind: p.text("kind", &f.kind, |t| match t {
            "none" => Ok(Kind::None),
            "tcp" => Ok(Kind::Tcp),
            "http" => Ok(Kind::Http),
            "https" => Ok(Kind::Https),
            "dns" => Ok(Kind::Dns),
            other => Err(format!(
                "expected \"tcp\", \"http\", \"https\", \"dns\" or \"none\", got {other:?}"
            )),
        }),
        mode: p.text("mode", &f.mode, |t| match t {
            "direct" => Ok(Mode::Direct),
            "tunnel" => Ok(Mode::Tunnel),
            other => Err(format!("expected \"direct\" or \"tunnel\", got {other:?}")),
        }),
        interval: p.millis("interval_ms", f.interval_ms, INTERVAL_MS),
        timeout: p.millis("timeout_ms", f.timeout_ms, TIMEOUT_MS),
        rise: p.number("rise", f.rise, RISE_FALL),
        fall: p.number("fall", f.fall, RISE_FALL),
        port: p.number("port", f.port, PORT),
        path: p.text("path", &f.path, parse_path),
        status: p.text("status", &f.status, parse_status),
        host: p.text("host", &f.host, parse_host),
        tls_verify: f.tls_verify.map(|value| p.set("tls_verify", value)),
        tls_server_name: p.text("tls_server_name", &f.tls_server_name, |t| {
            ServerName::try_from(t)
                .map(|_| t.to_owned())
                .map_err(|_| format!("expected a DNS name or an IP address, got {t:?}"))
        }),
        ca_file: p.text("ca_file", &f.ca_file, parse_ca_file),
        dns_name: p.text("dns_name", &f.dns_name, |t| {
            let mut name = Name::from_ascii(t).map_err(|e| {
                format!("expected a domain name like \"health.example.com\", got {t:?} ({e})")
            })?;
            name.set_fqdn(true);
            Ok(name)
        }),
        dns_type: p.text("dns_type", &f.dns_type, |t| {
            match RecordType::from_str(&t.to_ascii_uppercase()) {
                Ok(rt) if !DNS_TYPES_REFUSED.contains(&rt) => Ok(rt),
                Ok(_) => Err(format!(
                    "{t:?} cannot be asked for in one UDP query; use e.g. \"A\", \"AAAA\" or \"SOA\""
                )),
                Err(_) => Err(format!(
                    "expected a DNS record type like \"A\", \"AAAA\" or \"SOA\", got {t:?}"
                )),
            }
        }),
        refused: Vec::new(),
    };
    parsed.refused = p.refused;
    parsed
}

fn parse_policy(prefix: &str, f: &HealthFile, errors: &mut Vec<FieldError>) -> FailurePolicy {
    let mut p = Parser {
        prefix,
        layer: Layer::Vip,
        errors,
        refused: Vec::new(),
    };
    let panic_threshold = p
        .number::<u8>("panic_threshold", f.panic_threshold, PERCENT)
        .map_or(0, |s| s.value);
    let all_down = p
        .text("all_down", &f.all_down, |t| match t {
            "open" => Ok(AllDown::Open),
            "closed" => Ok(AllDown::Closed),
            other => Err(format!("expected \"open\" or \"closed\", got {other:?}")),
        })
        .map_or(AllDown::default(), |s| s.value);
    FailurePolicy {
        panic_threshold,
        all_down,
    }
}

fn parse_damping(prefix: &str, f: &HealthFile, errors: &mut Vec<FieldError>) -> Damping {
    let mut p = Parser {
        prefix,
        layer: Layer::Vip,
        errors,
        refused: Vec::new(),
    };
    let secs = |s: Option<Set<u32>>, default: Duration| {
        s.map_or(default, |s| Duration::from_secs(u64::from(s.value)))
    };
    Damping {
        max_transitions: p
            .number("flap_transitions", f.flap_transitions, FLAP_TRANSITIONS)
            .map_or(Damping::DEFAULT_MAX_TRANSITIONS, |s| s.value),
        window: secs(
            p.number("flap_window_secs", f.flap_window_secs, FLAP_SECS),
            Damping::DEFAULT_WINDOW,
        ),
        hold: secs(
            p.number("flap_hold_secs", f.flap_hold_secs, FLAP_SECS),
            Damping::DEFAULT_HOLD,
        ),
    }
}

fn refuse_vip_only_keys(prefix: &str, f: &HealthFile, errors: &mut Vec<FieldError>) {
    let keys = [
        ("panic_threshold", f.panic_threshold.is_some()),
        ("all_down", f.all_down.is_some()),
        ("flap_transitions", f.flap_transitions.is_some()),
        ("flap_window_secs", f.flap_window_secs.is_some()),
        ("flap_hold_secs", f.flap_hold_secs.is_some()),
    ];
    for (key, _) in keys.iter().filter(|(_, set)| *set) {
        errors.push(FieldError {
            path: format!("{prefix}.{key}"),
            message: "only allowed in the VIP's health table (it applies to all its backends)"
                .to_owned(),
        });
    }
}

/// Checks keys of one table, recording errors at `prefix.key`.
struct Parser<'a> {
    prefix: &'a str,
    layer: Layer,
    errors: &'a mut Vec<FieldError>,
    /// Keys whose values were refused.
    refused: Vec<&'static str>,
}

impl Parser<'_> {
    fn path(&self, key: &str) -> String {
        format!("{}.{key}", self.prefix)
    }

    fn set<T>(&self, key: &str, value: T) -> Set<T> {
        Set {
            value,
            path: self.path(key),
            layer: self.layer,
        }
    }

    fn fail(&mut self, key: &'static str, message: String) {
        self.refused.push(key);
        let path = self.path(key);
        self.errors.push(FieldError { path, message });
    }

    fn text<T>(
        &mut self,
        key: &'static str,
        value: &Option<String>,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<Set<T>> {
        match parse(value.as_deref()?) {
            Ok(v) => Some(self.set(key, v)),
            Err(message) => {
                self.fail(key, message);
                None
            }
        }
    }

    fn number<T: TryFrom<u64>>(
        &mut self,
        key: &'static str,
        value: Option<u64>,
        (min, max): (u64, u64),
    ) -> Option<Set<T>> {
        let v = value?;
        match T::try_from(v) {
            Ok(t) if (min..=max).contains(&v) => Some(self.set(key, t)),
            _ => {
                self.fail(
                    key,
                    format!("expected a value from {min} to {max}, got {v}"),
                );
                None
            }
        }
    }

    fn millis(
        &mut self,
        key: &'static str,
        value: Option<u64>,
        range: (u64, u64),
    ) -> Option<Set<Duration>> {
        let s = self.number::<u64>(key, value, range)?;
        Some(Set {
            value: Duration::from_millis(s.value),
            path: s.path,
            layer: s.layer,
        })
    }
}

fn parse_path(t: &str) -> Result<String, String> {
    if !t.starts_with('/') {
        return Err(format!("expected a path starting with '/', got {t:?}"));
    }
    PathAndQuery::from_str(t)
        .map(|_| t.to_owned())
        .map_err(|_| format!("expected a URL path (and query) without spaces, got {t:?}"))
}

fn parse_host(t: &str) -> Result<String, String> {
    if t.is_empty() || t.contains(|c: char| c.is_whitespace()) || HeaderValue::from_str(t).is_err()
    {
        return Err(format!(
            "expected a host name like \"www.example.com\" (with an optional :port), got {t:?}"
        ));
    }
    Ok(t.to_owned())
}

/// `200-399`, `200`, `200,204,300-308`.
fn parse_status(t: &str) -> Result<StatusRanges, String> {
    let bad = || {
        format!(
            "expected status codes from 100 to 599 or ranges of them like \"200-399\" \
             (comma-separated), got {t:?}"
        )
    };
    let code = |s: &str| {
        s.trim()
            .parse::<u16>()
            .ok()
            .filter(|c| HTTP_STATUS.contains(c))
    };
    let mut ranges = Vec::new();
    for item in t.split(',').filter(|i| !i.trim().is_empty()) {
        let range = match item.split_once('-') {
            Some((lo, hi)) => (code(lo), code(hi)),
            None => (code(item), code(item)),
        };
        match range {
            (Some(lo), Some(hi)) if lo <= hi => ranges.push(lo..=hi),
            _ => return Err(bad()),
        }
    }
    StatusRanges::new(ranges).ok_or_else(bad)
}

fn parse_ca_file(t: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(t);
    let certs: Vec<_> = CertificateDer::pem_file_iter(&path)
        .and_then(Iterator::collect::<Result<_, _>>)
        .map_err(|e| format!("cannot read CA certificates from {t:?}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("no PEM certificate in {t:?}"));
    }
    Ok(path)
}

#[cfg(test)]
mod tests;
