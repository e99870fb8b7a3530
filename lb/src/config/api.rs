//! `[api]`: the remote HTTPS API ([`Api`]), off by default. Where it listens, its
//! certificate and key, the CA that client certificates must chain to (mutual TLS), the
//! bearer tokens (each read from its own file, with a name and a role), the client
//! certificates' common names mapped to roles, and the limits one client is held to.
//! The server is `crate::api`; the book's chapter is docs/src/guide/api.md.

use std::{path::PathBuf, time::Duration};

use serde::Deserialize;

use super::value::UInt;

/// `[api]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiFile {
    /// Whether the API is served.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// `ADDR:PORT` (IPv6 in brackets).
    #[serde(default)]
    pub listen: Option<String>,
    /// The server's certificate chain (PEM).
    #[serde(default)]
    pub cert_file: Option<String>,
    /// The server's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[serde(default)]
    pub key_file: Option<String>,
    /// CA certificates (PEM) client certificates must chain to.
    #[serde(default)]
    pub client_ca_file: Option<String>,
    /// Connections served at once.
    #[serde(default)]
    pub max_connections: Option<UInt<u32>>,
    /// Largest request body (bytes).
    #[serde(default)]
    pub max_body_bytes: Option<UInt<u32>>,
    /// Time for the TLS handshake and a request's headers (ms).
    #[serde(default)]
    pub header_timeout_ms: Option<UInt<u32>>,
    /// Time for a request's body (ms).
    #[serde(default)]
    pub body_timeout_ms: Option<UInt<u32>>,
    /// Recent change request ids remembered with their answers.
    #[serde(default)]
    pub idempotency_entries: Option<UInt<u32>>,
    /// `[[api.token]]`: bearer tokens.
    #[serde(default, rename = "token")]
    pub tokens: Vec<TokenFile>,
    /// `[[api.client]]`: client certificates' common names and their roles.
    #[serde(default, rename = "client")]
    pub clients: Vec<ClientFile>,
}

/// `[[api.token]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenFile {
    /// The name changes are logged with.
    pub name: String,
    /// The file holding the secret (its first line, surrounding spaces trimmed).
    pub file: String,
    /// `read-only` or `admin`.
    pub role: String,
}

/// `[[api.client]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientFile {
    /// The certificate subject's common name (CN).
    pub common_name: String,
    /// `read-only` or `admin`.
    pub role: String,
}

/// What a client may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads: status, stats, flows, overrides, the trace.
    ReadOnly,
    /// Reads and changes.
    Admin,
}

impl Role {
    /// Parses `read-only` or `admin`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "read-only" => Some(Self::ReadOnly),
            "admin" => Some(Self::Admin),
            _ => None,
        }
    }

    /// The role as written in the file.
    pub fn name(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::Admin => "admin",
        }
    }
}

/// A bearer token: its name, the file of its secret, its role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiToken {
    /// The name changes are logged with (`token:NAME`).
    pub name: String,
    /// The secret's file, read by the server (never by the configuration).
    pub file: PathBuf,
    /// What it may do.
    pub role: Role,
}

/// The validated `[api]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Api {
    /// Where the API listens (`None`: not served).
    pub listen: Option<std::net::SocketAddr>,
    /// The server's certificate chain (PEM).
    pub cert_file: PathBuf,
    /// The server's private key (PEM).
    pub key_file: PathBuf,
    /// CA certificates (PEM) of mutual TLS; `None`: no client certificates asked for.
    pub client_ca_file: Option<PathBuf>,
    /// Client certificates' common names and their roles.
    pub clients: Vec<(String, Role)>,
    /// Bearer tokens.
    pub tokens: Vec<ApiToken>,
    /// Connections served at once; further ones get 503.
    pub max_connections: u32,
    /// Largest request body (bytes); larger gets 413.
    pub max_body_bytes: u32,
    /// Time for the TLS handshake, and then for each request's headers.
    pub header_timeout: Duration,
    /// Time for each request's body; slower gets 408.
    pub body_timeout: Duration,
    /// Change request ids remembered (with their answers) for retries.
    pub idempotency_entries: u32,
}

impl Default for Api {
    fn default() -> Self {
        use crate::defaults as d;
        Self {
            listen: None,
            cert_file: PathBuf::new(),
            key_file: PathBuf::new(),
            client_ca_file: None,
            clients: Vec::new(),
            tokens: Vec::new(),
            max_connections: d::API_MAX_CONNECTIONS,
            max_body_bytes: d::API_MAX_BODY_BYTES,
            header_timeout: Duration::from_millis(u64::from(d::API_HEADER_TIMEOUT_MS)),
            body_timeout: Duration::from_millis(u64::from(d::API_BODY_TIMEOUT_MS)),
            idempotency_entries: d::API_IDEMPOTENCY_ENTRIES,
        }
    }
}
