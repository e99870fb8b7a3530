//! Link and route events from the kernel (rtnetlink, `NETLINK_ROUTE`), so that the
//! backends' managed neighbour entries follow the interfaces ([`super::neighbours`]).
//!
//! An interface that goes down loses its neighbour entries, the managed ones included
//! (`neigh_ifdown`), and the routes through it. When it comes back, nothing installs
//! them again: `bpf_fib_lookup` only reads the neighbour table, the XDP program's
//! packets never reach the stack that would resolve them, and a backend without health
//! checks sends nothing that would. So a thread (`lb-link-events`) listens to the
//! kernel's link and route multicast groups and reports an interface that came up
//! (`IFF_UP` and `IFF_RUNNING`) or a route added; the daemon then installs the managed
//! entries again, after a short quiet time.
//!
//! Messages are read with a plain netlink socket (`libc`): only the header
//! (`nlmsghdr`) and, for links, `ifinfomsg` are looked at (rtnetlink(7)).

use std::{collections::HashMap, io, mem::size_of, os::fd::AsRawFd as _};

use tokio::sync::mpsc;
use tracing::warn;

/// `RTMGRP_LINK`, `RTMGRP_IPV4_ROUTE`, `RTMGRP_IPV6_ROUTE` (`linux/rtnetlink.h`).
const GROUPS: u32 = 0x1 | 0x40 | 0x400;
/// `RTM_NEWLINK`, `RTM_NEWROUTE`.
const RTM_NEWLINK: u16 = 16;
const RTM_NEWROUTE: u16 = 24;
/// `struct nlmsghdr`: 16 bytes; `struct ifinfomsg`: 16 bytes.
const NLMSG_HDR: usize = 16;
const IFINFO: usize = 16;

/// What happened that may have removed managed neighbour entries or made them
/// installable again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum LinkEvent {
    /// Interface index `0` came up (up and running).
    Up(u32),
    /// A route was added.
    RouteAdded,
}

/// Tracks each interface's running state, to report the transitions to running.
#[derive(Debug, Default)]
pub(super) struct Links(HashMap<u32, bool>);

impl Links {
    /// The events of one datagram of netlink messages (`buf`).
    pub(super) fn parse(&mut self, mut buf: &[u8]) -> Vec<LinkEvent> {
        let mut out = Vec::new();
        while buf.len() >= NLMSG_HDR {
            let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            let kind = u16::from_ne_bytes([buf[4], buf[5]]);
            if len < NLMSG_HDR || len > buf.len() {
                break;
            }
            let body = &buf[NLMSG_HDR..len];
            match kind {
                RTM_NEWLINK if body.len() >= IFINFO => {
                    let index = u32::from_ne_bytes([body[4], body[5], body[6], body[7]]);
                    let flags = u32::from_ne_bytes([body[8], body[9], body[10], body[11]]);
                    let running = flags & (libc::IFF_UP | libc::IFF_RUNNING) as u32
                        == (libc::IFF_UP | libc::IFF_RUNNING) as u32;
                    let was = self.0.insert(index, running);
                    if running && was != Some(true) {
                        out.push(LinkEvent::Up(index));
                    }
                }
                RTM_NEWROUTE => out.push(LinkEvent::RouteAdded),
                _ => {}
            }
            // Messages are aligned to 4 bytes (NLMSG_ALIGN).
            let next = len.next_multiple_of(4).min(buf.len());
            buf = &buf[next..];
        }
        out
    }
}

/// An rtnetlink socket bound to the link and route groups.
fn socket() -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the descriptor is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a new descriptor nobody else owns.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: an all-zero sockaddr_nl is valid; the fields are set next.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::sa_family_t::try_from(libc::AF_NETLINK).unwrap_or_default();
    addr.nl_groups = GROUPS;
    // SAFETY: bind(2) with a sockaddr_nl of its size.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            std::ptr::from_ref(&addr).cast(),
            libc::socklen_t::try_from(size_of::<libc::sockaddr_nl>()).unwrap_or(0),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Starts the thread `lb-link-events`, which sends every event to `tx` until the
/// receiver is gone.
///
/// # Errors
/// When the socket or the thread cannot be created.
pub(super) fn watch(tx: mpsc::UnboundedSender<LinkEvent>) -> io::Result<()> {
    let fd = socket()?;
    std::thread::Builder::new()
        .name("lb-link-events".to_owned())
        .spawn(move || {
            let mut links = Links::default();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                // SAFETY: recv(2) into our buffer of its length.
                let n =
                    unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
                let Ok(n) = usize::try_from(n) else {
                    let e = io::Error::last_os_error();
                    if e.raw_os_error() == Some(libc::ENOBUFS) {
                        // Events were lost: the daemon installs everything again.
                        if tx.send(LinkEvent::RouteAdded).is_err() {
                            return;
                        }
                        continue;
                    }
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    warn!("link events: {e}; the managed neighbours no longer follow link changes");
                    return;
                };
                for event in links.parse(&buf[..n]) {
                    if tx.send(event).is_err() {
                        return;
                    }
                }
            }
        })?;
    Ok(())
}

/// The name of interface `index`, or the index as text.
pub(super) fn name_of(index: u32) -> String {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: if_indextoname writes at most IF_NAMESIZE bytes into buf.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return format!("index {index}");
    }
    // SAFETY: on success buf holds a NUL-terminated name.
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One `RTM_NEWLINK` message of interface `index` with `flags`.
    fn newlink(index: u32, flags: u32) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&32u32.to_ne_bytes());
        m.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&[0, 0, 1, 0]);
        m.extend_from_slice(&index.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m
    }

    #[test]
    fn a_link_that_comes_up_is_reported_once_and_a_route_added_each_time() {
        let up = (libc::IFF_UP | libc::IFF_RUNNING) as u32;
        let mut links = Links::default();
        assert_eq!(links.parse(&newlink(3, up)), vec![LinkEvent::Up(3)]);
        assert_eq!(links.parse(&newlink(3, up)), vec![]);
        assert_eq!(links.parse(&newlink(3, libc::IFF_UP as u32)), vec![]);
        let mut two = newlink(3, up);
        let mut route = newlink(0, 0);
        route[4..6].copy_from_slice(&RTM_NEWROUTE.to_ne_bytes());
        two.extend_from_slice(&route);
        assert_eq!(
            links.parse(&two),
            vec![LinkEvent::Up(3), LinkEvent::RouteAdded]
        );
        assert_eq!(links.parse(&two[..20]), vec![], "a cut message is ignored");
    }
}
