//! Health-check targets for the health-check tests, each inside one backend's
//! namespace and stopped on drop: a TCP port that accepts ([`PortListener`]), an HTTP
//! server whose status can be changed ([`HttpServer`]), a DNS responder that can be
//! switched to garbage ([`DnsServer`]), a real server process to kill
//! ([`ServerProcess`], Python's `http.server`), and an nftables rule that silently drops
//! a port's packets ([`DropRule`]).
//!
//! Sockets bind the wildcard address (`[::]`, dual-stack), so a target answers on the
//! backend's own addresses (direct probes) and on the VIPs its loopback holds (tunnel
//! probes). The in-process servers run on one thread each, polling non-blocking
//! sockets every few milliseconds.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream, UdpSocket},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU16, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{Context as _, bail};

use crate::netns::NetNs;

/// Port of [`PortListener`] targets in the tests.
pub const TCP_PROBE_PORT: u16 = 8081;
/// Port of [`HttpServer`] targets.
pub const HTTP_PROBE_PORT: u16 = 8082;
/// Port of [`ServerProcess`] targets.
pub const PROCESS_PROBE_PORT: u16 = 8083;
/// Port of [`DnsServer`] targets.
pub const DNS_PROBE_PORT: u16 = 5353;
/// How long a server thread sleeps when nothing is ready.
const IDLE: Duration = Duration::from_millis(3);

fn any(port: u16) -> SocketAddr {
    (std::net::Ipv6Addr::UNSPECIFIED, port).into()
}

/// A thread serving until its flag is set; joined on drop.
#[derive(Debug)]
struct Worker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    fn spawn(name: &str, f: impl FnOnce(&AtomicBool) + Send + 'static) -> anyhow::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn({
                let stop = Arc::clone(&stop);
                move || f(&stop)
            })
            .context("spawning a server thread")?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accepts connections on `listener` until `stop`, handing each to `handle`.
fn accept_loop(listener: &TcpListener, stop: &AtomicBool, mut handle: impl FnMut(TcpStream)) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => handle(stream),
            Err(_) => std::thread::sleep(IDLE),
        }
    }
}

fn bind_tcp(ns: &NetNs, addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let listener = ns
        .enter(|| TcpListener::bind(addr))?
        .with_context(|| format!("bind {addr} in {}", ns.name()))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// A TCP port that accepts every connection and closes it; dropping it closes the port
/// (connections are then refused).
#[derive(Debug)]
pub struct PortListener {
    _worker: Worker,
}

impl PortListener {
    /// Listens on `[::]:port` in `ns`.
    ///
    /// # Errors
    /// When the port cannot be bound.
    pub fn open(ns: &NetNs, port: u16) -> anyhow::Result<Self> {
        Self::open_on(ns, any(port))
    }

    /// Listens on `addr` only, in `ns`.
    ///
    /// # Errors
    /// When the address cannot be bound.
    pub fn open_on(ns: &NetNs, addr: SocketAddr) -> anyhow::Result<Self> {
        let listener = bind_tcp(ns, addr)?;
        let worker = Worker::spawn("tb-hc-tcp", move |stop| {
            accept_loop(&listener, stop, drop);
        })?;
        Ok(Self { _worker: worker })
    }
}

/// An HTTP/1.1 server answering every request with the status it is set to (no body,
/// `Connection: close`).
#[derive(Debug)]
pub struct HttpServer {
    status: Arc<AtomicU16>,
    _worker: Worker,
}

impl HttpServer {
    /// Serves on `[::]:port` in `ns`, answering 200.
    ///
    /// # Errors
    /// When the port cannot be bound.
    pub fn start(ns: &NetNs, port: u16) -> anyhow::Result<Self> {
        let listener = bind_tcp(ns, any(port))?;
        let status = Arc::new(AtomicU16::new(200));
        let worker = Worker::spawn("tb-hc-http", {
            let status = Arc::clone(&status);
            move |stop| {
                accept_loop(&listener, stop, |stream| {
                    answer_http(stream, status.load(Ordering::SeqCst));
                });
            }
        })?;
        Ok(Self {
            status,
            _worker: worker,
        })
    }

    /// Answers `status` from now on.
    pub fn set_status(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }
}

/// Reads a request head (at most 4 KiB, 1 s) and answers `status`.
fn answer_http(mut stream: TcpStream, status: u16) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 4096 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let reason = if status < 400 { "OK" } else { "Unavailable" };
    let _ = write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
}

