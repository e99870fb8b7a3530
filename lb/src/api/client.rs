//! The remote API's client ([`Remote`]): the [`Transport`] that carries the CLI's
//! control requests to a daemon's API over HTTPS (hyper's HTTP/1.1 client over
//! tokio-rustls, ring provider), so `lb --remote URL VERB` renders the same answers as
//! over the unix socket. Each request becomes its API operation (`route`); a change
//! carries its change id as its `Idempotency-Key`, so a retry after a lost connection
//! applies once.
//!
//! Credentials ([`Credentials`]): the server is verified against `cacert` (else the
//! system's CAs); the client authenticates with a bearer token (`token_file`, its first
//! line) and/or a client certificate (`cert` and `key`, PEM). Errors name the flag at
//! fault: `--remote` (a bad URL, an unreachable address, a failed handshake),
//! `--cacert`, `--cert`, `--key`, `--token-file`, and 401/403 with the server's reason
//! (which names the role).

use std::{
    io::{BufRead, BufReader, Read},
    path::{Path, PathBuf},
    sync::{Arc, Mutex, mpsc},
};

use http_body_util::{BodyExt as _, Full, Limited};
use hyper::{
    Method, Request as HttpRequest, StatusCode, Uri,
    body::{Bytes, Incoming},
    client::conn::http1::{self, SendRequest},
    header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue},
};
use hyper_util::rt::TokioIo;
use rustls::{
    ClientConfig, RootCertStore,
    crypto::ring,
    pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject as _},
};
use serde_json::{Map, Value};
use tokio_rustls::TlsConnector;

use crate::control::{
    CLIENT_TIMEOUT, ClientError, MAX_ANSWER_BYTES, Request, Transport, new_change_id,
};

/// How a client proves itself and checks the server: the flags `--cacert`, `--cert`,
/// `--key`, `--token-file`, or the same keys of a client configuration or fleet file.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credentials {
    /// The CA certificates (PEM) the server's certificate must chain to; none: the
    /// system's.
    pub cacert: Option<PathBuf>,
    /// The client certificate chain (PEM), for mutual TLS.
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
    /// The bearer token: the file's first line.
    pub token_file: Option<PathBuf>,
}

impl Credentials {
    /// `self`'s settings, each taken from `defaults` where `self` has none.
    #[must_use]
    pub fn or(self, defaults: &Self) -> Self {
        Self {
            cacert: self.cacert.or_else(|| defaults.cacert.clone()),
            cert: self.cert.or_else(|| defaults.cert.clone()),
            key: self.key.or_else(|| defaults.key.clone()),
            token_file: self.token_file.or_else(|| defaults.token_file.clone()),
        }
    }
}

/// Where requests go: everything a connection needs, shared with a trace's thread.
#[derive(Clone)]
struct Target {
    url: String,
    host: String,
    port: u16,
    authority: HeaderValue,
    name: ServerName<'static>,
    tls: TlsConnector,
    token: Option<HeaderValue>,
}

/// A daemon's remote API, one kept-alive connection at a time.
pub struct Remote {
    target: Target,
    runtime: tokio::runtime::Runtime,
    connection: Mutex<Option<SendRequest<Full<Bytes>>>>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.target.url)
            .finish_non_exhaustive()
    }
}

/// A [`ClientError::Remote`] with `text`.
fn remote_error(text: String) -> ClientError {
    ClientError::Remote(text)
}

