//! The API's operations ([`Endpoint`]): which method and path, which role, whether it
//! changes anything, the control [`Request`] it becomes, and the type its answer is
//! printed as. Every operation is a control request answered by the same code as the
//! unix socket's, and its JSON is what the CLI's `--json` prints: the answer's data
//! decoded into its type and encoded again, so keys come in the type's order.
//!
//! | method and path | role | control request | answer |
//! |---|---|---|---|
//! | `GET /v1/status` | read-only | `status` | `Status` |
//! | `GET /v1/stats` | read-only | `stats` | `Stats` |
//! | `GET /v1/flow?vip=V&client=C` | read-only | `flow` | `FlowReport` |
//! | `GET /v1/overrides` | read-only | `overrides` | `OverridesReport` |
//! | `DELETE /v1/overrides` | admin | `overrides` (clear) | `OverridesReport` |
//! | `POST /v1/backend` | admin | `backend` | `Change` |
//! | `POST /v1/vip` | admin | `vip` | `VipChange` |
//! | `GET /v1/conns?vip=V&backend=B&client=P&state=S&limit=N` | read-only | `conns` | `ConnList` |
//! | `POST /v1/config/diff` (TOML body) | read-only | `push_config` (dry run) | `ConfigDiff` |
//! | `POST /v1/reload` | admin | `reload` | `ConfigDiff` |
//! | `POST /v1/reload/learn` | admin | `reload --phase learn` | `Learned` |
//! | `PUT /v1/config` (TOML body) | admin | `push_config` | `ConfigDiff` |
//! | `PUT /v1/config/learn` (TOML body) | admin | `push_learn` | `Learned` |
//! | `GET /v1/trace?vip=V&client=C` | read-only | `trace` | JSON lines |
//! | `GET /v1/openapi.json` | any client | none | the OpenAPI document |

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};

use crate::{
    config::Role,
    control::{
        BackendAction, Change, ConfigDiff, ConnList, FlowReport, OverridesReport, Request, Stats,
        Status, TraceEvent, TraceStarted, VipAction, VipChange,
    },
};

/// One operation of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `GET /v1/status`.
    Status,
    /// `GET /v1/stats`.
    Stats,
    /// `GET /v1/flow`.
    Flow,
    /// `GET /v1/overrides`.
    Overrides,
    /// `DELETE /v1/overrides`.
    ClearOverrides,
    /// `POST /v1/backend`.
    Backend,
    /// `POST /v1/vip`.
    Vip,
    /// `GET /v1/conns`.
    Conns,
    /// `POST /v1/config/diff`.
    ConfigDiff,
    /// `POST /v1/reload`.
    Reload,
    /// `POST /v1/reload/learn`.
    ReloadLearn,
    /// `PUT /v1/config`.
    PushConfig,
    /// `PUT /v1/config/learn`.
    PushLearn,
    /// `GET /v1/trace`.
    Trace,
    /// `GET /v1/openapi.json`.
    OpenApi,
}

/// Where the OpenAPI document is served.
pub const OPENAPI_PATH: &str = "/v1/openapi.json";

/// Why a method and path name no operation.
#[derive(Debug, PartialEq, Eq)]
pub enum NoRoute {
    /// No such path (404).
    Path,
    /// The path exists, not with this method (405); the methods it takes.
    Method(&'static str),
}

/// The body of `POST /v1/backend`: `lb backend ACTION VIP BACKEND` and its flags.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BackendChange {
    /// What to do.
    pub action: BackendAction,
    /// The VIP, `ADDR:PORT/PROTO` (IPv6 in brackets).
    #[schema(example = "203.0.113.10:80/tcp")]
    pub vip: String,
    /// The backend's address.
    #[schema(example = "10.0.0.11")]
    pub backend: String,
    /// Weight (add, undrain; required by weight).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Drain: remove the backend after this many seconds, or once its last connection
    /// ends if that is first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// Drain: stay drained (cancels a pending timed removal).
    #[serde(default)]
    pub keep: bool,
}

/// The body of `POST /v1/vip`: `lb vip ACTION ADDRESS`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VipRequest {
    /// `withdraw` or `announce`.
    pub action: VipAction,
    /// The VIP address (every VIP of it shares its route).
    #[schema(example = "203.0.113.10")]
    pub address: String,
}

