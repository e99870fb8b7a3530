//! The pinned side of [`KernelDataplane`]: attaching through the pinned XDP link
//! (a new link, pinned, or the program of an existing one replaced atomically with
//! `bpf_link_update`), detaching it, the controller's record, and what an adopted data
//! plane holds.

use std::{ffi::CString, os::fd::AsFd as _};

use aya::programs::{
    links::{FdLink, PinnedLink},
    xdp::XdpLink,
};
use lb_common::maps;
use tracing::{info, warn};

use super::{KernelDataplane, lock, prog_err, xdp};
use crate::{
    Adopted, AttachMode, DataplaneError, bpf_sys,
    pinned::{Discarded, PinDir},
    syscall_err,
};

/// `meta.attach_mode` of a mode.
fn mode_code(mode: AttachMode) -> u32 {
    match mode {
        AttachMode::Native => 1,
        AttachMode::Skb => 2,
    }
}

fn link_err(op: &str) -> impl FnOnce(aya::programs::links::LinkError) -> DataplaneError + '_ {
    move |e| DataplaneError::Syscall {
        op: op.to_owned(),
        error: std::io::Error::other(e.to_string()),
    }
}

impl KernelDataplane {
    /// The pin directory, for a pinned data plane.
    pub fn pin_dir(&self) -> Option<&PinDir> {
        self.pinned.as_ref().map(|p| &p.dir)
    }

    /// The mode of the attached link as recorded when it was created (adopted links
    /// keep theirs); `None` when not attached or not pinned.
    pub fn attached_mode(&self) -> Option<AttachMode> {
        let mut tables = lock(&self.tables);
        match tables.meta_mut().map(|m| m.get().attach_mode) {
            Some(1) => Some(AttachMode::Native),
            Some(2) => Some(AttachMode::Skb),
            _ => None,
        }
    }

    /// The table epoch recorded in the pins' `meta`: tables installed since the
    /// datapath was created (0 when not pinned).
    pub fn table_epoch(&self) -> u32 {
        lock(&self.tables).meta_mut().map_or(0, |m| m.get().epoch)
    }

    /// Tells a daemon starting meanwhile that this one is exiting (it then waits for
    /// the lock instead of refusing).
    pub fn mark_exiting(&mut self) {
        if let Some(p) = &mut self.pinned {
            p.lock.mark_exiting();
        }
    }

    /// Attaches through the pin directory's link: when a link is pinned for this
    /// interface, it keeps running the programs a start of the same build kept (see
    /// `super::programs`), or its program is replaced by this one in one
    /// `bpf_link_update` (no instant without a program; the link keeps its mode);
    /// otherwise a new link is created in `mode` and pinned. A pinned link of another
    /// interface index (the interface was deleted and re-created) is replaced by a new
    /// one. Programs put in place are claimed in the `programs` pin.
    pub(super) fn attach_pinned(
        &mut self,
        iface: &str,
        mode: AttachMode,
    ) -> Result<(), DataplaneError> {
        if self.pinned.as_ref().is_some_and(|p| p.kept_programs) {
            if let Some(program) = self.keep_link(iface)? {
                info!(
                    "kept the programs of the pinned XDP link on {iface}: the same build (program {program})"
                );
                return Ok(());
            }
            // The link went, or moved, since the start examined it: the programs must
            // be loaded after all.
            warn!("the pinned XDP link no longer runs on {iface}: loading the programs");
            self.load_kept_programs()?;
        }
        self.attach_replacing(iface, mode)?;
        if let Some(pinned) = &self.pinned
            && let Err(e) = super::programs::claim(&pinned.dir, &pinned.object)
        {
            warn!("the running programs could not be recorded ({e}): the next start loads its own");
        }
        Ok(())
    }

    /// The program id of the pinned link when it is attached to `iface`, taken as this
    /// data plane's link; `None` otherwise (a link that cannot be examined included:
    /// the programs are then loaded and attached, which reports it).
    fn keep_link(&mut self, iface: &str) -> Result<Option<u32>, DataplaneError> {
        let Some(pinned) = self.pinned.as_mut() else {
            return Err(DataplaneError::NotAttached);
        };
        let Ok(Some(program)) = super::programs::link_program(&pinned.dir, iface) else {
            return Ok(None);
        };
        pinned.link = Some(
            PinnedLink::from_pin(pinned.dir.link()).map_err(link_err("opening the pinned link"))?,
        );
        Ok(Some(program))
    }

    /// Loads this object's programs after a start kept the running ones, withdrawing
    /// the claim first (see `super::programs`).
    fn load_kept_programs(&mut self) -> Result<(), DataplaneError> {
        if let Some(pinned) = &self.pinned {
            super::programs::withdraw(&pinned.dir)
                .map_err(syscall_err("removing the programs pin".into()))?;
        }
        super::load::load_programs(&mut self.ebpf)?;
        if let Some(pinned) = self.pinned.as_mut() {
            pinned.kept_programs = false;
        }
        Ok(())
    }