impl Remote {
    /// A client of the API at `url` (`https://HOST[:PORT]`, port 443 by default) with
    /// `credentials`. Nothing is connected until the first request.
    ///
    /// # Errors
    /// [`ClientError::Remote`] naming the flag: a URL that is not `https://HOST[:PORT]`,
    /// an unreadable or empty PEM or token file, `--cert` without `--key`.
    pub fn new(url: &str, credentials: &Credentials) -> Result<Self, ClientError> {
        let bad = |why: &str| remote_error(format!("--remote {url:?}: {why}"));
        let uri: Uri = url
            .parse()
            .map_err(|e| bad(&format!("not a URL ({e}); expected https://HOST[:PORT]")))?;
        if uri.scheme_str() != Some("https") {
            return Err(bad(
                "the API is served over HTTPS only: https://HOST[:PORT]",
            ));
        }
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(bad("give no path: https://HOST[:PORT]"));
        }
        let authority = uri.authority().ok_or_else(|| bad("no host"))?;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let name = ServerName::try_from(host.clone())
            .map_err(|e| bad(&format!("{host:?} is not a host name or address: {e}")))?;
        let target = Target {
            url: format!("https://{authority}"),
            port: authority.port_u16().unwrap_or(443),
            host,
            authority: HeaderValue::from_str(authority.as_str()).map_err(|_| bad("bad host"))?,
            name,
            tls: TlsConnector::from(Arc::new(tls_config(credentials)?)),
            token: token(credentials.token_file.as_deref())?,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| remote_error(format!("starting the client's runtime: {e}")))?;
        Ok(Self {
            target,
            runtime,
            connection: Mutex::new(None),
        })
    }

    /// The URL requests go to (`https://HOST:PORT`).
    pub fn url(&self) -> &str {
        &self.target.url
    }

    /// Sends `route` on the kept connection (a new one if it is gone; once more on a new
    /// one if the kept one fails, which a change's `Idempotency-Key` makes safe).
    async fn send(&self, route: &Route) -> Result<(StatusCode, Bytes), ClientError> {
        let kept = self
            .connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let reused = kept.is_some();
        let mut sender = match kept {
            Some(s) if !s.is_closed() => s,
            _ => self.target.connect().await?,
        };
        let response = match sender.send_request(self.target.request(route)?).await {
            Ok(r) => r,
            Err(_) if reused => {
                sender = self.target.connect().await?;
                sender
                    .send_request(self.target.request(route)?)
                    .await
                    .map_err(|e| self.target.failed(&e))?
            }
            Err(e) => return Err(self.target.failed(&e)),
        };
        let answer = read_body(&self.target, response).await?;
        *self
            .connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(sender);
        Ok(answer)
    }
}

impl Target {
    /// A new connection: TCP, the TLS handshake, HTTP/1.1.
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, ClientError> {
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| remote_error(format!("--remote {}: cannot connect: {e}", self.url)))?;
        let _ = tcp.set_nodelay(true);
        let tls = self
            .tls
            .connect(self.name.clone(), tcp)
            .await
            .map_err(|e| {
                remote_error(format!(
                    "--remote {}: TLS handshake failed: {e} (is --cacert the CA of the server's certificate, and are --cert and --key a certificate the server's api.client_ca_file accepts?)",
                    self.url
                ))
            })?;
        let (sender, connection) = http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| self.failed(&e))?;
        tokio::spawn(connection);
        Ok(sender)
    }

    /// The HTTP request of `route`.
    fn request(&self, route: &Route) -> Result<HttpRequest<Full<Bytes>>, ClientError> {
        let mut builder = HttpRequest::builder()
            .method(route.method.clone())
            .uri(&route.path)
            .header(HOST, self.authority.clone());
        if let Some(token) = &self.token {
            builder = builder.header(AUTHORIZATION, token.clone());
        }
        if let Some(id) = &route.request_id {
            builder = builder.header("idempotency-key", id.as_str());
        }
        if let Some(kind) = route.content_type {
            builder = builder.header(CONTENT_TYPE, kind);
        }
        builder
            .body(Full::new(route.body.clone()))
            .map_err(|e| remote_error(format!("building the request: {e}")))
    }

    /// An HTTP failure of this target, naming it.
    fn failed(&self, e: &hyper::Error) -> ClientError {
        remote_error(format!("--remote {}: {e}", self.url))
    }
}

