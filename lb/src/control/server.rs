//! The daemon end: [`serve`] reads one [`Request`] from a connection within [`Limits`],
//! answers it and closes; [`serve_streaming`] may answer with a stream of lines
//! (`lb trace`) that ends when the client closes. What one client can make the daemon hold is bounded: at most
//! [`MAX_REQUEST_BYTES`] of request, for at most [`IDLE_TIMEOUT`].

use std::time::Duration;

use tokio::{
    io::{
        AsyncBufRead, AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, AsyncWrite,
        AsyncWriteExt as _,
    },
    sync::mpsc,
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

/// What a handler answers: one line, or a stream of lines.
pub enum Reply {
    /// One answer line, then the connection is closed.
    Once(Response),
    /// One line per response received, until the sender closes the channel or the
    /// client closes the connection (the receiver is then dropped, which the sender
    /// sees as a closed channel).
    Stream(mpsc::Receiver<Response>),
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
    serve_streaming(stream, limits, |request, _| Reply::Once(handle(request))).await
}

/// [`serve`] for handlers that may answer with a stream ([`Reply::Stream`]), and that
/// read the request's `change_id` (the handler's second argument): the lines
/// are written as they come, each within `limits.idle_timeout`, while the connection
/// is watched for the client's end of file (a client that vanishes ends the stream at
/// once, even when no line is due).
///
/// # Errors
/// [`ServeError`]: what ended the connection early.
pub async fn serve_streaming<S>(
    stream: S,
    limits: Limits,
    handle: impl FnOnce(&Request, Option<&str>) -> Reply,
) -> Result<(), ServeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (read, mut write) = tokio::io::split(stream);
    let mut reader = tokio::io::BufReader::new(read);
    let read = read_request(&mut reader, limits).await;
    let reply = match &read {
        Ok((request, change_id)) => handle(request, change_id.as_deref()),
        Err(ServeError::Closed | ServeError::Io(_)) => return read.map(|_| ()),
        Err(e) => Reply::Once(Response::error(e)),
    };
    match reply {
        Reply::Once(response) => write_line(&mut write, &response, limits).await?,
        Reply::Stream(mut lines) => {
            let mut rest = [0u8; 256];
            loop {
                tokio::select! {
                    line = lines.recv() => match line {
                        Some(response) => write_line(&mut write, &response, limits).await?,
                        None => break,
                    },
                    // Anything the client sends after its request, or its end of file,
                    // ends the stream.
                    _ = reader.read(&mut rest) => break,
                }
            }
        }
    }
    let _ = write.shutdown().await;
    read.map(|_| ())
}

/// Writes `response` as one JSON line within `limits.idle_timeout`.
async fn write_line(
    write: &mut (impl AsyncWrite + Unpin),
    response: &Response,
    limits: Limits,
) -> Result<(), ServeError> {
    let mut text = serde_json::to_string(response).unwrap_or_else(|_| "{\"ok\":false}".into());
    text.push('\n');
    timeout(limits.idle_timeout, write.write_all(text.as_bytes()))
        .await
        .map_err(|_| ServeError::WriteTimeout(limits.idle_timeout))??;
    Ok(())
}

/// Reads and decodes one request line of at most `limits.max_request_bytes`.
async fn read_request(
    read: &mut (impl AsyncBufRead + Unpin),
    limits: Limits,
) -> Result<(Request, Option<String>), ServeError> {
    let max = limits.max_request_bytes;
    // One byte more than the limit tells a line of exactly `max` bytes without its
    // newline from a longer one.
    let mut reader = read.take(u64::try_from(max).unwrap_or(u64::MAX) + 1);
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
    let request = serde_json::from_slice(&line).map_err(ServeError::Malformed)?;
    let id: ChangeIdKey = serde_json::from_slice(&line).map_err(ServeError::Malformed)?;
    Ok((request, id.change_id))
}

/// The `change_id` key a client may put next to `command` in a change request (see
/// [`super::Client::change`]).
#[derive(serde::Deserialize)]
struct ChangeIdKey {
    #[serde(default)]
    change_id: Option<String>,
}
