//! The daemon end: [`serve`] reads one [`Request`] from a connection within [`Limits`],
//! answers it and closes. What one client can make the daemon hold is bounded: at most
//! [`MAX_REQUEST_BYTES`] of request, for at most [`IDLE_TIMEOUT`].

use std::time::Duration;

use tokio::{
    io::{AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _},
    time::timeout,
};

use super::{Request, Response};

/// The longest request line the daemon reads (bytes, newline excluded). Requests are
/// below 200 bytes; a longer line is refused after this many bytes, never buffered whole.
pub const MAX_REQUEST_BYTES: usize = 64 << 10;
/// How long a connection may take to deliver its whole request, and the daemon to write
/// its answer; a connection that does not is closed. The CLI writes its request at once.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the daemon lets one connection hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest request line (bytes, newline excluded).
    pub max_request_bytes: usize,
    /// The time a connection gets to deliver its request, and the answer to be written.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_request_bytes: MAX_REQUEST_BYTES,
            idle_timeout: IDLE_TIMEOUT,
        }
    }
}

/// Why a connection ended without an answered request, or with an unwritten answer.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The client closed the connection without sending anything (a probe).
    #[error("closed without a request")]
    Closed,
    /// The request line is longer than the limit.
    #[error("request larger than {0} bytes")]
    TooLarge(usize),
    /// The request was not complete within the limit.
    #[error("no complete request within {0:?}")]
    Timeout(Duration),
    /// The request is not a [`Request`].
    #[error("bad request: {0}")]
    Malformed(serde_json::Error),
    /// The answer could not be written within the limit.
    #[error("the answer could not be written within {0:?}")]
    WriteTimeout(Duration),
    /// Reading or writing failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Reads one request from `stream` within `limits`, answers it with `handle`, and
/// returns. A request that is too large, late or malformed is answered with the error
/// (best effort) and not handed to `handle`.
///
/// # Errors
/// [`ServeError`]: what ended the connection early.
pub async fn serve<S>(
    stream: S,
    limits: Limits,
    handle: impl FnOnce(&Request) -> Response,
) -> Result<(), ServeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (read, mut write) = tokio::io::split(stream);
    let read = read_request(read, limits).await;
    let response = match &read {
        Ok(request) => handle(request),
        Err(ServeError::Closed | ServeError::Io(_)) => return read.map(|_| ()),
        Err(e) => Response::error(e),
    };
    let mut text = serde_json::to_string(&response).unwrap_or_else(|_| "{\"ok\":false}".into());
    text.push('\n');
    timeout(limits.idle_timeout, write.write_all(text.as_bytes()))
        .await
        .map_err(|_| ServeError::WriteTimeout(limits.idle_timeout))??;
    let _ = write.shutdown().await;
    read.map(|_| ())
}

/// Reads and decodes one request line of at most `limits.max_request_bytes`.
async fn read_request(read: impl AsyncRead + Unpin, limits: Limits) -> Result<Request, ServeError> {
    let max = limits.max_request_bytes;
    // One byte more than the limit tells a line of exactly `max` bytes without its
    // newline from a longer one.
    let mut reader =
        tokio::io::BufReader::new(read).take(u64::try_from(max).unwrap_or(u64::MAX) + 1);
    let mut line = Vec::new();
    timeout(limits.idle_timeout, reader.read_until(b'\n', &mut line))
        .await
        .map_err(|_| ServeError::Timeout(limits.idle_timeout))??;
    if line.is_empty() {
        return Err(ServeError::Closed);
    }
    if !line.ends_with(b"\n") && line.len() > max {
        return Err(ServeError::TooLarge(max));
    }
    serde_json::from_slice(&line).map_err(ServeError::Malformed)
}