/// The answer's status and body (at most [`MAX_ANSWER_BYTES`]).
async fn read_body(
    target: &Target,
    response: hyper::Response<Incoming>,
) -> Result<(StatusCode, Bytes), ClientError> {
    let status = response.status();
    let limit = usize::try_from(MAX_ANSWER_BYTES).unwrap_or(usize::MAX);
    let body = Limited::new(response.into_body(), limit)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                ClientError::AnswerTooLarge
            } else {
                remote_error(format!("--remote {}: reading the answer: {e}", target.url))
            }
        })?;
    Ok((status, body.to_bytes()))
}

/// The answer's data, or the error its status means.
fn outcome(target: &Target, status: StatusCode, body: &[u8]) -> Result<Value, ClientError> {
    if status == StatusCode::OK {
        return Ok(serde_json::from_slice(body)?);
    }
    let reason = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_owned());
    let url = &target.url;
    Err(match status {
        StatusCode::BAD_REQUEST => ClientError::Refused(reason),
        StatusCode::UNAUTHORIZED => remote_error(format!(
            "{url}: 401 unauthorized: {reason} (give --token-file with a token the daemon's [[api.token]] lists, or --cert and --key)"
        )),
        StatusCode::FORBIDDEN => remote_error(format!("{url}: 403 forbidden: {reason}")),
        _ => remote_error(format!("{url}: HTTP {}: {reason}", status.as_u16())),
    })
}

impl Transport for Remote {
    fn exchange(&self, request: &Request, change_id: Option<&str>) -> Result<Value, ClientError> {
        let route = route(request, change_id)?;
        let (status, body) = self
            .runtime
            .block_on(async { tokio::time::timeout(CLIENT_TIMEOUT, self.send(&route)).await })
            .map_err(|_| ClientError::Io(std::io::ErrorKind::TimedOut.into()))??;
        outcome(&self.target, status, &body)
    }

    fn stream(&self, request: &Request) -> Result<Box<dyn BufRead + Send>, ClientError> {
        let route = route(request, None)?;
        let target = self.target.clone();
        let (tx, rx) = mpsc::sync_channel::<Result<Bytes, String>>(16);
        let (started_tx, started_rx) = mpsc::sync_channel::<Result<(), ClientError>>(1);
        std::thread::spawn(move || stream_thread(&target, &route, &started_tx, &tx));
        match started_rx.recv_timeout(CLIENT_TIMEOUT) {
            Ok(Ok(())) => Ok(Box::new(BufReader::new(ChannelReader {
                rx,
                chunk: Bytes::new(),
            }))),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ClientError::Io(std::io::ErrorKind::TimedOut.into())),
        }
    }
}

/// A stream's thread: its own runtime and connection; says whether the stream started,
/// then passes the body's chunks on until the reader is dropped.
fn stream_thread(
    target: &Target,
    route: &Route,
    started: &mpsc::SyncSender<Result<(), ClientError>>,
    chunks: &mpsc::SyncSender<Result<Bytes, String>>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            let _ = started.send(Err(remote_error(format!("starting a runtime: {e}"))));
            return;
        }
    };
    runtime.block_on(async {
        let opened = async {
            let mut sender = target.connect().await?;
            let response = sender
                .send_request(target.request(route)?)
                .await
                .map_err(|e| target.failed(&e))?;
            if response.status() != StatusCode::OK {
                let (status, body) = read_body(target, response).await?;
                return Err(outcome(target, status, &body)
                    .err()
                    .unwrap_or_else(|| remote_error("unexpected answer".into())));
            }
            Ok((sender, response.into_body()))
        };
        let (_sender, mut body) = match opened.await {
            Ok(o) => o,
            Err(e) => {
                let _ = started.send(Err(e));
                return;
            }
        };
        let _ = started.send(Ok(()));
        while let Some(frame) = body.frame().await {
            let sent = match frame {
                Ok(f) => match f.into_data() {
                    Ok(data) => chunks.send(Ok(data)),
                    Err(_) => continue,
                },
                Err(e) => chunks.send(Err(e.to_string())),
            };
            if sent.is_err() {
                return;
            }
        }
    });
}