/// A DNS responder over UDP: answers each query with an empty well-formed response
/// (its id and question, `NOERROR`), or, once switched, with five bytes of garbage.
#[derive(Debug)]
pub struct DnsServer {
    garbage: Arc<AtomicBool>,
    _worker: Worker,
}

impl DnsServer {
    /// Serves on `[::]:port` (UDP) in `ns`.
    ///
    /// # Errors
    /// When the port cannot be bound.
    pub fn start(ns: &NetNs, port: u16) -> anyhow::Result<Self> {
        let socket = ns
            .enter(|| UdpSocket::bind(any(port)))?
            .with_context(|| format!("bind [::]:{port}/udp in {}", ns.name()))?;
        socket.set_nonblocking(true)?;
        let garbage = Arc::new(AtomicBool::new(false));
        let worker = Worker::spawn("tb-hc-dns", {
            let garbage = Arc::clone(&garbage);
            move |stop| {
                let mut buf = [0u8; 1500];
                while !stop.load(Ordering::SeqCst) {
                    let Ok((n, peer)) = socket.recv_from(&mut buf) else {
                        std::thread::sleep(IDLE);
                        continue;
                    };
                    if garbage.load(Ordering::SeqCst) {
                        let _ = socket.send_to(b"oops!", peer);
                    } else if n >= 12 {
                        // The query with QR set and RCODE 0: a response to it.
                        let mut answer = buf[..n].to_vec();
                        answer[2] |= 0x80;
                        answer[3] = 0x80;
                        let _ = socket.send_to(&answer, peer);
                    }
                }
            }
        })?;
        Ok(Self {
            garbage,
            _worker: worker,
        })
    }

    /// Answers garbage (`true`) or well-formed responses (`false`) from now on.
    pub fn set_garbage(&self, garbage: bool) {
        self.garbage.store(garbage, Ordering::SeqCst);
    }
}

/// A server in a process of its own (Python's `http.server` on `[::]:port`) inside a
/// namespace, so that a test can kill it as an operator's server dies; killed on drop.
#[derive(Debug)]
pub struct ServerProcess {
    child: Option<Child>,
}

impl ServerProcess {
    /// Starts `python3 -m http.server --bind :: PORT` in `ns` and waits until it
    /// listens (at most 5 s).
    ///
    /// # Errors
    /// When python3 cannot start or does not listen in time.
    pub fn http(ns: &NetNs, port: u16) -> anyhow::Result<Self> {
        let child = Command::new("ip")
            .args(["netns", "exec", ns.name(), "python3", "-m", "http.server"])
            .args(["--bind", "::", &port.to_string()])
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting python3 -m http.server")?;
        let server = Self { child: Some(child) };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let up = ns
                .enter(|| TcpStream::connect(("::1", port)).is_ok())
                .unwrap_or(false);
            if up {
                return Ok(server);
            }
            if std::time::Instant::now() > deadline {
                bail!("python3 -m http.server did not listen on port {port} within 5 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An nftables table in a namespace that silently drops incoming TCP and UDP packets
/// to one port (as a firewall or a hung host would); deleted on drop.
#[derive(Debug)]
pub struct DropRule<'ns> {
    ns: &'ns NetNs,
}

impl<'ns> DropRule<'ns> {
    /// Adds table `inet lbtest` with the drop rule for `port`.
    ///
    /// # Errors
    /// When `nft` is missing (`cargo xtask setup` installs nftables) or refuses.
    pub fn add(ns: &'ns NetNs, port: u16) -> anyhow::Result<Self> {
        let script = format!(
            "table inet lbtest {{\n  chain input {{\n    type filter hook input priority 0;\n    \
             tcp dport {port} drop\n    udp dport {port} drop\n  }}\n}}\n"
        );
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns.name(), "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("nft (install nftables)")?;
        child
            .stdin
            .take()
            .context("nft's stdin")?
            .write_all(script.as_bytes())?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!("nft: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(Self { ns })
    }
}

impl Drop for DropRule<'_> {
    fn drop(&mut self) {
        let _ = self.ns.exec("nft", &["delete", "table", "inet", "lbtest"]);
    }
}
