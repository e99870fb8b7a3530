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

use std::io;

use lb_dataplane::offload::ethtool_value;

/// `ETHTOOL_STXCSUM` (include/uapi/linux/ethtool.h).
const ETHTOOL_STXCSUM: u32 = 0x17;
/// `ETHTOOL_GFLAGS`, `ETHTOOL_SFLAGS` and the flag `ETH_FLAG_RXVLAN`.
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_SFLAGS: u32 = 0x26;
const ETH_FLAG_RXVLAN: u32 = 1 << 8;

/// Switches transmit checksum offload off on `iface`, an interface of the calling
/// thread's network namespace.
///
/// # Errors
/// When the interface does not exist or the ioctl fails.
pub fn disable_tx_checksum(iface: &str) -> io::Result<()> {
    ethtool_value(iface, ETHTOOL_STXCSUM, 0).map(|_| ())
}

/// Switches receive VLAN offload off on `iface` (a veth advertises it): `lb run` refuses
/// native XDP on an interface that has it, see `lb_dataplane::offload`.
///
/// # Errors
/// When the interface does not exist or an ioctl fails.
pub fn disable_rx_vlan(iface: &str) -> io::Result<()> {
    let flags = ethtool_value(iface, ETHTOOL_GFLAGS, 0)?;
    ethtool_value(iface, ETHTOOL_SFLAGS, flags & !ETH_FLAG_RXVLAN).map(|_| ())
}