/// The reading end of a stream's chunks.
struct ChannelReader {
    rx: mpsc::Receiver<Result<Bytes, String>>,
    chunk: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rx.recv() {
                Ok(Ok(chunk)) => self.chunk = chunk,
                Ok(Err(e)) => return Err(std::io::Error::other(e)),
                Err(_) => return Ok(0),
            }
        }
        let n = out.len().min(self.chunk.len());
        out[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}

/// A control request as an API request.
#[derive(Clone, Debug)]
struct Route {
    method: Method,
    /// Path and query.
    path: String,
    body: Bytes,
    content_type: Option<&'static str>,
    /// A change's `Idempotency-Key`.
    request_id: Option<String>,
}

/// The API operation of `request` (see [`super::routes`]); a change carries
/// `change_id` (a new one if `None`) as its request id.
///
/// # Errors
/// A request the API does not serve (`config diff` of a file on the daemon's host).
fn route(request: &Request, change_id: Option<&str>) -> Result<Route, ClientError> {
    let mut fields = match serde_json::to_value(request)? {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    fields.remove("command");
    let id = || Some(change_id.map_or_else(new_change_id, str::to_owned));
    let get = |path: &str, fields: &Map<String, Value>| Route {
        method: Method::GET,
        path: format!("{path}{}", query(fields)),
        body: Bytes::new(),
        content_type: None,
        request_id: None,
    };
    let change = |method: Method, path: &str, body: Bytes, kind: Option<&'static str>| Route {
        method,
        path: path.to_owned(),
        body,
        content_type: kind,
        request_id: id(),
    };
    let json =
        |fields: &Map<String, Value>| Bytes::from(serde_json::to_vec(fields).unwrap_or_default());
    Ok(match request {
        Request::Status => get("/v1/status", &Map::new()),
        Request::Stats => get("/v1/stats", &Map::new()),
        Request::Flow { .. } => get("/v1/flow", &fields),
        Request::Trace { .. } => get("/v1/trace", &fields),
        Request::Conns { .. } => get("/v1/conns", &fields),
        Request::Overrides { clear: false } => get("/v1/overrides", &Map::new()),
        Request::Overrides { clear: true } => {
            change(Method::DELETE, "/v1/overrides", Bytes::new(), None)
        }
        Request::Backend { .. } => change(
            Method::POST,
            "/v1/backend",
            json(&fields),
            Some("application/json"),
        ),
        Request::Vip { .. } => change(
            Method::POST,
            "/v1/vip",
            json(&fields),
            Some("application/json"),
        ),
        Request::Reload => change(Method::POST, "/v1/reload", Bytes::new(), None),
        Request::ReloadLearn => change(Method::POST, "/v1/reload/learn", Bytes::new(), None),
        Request::PushConfig {
            toml,
            dry_run: false,
        } => change(
            Method::PUT,
            "/v1/config",
            Bytes::from(toml.clone()),
            Some("application/toml"),
        ),
        Request::PushLearn { toml } => change(
            Method::PUT,
            "/v1/config/learn",
            Bytes::from(toml.clone()),
            Some("application/toml"),
        ),
        Request::PushConfig {
            toml,
            dry_run: true,
        } => Route {
            method: Method::POST,
            path: "/v1/config/diff".into(),
            body: Bytes::from(toml.clone()),
            content_type: Some("application/toml"),
            request_id: None,
        },
        Request::ConfigDiff { .. } => {
            return Err(remote_error(
                "over --remote, lb config diff needs a FILE to send: the API does not read the daemon's own file".into(),
            ));
        }
    })
}

