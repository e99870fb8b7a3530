//! The client side: sockets opened from a chosen source address and port, with a
//! timeout on every operation so a lost packet fails a test instead of hanging it.
//!
//! The free functions act in the calling thread's network namespace: call them from
//! [`crate::netns::NetNs::enter`] on the bed's client namespace, or use the wrappers on
//! [`super::TestBed`]. A socket keeps the namespace it was created in, so a [`TcpConn`]
//! may be used from any thread afterwards.

use std::{
    io::{self, Read as _, Write as _},
    net::{SocketAddr, TcpStream, UdpSocket},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    time::Duration,
};

/// A TCP connection to a backend server through the load balancer.
#[derive(Debug)]
pub struct TcpConn {
    stream: TcpStream,
    /// Bytes read past the last returned line.
    pending: Vec<u8>,
}

impl TcpConn {
    /// Sends `msg` followed by a newline and returns the reply line (the answering
    /// backend's name) without its newline.
    ///
    /// # Errors
    /// On a socket error, when the peer closes first, or when no complete line arrives
    /// within the connection's timeout.
    pub fn exchange(&mut self, msg: &str) -> io::Result<String> {
        let mut line = Vec::with_capacity(msg.len() + 1);
        line.extend_from_slice(msg.as_bytes());
        line.push(b'\n');
        self.stream.write_all(&line)?;
        let mut buf = [0u8; 512];
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let reply: Vec<u8> = self.pending.drain(..=end).collect();
                return Ok(String::from_utf8_lossy(&reply[..end]).into_owned());
            }
            match self.stream.read(&mut buf)? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed before a reply line",
                    ));
                }
                n => self.pending.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// The connection's local (client) address.
    ///
    /// # Errors
    /// When the socket has no address (closed).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// The underlying stream (its read and write timeouts are set).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }
}

/// A `sockaddr_in` / `sockaddr_in6` for the socket calls.
enum RawAddr {
    V4(libc::sockaddr_in),
    V6(libc::sockaddr_in6),
}

impl RawAddr {
    fn new(addr: SocketAddr) -> Self {
        match addr {
            SocketAddr::V4(a) => Self::V4(libc::sockaddr_in {
                sin_family: libc::sa_family_t::try_from(libc::AF_INET).unwrap_or(2),
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            }),
            SocketAddr::V6(a) => Self::V6(libc::sockaddr_in6 {
                sin6_family: libc::sa_family_t::try_from(libc::AF_INET6).unwrap_or(10),
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: 0,
            }),
        }
    }

    fn as_ptr(&self) -> (*const libc::sockaddr, libc::socklen_t) {
        match self {
            Self::V4(a) => (
                std::ptr::from_ref(a).cast(),
                libc::socklen_t::try_from(size_of::<libc::sockaddr_in>()).unwrap_or(16),
            ),
            Self::V6(a) => (
                std::ptr::from_ref(a).cast(),
                libc::socklen_t::try_from(size_of::<libc::sockaddr_in6>()).unwrap_or(28),
            ),
        }
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn set_int_option(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    let len = libc::socklen_t::try_from(size_of::<libc::c_int>()).unwrap_or(4);
    // SAFETY: fd is an open socket; value lives for the call and len is its size.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            std::ptr::from_ref(&value).cast(),
            len,
        )
    })
}

/// The poll timeout in milliseconds for `timeout` (at least 1 ms).
fn millis(timeout: Duration) -> libc::c_int {
    libc::c_int::try_from(timeout.as_millis())
        .unwrap_or(libc::c_int::MAX)
        .max(1)
}

