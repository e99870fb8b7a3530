//! The HTTP side of the metrics endpoint: a hyper 1 HTTP/1.1 server inside the daemon's
//! runtime. `GET /metrics` answers the exposition ([`super::metrics::encode`]):
//! OpenMetrics text when the scraper's `Accept` asks for it (Prometheus does), else
//! Prometheus text 0.0.4 (`curl`, `promtool check metrics`). Any other path is 404,
//! any other method 405. The snapshot is read on a blocking thread, so a scrape never
//! stalls the control socket's event loop.

use std::{convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header::{ACCEPT, CONTENT_TYPE, HeaderValue},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::warn;

use super::{
    Shared,
    metrics::{Recorder, Snapshot, encode},
};

/// How long a connection may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds the endpoint's listener (before the program is attached, so that a taken port
/// fails the start).
///
/// # Errors
/// When the address cannot be bound.
pub(super) fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves the endpoint on `listener` until the runtime stops.
pub(super) async fn serve(
    listener: std::net::TcpListener,
    service: Shared,
    recorder: Arc<Recorder>,
    retention: Duration,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            warn!("metrics endpoint: {e}");
            return;
        }
    };
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                warn!("metrics endpoint accept: {e}");
                continue;
            }
        };
        let (service, recorder) = (Arc::clone(&service), Arc::clone(&recorder));
        tokio::spawn(async move {
            let handler = service_fn(move |request| {
                respond(
                    request,
                    Arc::clone(&service),
                    Arc::clone(&recorder),
                    retention,
                )
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            // A scraper that goes away mid-answer is not an error of the daemon.
            let _ = builder
                .serve_connection(TokioIo::new(stream), handler)
                .await;
        });
    }
}

/// One request's answer.
async fn respond(
    request: Request<Incoming>,
    service: Shared,
    recorder: Arc<Recorder>,
    retention: Duration,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let plain = |status: StatusCode, text: &str| {
        let mut r = Response::new(Full::new(Bytes::from(text.to_owned())));
        *r.status_mut() = status;
        r
    };
    if request.uri().path() != "/metrics" {
        return Ok(plain(
            StatusCode::NOT_FOUND,
            "lb: the metrics are at /metrics\n",
        ));
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return Ok(plain(StatusCode::METHOD_NOT_ALLOWED, "GET /metrics\n"));
    }
    let openmetrics = request
        .headers()
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let snapshot = tokio::task::spawn_blocking(move || {
        let mut service = service.lock().unwrap_or_else(|p| p.into_inner());
        Snapshot::take(&mut service, retention)
    })
    .await;
    let snapshot = match snapshot {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return Ok(plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("lb: reading the counters: {e}\n"),
            ));
        }
        Err(e) => {
            return Ok(plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("lb: {e}\n"),
            ));
        }
    };
    let (body, content_type) = encode(snapshot, &recorder, openmetrics);
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(response)
}
