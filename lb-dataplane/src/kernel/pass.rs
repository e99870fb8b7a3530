//! [`PassProgram`]: the empty XDP program attached to an interface, for test beds
//! (feature `test-harness`).

use aya::{
    Ebpf, EbpfLoader,
    programs::{XdpMode, xdp::XdpLinkId},
};
use lb_common::maps;

use super::{load_err, prog_err, xdp};
use crate::DataplaneError;

/// Entries of each conntrack map and SYN cache slots when only `lb_empty` is loaded.
const UNUSED_MAP_ENTRIES: u32 = 64;

/// The empty XDP program (`lb_empty`, returns `XDP_PASS`) attached to an interface,
/// detached on drop. Attached to the veth peer of the load balancer's interface, it gives
/// that peer the NAPI context without which frames the load balancer sends back out with
/// `XDP_TX` are dropped by the veth driver (BR-24 in `docs/src/operations/failure-scenarios.md`).
pub struct PassProgram {
    ebpf: Ebpf,
    name: &'static str,
    link: Option<XdpLinkId>,
}

impl PassProgram {
    /// Loads `lb_empty` (with minimal conntrack maps) and attaches it to `iface` in
    /// native mode.
    ///
    /// # Errors
    /// When loading or attaching fails.
    pub fn attach(iface: &str) -> Result<Self, DataplaneError> {
        Self::attach_program(iface, maps::EMPTY_PROGRAM)
    }

    /// Like [`Self::attach`] with `lb_sink`, which drops every frame: the cheapest
    /// receiver of a packet-rate benchmark's `XDP_TX` frames (the veth peer counts them
    /// in its `rx_packets`).
    ///
    /// # Errors
    /// When loading or attaching fails.
    pub fn attach_sink(iface: &str) -> Result<Self, DataplaneError> {
        Self::attach_program(iface, maps::SINK_PROGRAM)
    }

    /// Loads program `name` of the object and attaches it to `iface` in native mode.
    fn attach_program(iface: &str, name: &'static str) -> Result<Self, DataplaneError> {
        let mut ebpf = EbpfLoader::new()
            .map_max_entries(maps::CONNTRACK_V4, UNUSED_MAP_ENTRIES)
            .map_max_entries(maps::CONNTRACK_V6, UNUSED_MAP_ENTRIES)
            .map_max_entries(maps::SYN_CACHE, UNUSED_MAP_ENTRIES)
            .load(crate::EBPF_OBJECT)
            .map_err(DataplaneError::Load)?;
        let prog = xdp(&mut ebpf, name)?;
        prog.load().map_err(load_err(name))?;
        let link = prog
            .attach(iface, XdpMode::Driver)
            .map_err(prog_err(name))?;
        Ok(Self {
            ebpf,
            name,
            link: Some(link),
        })
    }
}

impl Drop for PassProgram {
    fn drop(&mut self) {
        if let (Some(link), Ok(prog)) = (self.link.take(), xdp(&mut self.ebpf, self.name)) {
            let _ = prog.detach(link);
        }
    }
}
