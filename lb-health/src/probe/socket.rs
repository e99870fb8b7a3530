//! Probe sockets: created non-blocking, marked (`SO_MARK`, tunnel mode) and bound to the
//! target's source address before they connect, then handed to tokio.

use std::{io, net::SocketAddr, time::Duration};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpSocket, TcpStream, UdpSocket};

use crate::{
    outcome::{Failure, Stage},
    target::ProbeTarget,
};

/// A socket of type `ty` for `target`, marked and bound.
fn socket(target: &ProbeTarget, ty: Type, protocol: Protocol) -> io::Result<Socket> {
    let socket = Socket::new(
        Domain::for_address(target.dest),
        ty.nonblocking(),
        Some(protocol),
    )?;
    if let Some(mark) = target.mark {
        socket.set_mark(mark)?;
    }
    if let Some(source) = target.source {
        socket.bind(&SocketAddr::new(source, 0).into())?;
    }
    Ok(socket)
}

/// A TCP connection to `target.dest`. The socket lingers 0 s: closing it sends an RST,
/// so probes leave no TIME_WAIT sockets on the LB host (as HAProxy's checks do).
///
/// # Errors
/// The failure, at [`Stage::Socket`] or [`Stage::Connect`].
pub(super) async fn tcp(target: &ProbeTarget) -> Result<TcpStream, Failure> {
    let setup = || -> io::Result<TcpSocket> {
        let socket = socket(target, Type::STREAM, Protocol::TCP)?;
        socket.set_linger(Some(Duration::ZERO))?;
        socket.set_tcp_nodelay(true)?;
        Ok(TcpSocket::from_std_stream(socket.into()))
    };
    let socket = setup().map_err(|e| Failure::from_io(Stage::Socket, &e))?;
    socket
        .connect(target.dest)
        .await
        .map_err(|e| Failure::from_io(Stage::Connect, &e))
}

/// A UDP socket connected to `target.dest` (it receives only the destination's
/// datagrams, and ICMP port unreachable as "refused").
///
/// # Errors
/// The failure, at [`Stage::Socket`].
pub(super) async fn udp(target: &ProbeTarget) -> Result<UdpSocket, Failure> {
    let fail = |e: io::Error| Failure::from_io(Stage::Socket, &e);
    let socket = socket(target, Type::DGRAM, Protocol::UDP).map_err(fail)?;
    if target.source.is_none() {
        let any: SocketAddr = match target.dest {
            SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        socket.bind(&any.into()).map_err(fail)?;
    }
    let socket = UdpSocket::from_std(socket.into()).map_err(fail)?;
    socket.connect(target.dest).await.map_err(fail)?;
    Ok(socket)
}
