//! Keeping the running programs on a restart of the same build.
//!
//! Verifying the load balancer's four programs is most of the CPU a restart of few
//! VIPs takes (about 0.5 s of both CPUs on a 2-vCPU VM), only to replace the programs
//! of the pinned link and program arrays with the same instructions. A start keeps
//! them instead when the pin directory's `programs` element (see
//! [`crate::pinned::Programs`]) names the SHA-256 of its own eBPF
//! object *and* exactly the programs that run now: the XDP link's (a link attached to
//! this interface), `RARE_PROGS` slots 0 and 1 and `TRACE_PROGS` slot 0.
//!
//! The element is removed before the first program of a start that replaces them
//! enters a pinned array or the link ([`withdraw`]), and written again once the link
//! runs the new program ([`claim`]), so a daemon that dies while it swaps leaves no
//! claim (an element of zeros claims nothing either), and
//! programs that another build put in place (one that does not know the element)
//! never match: the kernel gives a program id again only after 2^31 loads.

use std::{ffi::CString, io, os::fd::AsFd as _};

use lb_common::maps;
use sha2::{Digest as _, Sha256};

use crate::{
    bpf_sys,
    pinned::{PinDir, ProgramIds, Programs, meta},
};

/// SHA-256 (FIPS 180-4) of the eBPF object `object` (about 1 ms).
pub(super) fn object_digest(object: &[u8]) -> [u8; 32] {
    Sha256::digest(object).into()
}

/// The index of `interface`; 0 when there is none.
fn ifindex(interface: &str) -> u32 {
    let Ok(name) = CString::new(interface) else {
        return 0;
    };
    // SAFETY: if_nametoindex reads the NUL-terminated name.
    unsafe { libc::if_nametoindex(name.as_ptr()) }
}

/// The id of the program in slot `slot` of the program array pinned at `name` under
/// `dir`'s maps (0 for an empty slot): a lookup in a program array from user space
/// gives the program's id (`bpf_fd_array_map_lookup_elem`, Linux 4.13+).
fn slot_program(dir: &PinDir, name: &str, slot: u32) -> io::Result<u32> {
    let Some(fd) = bpf_sys::open_pinned(&dir.map(name))? else {
        return Ok(0);
    };
    let mut id = [0u8; 4];
    let found = bpf_sys::lookup(fd.as_fd(), &slot.to_ne_bytes(), &mut id)?;
    Ok(if found { u32::from_ne_bytes(id) } else { 0 })
}

/// The id of the program that the XDP link pinned at `dir` runs, when the link is
/// attached to `interface`; `None` when no link is pinned, or it is attached to
/// another interface (0: its interface is gone).
///
/// # Errors
/// When the pin cannot be opened or examined.
pub(super) fn link_program(dir: &PinDir, interface: &str) -> io::Result<Option<u32>> {
    let Some(fd) = bpf_sys::open_pinned(&dir.link())? else {
        return Ok(None);
    };
    let info = bpf_sys::xdp_link_info(fd.as_fd())?;
    let here = ifindex(interface);
    Ok((info.ifindex == here && here != 0).then_some(info.prog_id))
}

/// The programs that run in the datapath pinned at `dir`: the pinned link's (0 unless
/// it is attached to `dir`'s interface) and the tail-call slots'.
///
/// # Errors
/// When a pin cannot be opened or examined.
pub(super) fn running(dir: &PinDir) -> io::Result<ProgramIds> {
    Ok(ProgramIds {
        link: link_program(dir, dir.interface())?.unwrap_or(0),
        rare: slot_program(dir, maps::RARE_PROGS, maps::RARE_SLOT)?,
        full: slot_program(dir, maps::RARE_PROGS, maps::FULL_SLOT)?,
        trace: slot_program(dir, maps::TRACE_PROGS, 0)?,
    })
}

/// Whether a start keeps the running programs: `Ok` when the `programs` element at
/// `dir` names `object` (its digest) and the ids that run now, none of them 0; why
/// not otherwise.
///
/// # Errors
/// The reason the programs are not kept.
pub(super) fn keeps(dir: &PinDir, object: &[u8; 32]) -> Result<(), String> {
    let claimed = match meta::read_programs(&dir.programs()) {
        Ok(Some(claimed)) => claimed,
        Ok(None) => return Err("no programs pin claims them".into()),
        Err(e) => return Err(format!("the programs pin is unreadable: {e}")),
    };
    if claimed == Programs::default() {
        return Err("the programs pin claims nothing".into());
    }
    if &claimed.object != object {
        return Err("they are another build's".into());
    }
    let ids = running(dir).map_err(|e| format!("the running programs cannot be examined: {e}"))?;
    let all_run = [ids.link, ids.rare, ids.full, ids.trace]
        .iter()
        .all(|&id| id != 0);
    if ids == claimed.ids && all_run {
        Ok(())
    } else {
        Err(format!(
            "the programs that run ({ids:?}) are not the ones its build claimed ({:?})",
            claimed.ids
        ))
    }
}

/// Withdraws the claim of the `programs` element at `dir` (removes its pin, whatever
/// it holds), before a start replaces any running program.
///
/// # Errors
/// When the pin exists and cannot be removed.
pub(super) fn withdraw(dir: &PinDir) -> io::Result<()> {
    match std::fs::remove_file(dir.programs()) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Claims the running programs for the object of digest `object`: writes their ids
/// into the `programs` element at `dir` (created if missing). Nothing is claimed when
/// the link does not run on `dir`'s interface.
///
/// # Errors
/// When the programs cannot be examined or the element cannot be written.
pub(super) fn claim(dir: &PinDir, object: &[u8; 32]) -> io::Result<ProgramIds> {
    let ids = running(dir)?;
    if ids.link != 0 {
        meta::write_programs(
            &dir.programs(),
            &Programs {
                object: *object,
                ids,
            },
        )?;
    }
    Ok(ids)
}