/// Opens a TCP connection from `src` (port 0: the kernel picks one) to `dst` within
/// `timeout`; reads and writes on it time out after `timeout` too.
///
/// `SO_REUSEADDR` is set so an explicit source port can be reused while an older
/// connection from it is in TIME_WAIT towards another destination; the same 4-tuple
/// cannot be reused until its TIME_WAIT ends (60 s, on the client side, which closes
/// first).
///
/// # Errors
/// When the socket cannot be bound (address not in the namespace, port in use) or the
/// connection is refused or not established within `timeout` (`TimedOut`).
pub fn tcp_connect(src: SocketAddr, dst: SocketAddr, timeout: Duration) -> io::Result<TcpConn> {
    let domain = if dst.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket(2) call; the result is checked before use.
    let raw = unsafe {
        libc::socket(
            domain,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    check(raw)?;
    // SAFETY: socket(2) returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    set_int_option(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    if src.port() == 0 {
        // Choose the port at connect time, per destination, not at bind time.
        set_int_option(&fd, libc::SOL_IP, libc::IP_BIND_ADDRESS_NO_PORT, 1)?;
    }
    let src_raw = RawAddr::new(src);
    let (ptr, len) = src_raw.as_ptr();
    // SAFETY: ptr/len describe a live sockaddr of the socket's family.
    check(unsafe { libc::bind(fd.as_raw_fd(), ptr, len) })?;
    let dst_raw = RawAddr::new(dst);
    let (ptr, len) = dst_raw.as_ptr();
    // SAFETY: as above.
    if let Err(e) = check(unsafe { libc::connect(fd.as_raw_fd(), ptr, len) })
        && e.raw_os_error() != Some(libc::EINPROGRESS)
    {
        return Err(e);
    }
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: pfd is one live pollfd.
    let ready = unsafe { libc::poll(&raw mut pfd, 1, millis(timeout)) };
    check(ready)?;
    if ready == 0 {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("connect {src} -> {dst}: no answer within {timeout:?}"),
        ));
    }
    let mut err: libc::c_int = 0;
    let mut len = libc::socklen_t::try_from(size_of::<libc::c_int>()).unwrap_or(4);
    // SAFETY: err and len are live and len is err's size.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&raw mut err).cast(),
            &raw mut len,
        )
    })?;
    if err != 0 {
        return Err(io::Error::from_raw_os_error(err));
    }
    let stream = TcpStream::from(fd);
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    Ok(TcpConn {
        stream,
        pending: Vec::new(),
    })
}

/// Connects from `src` to `dst`, exchanges one line ([`TcpConn::exchange`]) and closes.
///
/// # Errors
/// As [`tcp_connect`] and [`TcpConn::exchange`].
pub fn tcp_exchange(
    src: SocketAddr,
    dst: SocketAddr,
    msg: &str,
    timeout: Duration,
) -> io::Result<String> {
    tcp_connect(src, dst, timeout)?.exchange(msg)
}

/// Sends `msg` (plus a newline) in one datagram from `src` to `dst` and returns the
/// first reply from `dst` (the socket is connected, so datagrams from any other source,
/// such as the load balancer, are not accepted), without its newline. One attempt: a
/// lost datagram is a `TimedOut`/`WouldBlock` error after `timeout`.
///
/// # Errors
/// When the socket cannot be bound or no reply arrives within `timeout`.
pub fn udp_exchange(
    src: SocketAddr,
    dst: SocketAddr,
    msg: &str,
    timeout: Duration,
) -> io::Result<String> {
    let socket = UdpSocket::bind(src)?;
    socket.set_read_timeout(Some(timeout))?;
    socket.set_write_timeout(Some(timeout))?;
    socket.connect(dst)?;
    socket.send(format!("{msg}\n").as_bytes())?;
    let mut buf = [0u8; 512];
    let n = socket.recv(&mut buf)?;
    let reply = String::from_utf8_lossy(&buf[..n]);
    Ok(reply.trim_end_matches('\n').to_owned())
}

/// Sends the Ethernet frame `frame` as it is out of `iface` (an interface of the
/// calling thread's network namespace), through a raw packet socket: for frames no
/// socket of the client's would send, such as a router's ICMP errors.
///
/// # Errors
/// When the socket cannot be opened or bound, or the send fails.
pub fn send_frame(iface: &str, frame: &[u8]) -> io::Result<()> {
    let name = std::ffi::CString::new(iface)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name"))?;
    // SAFETY: name is a valid NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain socket(2) call; the result is checked before use. Protocol 0: the
    // socket only sends.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    check(raw)?;
    // SAFETY: socket(2) returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: sockaddr_ll is plain old data; all zeroes is a valid start.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = u16::try_from(libc::AF_PACKET).unwrap_or(17);
    addr.sll_ifindex = i32::try_from(index).unwrap_or(0);
    addr.sll_halen = 6;
    addr.sll_addr[..6].copy_from_slice(&frame[..6.min(frame.len())]);
    let len = libc::socklen_t::try_from(size_of::<libc::sockaddr_ll>()).unwrap_or(20);
    // SAFETY: buf/len describe `frame`; addr/len a live sockaddr_ll.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&raw const addr).cast(),
            len,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
