//! The control socket protocol between `lb run` and the `lb` CLI verbs.
//!
//! A Unix stream socket (default `/run/lb/lb.sock`, mode 0600, so root only). One
//! request per connection: the client writes one JSON [`Request`] line, the daemon
//! answers one JSON [`Response`] line and closes.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::Path,
    time::Duration,
};

use serde::{Deserialize, Serialize};

/// What `lb backend` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendAction {
    /// Add a backend (active, with `--weight`, default 1).
    Add,
    /// Remove a backend: its flows are re-hashed on the new table.
    Remove,
    /// Drain: no new flows, established flows stay.
    Drain,
    /// Undo a drain (and set `--weight` if given).
    Undrain,
}

/// A request to the daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Request {
    /// `lb status`.
    Status,
    /// `lb stats`.
    Stats,
    /// `lb backend ...`.
    Backend {
        /// What to do.
        action: BackendAction,
        /// `ADDR:PORT/PROTO`.
        vip: String,
        /// Backend address.
        backend: String,
        /// Weight (add, undrain).
        weight: Option<u32>,
    },
    /// `lb flow`.
    Flow {
        /// `ADDR:PORT/PROTO`.
        vip: String,
        /// Client `ADDR:PORT`.
        client: String,
    },
}

/// The daemon's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Response {
    /// Whether the request succeeded.
    pub ok: bool,
    /// Why not, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The answer's data, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

impl Response {
    /// A success carrying `data`.
    pub fn ok(data: impl Serialize) -> Self {
        match serde_json::to_value(data) {
            Ok(data) => Self {
                ok: true,
                error: None,
                data: Some(data),
            },
            Err(e) => Self::error(format!("encoding the answer: {e}")),
        }
    }

    /// A failure saying `message`.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            ok: false,
            error: Some(message.into()),
            data: None,
        }
    }
}

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
    /// The daemon refused the request.
    #[error("{0}")]
    Refused(String),
}

/// How long the CLI waits for an answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends `request` to the daemon at `socket` and returns the answer's data.
///
/// # Errors
/// [`ClientError`], including the daemon's own error message as
/// [`ClientError::Refused`].
pub fn call(socket: &Path, request: &Request) -> Result<serde_json::Value, ClientError> {
    let stream = UnixStream::connect(socket).map_err(|error| ClientError::Connect {
        path: socket.display().to_string(),
        error,
    })?;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut line = serde_json::to_string(request)?;
    line.push('\n');
    (&stream).write_all(line.as_bytes())?;
    let mut answer = String::new();
    BufReader::new(&stream).read_line(&mut answer)?;
    let response: Response = serde_json::from_str(&answer)?;
    if response.ok {
        Ok(response.data.unwrap_or(serde_json::Value::Null))
    } else {
        Err(ClientError::Refused(
            response
                .error
                .unwrap_or_else(|| "request refused".to_owned()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_as_tagged_json() {
        let r = Request::Backend {
            action: BackendAction::Drain,
            vip: "203.0.113.10:80/tcp".into(),
            backend: "198.51.100.11".into(),
            weight: None,
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(
            text,
            r#"{"command":"backend","action":"drain","vip":"203.0.113.10:80/tcp","backend":"198.51.100.11","weight":null}"#
        );
        assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), r);
        assert_eq!(
            serde_json::to_string(&Request::Status).unwrap(),
            r#"{"command":"status"}"#
        );
    }
}
