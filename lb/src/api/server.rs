//! The HTTPS server: accepts connections within `api.max_connections`, runs the TLS
//! handshake and then HTTP/1.1 (hyper) within the header time, authenticates each
//! request ([`super::auth`]), reads a bounded body within the body time, and answers
//! through a [`Service`], the same code that answers the control socket.
//!
//! Limits and their answers: a connection over `max_connections` gets 503 and is
//! closed (and one over that many again is closed at once, unanswered); a handshake or
//! request headers slower than `header_timeout` end the connection (an idle kept-alive
//! connection too); a body larger than `max_body_bytes` gets 413, one slower than
//! `body_timeout` 408, both closing the connection.

use std::{convert::Infallible, sync::Arc, time::Duration};

use anyhow::Context as _;
use http_body_util::{BodyExt as _, Full, Limited, combinators::BoxBody};
use hyper::{
    HeaderMap, Request as HttpRequest, Response as HttpResponse, StatusCode,
    body::{Bytes, Incoming},
    header::{AUTHORIZATION, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::TcpListener,
    sync::{Mutex, OwnedSemaphorePermit, Semaphore},
    time::timeout,
};
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use super::{
    auth::{Auth, Principal, Refused},
    idempotency::{self, Answer, Cache, Seen},
    routes::{Endpoint, NoRoute},
    stream::Lines,
    tls,
};
use crate::{
    config::{Api, Role},
    control::{Request, server::Reply},
};

/// What answers the API's requests: the daemon's request handling (in tests, a fake).
pub trait Service: Send + Sync + 'static {
    /// Answers `request` as the control socket would. Called on a blocking thread,
    /// except for `trace`, whose [`Reply::Stream`] is read as the body.
    fn handle(&self, request: &Request) -> Reply;
}

/// The longest request id accepted (bytes).
const MAX_REQUEST_ID: usize = 128;
/// Largest request head hyper buffers (bytes); a larger one is refused (431).
const MAX_HEAD_BYTES: usize = 16 << 10;

/// A bound, configured server, before it serves.
pub struct Server {
    listener: std::net::TcpListener,
    acceptor: TlsAcceptor,
    state: Arc<State>,
}

/// What every connection shares.
struct State {
    auth: Auth,
    max_body_bytes: usize,
    header_timeout: Duration,
    body_timeout: Duration,
    cache: Mutex<Cache>,
    connections: Arc<Semaphore>,
    overflow: Arc<Semaphore>,
}

impl Server {
    /// Reads the TLS files and token files of `api` and binds its address; `None` when
    /// the API is off.
    ///
    /// # Errors
    /// A file that cannot be read or is unusable (naming its key), an address that
    /// cannot be bound.
    pub fn bind(api: &Api) -> anyhow::Result<Option<Self>> {
        let Some(addr) = api.listen else {
            return Ok(None);
        };
        let config = tls::server_config(api)?;
        let auth = Auth::new(api);
        auth.check_files()?;
        let max = usize::try_from(api.max_connections).unwrap_or(usize::MAX);
        let listener = listen(addr, max).with_context(|| format!("api.listen: binding {addr}"))?;
        let state = State {
            auth,
            max_body_bytes: usize::try_from(api.max_body_bytes).unwrap_or(usize::MAX),
            header_timeout: api.header_timeout,
            body_timeout: api.body_timeout,
            cache: Mutex::new(Cache::new(
                usize::try_from(api.idempotency_entries).unwrap_or(usize::MAX),
            )),
            connections: Arc::new(Semaphore::new(max)),
            overflow: Arc::new(Semaphore::new((max / 8).max(16))),
        };
        Ok(Some(Self {
            listener,
            acceptor: TlsAcceptor::from(config),
            state: Arc::new(state),
        }))
    }

