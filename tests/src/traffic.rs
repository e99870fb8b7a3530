//! Client traffic for the end-to-end tests and the demo: many flows from the bed's
//! client addresses, persistent UDP flows, per-backend tallies, and the exact number of
//! TCP segments a connection sent (for comparing with the load balancer's counters).
//!
//! Functions that create sockets take the [`TestBed`] and enter its client namespace
//! themselves; the sockets keep that namespace, so they can be used from any thread.

use std::{
    collections::BTreeMap,
    fmt,
    io::{self, Read as _},
    net::{Shutdown, SocketAddr, TcpStream, UdpSocket},
    os::fd::AsRawFd as _,
    time::Duration,
};

use anyhow::Context as _;

use crate::testbed::{TcpConn, TestBed, client};

/// How the source ports of [`sources`] are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ports {
    /// Port 0: the kernel picks one at connect time (what real clients do).
    Kernel,
    /// Flow `j` uses port `base + j`: the same flows on every run, so whatever depends
    /// on the flow hash (which backend each flow gets) is reproducible. Keep the range
    /// below the kernel's ephemeral ports (32,768 and up) when mixing with
    /// [`Ports::Kernel`] flows from the same addresses.
    Fixed(u16),
}

/// The source addresses of `n` flows: flow `j` comes from client `j % clients` of the
/// family (`v6`), its port per `ports`.
///
/// # Panics
/// When a fixed port would exceed 65,535.
pub fn sources(bed: &TestBed, n: usize, v6: bool, ports: Ports) -> Vec<SocketAddr> {
    let clients = bed.client_count();
    (0..n)
        .map(|j| {
            let port = match ports {
                Ports::Kernel => 0,
                Ports::Fixed(base) => u16::try_from(j)
                    .ok()
                    .and_then(|j| base.checked_add(j))
                    .unwrap_or_else(|| panic!("port {base} + {j} is out of range")),
            };
            SocketAddr::new(bed.client_addr(j % clients, v6), port)
        })
        .collect()
}

/// A TCP connection and the backend that answered its first line.
#[derive(Debug)]
pub struct Greeted {
    /// The connection (open).
    pub conn: TcpConn,
    /// The answering backend's name (`b<k>`).
    pub backend: String,
}

/// Opens one TCP connection from every source to `dst` and exchanges one line on each
/// (in order; each connection is answered before the next is opened).
///
/// # Errors
/// The first connection that fails or is not answered, naming its index and source.
pub fn connect_all(
    bed: &TestBed,
    srcs: &[SocketAddr],
    dst: SocketAddr,
) -> anyhow::Result<Vec<Greeted>> {
    let timeout = bed.options().io_timeout;
    bed.client_ns().enter(|| {
        srcs.iter()
            .enumerate()
            .map(|(j, &src)| {
                let mut conn = client::tcp_connect(src, dst, timeout)
                    .with_context(|| format!("connection {j} from {src} to {dst}"))?;
                let backend = conn.exchange("hello").with_context(|| {
                    format!("first exchange of connection {j} from {src} to {dst}")
                })?;
                Ok(Greeted { conn, backend })
            })
            .collect()
    })?
}

/// Like [`connect_all`], but each connection is closed after its answer (so thousands
/// of flows need no open descriptors); returns each flow's actual source address
/// (with the port the kernel chose) and the answering backend.
///
/// # Errors
/// As [`connect_all`].
pub fn greet_all(
    bed: &TestBed,
    srcs: &[SocketAddr],
    dst: SocketAddr,
) -> anyhow::Result<Vec<(SocketAddr, String)>> {
    let timeout = bed.options().io_timeout;
    bed.client_ns().enter(|| {
        srcs.iter()
            .enumerate()
            .map(|(j, &src)| {
                let mut conn = client::tcp_connect(src, dst, timeout)
                    .with_context(|| format!("connection {j} from {src} to {dst}"))?;
                let local = conn.local_addr()?;
                let backend = conn
                    .exchange("hello")
                    .with_context(|| format!("connection {j} from {local} to {dst}"))?;
                Ok((local, backend))
            })
            .collect()
    })?
}

/// A UDP flow: one socket bound to a client address and connected to a VIP, so every
/// datagram has the same 5-tuple and only the VIP's replies are accepted.
#[derive(Debug)]
pub struct UdpFlow {
    socket: UdpSocket,
}

impl UdpFlow {
    /// Opens flows from every source to `dst` (in the bed's client namespace), with the
    /// bed's I/O timeout.
    ///
    /// # Errors
    /// When a socket cannot be bound or connected.
    pub fn open_all(
        bed: &TestBed,
        srcs: &[SocketAddr],
        dst: SocketAddr,
    ) -> anyhow::Result<Vec<Self>> {
        let timeout = bed.options().io_timeout;
        bed.client_ns().enter(|| {
            srcs.iter()
                .map(|&src| {
                    Self::open(src, dst, timeout).with_context(|| format!("UDP {src} -> {dst}"))
                })
                .collect()
        })?
    }

