//! What one probe tells: [`ProbeResult`], the latency of a success or the [`Failure`]
//! that explains a failed probe (the reason logged with a transition and shown in
//! `lb status`).

use std::{fmt, io, time::Duration};

/// The result of one probe: `Ok(latency)` from the start of the probe (socket creation)
/// to the answer that made it a success, or the reason it failed.
pub type ProbeResult = Result<Duration, Failure>;

/// The step of a probe that was running when it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// Creating, marking and binding the socket.
    Socket,
    /// TCP handshake (or UDP connect).
    Connect,
    /// TLS handshake.
    Tls,
    /// Waiting for the HTTP response head.
    Response,
    /// Waiting for the DNS answer.
    Answer,
    /// The probe as a whole: it overran its own timeout and the scheduler gave up.
    Probe,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Socket => "socket",
            Stage::Connect => "connect",
            Stage::Tls => "TLS handshake",
            Stage::Response => "waiting for the response",
            Stage::Answer => "waiting for the answer",
            Stage::Probe => "probe",
        })
    }
}

/// Why a probe failed. [`fmt::Display`] gives the operator text (`timeout after 1000 ms
/// (connect)`, `HTTP 503`, `wrong DNS id 0x1234 (sent 0xbeef)`); [`Failure::code`] a
/// short stable name for counters and JSON.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Failure {
    /// No answer within the probe's timeout.
    Timeout {
        /// The step that was waiting.
        stage: Stage,
        /// The timeout.
        after: Duration,
    },
    /// The peer refused: a TCP RST to the SYN, or ICMP port unreachable for UDP.
    Refused,
    /// The connection was reset or closed before the probe's answer.
    Reset {
        /// The step that was running.
        stage: Stage,
    },
    /// No route to the host or network (ICMP host/network unreachable, or no route on
    /// the LB host).
    Unreachable,
    /// An HTTP status outside the expected ranges.
    HttpStatus {
        /// The status code received.
        status: u16,
    },
    /// The HTTP exchange failed (malformed response head, protocol error).
    Http(String),
    /// The TLS handshake failed (certificate, protocol).
    Tls(String),
    /// A well-formed DNS message whose id is not the query's.
    DnsWrongId {
        /// The id sent.
        sent: u16,
        /// The id received.
        got: u16,
    },
    /// An answer that is not a well-formed DNS response.
    DnsMalformed(String),
    /// Any other socket error, at the step it happened.
    Io {
        /// The step.
        stage: Stage,
        /// The system's message.
        message: String,
    },
}

impl Failure {
    /// A short stable name: `timeout`, `refused`, `reset`, `unreachable`, `http_status`,
    /// `http`, `tls`, `dns_wrong_id`, `dns_malformed`, `io`.
    pub fn code(&self) -> &'static str {
        match self {
            Failure::Timeout { .. } => "timeout",
            Failure::Refused => "refused",
            Failure::Reset { .. } => "reset",
            Failure::Unreachable => "unreachable",
            Failure::HttpStatus { .. } => "http_status",
            Failure::Http(_) => "http",
            Failure::Tls(_) => "tls",
            Failure::DnsWrongId { .. } => "dns_wrong_id",
            Failure::DnsMalformed(_) => "dns_malformed",
            Failure::Io { .. } => "io",
        }
    }

    /// The failure an I/O error stands for at `stage`.
    pub fn from_io(stage: Stage, error: &io::Error) -> Self {
        match error.kind() {
            io::ErrorKind::ConnectionRefused => Failure::Refused,
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof => Failure::Reset { stage },
            io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
                Failure::Unreachable
            }
            _ => Failure::Io {
                stage,
                message: error.to_string(),
            },
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Timeout { stage, after } => {
                write!(f, "timeout after {} ms ({stage})", after.as_millis())
            }
            Failure::Refused => f.write_str("connection refused"),
            Failure::Reset { stage } => write!(f, "connection reset ({stage})"),
            Failure::Unreachable => f.write_str("host unreachable"),
            Failure::HttpStatus { status } => write!(f, "HTTP {status}"),
            Failure::Http(e) => write!(f, "HTTP error: {e}"),
            Failure::Tls(e) => write!(f, "TLS error: {e}"),
            Failure::DnsWrongId { sent, got } => {
                write!(f, "wrong DNS id {got:#06x} (sent {sent:#06x})")
            }
            Failure::DnsMalformed(e) => write!(f, "malformed DNS answer: {e}"),
            Failure::Io { stage, message } => write!(f, "{message} ({stage})"),
        }
    }
}

impl serde::Serialize for Failure {
    /// The operator text ([`fmt::Display`]).
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_map_to_reasons() {
        let e = |k| io::Error::from(k);
        assert_eq!(
            Failure::from_io(Stage::Connect, &e(io::ErrorKind::ConnectionRefused)),
            Failure::Refused
        );
        assert_eq!(
            Failure::from_io(Stage::Response, &e(io::ErrorKind::ConnectionReset)),
            Failure::Reset {
                stage: Stage::Response
            }
        );
        assert_eq!(
            Failure::from_io(Stage::Connect, &e(io::ErrorKind::HostUnreachable)),
            Failure::Unreachable
        );
        assert_eq!(
            Failure::from_io(Stage::Socket, &e(io::ErrorKind::PermissionDenied)).code(),
            "io"
        );
    }

    #[test]
    fn texts_name_the_reason() {
        let t = Failure::Timeout {
            stage: Stage::Connect,
            after: Duration::from_millis(1000),
        };
        assert_eq!(t.to_string(), "timeout after 1000 ms (connect)");
        assert_eq!(Failure::HttpStatus { status: 503 }.to_string(), "HTTP 503");
        assert_eq!(
            Failure::DnsWrongId {
                sent: 0xbeef,
                got: 0x1234
            }
            .to_string(),
            "wrong DNS id 0x1234 (sent 0xbeef)"
        );
    }
}
