//! Real servers on loopback for the health-check tests: a TCP listener, a tiny HTTP(S)
//! server whose answer can be switched (status, hang, garbage, close), and a UDP DNS
//! responder that answers well-formed, garbage, with the wrong id, or not at all. Each
//! server stops when dropped. Only 127.0.0.1 is used.

#![allow(dead_code, unreachable_pub, reason = "each test binary uses a part")]

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU8, AtomicU16, Ordering},
    },
    time::Duration,
};

use hickory_proto::op::{Message, OpCode};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::{
    ServerConfig,
    crypto::ring,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer},
};
use tokio::{
    io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _},
    net::{TcpListener, UdpSocket},
    task::JoinHandle,
};
use tokio_rustls::TlsAcceptor;

/// A task aborted on drop.
struct Task(JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Accepts TCP connections and closes them. Dropping it closes the port: connections
/// are then refused.
pub struct TcpServer {
    pub addr: SocketAddr,
    _task: Task,
}

impl TcpServer {
    pub async fn start() -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap()).await
    }

    /// A server on `addr` (e.g. the port of a server that was stopped).
    pub async fn start_on(addr: SocketAddr) -> Self {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                drop(stream);
            }
        });
        Self {
            addr,
            _task: Task(task),
        }
    }
}

/// How the HTTP server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum HttpMode {
    /// `HTTP/1.1 <status>` with an empty body.
    Respond = 0,
    /// Reads the request, never answers.
    Hang = 1,
    /// Answers bytes that are not HTTP.
    Garbage = 2,
    /// Closes the connection after reading the request.
    Close = 3,
}

/// A tiny HTTP/1.1 server (optionally over TLS).
pub struct HttpServer {
    pub addr: SocketAddr,
    status: Arc<AtomicU16>,
    mode: Arc<AtomicU8>,
    /// The last request head received and the address it came from.
    pub last_request: Arc<Mutex<Option<(String, SocketAddr)>>>,
    _task: Task,
}

impl HttpServer {
    pub async fn start(tls: Option<Arc<ServerConfig>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let status = Arc::new(AtomicU16::new(200));
        let mode = Arc::new(AtomicU8::new(HttpMode::Respond as u8));
        let last_request = Arc::new(Mutex::new(None));
        let (s, m, l) = (status.clone(), mode.clone(), last_request.clone());
        let acceptor = tls.map(TlsAcceptor::from);
        let task = tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                let (s, m, l, acceptor) = (s.clone(), m.clone(), l.clone(), acceptor.clone());
                tokio::spawn(async move {
                    match acceptor {
                        None => serve(stream, peer, &s, &m, &l).await,
                        Some(a) => {
                            if let Ok(stream) = a.accept(stream).await {
                                serve(stream, peer, &s, &m, &l).await;
                            }
                        }
                    }
                });
            }
        });
        Self {
            addr,
            status,
            mode,
            last_request,
            _task: Task(task),
        }
    }

    pub fn set_status(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    pub fn set_mode(&self, mode: HttpMode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    peer: SocketAddr,
    status: &AtomicU16,
    mode: &AtomicU8,
    last: &Mutex<Option<(String, SocketAddr)>>,
) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    *last.lock().unwrap() = Some((String::from_utf8_lossy(&head).into_owned(), peer));
    let answer = match mode.load(Ordering::SeqCst) {
        0 => format!(
            "HTTP/1.1 {} Test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            status.load(Ordering::SeqCst)
        ),
        1 => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return;
        }
        2 => "SSH-2.0-OpenSSH_9.2\r\n\r\n".to_owned(),
        _ => return,
    };
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// How the DNS responder answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum DnsMode {
    /// A well-formed NOERROR response with the query's id.
    Good = 0,
    /// Bytes that are not a DNS message.
    Garbage = 1,
    /// A well-formed response with another id.
    WrongId = 2,
    /// Never answers (a silently dropping peer).
    Silent = 3,
}

/// A UDP DNS responder.
pub struct DnsServer {
    pub addr: SocketAddr,
    mode: Arc<AtomicU8>,
    _task: Task,
}

impl DnsServer {
    pub async fn start() -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let mode = Arc::new(AtomicU8::new(DnsMode::Good as u8));
        let m = mode.clone();
        let task = tokio::spawn(async move {
            let mut buf = [0u8; 1500];
            while let Ok((n, peer)) = socket.recv_from(&mut buf).await {
                let Ok(query) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                let id = query.metadata.id;
                let answer = match m.load(Ordering::SeqCst) {
                    0 | 2 => {
                        let id = if m.load(Ordering::SeqCst) == 2 {
                            id.wrapping_add(1)
                        } else {
                            id
                        };
                        let mut r = Message::response(id, OpCode::Query);
                        r.add_queries(query.queries);
                        r.to_vec().unwrap()
                    }
                    1 => b"\x12\x34 this is not a DNS message".to_vec(),
                    _ => continue,
                };
                let _ = socket.send_to(&answer, peer).await;
            }
        });
        Self {
            addr,
            mode,
            _task: Task(task),
        }
    }

    pub fn set_mode(&self, mode: DnsMode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }
}

/// A private CA and a server certificate it signed, for `backend.test` and 127.0.0.1.
pub struct TestPki {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// The server's TLS configuration.
    pub server: Arc<ServerConfig>,
}

impl TestPki {
    pub fn new() -> Self {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["backend.test".to_owned(), "127.0.0.1".to_owned()])
            .unwrap()
            .signed_by(&leaf_key, &ca)
            .unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let chain: Vec<CertificateDer<'static>> = vec![leaf.der().clone()];
        let server = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        Self {
            ca_pem: ca.pem(),
            server: Arc::new(server),
        }
    }
}

/// A file removed on drop.
pub struct TempFile(pub std::path::PathBuf);

impl TempFile {
    pub fn new(name: &str, contents: &str) -> Self {
        let path = std::env::temp_dir().join(format!("lb-health-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).unwrap();
        Self(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
