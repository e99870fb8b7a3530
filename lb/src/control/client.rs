//! The client end, for the CLI verbs and the tests: [`Client`] sends one [`Request`]
//! and decodes the answer into the request's type, over the daemon's unix socket or a
//! [`Transport`] of another layer (the remote API's HTTPS client,
//! `crate::api::client`): the verbs render the same answers whichever carried them.

use std::{
    io::{BufRead, BufReader, Read as _, Write as _},
    net::{IpAddr, SocketAddr},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use serde::de::DeserializeOwned;

use super::{
    BackendAction, Change, FlowReport, OverridesReport, Request, Response, Stats, Status,
    TraceClient, TraceEvent, TraceStarted, VipAction, VipChange,
};
use crate::config::Vip;
use lb_maglev::BackendKey;

/// How long the client waits for an answer (and for its request to be written).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer the client reads (bytes, newline included): far above the
/// status of 1,024 VIPs with 65,535 backends, far below what would exhaust a CLI.
pub const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// Errors of the client side.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be reached.
    #[error(
        "cannot reach the lb daemon at {path}: {error} (is `lb run` running, and are you root?)"
    )]
    Connect {
        /// The socket path.
        path: String,
        /// The error.
        error: std::io::Error,
    },
    /// The exchange failed.
    #[error("talking to the lb daemon: {0}")]
    Io(#[from] std::io::Error),
    /// The answer was not understood.
    #[error("unreadable answer from the lb daemon: {0}")]
    Decode(#[from] serde_json::Error),
    /// A remote daemon could not be reached, or refused the client (the text names the
    /// flag or the credentials at fault).
    #[error("{0}")]
    Remote(String),
    /// The answer did not end within [`MAX_ANSWER_BYTES`].
    #[error("the lb daemon's answer exceeds {MAX_ANSWER_BYTES} bytes")]
    AnswerTooLarge,
    /// The daemon refused the request; its message.
    #[error("{0}")]
    Refused(String),
    /// A change was sent but the daemon did not answer in time (stopped, or busy): it
    /// may still apply the change; `lb status` tells by its id (`recent_changes`).
    #[error(
        "the lb daemon did not answer within {}s (stopped, e.g. SIGSTOP, or overloaded): the change was sent with id {change_id} and may still apply when the daemon resumes; `lb status` lists the last changes by id and whether they applied",
        .waited.as_secs()
    )]
    NoAnswer {
        /// The change's id.
        change_id: String,
        /// How long the client waited.
        waited: Duration,
    },
}

/// A new change id: the client's pid and the time in nanoseconds (hexadecimal), unique
/// on the host, shown in `lb status` once the daemon has handled the change.
pub fn new_change_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{}-{nanos:x}", std::process::id())
}

/// A way to the daemon other than its unix socket.
pub trait Transport: Send + Sync + std::fmt::Debug {
    /// Sends `request` (a change with `change_id`, which makes its retries safe) and
    /// returns the answer's data.
    ///
    /// # Errors
    /// [`ClientError`]: [`ClientError::Refused`] with the daemon's reason when it
    /// refused the request, [`ClientError::Remote`] when the transport failed.
    fn exchange(
        &self,
        request: &Request,
        change_id: Option<&str>,
    ) -> Result<serde_json::Value, ClientError>;

    /// Starts the stream of `request` (`trace`): its lines, each one answer's data as
    /// JSON.
    ///
    /// # Errors
    /// As [`Self::exchange`].
    fn stream(&self, request: &Request) -> Result<Box<dyn BufRead + Send>, ClientError>;
}

/// A client of one daemon: on its unix socket (each call one connection), or through a
/// [`Transport`].
#[derive(Clone, Debug)]
pub struct Client {
    socket: PathBuf,
    transport: Option<Arc<dyn Transport>>,
}