impl Endpoint {
    /// The operation at `method` and `path`.
    ///
    /// # Errors
    /// [`NoRoute`].
    pub fn find(method: &str, path: &str) -> Result<Self, NoRoute> {
        let (get, methods) = match path {
            "/v1/status" => (Some(Self::Status), "GET"),
            "/v1/stats" => (Some(Self::Stats), "GET"),
            "/v1/flow" => (Some(Self::Flow), "GET"),
            "/v1/trace" => (Some(Self::Trace), "GET"),
            OPENAPI_PATH => (Some(Self::OpenApi), "GET"),
            "/v1/conns" => (Some(Self::Conns), "GET"),
            "/v1/overrides" => (Some(Self::Overrides), "GET, DELETE"),
            "/v1/backend" | "/v1/vip" | "/v1/reload" | "/v1/reload/learn" | "/v1/config/diff" => {
                (None, "POST")
            }
            "/v1/config" | "/v1/config/learn" => (None, "PUT"),
            _ => return Err(NoRoute::Path),
        };
        match (method, path) {
            ("GET" | "HEAD", _) if get.is_some() => Ok(get.unwrap_or(Self::Status)),
            ("DELETE", "/v1/overrides") => Ok(Self::ClearOverrides),
            ("POST", "/v1/backend") => Ok(Self::Backend),
            ("POST", "/v1/vip") => Ok(Self::Vip),
            ("POST", "/v1/reload") => Ok(Self::Reload),
            ("POST", "/v1/reload/learn") => Ok(Self::ReloadLearn),
            ("POST", "/v1/config/diff") => Ok(Self::ConfigDiff),
            ("PUT", "/v1/config") => Ok(Self::PushConfig),
            ("PUT", "/v1/config/learn") => Ok(Self::PushLearn),
            _ => Err(NoRoute::Method(methods)),
        }
    }

    /// The role the operation needs (`None`: any authenticated client or none).
    pub fn role(self) -> Option<Role> {
        match self {
            Self::OpenApi => None,
            Self::ClearOverrides
            | Self::Backend
            | Self::Vip
            | Self::Reload
            | Self::ReloadLearn
            | Self::PushConfig
            | Self::PushLearn => Some(Role::Admin),
            _ => Some(Role::ReadOnly),
        }
    }

    /// Whether the operation changes the running state (logged with who made it, and
    /// idempotent on retry).
    pub fn is_change(self) -> bool {
        self.role() == Some(Role::Admin)
    }

    /// Whether the operation reads a body.
    pub fn has_body(self) -> bool {
        matches!(
            self,
            Self::Backend | Self::Vip | Self::ConfigDiff | Self::PushConfig | Self::PushLearn
        )
    }

    /// Whether the body is a configuration (TOML, up to
    /// [`crate::defaults::API_MAX_CONFIG_BYTES`]) rather than a small JSON object.
    pub fn takes_config(self) -> bool {
        matches!(self, Self::ConfigDiff | Self::PushConfig | Self::PushLearn)
    }

    /// The control request for `query` (the URI's query string) and `body`.
    ///
    /// # Errors
    /// A parameter or body that does not decode, naming it.
    pub fn request(self, query: &str, body: &[u8]) -> Result<Request, String> {
        let mut fields = Map::new();
        let command = match self {
            Self::Status | Self::OpenApi => "status",
            Self::Stats => "stats",
            Self::Overrides | Self::ClearOverrides => {
                fields.insert("clear".into(), Value::Bool(self == Self::ClearOverrides));
                "overrides"
            }
            Self::Flow | Self::Trace => {
                for (key, value) in parse_query(query)? {
                    if key != "vip" && key != "client" {
                        return Err(format!("unknown query parameter {key:?} (vip, client)"));
                    }
                    fields.insert(key, Value::String(value));
                }
                if self == Self::Flow { "flow" } else { "trace" }
            }
            Self::Conns => {
                conns_query(query, &mut fields)?;
                "conns"
            }
            Self::Reload => "reload",
            Self::ReloadLearn => "reload_learn",
            Self::PushLearn => {
                let text = std::str::from_utf8(body)
                    .map_err(|_| "body: the configuration is not UTF-8".to_owned())?;
                fields.insert("toml".into(), Value::String(text.to_owned()));
                "push_learn"
            }
            Self::ConfigDiff | Self::PushConfig => {
                let text = std::str::from_utf8(body)
                    .map_err(|_| "body: the configuration is not UTF-8".to_owned())?;
                fields.insert("toml".into(), Value::String(text.to_owned()));
                fields.insert("dry_run".into(), Value::Bool(self == Self::ConfigDiff));
                "push_config"
            }
            Self::Backend => {
                let change: BackendChange = decode_body(body)?;
                fields = object(&change)?;
                "backend"
            }
            Self::Vip => {
                let vip: VipRequest = decode_body(body)?;
                fields = object(&vip)?;
                "vip"
            }
        };
        fields.insert("command".into(), Value::String(command.into()));
        serde_json::from_value(Value::Object(fields)).map_err(|e| e.to_string())
    }

    /// The answer's data as the CLI's `--json` prints it: decoded into the operation's
    /// type and encoded again (compact).
    ///
    /// # Errors
    /// Data that is not of the type (a daemon bug).
    pub fn answer(self, data: Value) -> Result<Vec<u8>, String> {
        match self {
            Self::Status | Self::OpenApi => retype::<Status>(data),
            Self::Stats => retype::<Stats>(data),
            Self::Flow => retype::<FlowReport>(data),
            Self::Overrides | Self::ClearOverrides => retype::<OverridesReport>(data),
            Self::Backend => retype::<Change>(data),
            Self::Vip => retype::<VipChange>(data),
            Self::Conns => retype::<ConnList>(data),
            Self::Reload | Self::ConfigDiff | Self::PushConfig => retype::<ConfigDiff>(data),
            Self::ReloadLearn | Self::PushLearn => retype::<crate::control::Learned>(data),
            Self::Trace => match retype::<TraceEvent>(data.clone()) {
                Ok(line) => Ok(line),
                Err(_) => retype::<TraceStarted>(data),
            },
        }
    }
}