    /// [`Self::attach_pinned`] with this data plane's own program.
    fn attach_replacing(&mut self, iface: &str, mode: AttachMode) -> Result<(), DataplaneError> {
        let Some(pinned) = self.pinned.as_mut() else {
            return Err(DataplaneError::NotAttached);
        };
        let path = pinned.dir.link();
        let c_iface = CString::new(iface).map_err(|_| {
            DataplaneError::OutOfRange(format!("interface name {iface:?} contains a NUL byte"))
        })?;
        // SAFETY: if_nametoindex reads the NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(c_iface.as_ptr()) };
        let existing = bpf_sys::open_pinned(&path).map_err(syscall_err(format!(
            "opening {}",
            pinned.dir.shown().join("link").display()
        )))?;
        if let Some(fd) = existing {
            let facts = bpf_sys::xdp_link_info(fd.as_fd());
            drop(fd);
            match facts {
                Ok(facts) if facts.ifindex == ifindex && ifindex != 0 => {
                    let link =
                        PinnedLink::from_pin(&path).map_err(link_err("opening the pinned link"))?;
                    let link = XdpLink::try_from(FdLink::from(link))
                        .map_err(link_err("the pinned link"))?;
                    let program = xdp(&mut self.ebpf, maps::XDP_PROGRAM)?;
                    let id = program
                        .attach_to_link(link)
                        .map_err(prog_err(maps::XDP_PROGRAM))?;
                    let link = program.take_link(id).map_err(prog_err(maps::XDP_PROGRAM))?;
                    let link = FdLink::try_from(link).map_err(link_err("the replaced link"))?;
                    // The pin still names the link: keep only our descriptor of it.
                    pinned.link =
                        Some(PinnedLink::from_pin(&path).map_err(link_err("reopening the link"))?);
                    drop(link);
                    info!(
                        "replaced the program of the pinned XDP link on {iface} (was program {})",
                        facts.prog_id
                    );
                    return Ok(());
                }
                Ok(facts) => warn!(
                    "the pinned XDP link is for interface index {} (0: its interface is gone), not {iface} ({ifindex}): attaching a new link",
                    facts.ifindex
                ),
                Err(e) => warn!("the pinned link cannot be examined ({e}): attaching a new link"),
            }
            std::fs::remove_file(&path).map_err(syscall_err(format!(
                "removing the stale link {}",
                path.display()
            )))?;
        }
        let xdp_mode = match mode {
            AttachMode::Native => aya::programs::XdpMode::Driver,
            AttachMode::Skb => aya::programs::XdpMode::Skb,
        };
        let program = xdp(&mut self.ebpf, maps::XDP_PROGRAM)?;
        let id = program
            .attach(iface, xdp_mode)
            .map_err(prog_err(maps::XDP_PROGRAM))?;
        let link = program.take_link(id).map_err(prog_err(maps::XDP_PROGRAM))?;
        let link = FdLink::try_from(link).map_err(|e| DataplaneError::Syscall {
            op: "attaching through a bpf_link (Linux 5.9+ and a driver that supports XDP links are needed to pin it)".into(),
            error: std::io::Error::other(e.to_string()),
        })?;
        let pinned_link = link.pin(&path).map_err(|e| DataplaneError::Syscall {
            op: format!("pinning the XDP link at {}", path.display()),
            error: std::io::Error::other(e.to_string()),
        })?;
        pinned.link = Some(pinned_link);
        if let Some(meta) = lock(&self.tables).meta_mut() {
            meta.update(|m| m.attach_mode = mode_code(mode))
                .map_err(syscall_err("recording the attach mode in meta".into()))?;
        }
        Ok(())
    }

    /// Detaches the pinned link at once (`BPF_LINK_DETACH`) and removes its pin.
    pub(super) fn detach_pinned(&mut self) -> Result<(), DataplaneError> {
        let Some(pinned) = self.pinned.as_mut() else {
            return Err(DataplaneError::NotAttached);
        };
        let link = pinned.link.take().ok_or(DataplaneError::NotAttached)?;
        let fd = bpf_sys::open_pinned(&pinned.dir.link())
            .map_err(syscall_err("opening the pinned link".into()))?;
        if let Some(fd) = fd {
            bpf_sys::link_detach(fd.as_fd())
                .map_err(syscall_err("detaching the XDP link".into()))?;
        }
        link.unpin()
            .map_err(syscall_err("removing the pinned link".into()))?;
        Ok(())
    }

    /// Detaches (if attached) and removes every pin of this data plane; what was
    /// discarded. The maps stay usable through this handle until it is dropped.
    ///
    /// # Errors
    /// When a pin cannot be removed.
    pub fn remove_pins(&mut self) -> Result<Option<Discarded>, DataplaneError> {
        if self.pinned.as_ref().is_some_and(|p| p.link.is_some()) {
            self.detach_pinned()?;
        }
        match &self.pinned {
            Some(p) => Ok(Some(p.dir.discard(false)?)),
            None => Ok(None),
        }
    }

    /// [`crate::Dataplane::adopted`].
    pub(super) fn adopted_state(&self) -> Result<Option<Adopted>, DataplaneError> {
        let Some(pinned) = self.pinned.as_ref().filter(|p| p.adopted) else {
            return Ok(None);
        };
        let record =
            crate::pinned::meta::load_record(&pinned.dir.record()).map_err(syscall_err(
                format!("reading {}", pinned.dir.shown().join("record").display()),
            ))?;
        let vips = lock(&self.tables)
            .vip_entries()?
            .into_iter()
            .map(|(k, e)| (k, e.vip_id))
            .collect();
        Ok(Some(Adopted {
            record,
            config: self.written_config,
            vips,
            sources: self.sources.lists(),
        }))
    }

    /// [`crate::Dataplane::store_record`].
    pub(super) fn write_record(&mut self, record: &[u8]) -> Result<(), DataplaneError> {
        let Some(pinned) = &self.pinned else {
            return Ok(());
        };
        crate::pinned::meta::store_record(&pinned.dir.record(), record).map_err(syscall_err(
            format!("writing {}", pinned.dir.shown().join("record").display()),
        ))
    }
}
