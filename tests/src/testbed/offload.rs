//! Transmit checksum offload on the client's veth, and receive VLAN offload on the
//! LB's, switched off with the ethtool ioctl (`SIOCETHTOOL`, `ETHTOOL_STXCSUM`,
//! `ETHTOOL_GFLAGS`/`ETHTOOL_SFLAGS`; no ethtool binary needed).
//!
//! A veth advertises checksum offload, so the client's TCP and UDP packets leave with
//! `CHECKSUM_PARTIAL`: the checksum field holds only the pseudo-header sum and the
//! kernel tracks that the rest is still to be done. When the LB's XDP program turns such
//! a packet into an XDP frame and sends it on with XDP_TX, that bookkeeping is lost and
//! the backend receives a wrong checksum and drops the segment. A real NIC computes the
//! checksum on transmit; switching the offload off makes the client's stack do it.

use std::{io, os::fd::AsRawFd as _};

/// `ETHTOOL_STXCSUM` (include/uapi/linux/ethtool.h).
const ETHTOOL_STXCSUM: u32 = 0x17;
/// `ETHTOOL_GFLAGS`, `ETHTOOL_SFLAGS` and the flag `ETH_FLAG_RXVLAN`.
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_SFLAGS: u32 = 0x26;
const ETH_FLAG_RXVLAN: u32 = 1 << 8;

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
    data: *mut EthtoolValue,
    _pad: [u8; 16],
}

/// Switches transmit checksum offload off on `iface`, an interface of the calling
/// thread's network namespace.
///
/// # Errors
/// When the interface does not exist or the ioctl fails.
pub fn disable_tx_checksum(iface: &str) -> io::Result<()> {
    ethtool(iface, ETHTOOL_STXCSUM, 0).map(|_| ())
}

/// Switches receive VLAN offload off on `iface` (a veth advertises it): `lb run` refuses
/// native XDP on an interface that has it, see `lb_user::dataplane::offload`.
///
/// # Errors
/// When the interface does not exist or an ioctl fails.
pub fn disable_rx_vlan(iface: &str) -> io::Result<()> {
    let flags = ethtool(iface, ETHTOOL_GFLAGS, 0)?;
    ethtool(iface, ETHTOOL_SFLAGS, flags & !ETH_FLAG_RXVLAN).map(|_| ())
}

/// Runs ethtool command `cmd` with `data` on `iface`; returns the data it leaves.
fn ethtool(iface: &str, cmd: u32, data: u32) -> io::Result<u32> {
    let bytes = iface.as_bytes();
    if bytes.len() >= 16 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").or_else(|_| {
        // A namespace whose loopback is down: any socket works for the ioctl.
        std::net::UdpSocket::bind("[::1]:0")
    })?;
    let mut value = EthtoolValue { cmd, data };
    let mut req = IfreqData {
        name: [0; 16],
        data: &raw mut value,
        _pad: [0; 16],
    };
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: SIOCETHTOOL reads the ifreq (name and data pointer) and the ethtool_value
    // it points to; both outlive the call.
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
    Ok(value.data)
}