/// `?key=value&...` of the fields that are set, percent-encoded (RFC 3986 section
/// 2.1: every byte but the unreserved ones).
fn query(fields: &Map<String, Value>) -> String {
    let mut out = String::new();
    for (key, value) in fields {
        let text = match value {
            Value::Null => continue,
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push(if out.is_empty() { '?' } else { '&' });
        out.push_str(key);
        out.push('=');
        for b in text.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

/// The rustls client configuration of `credentials`.
fn tls_config(credentials: &Credentials) -> Result<ClientConfig, ClientError> {
    let provider = Arc::new(ring::default_provider());
    let mut roots = RootCertStore::empty();
    match &credentials.cacert {
        Some(path) => {
            for ca in pem_certificates(path, "--cacert")? {
                roots.add(ca).map_err(|e| {
                    remote_error(format!("--cacert {}: unusable CA: {e}", path.display()))
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(remote_error(
                    "--cacert: not given, and the system has no CA certificates".into(),
                ));
            }
        }
    }
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| remote_error(format!("TLS protocol versions: {e}")))?
        .with_root_certificates(roots);
    let mut config = match (&credentials.cert, &credentials.key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let chain = pem_certificates(cert, "--cert")?;
            let key_der = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| remote_error(format!("--key {}: {e}", key.display())))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| remote_error(format!("--cert and --key: {e}")))?
        }
        (Some(_), None) => return Err(remote_error("--cert needs --key".into())),
        (None, Some(_)) => return Err(remote_error("--key needs --cert".into())),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Every certificate of a PEM file; `flag` names it in errors.
fn pem_certificates(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| remote_error(format!("{flag} {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(remote_error(format!(
            "{flag} {}: no certificate in the file",
            path.display()
        )));
    }
    Ok(certs)
}

/// The `Authorization` header of the token in `path` (its first line).
fn token(path: Option<&Path>) -> Result<Option<HeaderValue>, ClientError> {
    let Some(path) = path else { return Ok(None) };
    let text = std::fs::read_to_string(path)
        .map_err(|e| remote_error(format!("--token-file {}: {e}", path.display())))?;
    let secret = text.lines().next().unwrap_or("").trim();
    if secret.is_empty() {
        return Err(remote_error(format!(
            "--token-file {}: the first line is empty",
            path.display()
        )));
    }
    HeaderValue::from_str(&format!("Bearer {secret}"))
        .map(Some)
        .map_err(|_| {
            remote_error(format!(
                "--token-file {}: the token is not visible ASCII",
                path.display()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_become_their_operations() {
        let vip = "203.0.113.10:80/tcp".parse().expect("vip");
        let r = route(
            &Request::Conns {
                vip: Some(vip),
                backend: None,
                client: None,
                state: None,
                limit: 5,
            },
            None,
        )
        .expect("routes");
        assert_eq!(r.method, Method::GET);
        assert_eq!(r.path, "/v1/conns?limit=5&vip=203.0.113.10%3A80%2Ftcp");
        let r = route(&Request::Reload, Some("abc")).expect("routes");
        assert_eq!((r.method, r.path.as_str()), (Method::POST, "/v1/reload"));
        assert_eq!(r.request_id.as_deref(), Some("abc"));
        let err = route(&Request::ConfigDiff { file: None }, None).unwrap_err();
        assert!(err.to_string().contains("--remote"), "{err}");
    }

    #[test]
    fn a_bad_url_or_file_names_its_flag() {
        let none = Credentials::default();
        for (url, says) in [
            ("http://lb1:9443", "HTTPS only"),
            ("lb1:9443", "--remote"),
            ("https://lb1:9443/v1", "no path"),
        ] {
            let err = Remote::new(url, &none).unwrap_err().to_string();
            assert!(err.contains(says), "{url}: {err}");
        }
        let missing = Credentials {
            cacert: Some("/nonexistent/ca.crt".into()),
            ..Credentials::default()
        };
        let err = Remote::new("https://lb1:9443", &missing)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--cacert /nonexistent/ca.crt"), "{err}");
        let half = Credentials {
            cacert: Some("/nonexistent/ca.crt".into()),
            token_file: Some("/nonexistent/t".into()),
            ..Credentials::default()
        };
        assert!(Remote::new("https://lb1", &half).is_err());
    }
}