impl Client {
    /// A client of the daemon at `socket`.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            transport: None,
        }
    }

    /// A client of the daemon behind `transport`.
    pub fn through(transport: Arc<dyn Transport>) -> Self {
        Self {
            socket: PathBuf::new(),
            transport: Some(transport),
        }
    }

    /// Whether it talks to a remote daemon's API rather than a local socket.
    #[must_use]
    pub fn is_remote(&self) -> bool {
        self.transport.is_some()
    }

    /// The socket (empty through a [`Transport`]).
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `lb status`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub fn status(&self) -> Result<Status, ClientError> {
        self.call(&Request::Status)
    }

    /// `lb stats`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub fn stats(&self) -> Result<Stats, ClientError> {
        self.call(&Request::Stats)
    }

    /// `lb backend ACTION`, with a drain's `(timeout, keep)`: what the change did.
    ///
    /// # Errors
    /// [`ClientError`], [`ClientError::Refused`] with the daemon's reason.
    pub fn backend(
        &self,
        action: BackendAction,
        vip: Vip,
        backend: BackendKey,
        weight: Option<u32>,
        (timeout, keep): (Option<Duration>, bool),
    ) -> Result<Change, ClientError> {
        self.change(&Request::Backend {
            action,
            vip,
            backend,
            weight,
            timeout_secs: timeout.map(|t| t.as_secs()),
            keep,
        })
    }

    /// `lb overrides [--clear]`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub fn overrides(&self, clear: bool) -> Result<OverridesReport, ClientError> {
        if clear {
            self.change(&Request::Overrides { clear })
        } else {
            self.call(&Request::Overrides { clear })
        }
    }

    /// `lb flow`: where a flow from `client` to `vip` goes.
    ///
    /// # Errors
    /// [`ClientError`].
    pub fn flow(&self, vip: Vip, client: SocketAddr) -> Result<FlowReport, ClientError> {
        self.call(&Request::Flow { vip, client })
    }

    /// `lb vip ACTION`: what changed, and the address's announcement now.
    ///
    /// # Errors
    /// [`ClientError`], [`ClientError::Refused`] with the daemon's reason.
    pub fn vip(&self, action: VipAction, address: IpAddr) -> Result<VipChange, ClientError> {
        self.change(&Request::Vip { action, address })
    }

    /// `lb trace`: starts a trace of the packets to `vip` from `client` (either or both
    /// may be left out) and returns the filter the daemon applied and the stream of
    /// traced packets. The trace stops when the stream is dropped (the connection
    /// closes), or when this process exits.
    ///
    /// # Errors
    /// [`ClientError`], [`ClientError::Refused`] (e.g. another trace is running).
    pub fn trace(
        &self,
        vip: Option<Vip>,
        client: Option<TraceClient>,
    ) -> Result<(TraceStarted, TraceStream), ClientError> {
        let request = Request::Trace { vip, client };
        let mut lines = if let Some(transport) = &self.transport {
            TraceStream {
                reader: transport.stream(&request)?,
                enveloped: false,
            }
        } else {
            let stream = self.send(&request, None)?;
            // Events come when packets do: no timeout on reading them.
            stream.set_read_timeout(None)?;
            TraceStream {
                reader: Box::new(BufReader::new(stream)),
                enveloped: true,
            }
        };
        let started = lines.next_data()?.ok_or_else(|| {
            ClientError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the daemon closed the trace before starting it",
            ))
        })?;
        Ok((started, lines))
    }

    /// Connects and writes `request`, with `change_id` as its `change_id` key.
    fn send(&self, request: &Request, change_id: Option<&str>) -> Result<UnixStream, ClientError> {
        let stream = UnixStream::connect(&self.socket).map_err(|error| ClientError::Connect {
            path: self.socket.display().to_string(),
            error,
        })?;
        stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
        stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
        let mut value = serde_json::to_value(request)?;
        if let (Some(id), Some(object)) = (change_id, value.as_object_mut()) {
            object.insert("change_id".into(), id.into());
        }
        let mut line = serde_json::to_string(&value)?;
        line.push('\n');
        (&stream).write_all(line.as_bytes())?;
        Ok(stream)
    }

    /// Sends `request` and decodes the answer's data as `T`.
    ///
    /// # Errors
    /// [`ClientError`], including the daemon's own error message as
    /// [`ClientError::Refused`].
    pub fn call<T: DeserializeOwned>(&self, request: &Request) -> Result<T, ClientError> {
        self.exchange(request, None)
    }

    /// [`Self::call`] for a change: sent with a new id ([`new_change_id`]); no answer
    /// within [`CLIENT_TIMEOUT`] is [`ClientError::NoAnswer`] with that id.
    ///
    /// # Errors
    /// As [`Self::call`].
    pub fn change<T: DeserializeOwned>(&self, request: &Request) -> Result<T, ClientError> {
        let change_id = new_change_id();
        self.exchange(request, Some(&change_id))
            .map_err(|e| match e {
                ClientError::Io(io)
                    if matches!(
                        io.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    ClientError::NoAnswer {
                        change_id,
                        waited: CLIENT_TIMEOUT,
                    }
                }
                e => e,
            })
    }

    /// Sends `request` (with `change_id`) and decodes the answer's data as `T`.
    fn exchange<T: DeserializeOwned>(
        &self,
        request: &Request,
        change_id: Option<&str>,
    ) -> Result<T, ClientError> {
        if let Some(transport) = &self.transport {
            return Ok(serde_json::from_value(
                transport.exchange(request, change_id)?,
            )?);
        }
        let stream = self.send(request, change_id)?;
        let mut reader = BufReader::new(stream);
        read_answer(&mut reader, true)?.ok_or_else(|| {
            ClientError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the daemon closed the connection without an answer",
            ))
        })
    }
}

/// Reads one answer line and decodes its data as `T` (from its [`Response`] envelope
/// when `enveloped`, as the socket sends them); `None` at the end of the stream.
fn read_answer<T: DeserializeOwned>(
    reader: &mut dyn BufRead,
    enveloped: bool,
) -> Result<Option<T>, ClientError> {
    let mut answer = Vec::new();
    reader
        .take(MAX_ANSWER_BYTES)
        .read_until(b'\n', &mut answer)?;
    if answer.is_empty() {
        return Ok(None);
    }
    if !answer.ends_with(b"\n") && answer.len() as u64 >= MAX_ANSWER_BYTES {
        return Err(ClientError::AnswerTooLarge);
    }
    if !enveloped {
        return Ok(Some(serde_json::from_slice(&answer)?));
    }
    let response: Response = serde_json::from_slice(&answer)?;
    if !response.ok {
        return Err(ClientError::Refused(
            response
                .error
                .unwrap_or_else(|| "request refused".to_owned()),
        ));
    }
    Ok(Some(serde_json::from_value(
        response.data.unwrap_or(serde_json::Value::Null),
    )?))
}

/// The traced packets of a running `lb trace`: an iterator over the daemon's lines.
/// Dropping it closes the connection, which stops the trace.
pub struct TraceStream {
    reader: Box<dyn BufRead + Send>,
    enveloped: bool,
}

impl TraceStream {
    fn next_data<T: DeserializeOwned>(&mut self) -> Result<Option<T>, ClientError> {
        read_answer(&mut *self.reader, self.enveloped)
    }
}

impl Iterator for TraceStream {
    type Item = Result<TraceEvent, ClientError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_data().transpose()
    }
}