    /// Opens a flow from `src` to `dst` in the calling thread's namespace.
    ///
    /// # Errors
    /// When the socket cannot be bound or connected.
    pub fn open(src: SocketAddr, dst: SocketAddr, timeout: Duration) -> io::Result<Self> {
        let socket = UdpSocket::bind(src)?;
        socket.set_read_timeout(Some(timeout))?;
        socket.set_write_timeout(Some(timeout))?;
        socket.connect(dst)?;
        Ok(Self { socket })
    }

    /// Sends `msg` plus a newline in one datagram and returns the reply without its
    /// newline (the answering backend's name). One attempt: a lost datagram is an error
    /// after the timeout.
    ///
    /// # Errors
    /// On a socket error or when no reply arrives in time.
    pub fn exchange(&self, msg: &str) -> io::Result<String> {
        self.socket.send(format!("{msg}\n").as_bytes())?;
        let mut buf = [0u8; 512];
        let n = self.socket.recv(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n])
            .trim_end_matches('\n')
            .to_owned())
    }

    /// The flow's source address.
    ///
    /// # Errors
    /// When the socket has no address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }
}

/// Segments a TCP socket has sent so far, retransmissions, SYN, FIN and pure ACKs
/// included (`tcpi_segs_out` of `TCP_INFO`, counted per segment on the wire).
///
/// # Errors
/// When `getsockopt` fails.
pub fn segments_sent(stream: &TcpStream) -> io::Result<u64> {
    tcp_info(stream).map(|info| u64::from(info.tcpi_segs_out))
}

/// Retransmissions of a TCP socket so far (`tcpi_total_retrans`).
///
/// # Errors
/// When `getsockopt` fails.
pub fn retransmissions(stream: &TcpStream) -> io::Result<u64> {
    tcp_info(stream).map(|info| u64::from(info.tcpi_total_retrans))
}

fn tcp_info(stream: &TcpStream) -> io::Result<libc::tcp_info> {
    // SAFETY: tcp_info is plain old data; all-zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = libc::socklen_t::try_from(size_of::<libc::tcp_info>()).unwrap_or(0);
    // SAFETY: info and len are live; len is info's size, which the kernel does not
    // exceed.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

/// What a connection closed with [`close_counting`] sent in total.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Closed {
    /// Segments sent over the connection's whole life ([`segments_sent`]).
    pub segments: u64,
    /// Retransmissions among them.
    pub retransmissions: u64,
}

/// Closes `conn` gracefully and returns every segment it ever sent: it sends FIN
/// (`shutdown(SHUT_WR)`), reads until the server's FIN, and only then reads the
/// counters. Linux acknowledges that FIN from the full socket before the connection
/// moves to TIME_WAIT (`tcp_fin`: `tcp_send_ack`, then `tcp_time_wait`), so the count
/// includes the very last ACK; after it, nothing more is sent (no loss in the bed, so
/// the TIME_WAIT socket never answers a retransmitted FIN).
///
/// # Errors
/// On a socket error, unexpected data, or when the server's FIN does not come in time.
pub fn close_counting(conn: TcpConn) -> io::Result<Closed> {
    let stream = conn.stream();
    stream.shutdown(Shutdown::Write)?;
    let mut reader: &TcpStream = stream;
    let mut buf = [0u8; 64];
    let n = reader.read(&mut buf)?;
    if n != 0 {
        return Err(io::Error::other(format!(
            "{n} unexpected bytes before the server's FIN"
        )));
    }
    Ok(Closed {
        segments: segments_sent(stream)?,
        retransmissions: retransmissions(stream)?,
    })
}

/// Counts per backend name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    counts: BTreeMap<String, u64>,
}

impl Tally {
    /// Tally of `names`.
    pub fn of<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut t = Self::default();
        for name in names {
            t.add(name, 1);
        }
        t
    }

    /// Adds `n` to `name`.
    pub fn add(&mut self, name: &str, n: u64) {
        *self.counts.entry(name.to_owned()).or_default() += n;
    }

    /// The count of `name` (0 if never seen).
    pub fn get(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    /// The sum of all counts.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// `name`'s share of the total (0 for an empty tally).
    pub fn share(&self, name: &str) -> f64 {
        #[expect(
            clippy::cast_precision_loss,
            reason = "counts of test traffic are far below 2^52"
        )]
        let share = self.get(name) as f64 / self.total().max(1) as f64;
        share
    }

    /// The names seen, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.counts.keys().map(String::as_str)
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .counts
            .iter()
            .map(|(name, n)| format!("{name} {n} ({:.1}%)", 100.0 * self.share(name)))
            .collect();
        write!(f, "{} of {}", parts.join(", "), self.total())
    }
}

/// Whether `share` is within `relative` (e.g. 0.15) of `ideal`, relatively:
/// `|share - ideal| <= relative * ideal`.
pub fn within(share: f64, ideal: f64, relative: f64) -> bool {
    (share - ideal).abs() <= relative * ideal
}
