//! The backends' servers: TCP and UDP sockets bound to the VIPs that answer every line
//! (TCP) or datagram (UDP) with the backend's name, e.g. `b1\n`.
//!
//! One thread per backend multiplexes all its sockets with `poll(2)` (non-blocking
//! sockets, per-connection output buffers), so a backend holds many hundreds of
//! concurrent connections with a single thread. The sockets are created on a thread
//! inside the backend's namespace and keep that namespace wherever they are used. The
//! thread stops (and closes every socket) when the [`EchoServer`] is dropped: a byte on a
//! socket pair wakes the poll.

use std::{
    io::{self, Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream, UdpSocket},
    os::{
        fd::{AsRawFd as _, RawFd},
        unix::net::UnixStream,
    },
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    thread::JoinHandle,
};

use anyhow::Context as _;

use crate::netns::NetNs;

/// Listen backlog of the TCP sockets (std's default of 128 is low for bursts of
/// hundreds of connections; the kernel caps it at `net.core.somaxconn`).
const BACKLOG: libc::c_int = 4096;

/// A snapshot of a server's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// TCP connections accepted since start.
    pub tcp_connections: u64,
    /// TCP connections open now.
    pub tcp_open: u64,
    /// TCP lines answered.
    pub tcp_messages: u64,
    /// UDP datagrams answered.
    pub udp_messages: u64,
}

#[derive(Debug, Default)]
struct Counters {
    tcp_connections: AtomicU64,
    tcp_open: AtomicU64,
    tcp_messages: AtomicU64,
    udp_messages: AtomicU64,
}

/// A running server; stopped on drop.
#[derive(Debug)]
pub struct EchoServer {
    wake: UnixStream,
    thread: Option<JoinHandle<io::Result<()>>>,
    counters: Arc<Counters>,
}

