//! Test support for the upgrades across map layouts: runs an older layout's build's
//! programs (`tests/data/lb-ebpf-layout1.o` to `lb-ebpf-layout5.o`) on a datapath
//! pinned in that layout, as that build's `lb run` left it. The maps come first from
//! `crate::pinned::migrate::rewind_to_layout1` to `rewind_to_layout5`; here the old
//! object is loaded over those pins (every map by its pin, as `load_pinned` does), its
//! tail-called programs put in `RARE_PROGS`, and its load balancer program put on the
//! pinned XDP link with `bpf_link_update`, so that it forwards from then on.

use aya::programs::links::{FdLink, PinnedLink};
use aya::{EbpfLoader, programs::xdp::XdpLink};
use lb_common::maps;

use super::{KernelDataplane, LoadOptions, load::load_programs, prog_err, xdp};
use crate::{
    DataplaneError,
    pinned::{Layout, PinDir},
};

/// Loads `object` (the build's of layout `version`) over the maps pinned at `dir` with
/// the sizes of `options`, and replaces the program of the pinned link with its
/// `lb_xdp`. The `programs` pin (which build's programs run) is removed: the old build
/// wrote its own. Returns the kernel's id of the program now attached.
///
/// # Errors
/// When the object cannot be loaded or the link updated.
pub fn run_old_program(
    dir: &PinDir,
    object: &[u8],
    version: u32,
    options: LoadOptions,
) -> Result<u32, DataplaneError> {
    let layout = Layout::of_object_at(object, version)
        .map_err(|e| DataplaneError::OutOfRange(e.to_string()))?;
    let _ = std::fs::remove_file(dir.programs());
    let paths: Vec<(String, std::path::PathBuf)> = layout
        .maps
        .iter()
        .map(|m| (m.name.clone(), dir.map(&m.name)))
        .collect();
    let mut loader = EbpfLoader::new();
    for (name, path) in &paths {
        loader.map_pin_path(name.as_str(), path.as_path());
    }
    let mut ebpf = KernelDataplane::load_object(&options, &mut loader, object, false)?;
    load_programs(&mut ebpf)?;
    let link = PinnedLink::from_pin(dir.link()).map_err(|e| DataplaneError::Syscall {
        op: "opening the pinned link".into(),
        error: std::io::Error::other(e.to_string()),
    })?;
    let link = XdpLink::try_from(FdLink::from(link)).map_err(|e| DataplaneError::Syscall {
        op: "the pinned link".into(),
        error: std::io::Error::other(e.to_string()),
    })?;
    let program = xdp(&mut ebpf, maps::XDP_PROGRAM)?;
    let id = program
        .attach_to_link(link)
        .map_err(prog_err(maps::XDP_PROGRAM))?;
    let info = program.info().map_err(prog_err(maps::XDP_PROGRAM))?;
    // The link stays pinned: dropping our descriptor of it detaches nothing.
    let link = program.take_link(id).map_err(prog_err(maps::XDP_PROGRAM))?;
    drop(FdLink::try_from(link));
    Ok(info.id())
}
