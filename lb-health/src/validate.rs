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

mod layer;
mod values;

use std::{fmt, time::Duration};

pub use self::layer::ProbeLayer;
use self::{
    layer::{Kind, Layer},
    values::{parse_damping, parse_layer, parse_policy, refuse_vip_only_keys},
};
use super::{
    damping::Damping,
    file::HealthFile,
    policy::FailurePolicy,
    settings::{
        Check, DEFAULT_DNS_TYPE, DEFAULT_HTTP_PATH, DEFAULT_INTERVAL, DEFAULT_TIMEOUT, DnsCheck,
        HttpCheck, Initial, Mode, ProbeSettings, StatusRanges, TlsCheck,
    },
    state::Thresholds,
};

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
    let timeout = timeout(m, interval, errors);
    let check = match kind {
        Kind::None => return None,
        Kind::Tcp => Check::Tcp,
        Kind::Http | Kind::Https => Check::Http(http_check(m, kind, checked, errors)),
        Kind::Dns => Check::Dns(dns_check(m, errors)?),
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
        initial: m.initial.as_ref().map_or(Initial::default(), |s| s.value),
    })
}

/// The timeout: the configured one, checked against the interval (the error names the
/// backend's override when the backend's interval makes the VIP's timeout too long),
/// or the default.
fn timeout(m: &ProbeLayer, interval: Duration, errors: &mut Vec<FieldError>) -> Duration {
    let Some(t) = &m.timeout else {
        return DEFAULT_TIMEOUT.min(interval / 2);
    };
    if t.value < interval || m.refused.contains(&"interval_ms") {
        return t.value;
    }
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
    t.value
}

/// The DNS query; `dns_name` is required (the error names the table that set the kind).
fn dns_check(m: &ProbeLayer, errors: &mut Vec<FieldError>) -> Option<DnsCheck> {
    if let Some(name) = &m.dns_name {
        return Some(DnsCheck {
            name: name.value.clone(),
            record_type: m.dns_type.as_ref().map_or(DEFAULT_DNS_TYPE, |t| t.value),
        });
    }
    if !m.refused.contains(&"dns_name") {
        let table = m
            .kind
            .as_ref()
            .and_then(|k| k.path.strip_suffix(".kind"))
            .unwrap_or_default();
        errors.push(FieldError {
            path: format!("{table}.dns_name"),
            message: "required with kind = \"dns\": the name to query".to_owned(),
        });
    }
    None
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

#[cfg(test)]
mod tests;
