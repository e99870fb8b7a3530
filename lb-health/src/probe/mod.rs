//! Probers: one probe of one backend, async on tokio, bounded by a timeout.
//!
//! [`Prober`] is the real prober, prepared once per backend from its [`Check`] and
//! [`ProbeTarget`] (request head, TLS configuration); the scheduler calls it through the
//! [`Probe`] trait, which tests implement with scripted fakes.
//!
//! What each kind does (latency is measured from socket creation to the answer):
//! - `tcp`: connect, then close with RST;
//! - `http`/`https`: connect, TLS handshake for https, GET with `Host`, `User-Agent:
//!   lb-health/VERSION` and `Connection: close`; success when the status is expected;
//! - `dns`: one UDP query; success on a well-formed response with the query's id.
//!
//! A probe that does not finish within its timeout fails with
//! [`Failure::Timeout`] naming the step that was waiting (connect, TLS handshake,
//! response, answer): a silently dropping backend and a hung server read differently.

mod dns;
mod http;
mod socket;
mod tls;

use std::{future::Future, net::IpAddr, pin::Pin, sync::Arc, time::Duration};

use hyper::header::HeaderValue;
use rustls::{ClientConfig, pki_types::ServerName};
use tokio::time::Instant;

use self::http::HttpRequest;
use super::{
    outcome::{Failure, ProbeResult, Stage},
    settings::{Check, DnsCheck},
    target::ProbeTarget,
};

/// Something that probes one backend. Implementations must end within about `timeout`;
/// the scheduler gives up on them a second later anyway.
pub trait Probe: Send + Sync + 'static {
    /// Runs one probe.
    fn probe(&self, timeout: Duration) -> Pin<Box<dyn Future<Output = ProbeResult> + Send + '_>>;
}

/// A prober could not be prepared (e.g. the CA file became unreadable after
/// validation).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot prepare the probe: {0}")]
pub struct SetupError(pub String);

/// What is prepared once per backend.
#[derive(Clone, Debug)]
enum Prepared {
    Tcp,
    Http {
        request: HttpRequest,
        tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    },
    Dns(DnsCheck),
}

/// The real prober of one backend.
#[derive(Clone, Debug)]
pub struct Prober {
    prepared: Prepared,
    target: ProbeTarget,
}

impl Prober {
    /// Prepares the probe `check` of `target`: the HTTP request head (Host defaults to
    /// the destination `address:port`), the TLS configuration and server name (the
    /// configured name, else the Host header's name, else the destination address).
    ///
    /// # Errors
    /// [`SetupError`] when the TLS trust anchors cannot be loaded or a name is invalid.
    pub fn new(check: &Check, target: ProbeTarget) -> Result<Self, SetupError> {
        let prepared = match check {
            Check::Tcp => Prepared::Tcp,
            Check::Dns(d) => Prepared::Dns(d.clone()),
            Check::Http(h) => {
                let host_text = h.host.clone().unwrap_or_else(|| target.dest.to_string());
                let host = HeaderValue::from_str(&host_text)
                    .map_err(|e| SetupError(format!("Host header {host_text:?}: {e}")))?;
                let tls = match &h.tls {
                    None => None,
                    Some(t) => {
                        let name = match (&t.server_name, &h.host) {
                            (Some(name), _) => name.clone(),
                            (None, Some(host)) => host_name(host).to_owned(),
                            (None, None) => target.dest.ip().to_string(),
                        };
                        let name = ServerName::try_from(name.clone())
                            .map_err(|e| SetupError(format!("TLS server name {name:?}: {e}")))?;
                        Some((tls::client_config(t)?, name))
                    }
                };
                Prepared::Http {
                    request: HttpRequest {
                        path: h.path.clone(),
                        host,
                        status: h.status.clone(),
                    },
                    tls,
                }
            }
        };
        Ok(Self { prepared, target })
    }

    /// Where the probes go.
    pub fn target(&self) -> &ProbeTarget {
        &self.target
    }

    /// Runs one probe with `timeout`.
    pub async fn run(&self, timeout: Duration) -> ProbeResult {
        let started = Instant::now();
        let mut stage = Stage::Socket;
        let result = tokio::time::timeout(timeout, self.exchange(&mut stage)).await;
        match result {
            Ok(Ok(())) => Ok(started.elapsed()),
            Ok(Err(failure)) => Err(failure),
            Err(_) => Err(Failure::Timeout {
                stage,
                after: timeout,
            }),
        }
    }

    async fn exchange(&self, stage: &mut Stage) -> Result<(), Failure> {
        match &self.prepared {
            Prepared::Tcp => {
                *stage = Stage::Connect;
                socket::tcp(&self.target).await.map(drop)
            }
            Prepared::Http { request, tls } => {
                *stage = Stage::Connect;
                let stream = socket::tcp(&self.target).await?;
                match tls {
                    None => http::get(stream, request, stage).await,
                    Some((config, name)) => {
                        *stage = Stage::Tls;
                        let stream = tls::handshake(stream, config.clone(), name.clone()).await?;
                        http::get(stream, request, stage).await
                    }
                }
            }
            Prepared::Dns(check) => {
                let socket = socket::udp(&self.target).await?;
                *stage = Stage::Connect;
                dns::exchange(&socket, check, stage).await
            }
        }
    }
}

impl Probe for Prober {
    fn probe(&self, timeout: Duration) -> Pin<Box<dyn Future<Output = ProbeResult> + Send + '_>> {
        Box::pin(self.run(timeout))
    }
}

/// The name part of a Host header value (`www.example.com:8080` → `www.example.com`,
/// `[2001:db8::1]:443` → `2001:db8::1`).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(name, _)| name);
    }
    match host.rsplit_once(':') {
        Some((name, port))
            if port.bytes().all(|b| b.is_ascii_digit()) && host.parse::<IpAddr>().is_err() =>
        {
            name
        }
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_lose_their_ports() {
        assert_eq!(host_name("www.example.com:8080"), "www.example.com");
        assert_eq!(host_name("www.example.com"), "www.example.com");
        assert_eq!(host_name("[2001:db8::1]:443"), "2001:db8::1");
        assert_eq!(host_name("192.0.2.1:80"), "192.0.2.1");
        assert_eq!(host_name("2001:db8::1"), "2001:db8::1");
    }
}
