//! Where a probe goes: destination, source address and socket mark, chosen by the
//! probe's mode.
//!
//! - `direct`: destination = the backend's address and the probe port; no mark.
//! - `tunnel`: destination = the VIP's address and the probe port (the VIP's port by
//!   default), mark = [`lb_common::probe::probe_mark`] of the backend's id
//!   (`0x4c42_0000 | id`). The TC egress program encapsulates packets with that mark to
//!   the backend, as the XDP program encapsulates a client's; the backend answers from
//!   the VIP straight to the probe's source address. Setting a mark needs
//!   `CAP_NET_ADMIN`.

use std::{
    fmt,
    net::{IpAddr, SocketAddr},
};

use lb_common::{maps::MAX_BACKENDS, probe::probe_mark};

use super::settings::Mode;

/// The addresses and mark of one backend's probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProbeTarget {
    /// Destination address and port.
    pub dest: SocketAddr,
    /// Source address to bind; `None`: the kernel's choice for the route.
    pub source: Option<IpAddr>,
    /// `SO_MARK` of the probe socket; `None`: unmarked.
    pub mark: Option<u32>,
}

/// Why no target could be chosen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// A tunnel mark needs a backend id in `1..MAX_BACKENDS`.
    #[error("backend id {0} cannot be put in a probe mark (expected 1 to {max})", max = MAX_BACKENDS - 1)]
    BadBackendId(u32),
    /// The source address is of the other family than the destination.
    #[error("source address {from} is not of the same family as destination {dest}")]
    FamilyMismatch {
        /// The source.
        from: IpAddr,
        /// The destination.
        dest: IpAddr,
    },
}

impl ProbeTarget {
    /// Probes to `backend`:`port`.
    ///
    /// # Errors
    /// [`TargetError::FamilyMismatch`].
    pub fn direct(backend: IpAddr, port: u16, source: Option<IpAddr>) -> Result<Self, TargetError> {
        Self::new(SocketAddr::new(backend, port), source, None)
    }

    /// Probes to `vip`:`port`, marked for backend id `backend_id`.
    ///
    /// # Errors
    /// [`TargetError::BadBackendId`], [`TargetError::FamilyMismatch`].
    pub fn tunnel(
        vip: IpAddr,
        port: u16,
        backend_id: u32,
        source: Option<IpAddr>,
    ) -> Result<Self, TargetError> {
        let mark = probe_mark(backend_id).ok_or(TargetError::BadBackendId(backend_id))?;
        Self::new(SocketAddr::new(vip, port), source, Some(mark))
    }

    /// The target `mode` chooses for a backend at `backend` (id `backend_id`) of the VIP
    /// at `vip`, probed on `port`.
    ///
    /// # Errors
    /// As [`Self::direct`] and [`Self::tunnel`].
    pub fn select(
        mode: Mode,
        vip: IpAddr,
        backend: IpAddr,
        backend_id: u32,
        port: u16,
        source: Option<IpAddr>,
    ) -> Result<Self, TargetError> {
        match mode {
            Mode::Direct => Self::direct(backend, port, source),
            Mode::Tunnel => Self::tunnel(vip, port, backend_id, source),
        }
    }

    fn new(
        dest: SocketAddr,
        source: Option<IpAddr>,
        mark: Option<u32>,
    ) -> Result<Self, TargetError> {
        let canonical = |a: IpAddr| a.to_canonical();
        let dest = SocketAddr::new(canonical(dest.ip()), dest.port());
        let source = source.map(canonical);
        if let Some(s) = source
            && s.is_ipv4() != dest.is_ipv4()
        {
            return Err(TargetError::FamilyMismatch {
                from: s,
                dest: dest.ip(),
            });
        }
        Ok(Self { dest, source, mark })
    }
}

impl fmt::Display for ProbeTarget {
    /// `198.51.100.11:80`, `203.0.113.10:80 mark 0x4c420007 from 192.0.2.1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.dest)?;
        if let Some(mark) = self.mark {
            write!(f, " mark {mark:#010x}")?;
        }
        if let Some(source) = self.source {
            write!(f, " from {source}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn direct_goes_to_the_backend_unmarked() {
        let t = ProbeTarget::select(
            Mode::Direct,
            ip("203.0.113.10"),
            ip("198.51.100.11"),
            7,
            8080,
            None,
        )
        .unwrap();
        assert_eq!(t.dest, "198.51.100.11:8080".parse().unwrap());
        assert_eq!(t.mark, None);
        assert_eq!(t.to_string(), "198.51.100.11:8080");
    }

    #[test]
    fn tunnel_goes_to_the_vip_marked_with_the_backend_id() {
        let t = ProbeTarget::select(
            Mode::Tunnel,
            ip("203.0.113.10"),
            ip("198.51.100.11"),
            7,
            80,
            Some(ip("192.0.2.1")),
        )
        .unwrap();
        assert_eq!(t.dest, "203.0.113.10:80".parse().unwrap());
        assert_eq!(t.mark, Some(0x4c42_0007));
        assert_eq!(t.source, Some(ip("192.0.2.1")));
        assert_eq!(
            t.to_string(),
            "203.0.113.10:80 mark 0x4c420007 from 192.0.2.1"
        );
        assert_eq!(
            ProbeTarget::tunnel(ip("203.0.113.10"), 80, 0, None),
            Err(TargetError::BadBackendId(0))
        );
    }

    #[test]
    fn families_must_agree() {
        assert!(matches!(
            ProbeTarget::direct(ip("2001:db8::1"), 80, Some(ip("192.0.2.1"))),
            Err(TargetError::FamilyMismatch { .. })
        ));
        // An IPv4-mapped source is IPv4.
        let t = ProbeTarget::direct(ip("198.51.100.11"), 80, Some(ip("::ffff:192.0.2.1"))).unwrap();
        assert_eq!(t.source, Some(ip("192.0.2.1")));
    }
}
