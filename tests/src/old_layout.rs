//! Datapaths of older map layouts, as their builds' `lb run` left them: this build's
//! daemon creates the datapath and stops, its maps are rewritten into the old layout
//! (`lb_dataplane::pinned::migrate::rewind_to_layout1` to `rewind_to_layout5`), and the
//! old build's eBPF object (`tests/data/lb-ebpf-layout<N>.o`, see the README there)
//! runs on the pinned link. The next `lb run` of this build then migrates it: an
//! upgrade, in the upgrade tests and the end-to-end beds.

use std::path::Path;

use anyhow::Context as _;
use lb_dataplane::{LoadOptions, kernel::old_layout::run_old_program, pinned::PinDir};

use crate::{
    daemon::{CT_CAPACITY, CT_SYN_CAPACITY, Daemon, Stop},
    netns::PIN_ROOT,
    testbed::{LB_IFACE, TestBed},
};

/// Rewrites a pin directory's maps into an older layout for that build's object.
pub type Rewind = fn(&PinDir, &[u8]) -> std::io::Result<()>;

/// The eBPF object of the last build of layout `version`.
///
/// # Panics
/// When the file is missing (the test data is part of the repository).
#[must_use]
pub fn old_object(version: u32) -> Vec<u8> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("data/lb-ebpf-layout{version}.o"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The XDP program id on the bed's LB interface, from `ip -j -d link show`.
///
/// # Panics
/// When `ip` fails or prints no JSON.
#[must_use]
pub fn xdp_program(bed: &TestBed) -> Option<u64> {
    let out = bed
        .lb_ns()
        .exec("ip", &["-j", "-d", "link", "show", "dev", bed.lb_iface()])
        .expect("ip link");
    let links: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j");
    links[0]["xdp"]["prog"]["id"].as_u64()
}

/// Runs `f` on the pin directory of the bed's LB interface, in its namespace.
///
/// # Errors
/// When the namespace cannot be entered, the pin directory is missing or `f` fails.
pub fn in_pin_dir<T: Send>(
    bed: &TestBed,
    f: impl FnOnce(&PinDir) -> anyhow::Result<T> + Send,
) -> anyhow::Result<T> {
    bed.lb_ns()
        .enter(|| {
            let dir = PinDir::locate(Path::new(PIN_ROOT), LB_IFACE, false)?;
            f(&dir)
        })
        .context("entering the LB namespace")?
}

/// Stops daemon `lb` and turns its pinned datapath into layout `version` (rewound by
/// `rewind`), run by that build's program. Returns the old program's id.
///
/// # Errors
/// When the maps cannot be rewound, the old program cannot be loaded, or another
/// program than the old one runs after.
pub fn run_old_layout(
    bed: &TestBed,
    lb: &mut Daemon<'_>,
    version: u32,
    rewind: Rewind,
) -> anyhow::Result<u32> {
    lb.halt(Stop::Term);
    let created = xdp_program(bed).context("no program attached")?;
    let object = old_object(version);
    let old = in_pin_dir(bed, |dir| {
        rewind(dir, &object)?;
        let options = LoadOptions {
            ct_capacity: CT_CAPACITY,
            ct_syn_capacity: CT_SYN_CAPACITY,
            ..LoadOptions::default()
        };
        Ok(run_old_program(dir, &object, version, options)?)
    })?;
    anyhow::ensure!(
        xdp_program(bed) == Some(u64::from(old)) && u64::from(old) != created,
        "the layout-{version} program {old} does not run in place of {created}"
    );
    Ok(old)
}