impl EchoServer {
    /// Binds TCP listeners on `tcp` and UDP sockets on `udp` inside `ns` and starts the
    /// thread that answers with `name`.
    ///
    /// # Errors
    /// When the namespace cannot be entered or a socket cannot be bound (address not
    /// configured, port taken).
    pub fn start(
        ns: &NetNs,
        name: &str,
        tcp: &[SocketAddr],
        udp: &[SocketAddr],
    ) -> anyhow::Result<Self> {
        let (listeners, udps) = ns
            .enter(|| -> anyhow::Result<_> {
                let listeners = tcp
                    .iter()
                    .map(|addr| {
                        let l = TcpListener::bind(addr).with_context(|| format!("bind {addr}"))?;
                        // SAFETY: listen on a socket we own; calling it again on a
                        // listening socket only changes the backlog.
                        if unsafe { libc::listen(l.as_raw_fd(), BACKLOG) } != 0 {
                            return Err(io::Error::last_os_error()).context("listen");
                        }
                        l.set_nonblocking(true)?;
                        Ok(l)
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                let udps = udp
                    .iter()
                    .map(|addr| {
                        let s = UdpSocket::bind(addr).with_context(|| format!("bind {addr}"))?;
                        s.set_nonblocking(true)?;
                        Ok(s)
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                Ok((listeners, udps))
            })?
            .with_context(|| format!("server sockets of {name} in {}", ns.name()))?;
        let (wake, wake_rx) = UnixStream::pair().context("socket pair")?;
        wake_rx.set_nonblocking(true)?;
        let counters = Arc::new(Counters::default());
        let reply = format!("{name}\n").into_bytes();
        let thread = std::thread::Builder::new()
            .name(format!("tb-srv-{name}"))
            .spawn({
                let counters = Arc::clone(&counters);
                move || serve(&listeners, &udps, &wake_rx, &reply, &counters)
            })
            .context("spawning the server thread")?;
        Ok(Self {
            wake,
            thread: Some(thread),
            counters,
        })
    }

    /// The server's counters now.
    pub fn stats(&self) -> ServerStats {
        let c = &self.counters;
        ServerStats {
            tcp_connections: c.tcp_connections.load(Ordering::Relaxed),
            tcp_open: c.tcp_open.load(Ordering::Relaxed),
            tcp_messages: c.tcp_messages.load(Ordering::Relaxed),
            udp_messages: c.udp_messages.load(Ordering::Relaxed),
        }
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        let _ = self.wake.write_all(&[1]);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One accepted connection and the replies not yet written.
struct Conn {
    stream: TcpStream,
    out: Vec<u8>,
}

/// Outcome of servicing a connection.
#[derive(PartialEq, Eq)]
enum ConnState {
    Open,
    Closed,
}

fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// The server loop: returns when `wake` becomes readable.
fn serve(
    listeners: &[TcpListener],
    udps: &[UdpSocket],
    wake: &UnixStream,
    reply: &[u8],
    counters: &Counters,
) -> io::Result<()> {
    let mut conns: Vec<Conn> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        fds.clear();
        fds.push(pollfd(wake.as_raw_fd(), libc::POLLIN));
        fds.extend(
            listeners
                .iter()
                .map(|l| pollfd(l.as_raw_fd(), libc::POLLIN)),
        );
        fds.extend(udps.iter().map(|u| pollfd(u.as_raw_fd(), libc::POLLIN)));
        fds.extend(conns.iter().map(|c| {
            let events = if c.out.is_empty() {
                libc::POLLIN
            } else {
                libc::POLLIN | libc::POLLOUT
            };
            pollfd(c.stream.as_raw_fd(), events)
        }));
        let nfds = libc::nfds_t::try_from(fds.len()).unwrap_or(libc::nfds_t::MAX);
        // SAFETY: fds is a live, initialised array of nfds pollfd structures.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), nfds, -1) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if fds[0].revents != 0 {
            return Ok(());
        }
        let (listener_fds, rest) = fds[1..].split_at(listeners.len());
        let (udp_fds, conn_fds) = rest.split_at(udps.len());

        // Connections first (in reverse, so swap_remove keeps lower indexes valid).
        for (i, pfd) in conn_fds.iter().enumerate().rev() {
            if pfd.revents != 0 && service(&mut conns[i], &mut buf, reply, counters) {
                conns.swap_remove(i);
                counters.tcp_open.fetch_sub(1, Ordering::Relaxed);
            }
        }
        for (listener, pfd) in listeners.iter().zip(listener_fds) {
            if pfd.revents == 0 {
                continue;
            }
            // Until WouldBlock (drained) or any other error (EMFILE, a connection reset
            // before accept): the next readiness tries again.
            while let Ok((stream, _)) = listener.accept() {
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                let _ = stream.set_nodelay(true);
                counters.tcp_connections.fetch_add(1, Ordering::Relaxed);
                counters.tcp_open.fetch_add(1, Ordering::Relaxed);
                conns.push(Conn {
                    stream,
                    out: Vec::new(),
                });
            }
        }
        for (udp, pfd) in udps.iter().zip(udp_fds) {
            if pfd.revents == 0 {
                continue;
            }
            while let Ok((_, peer)) = udp.recv_from(&mut buf) {
                counters.udp_messages.fetch_add(1, Ordering::Relaxed);
                let _ = udp.send_to(reply, peer);
            }
        }
    }
}

/// Reads what the connection has, queues one reply per complete line and writes what
/// the socket takes. Returns whether the connection is finished (and must be dropped).
fn service(conn: &mut Conn, buf: &mut [u8], reply: &[u8], counters: &Counters) -> bool {
    let mut state = ConnState::Open;
    loop {
        match conn.stream.read(buf) {
            Ok(0) => {
                state = ConnState::Closed;
                break;
            }
            Ok(n) => {
                let lines = buf[..n].iter().filter(|&&b| b == b'\n').count();
                for _ in 0..lines {
                    conn.out.extend_from_slice(reply);
                }
                counters
                    .tcp_messages
                    .fetch_add(u64::try_from(lines).unwrap_or(0), Ordering::Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
    while !conn.out.is_empty() {
        match conn.stream.write(&conn.out) {
            Ok(n) => {
                conn.out.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
    state == ConnState::Closed
}
