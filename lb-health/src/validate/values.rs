//! Checking each key of one `health` table on its own: ranges, names, paths, status
//! ranges, the CA file; every refused value is recorded with its path.

use std::{ops::RangeInclusive, path::PathBuf, str::FromStr as _, time::Duration};

use hickory_proto::rr::{Name, RecordType};
use hyper::http::{HeaderValue, uri::PathAndQuery};
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject as _};

use super::{
    FieldError,
    layer::{Kind, Layer, ProbeLayer, Set},
};
use crate::{
    damping::Damping,
    file::HealthFile,
    policy::{AllDown, FailurePolicy},
    settings::{Initial, Mode, StatusRanges},
};

// Accepted ranges (inclusive) of the integer keys: intervals from 100 ms to an hour,
// timeouts from 10 ms (always below the interval, checked with it), rise and fall up to
// 100 probes, flap windows and holds up to a day.
const INTERVAL_MS: (u64, u64) = (100, 3_600_000);
const TIMEOUT_MS: (u64, u64) = (10, 3_599_999);
const RISE_FALL: (u64, u64) = (1, 100);
const PORT: (u64, u64) = (1, 65_535);
const PERCENT: (u64, u64) = (0, 100);
const FLAP_TRANSITIONS: (u64, u64) = (0, 1_000);
const FLAP_SECS: (u64, u64) = (1, 86_400);
/// HTTP status codes (RFC 9110 section 15: three digits, 1xx to 5xx).
const HTTP_STATUS: RangeInclusive<u16> = 100..=599;
/// Record types that cannot be asked for in one UDP query.
const DNS_TYPES_REFUSED: [RecordType; 3] = [RecordType::AXFR, RecordType::IXFR, RecordType::OPT];

/// Checks each probe key of one table on its own.
pub(super) fn parse_layer(
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
        initial: p.text("initial", &f.initial, |t| match t {
            "down" => Ok(Initial::Down),
            "up" => Ok(Initial::Up),
            other => Err(format!("expected \"down\" or \"up\", got {other:?}")),
        }),
        refused: Vec::new(),
    };
    parsed.refused = p.refused;
    parsed
}

pub(super) fn parse_policy(
    prefix: &str,
    f: &HealthFile,
    errors: &mut Vec<FieldError>,
) -> FailurePolicy {
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

pub(super) fn parse_damping(prefix: &str, f: &HealthFile, errors: &mut Vec<FieldError>) -> Damping {
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

pub(super) fn refuse_vip_only_keys(prefix: &str, f: &HealthFile, errors: &mut Vec<FieldError>) {
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
