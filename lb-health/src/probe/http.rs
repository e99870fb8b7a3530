//! HTTP/1.1 GET over a connected stream (plain or TLS) with hyper's client connection:
//! one request, `Connection: close`, success when the response head's status is in the
//! expected ranges. The body is not read.

use std::pin::pin;

use http_body_util::Empty;
use hyper::{
    Request,
    body::Bytes,
    header::{CONNECTION, HOST, HeaderValue, USER_AGENT},
};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::{
    outcome::{Failure, Stage},
    settings::StatusRanges,
};

/// The User-Agent of probes.
const AGENT: &str = concat!("lb-health/", env!("CARGO_PKG_VERSION"));

/// A prepared request: what varies per backend, checked once.
#[derive(Clone, Debug)]
pub(super) struct HttpRequest {
    /// Origin-form target (`/healthz`).
    pub(super) path: String,
    /// The Host header.
    pub(super) host: HeaderValue,
    /// Healthy statuses.
    pub(super) status: StatusRanges,
}

/// Sends the GET over `stream`; `stage` follows the exchange.
///
/// # Errors
/// [`Failure::HttpStatus`] for an unexpected status; [`Failure::Http`] for a malformed
/// response; [`Failure::Reset`] when the server closes first.
pub(super) async fn get<S>(
    stream: S,
    request: &HttpRequest,
    stage: &mut Stage,
) -> Result<(), Failure>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
            .await
            .map_err(|e| failure(&e, *stage))?;
    let req = Request::get(request.path.as_str())
        .header(HOST, request.host.clone())
        .header(USER_AGENT, AGENT)
        .header(CONNECTION, "close")
        .body(Empty::new())
        .map_err(|e| Failure::Http(e.to_string()))?;
    *stage = Stage::Response;
    let mut connection = pin!(connection);
    let mut send = pin!(sender.send_request(req));
    // The connection task delivers the response (or the error) to `send`; once it ends,
    // `send` resolves too.
    let response = tokio::select! {
        biased;
        response = &mut send => response,
        _ = &mut connection => send.await,
    }
    .map_err(|e| failure(&e, Stage::Response))?;
    let status = response.status().as_u16();
    if request.status.contains(status) {
        Ok(())
    } else {
        Err(Failure::HttpStatus { status })
    }
}

/// The failure a hyper error stands for.
fn failure(error: &hyper::Error, stage: Stage) -> Failure {
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Failure::from_io(stage, io);
        }
        source = e.source();
    }
    if error.is_incomplete_message() || error.is_closed() {
        Failure::Reset { stage }
    } else {
        Failure::Http(error.to_string())
    }
}
