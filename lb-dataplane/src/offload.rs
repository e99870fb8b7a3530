//! Receive VLAN offload of the interface the program attaches to, read with the ethtool
//! ioctl (`SIOCETHTOOL`, `ETHTOOL_GFLAGS`, flag `ETH_FLAG_RXVLAN`: the kernel's
//! `NETIF_F_HW_VLAN_CTAG_RX`, "rx-vlan-offload" in `ethtool -k`), and its receive queues
//! (`ETHTOOL_GCHANNELS`, `ethtool -l`), which decide whether the SYN cache is split by
//! CPU ([`rx_queues`]).
//!
//! With the offload on, the NIC removes a frame's 802.1Q tag before XDP sees it and
//! keeps it in the receive descriptor. A native XDP program then sees tagged frames as
//! untagged, and one it sends back with `XDP_TX` leaves without its tag, on the wrong
//! VLAN. The kernel offers the tag to XDP only through the RX metadata kfunc
//! `bpf_xdp_metadata_rx_vlan_tag` (Linux 6.8+, some drivers, device-bound programs),
//! which aya 0.14 / aya-ebpf 0.2.1 cannot call or load. So `lb run` refuses native mode
//! on such an interface (`xdp_mode = "native"`) and falls back to skb mode with a
//! warning (`auto`): in skb mode the tag stays with the packet's socket buffer, the
//! program handles the untagged frame, and the kernel puts the tag back on transmit.

use std::{io, os::fd::AsRawFd as _};

/// `ETHTOOL_GFLAGS` (include/uapi/linux/ethtool.h).
const ETHTOOL_GFLAGS: u32 = 0x25;
/// `ETH_FLAG_RXVLAN`: receive VLAN offload.
const ETH_FLAG_RXVLAN: u32 = 1 << 8;
/// `ETHTOOL_GCHANNELS` (include/uapi/linux/ethtool.h): the queue counts.
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// `struct ethtool_channels` (include/uapi/linux/ethtool.h).
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// `struct ifreq` with the `ifr_data` member of its union (40 bytes on 64-bit Linux).
#[repr(C)]
struct IfreqData {
    name: [u8; 16],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// Whether `iface` (in the calling thread's network namespace) has receive VLAN
/// offload on. An interface without ethtool support (`EOPNOTSUPP`) has none.
///
/// # Errors
/// A name too long, an interface that does not exist, or another ioctl failure.
pub fn rx_vlan_offload(iface: &str) -> io::Result<bool> {
    match ethtool_value(iface, ETHTOOL_GFLAGS, 0) {
        Ok(flags) => Ok(flags & ETH_FLAG_RXVLAN != 0),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Runs the ethtool command `cmd` (one that takes a `struct ethtool_value`, such as
/// `ETHTOOL_GFLAGS` 0x25, `ETHTOOL_SFLAGS` 0x26 or `ETHTOOL_STXCSUM` 0x17,
/// include/uapi/linux/ethtool.h) with `data` on `iface`, an interface of the calling
/// thread's network namespace; returns the value's data afterwards.
///
/// # Errors
/// A name too long, an interface that does not exist, or the ioctl's failure.
pub fn ethtool_value(iface: &str, cmd: u32, data: u32) -> io::Result<u32> {
    let mut value = EthtoolValue { cmd, data };
    ethtool(iface, (&raw mut value).cast())?;
    Ok(value.data)
}

/// The receive queues of `iface` (in the calling thread's network namespace): its
/// receive-only and combined channels (`ethtool -l`). `None` when the driver does not
/// say (`EOPNOTSUPP`, as loopback).
///
/// Receive-side scaling, which keeps each flow on one queue and so on one CPU, needs
/// more than one: the data plane splits the SYN cache by CPU only then
/// (`lb_common::syn_cache`). A veth has one queue unless created with more, and its
/// packets are handled on whichever CPU sent them.
///
/// # Errors
/// A name too long, an interface that does not exist, or another ioctl failure.
pub fn rx_queues(iface: &str) -> io::Result<Option<u32>> {
    let mut channels = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    match ethtool(iface, (&raw mut channels).cast()) {
        Ok(()) => Ok(Some(channels.rx_count + channels.combined_count)),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Runs the ethtool ioctl on `iface` with `data`, a `struct ethtool_*` whose first
/// field is the command, which the kernel reads and writes.
fn ethtool(iface: &str, data: *mut libc::c_void) -> io::Result<()> {
    let bytes = iface.as_bytes();
    if bytes.len() >= 16 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {iface:?} too long"),
        ));
    }
    // SAFETY: socket(2) with constant arguments; the descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a new, open descriptor that nothing else owns.
    let socket = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut req = IfreqData {
        name: [0; 16],
        data,
        _pad: [0; 16],
    };
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: SIOCETHTOOL reads the ifreq (name and data pointer) and writes the
    // ethtool structure it points to (the caller's, of the command's type); both
    // outlive the call.
    let rc = unsafe {
        libc::ioctl(
            socket.as_raw_fd(),
            libc::SIOCETHTOOL,
            (&raw mut req).cast::<libc::c_void>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Why native XDP on `iface` would forward tagged frames untagged, if it would: the
/// message for the operator, naming the fix.
pub fn native_vlan_problem(iface: &str) -> Option<String> {
    match rx_vlan_offload(iface) {
        Ok(true) => Some(format!(
            "interface {iface} has receive VLAN offload on (rx-vlan-offload): its NIC removes \
             802.1Q tags before XDP sees the frame, so native XDP would send tagged frames \
             back untagged; switch it off (`ethtool -K {iface} rxvlan off`) or use \
             xdp_mode = \"skb\", where the kernel keeps the tag with the packet"
        )),
        Ok(false) | Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_no_vlan_offload_and_long_names_are_refused() {
        assert!(!rx_vlan_offload("lo").expect("lo answers"));
        assert!(rx_vlan_offload("a-name-much-too-long").is_err());
        assert!(native_vlan_problem("lo").is_none());
    }

    #[test]
    fn loopback_does_not_say_its_receive_queues() {
        assert_eq!(rx_queues("lo").expect("lo answers"), None);
        assert!(rx_queues("a-name-much-too-long").is_err());
    }
}
