//! [`ProbeLayer`]: the probe keys of one `health` table, each checked on its own and
//! remembered with the path it was written at, so that a merged view of a VIP's table
//! and a backend's can name the right key in every error.

use std::{path::PathBuf, time::Duration};

use hickory_proto::rr::{Name, RecordType};

use crate::settings::{Initial, Mode, StatusRanges};

/// The `kind` key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    None,
    Tcp,
    Http,
    Https,
    Dns,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
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
pub(super) enum Layer {
    Vip,
    Backend,
}

/// A key's checked value and where it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Set<T> {
    pub(super) value: T,
    pub(super) path: String,
    pub(super) layer: Layer,
}

/// One table's probe keys, each checked on its own, with the path it was written at.
/// [`ProbeLayer::merge`] lays a backend's table over its VIP's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeLayer {
    pub(super) kind: Option<Set<Kind>>,
    pub(super) mode: Option<Set<Mode>>,
    pub(super) interval: Option<Set<Duration>>,
    pub(super) timeout: Option<Set<Duration>>,
    pub(super) rise: Option<Set<u32>>,
    pub(super) fall: Option<Set<u32>>,
    pub(super) port: Option<Set<u16>>,
    pub(super) path: Option<Set<String>>,
    pub(super) status: Option<Set<StatusRanges>>,
    pub(super) host: Option<Set<String>>,
    pub(super) tls_verify: Option<Set<bool>>,
    pub(super) tls_server_name: Option<Set<String>>,
    pub(super) ca_file: Option<Set<PathBuf>>,
    pub(super) dns_name: Option<Set<Name>>,
    pub(super) dns_type: Option<Set<RecordType>>,
    pub(super) initial: Option<Set<Initial>>,
    /// Keys (names, not paths) whose values were refused: not "missing" either.
    pub(super) refused: Vec<&'static str>,
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
            initial: pick(&self.initial, &over.initial),
            refused: [self.refused.as_slice(), over.refused.as_slice()].concat(),
        }
    }

    /// Every key but `kind`: where it was set, and which kinds use it.
    fn keys(&self) -> [KeyUse<'_>; 15] {
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
            k(at(&self.initial), probing, PROBING),
        ]
    }

    /// Paths of the keys set in `layer` that `kind` does not use, with the kinds that
    /// use them.
    pub(super) fn unused_by(&self, kind: Kind, layer: Layer) -> Vec<(&str, &'static str)> {
        self.keys()
            .into_iter()
            .filter_map(|k| match k.set {
                Some((path, l)) if l == layer && !(k.used)(kind) => Some((path, k.by)),
                _ => None,
            })
            .collect()
    }

    pub(super) fn any_probe_key(&self) -> bool {
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
