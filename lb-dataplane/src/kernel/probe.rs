//! The probe program `lb_probe_encap` (TC egress) of the loaded object: attaching it to
//! the LB's interface, detaching it, and reading its counters. It shares `BACKENDS` and
//! `CONFIG` with the XDP program (one object, one set of maps), so a tunnel-mode probe
//! is encapsulated with exactly the state client packets see.
//!
//! Attachment: a TCX link on Linux 6.6+ (aya's default, no qdisc needed); on older
//! kernels the `clsact` qdisc is added first and the program attached through netlink.

use aya::{
    maps::PerCpuArray,
    programs::{SchedClassifier, TcAttachType, tc},
};
use lb_common::{maps, probe::ProbeStats};

use super::{KernelDataplane, load_err, prog_err};
use crate::{DataplaneError, map_err};

impl KernelDataplane {
    /// Loads `lb_probe_encap` (the first time) and attaches it to the egress of
    /// `iface`. Attaching again while attached does nothing.
    ///
    /// # Errors
    /// [`DataplaneError::Rejected`] when the kernel refuses the program,
    /// [`DataplaneError::Program`] when it refuses the attachment (no TC support, no
    /// `CAP_NET_ADMIN`).
    pub fn attach_probe_encap(&mut self, iface: &str) -> Result<(), DataplaneError> {
        if self.probe_link.is_some() {
            return Ok(());
        }
        let prog = classifier(&mut self.ebpf)?;
        if prog.fd().is_err() {
            prog.load().map_err(load_err(maps::PROBE_PROGRAM))?;
        }
        let link = match prog.attach(iface, TcAttachType::Egress) {
            Ok(link) => link,
            Err(first) => {
                // Netlink attachment (kernels before TCX) needs the clsact qdisc; an
                // existing one is fine.
                if tc::qdisc_add_clsact(iface).is_err() {
                    return Err(prog_err(maps::PROBE_PROGRAM)(first));
                }
                prog.attach(iface, TcAttachType::Egress)
                    .map_err(prog_err(maps::PROBE_PROGRAM))?
            }
        };
        self.probe_link = Some(link);
        Ok(())
    }

    /// Whether the probe program is attached by this handle.
    pub fn probe_encap_attached(&self) -> bool {
        self.probe_link.is_some()
    }

    /// Detaches the probe program.
    ///
    /// # Errors
    /// [`DataplaneError::NotAttached`] if it is not attached; the kernel's refusal.
    pub fn detach_probe_encap(&mut self) -> Result<(), DataplaneError> {
        let link = self.probe_link.take().ok_or(DataplaneError::NotAttached)?;
        classifier(&mut self.ebpf)?
            .detach(link)
            .map_err(prog_err(maps::PROBE_PROGRAM))
    }

    /// The probe program's counters, summed over CPUs.
    ///
    /// # Errors
    /// When the map is missing or cannot be read.
    pub fn probe_stats(&self) -> Result<ProbeStats, DataplaneError> {
        let map = self
            .ebpf
            .map(maps::PROBE_STATS)
            .ok_or(DataplaneError::MissingMap(maps::PROBE_STATS))?;
        let stats: PerCpuArray<_, ProbeStats> =
            PerCpuArray::try_from(map).map_err(map_err(maps::PROBE_STATS, "open"))?;
        let per_cpu = stats
            .get(&0, 0)
            .map_err(map_err(maps::PROBE_STATS, "lookup"))?;
        let mut total = ProbeStats::default();
        per_cpu.iter().for_each(|v| total.accumulate(v));
        Ok(total)
    }
}

/// The probe program of the object.
fn classifier(ebpf: &mut aya::Ebpf) -> Result<&mut SchedClassifier, DataplaneError> {
    let prog = ebpf
        .program_mut(maps::PROBE_PROGRAM)
        .ok_or(DataplaneError::Program {
            program: maps::PROBE_PROGRAM,
            error: aya::programs::ProgramError::NotLoaded,
        })?;
    prog.try_into().map_err(prog_err(maps::PROBE_PROGRAM))
}