    /// The bound address.
    ///
    /// # Errors
    /// When the socket has none.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until the runtime stops, answering through `service`.
    pub async fn serve(self, service: Arc<dyn Service>) {
        let listener = match TcpListener::from_std(self.listener) {
            Ok(l) => l,
            Err(e) => {
                warn!("api: {e}");
                return;
            }
        };
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    warn!("api accept: {e}");
                    // Out of descriptors: give the open connections time to end.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let state = Arc::clone(&self.state);
            let permit = match Arc::clone(&state.connections).try_acquire_owned() {
                Ok(p) => Permit::Serve(p),
                Err(_) => match Arc::clone(&state.overflow).try_acquire_owned() {
                    Ok(p) => Permit::Refuse(p),
                    Err(_) => {
                        debug!("api: {peer}: over the connection limit, closed");
                        continue;
                    }
                },
            };
            let (acceptor, service) = (self.acceptor.clone(), Arc::clone(&service));
            tokio::spawn(async move {
                connection(stream, peer, acceptor, state, service, permit).await;
            });
        }
    }
}

/// A listening socket whose accept queue holds a burst of `max` connections (the
/// default of 128 would reset a burst of 200 clients).
fn listen(addr: std::net::SocketAddr, max: usize) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(max.max(128) + max / 8).unwrap_or(i32::MAX))?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// A connection's place: served, or only answered 503.
enum Permit {
    Serve(#[allow(dead_code, reason = "held, never read")] OwnedSemaphorePermit),
    Refuse(#[allow(dead_code, reason = "held, never read")] OwnedSemaphorePermit),
}

/// One connection: handshake, then requests until the client closes or a limit ends it.
async fn connection(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    acceptor: TlsAcceptor,
    state: Arc<State>,
    service: Arc<dyn Service>,
    permit: Permit,
) {
    let tls = match timeout(state.header_timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            info!("api: {peer}: TLS handshake refused: {e}");
            return;
        }
        Err(_) => {
            debug!(
                "api: {peer}: no TLS handshake within {:?}",
                state.header_timeout
            );
            return;
        }
    };
    let common_name = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(<[_]>::first)
        .and_then(tls::common_name);
    let overloaded = matches!(permit, Permit::Refuse(_));
    let header_timeout = state.header_timeout;
    let handler = service_fn(move |request| {
        let (state, service, cn) = (
            Arc::clone(&state),
            Arc::clone(&service),
            common_name.clone(),
        );
        async move {
            let mut response = if overloaded {
                error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many connections; retry later",
                )
            } else {
                respond(request, &state, service, cn.as_deref(), peer).await
            };
            if overloaded {
                response
                    .headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, Infallible>(response)
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(!overloaded);
    if let Err(e) = builder.serve_connection(TokioIo::new(tls), handler).await {
        debug!("api: {peer}: {e}");
    }
    drop(permit);
}

/// The body type of every answer.
type Body = BoxBody<Bytes, Infallible>;

/// A JSON answer (`body` plus a newline).
fn json(status: StatusCode, mut body: Vec<u8>) -> HttpResponse<Body> {
    body.push(b'\n');
    let mut response = HttpResponse::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// `{"error": message}` with `status`.
fn error(status: StatusCode, message: &str) -> HttpResponse<Body> {
    let body = serde_json::to_vec(&serde_json::json!({ "error": message })).unwrap_or_default();
    json(status, body)
}

/// `{"error": ...}` with `status`, closing the connection (the body was not read whole).
fn error_closing(status: StatusCode, message: &str) -> HttpResponse<Body> {
    let mut response = error(status, message);
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// One request's answer.
async fn respond(
    request: HttpRequest<Incoming>,
    state: &State,
    service: Arc<dyn Service>,
    common_name: Option<&str>,
    peer: std::net::SocketAddr,
) -> HttpResponse<Body> {
    let (parts, body) = request.into_parts();
    let (method, path) = (parts.method.as_str(), parts.uri.path());
    let endpoint = match Endpoint::find(method, path) {
        Ok(e) => e,
        Err(NoRoute::Path) => return error(StatusCode::NOT_FOUND, &format!("no such path {path}")),
        Err(NoRoute::Method(allowed)) => {
            let mut r = error(
                StatusCode::METHOD_NOT_ALLOWED,
                &format!("{path} takes {allowed}"),
            );
            if let Ok(v) = HeaderValue::from_str(allowed) {
                r.headers_mut().insert(hyper::header::ALLOW, v);
            }
            return r;
        }
    };
    if endpoint == Endpoint::OpenApi {
        return json(StatusCode::OK, super::openapi::json().trim_end().into());
    }
    let principal = match authorize(state, endpoint, &parts.headers, common_name) {
        Ok(p) => p,
        Err(response) => {
            info!(
                "api: {peer}: {method} {path} refused ({})",
                response.status()
            );
            return *response;
        }
    };
    let body = if endpoint.has_body() {
        match read_body(state, &parts.headers, body, endpoint.takes_config()).await {
            Ok(b) => b,
            Err(response) => return *response,
        }
    } else {
        Bytes::new()
    };
    let query = parts.uri.query().unwrap_or("");
    let control = match endpoint.request(query, &body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("bad request: {e}")),
    };
    if endpoint == Endpoint::Trace {
        return trace(service.as_ref(), &control, endpoint);
    }
    if !endpoint.is_change() {
        return answer(service, control, endpoint).await.into_response();
    }
    let context = ChangeContext {
        method,
        path,
        body: &body,
        who: &principal.who,
    };
    change(state, service, control, endpoint, &parts.headers, context).await
}

/// The principal of a request to `endpoint`, if its role allows it.
fn authorize(
    state: &State,
    endpoint: Endpoint,
    headers: &HeaderMap,
    common_name: Option<&str>,
) -> Result<Principal, Box<HttpResponse<Body>>> {
    let principal = state
        .auth
        .authenticate(
            headers.get(AUTHORIZATION).map(HeaderValue::as_bytes),
            common_name,
        )
        .map_err(|e| {
            let status = match e {
                Refused::UnmappedCertificate(_) => StatusCode::FORBIDDEN,
                Refused::Missing | Refused::UnknownToken => StatusCode::UNAUTHORIZED,
            };
            let mut r = error(status, &e.to_string());
            if status == StatusCode::UNAUTHORIZED {
                r.headers_mut().insert(
                    hyper::header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"lb\""),
                );
            }
            Box::new(r)
        })?;
    match endpoint.role() {
        Some(Role::Admin) if principal.role != Role::Admin => Err(Box::new(error(
            StatusCode::FORBIDDEN,
            &format!(
                "{} is {}: changes need the admin role",
                principal.who,
                principal.role.name()
            ),
        ))),
        _ => Ok(principal),
    }
}

/// Reads a body of at most `max_body_bytes` (a configuration: at most
/// [`crate::defaults::API_MAX_CONFIG_BYTES`]) within `body_timeout`.
async fn read_body(
    state: &State,
    headers: &HeaderMap,
    body: Incoming,
    config: bool,
) -> Result<Bytes, Box<HttpResponse<Body>>> {
    let (max, limit) = if config {
        (
            crate::defaults::API_MAX_CONFIG_BYTES as usize,
            "the configuration limit",
        )
    } else {
        (state.max_body_bytes, "api.max_body_bytes")
    };
    let too_large = || {
        Box::new(error_closing(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("request body larger than {max} bytes ({limit})"),
        ))
    };
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > u64::try_from(max).unwrap_or(u64::MAX)) {
        return Err(too_large());
    }
    match timeout(state.body_timeout, Limited::new(body, max).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err(Box::new(error_closing(
            StatusCode::BAD_REQUEST,
            &format!("reading the body: {e}"),
        ))),
        Err(_) => Err(Box::new(error_closing(
            StatusCode::REQUEST_TIMEOUT,
            &format!(
                "request body not received within {} ms (api.body_timeout_ms)",
                state.body_timeout.as_millis()
            ),
        ))),
    }
}

/// `trace`: the stream of JSON lines, or the daemon's refusal.
fn trace(service: &dyn Service, request: &Request, endpoint: Endpoint) -> HttpResponse<Body> {
    match service.handle(request) {
        Reply::Stream(lines) => {
            let mut response = HttpResponse::new(Lines::new(lines, endpoint).boxed());
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/jsonl"));
            response
        }
        Reply::Once(r) => Answer::from_response(r, endpoint).into_response(),
    }
}

/// Answers `request` through `service` on a blocking thread.
async fn answer(service: Arc<dyn Service>, request: Request, endpoint: Endpoint) -> Answer {
    let reply = tokio::task::spawn_blocking(move || service.handle(&request)).await;
    match reply {
        Ok(Reply::Once(response)) => Answer::from_response(response, endpoint),
        // `conns`: the walk runs off the service and sends its one answer.
        Ok(Reply::Stream(mut answers)) => match answers.recv().await {
            Some(response) => Answer::from_response(response, endpoint),
            None => Answer::error(StatusCode::INTERNAL_SERVER_ERROR, "no answer"),
        },
        Err(e) => Answer::error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

impl Answer {
    /// The HTTP answer to a control response: 200 with the data as the CLI prints it,
    /// 400 with the daemon's refusal.
    fn from_response(response: crate::control::Response, endpoint: Endpoint) -> Self {
        match (response.ok, response.data) {
            (true, Some(data)) => match endpoint.answer(data) {
                Ok(mut body) => {
                    body.push(b'\n');
                    Self {
                        status: 200,
                        body: Bytes::from(body),
                    }
                }
                Err(e) => Self::error(StatusCode::INTERNAL_SERVER_ERROR, &e),
            },
            (true, None) => Self::error(StatusCode::INTERNAL_SERVER_ERROR, "empty answer"),
            (false, _) => Self::error(
                StatusCode::BAD_REQUEST,
                response.error.as_deref().unwrap_or("refused"),
            ),
        }
    }

    fn error(status: StatusCode, message: &str) -> Self {
        let mut body =
            serde_json::to_vec(&serde_json::json!({ "error": message })).unwrap_or_default();
        body.push(b'\n');
        Self {
            status: status.as_u16(),
            body: Bytes::from(body),
        }
    }

    fn into_response(self) -> HttpResponse<Body> {
        let mut response = HttpResponse::new(Full::new(self.body).boxed());
        *response.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

/// What a change is logged and remembered with.
struct ChangeContext<'a> {
    method: &'a str,
    path: &'a str,
    body: &'a [u8],
    who: &'a str,
}

/// The request id of a change: `Idempotency-Key`, else `X-Request-Id`.
fn request_id(headers: &HeaderMap) -> Result<String, String> {
    let value = headers
        .get("idempotency-key")
        .or_else(|| headers.get("x-request-id"))
        .ok_or(
            "changes need an Idempotency-Key header: a unique id per change, reused by its retries",
        )?;
    let id = value
        .to_str()
        .map_err(|_| "the request id is not visible ASCII")?
        .trim_matches('"');
    if id.is_empty() || id.len() > MAX_REQUEST_ID {
        return Err(format!(
            "the request id must be 1 to {MAX_REQUEST_ID} characters"
        ));
    }
    Ok(id.to_owned())
}

/// A change: applied once per request id, logged with who made it; a retry gets the
/// first answer (`Idempotent-Replayed: true`).
async fn change(
    state: &State,
    service: Arc<dyn Service>,
    request: Request,
    endpoint: Endpoint,
    headers: &HeaderMap,
    c: ChangeContext<'_>,
) -> HttpResponse<Body> {
    let id = match request_id(headers) {
        Ok(id) => id,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    let fingerprint = idempotency::fingerprint(c.method, c.path, c.body);
    // Held while the change applies: a retry arriving meanwhile waits for its answer.
    let mut cache = state.cache.lock().await;
    let mut response = match cache.seen(c.who, &id, &fingerprint) {
        Seen::Replay(answer) => {
            info!(
                "api: {} {} {} (request id {id}): a retry, answered again",
                c.who, c.method, c.path
            );
            let mut r = answer.into_response();
            r.headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
            r
        }
        Seen::Mismatch => error(
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!("request id {id:?} was used for another request"),
        ),
        Seen::New => {
            let answer = answer(service, request, endpoint).await;
            let outcome = if answer.status == 200 {
                "applied"
            } else {
                "refused"
            };
            info!(
                "api: change by {} (request id {id}): {} {} {}: {outcome} ({})",
                c.who,
                c.method,
                c.path,
                String::from_utf8_lossy(c.body),
                answer.status
            );
            cache.insert(c.who, &id, fingerprint, answer.clone());
            answer.into_response()
        }
    };
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", v);
    }
    response
}