/// The query of `GET /v1/conns` as the fields of `conns` (`limit` defaults to the
/// CLI's 1,000).
fn conns_query(query: &str, fields: &mut Map<String, Value>) -> Result<(), String> {
    fields.insert("limit".into(), Value::from(1_000_u64));
    for (key, value) in parse_query(query)? {
        match key.as_str() {
            "vip" | "backend" | "client" | "state" => {
                fields.insert(key, Value::String(value));
            }
            "limit" => {
                let n: u64 = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=200_000).contains(n))
                    .ok_or_else(|| format!("limit: expected 1 to 200000, got {value:?}"))?;
                fields.insert(key, Value::from(n));
            }
            _ => {
                return Err(format!(
                    "unknown query parameter {key:?} (vip, backend, client, state, limit)"
                ));
            }
        }
    }
    Ok(())
}

/// `data` decoded as `T` and encoded again.
fn retype<T: DeserializeOwned + Serialize>(data: Value) -> Result<Vec<u8>, String> {
    let typed: T = serde_json::from_value(data).map_err(|e| e.to_string())?;
    serde_json::to_vec(&typed).map_err(|e| e.to_string())
}

/// A JSON body as `T`, its errors prefixed with `body:`.
fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("body: {e}"))
}

/// `value`'s fields as a JSON object.
fn object(value: &impl Serialize) -> Result<Map<String, Value>, String> {
    match serde_json::to_value(value).map_err(|e| e.to_string())? {
        Value::Object(map) => Ok(map),
        _ => Err("body: expected a JSON object".into()),
    }
}

/// The `key=value` pairs of a query string, percent-decoded (`+` is a space), each
/// key once.
///
/// # Errors
/// A repeated key, a bad escape or text that is not UTF-8.
pub fn parse_query(query: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for part in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = part.split_once('=').unwrap_or((part, ""));
        let (key, value) = (percent_decode(key)?, percent_decode(value)?);
        if pairs.iter().any(|(k, _)| *k == key) {
            return Err(format!("query parameter {key:?} given twice"));
        }
        pairs.push((key, value));
    }
    Ok(pairs)
}

/// Percent-decoding of a query component (RFC 3986 section 2.1; `+` is a space as in
/// `application/x-www-form-urlencoded`).
fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("bad percent escape in {text:?}"))?;
                out.push(hex);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} is not UTF-8 once decoded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_and_paths_name_their_operation() {
        assert_eq!(Endpoint::find("GET", "/v1/status"), Ok(Endpoint::Status));
        assert_eq!(
            Endpoint::find("DELETE", "/v1/overrides"),
            Ok(Endpoint::ClearOverrides)
        );
        assert_eq!(
            Endpoint::find("GET", "/v1/backend"),
            Err(NoRoute::Method("POST"))
        );
        assert_eq!(Endpoint::find("GET", "/v2/status"), Err(NoRoute::Path));
        assert_eq!(Endpoint::Backend.role(), Some(Role::Admin));
        assert_eq!(Endpoint::Trace.role(), Some(Role::ReadOnly));
    }

    #[test]
    fn a_flow_query_becomes_the_control_request() {
        let request = Endpoint::Flow
            .request("vip=203.0.113.10%3A80%2Ftcp&client=192.0.2.1:40000", b"")
            .expect("decodes");
        assert!(matches!(request, Request::Flow { .. }), "{request:?}");
        let err = Endpoint::Flow.request("vip=x&vip=y", b"").unwrap_err();
        assert!(err.contains("twice"), "{err}");
        let err = Endpoint::Flow.request("port=1", b"").unwrap_err();
        assert!(err.contains("unknown query parameter"), "{err}");
    }

    #[test]
    fn a_backend_body_becomes_the_control_request_and_bad_fields_are_named() {
        let body =
            br#"{"action":"weight","vip":"203.0.113.10:80/tcp","backend":"10.0.0.1","weight":3}"#;
        let request = Endpoint::Backend.request("", body).expect("decodes");
        assert!(
            matches!(
                request,
                Request::Backend {
                    weight: Some(3),
                    ..
                }
            ),
            "{request:?}"
        );
        let err = Endpoint::Backend
            .request("", br#"{"action":"add","vip":"nope","backend":"10.0.0.1"}"#)
            .unwrap_err();
        assert!(err.contains("nope"), "{err}");
        let err = Endpoint::Backend
            .request(
                "",
                br#"{"action":"add","vip":"203.0.113.10:80/tcp","backend":"10.0.0.1","colour":1}"#,
            )
            .unwrap_err();
        assert!(err.starts_with("body:") && err.contains("colour"), "{err}");
    }
}
