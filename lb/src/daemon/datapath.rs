//! Opening the pinned datapath at start (`lb detach` removes it:
//! [`lb_dataplane::pinned::detach`]).
//!
//! At start ([`open`]): find the interface's pin directory (see
//! [`lb_dataplane::pinned`]), take its lock (a second daemon for the interface is
//! refused with the first one's pid and socket; one that is exiting is waited for),
//! optionally discard what is pinned (`--reset`, which says what it discarded), then
//! load the program over the pinned maps: adopted when compatible, created otherwise,
//! refused — untouched — when incompatible. A datapath that a failed start created is
//! removed again ([`CreatedDatapath`]).

use std::{path::PathBuf, time::Duration};

use anyhow::Context as _;
use tracing::info;

use super::RunOptions;
use crate::config::Config;
use lb_dataplane::{
    KernelDataplane, LoadOptions, Opened, Pinning,
    pinned::{Layout, Owner, PinDir},
};

/// How long a start waits for a daemon that is exiting to release the interface.
const EXITING_WAIT: Duration = Duration::from_secs(10);

/// The data plane opened at start.
pub(super) struct OpenedDatapath {
    /// The data plane (attached by the caller).
    pub(super) dp: KernelDataplane,
    /// Whether it was created by this start (nothing was pinned).
    pub(super) created: bool,
    /// The layout stamp of the loaded object.
    pub(super) layout: String,
    /// For a created datapath, the line the start logs once it succeeded (`created the
    /// datapath at ...`): a start refused later removes it again and never says so.
    pub(super) created_line: Option<String>,
    /// What the migration of a pinned datapath of an older layout did, if there was one.
    pub(super) migration: Option<String>,
}

/// The eBPF object to load: the embedded one, or the file of `--object`.
fn object(options: &RunOptions) -> anyhow::Result<&'static [u8]> {
    match &options.object {
        None => Ok(lb_dataplane::EBPF_OBJECT),
        Some(path) => {
            let bytes = std::fs::read(path)
                .with_context(|| format!("reading the eBPF object {}", path.display()))?;
            // Lives for the whole run, as the embedded object does.
            Ok(Box::leak(bytes.into_boxed_slice()))
        }
    }
}

/// Opens the datapath of `config.interface` (module documentation). When that fails
/// and the process lacks one of the capabilities the kernel asks for the datapath, the
/// error names them: root can lack them too (a bounding set, a container).
pub(super) fn open(config: &Config, options: &RunOptions) -> anyhow::Result<OpenedDatapath> {
    open_with_capabilities(config, options).map_err(|error| {
        let missing = lb_dataplane::missing_capabilities();
        if missing.is_empty() {
            error
        } else {
            error.context(format!(
                "this process lacks {}; the kernel asks CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN for the datapath, which lb.service grants",
                missing.join(", ")
            ))
        }
    })
}

/// The work of [`open`], without its note on missing capabilities.
fn open_with_capabilities(config: &Config, options: &RunOptions) -> anyhow::Result<OpenedDatapath> {
    let object = object(options)?;
    let layout = Layout::of_object(object)?.stamp();
    let dir = PinDir::locate(&config.pin_dir, &config.interface, true)?;
    let owner = Owner {
        pid: std::process::id(),
        exiting: false,
        socket: config.control_socket.display().to_string(),
    };
    // Nothing pinned yet: a failure below removes the directories the lock creates.
    let fresh = !dir.exists();
    let lock = dir.lock(&owner, EXITING_WAIT)?;
    if options.reset && dir.exists() {
        let gone = dir.discard(false)?;
        info!(
            "--reset: discarded the datapath pinned at {} ({gone})",
            dir.shown().display()
        );
    } else if options.reset {
        info!("--reset: nothing was pinned at {}", dir.shown().display());
    }
    let shown = dir.shown();
    let (dp, opened) = KernelDataplane::load_pinned(
        LoadOptions {
            ct_capacity: config.ct_capacity,
            ct_syn_capacity: config.ct_syn_capacity,
            frag_capacity: config.frag_capacity,
            affinity_capacity: config.affinity_capacity,
            exceptions_capacity: config.exceptions_capacity,
        },
        Pinning { dir, lock, object },
    )
    .inspect_err(|_| {
        if fresh {
            remove_skeleton(config);
        }
    })
    .context("loading the XDP program")?;
    let mut created_line = None;
    match opened {
        Opened::Migrated(ref migration) => info!(
            "migrated the datapath pinned at {} to this build's layout {layout}, {migration}; adopting it: connection tracking, the SYN cache, counters and tables kept",
            shown.display()
        ),
        Opened::Adopted => info!(
            "adopting the datapath pinned at {} (layout {layout}): maps, connection tracking and counters kept",
            shown.display()
        ),
        Opened::Created { leftovers } => {
            if leftovers > 0 {
                info!(
                    "removed {leftovers} pins of an earlier start that did not complete at {}",
                    shown.display()
                );
            }
            created_line = Some(format!(
                "created the datapath at {} (layout {layout})",
                shown.display()
            ));
        }
    }
    Ok(OpenedDatapath {
        dp,
        created: matches!(opened, Opened::Created { .. }),
        migration: match &opened {
            Opened::Migrated(m) => Some(m.to_string()),
            _ => None,
        },
        layout,
        created_line,
    })
}

/// Removes the pin directory of `config.interface` when nothing is pinned in it (the
/// empty `maps/` and `tables/` and the owner note a lock creates), and its namespace's
/// directory when that is left empty: a start that failed leaves nothing behind.
fn remove_skeleton(config: &Config) {
    if let Ok(dir) = PinDir::locate(&config.pin_dir, &config.interface, false)
        && !dir.exists()
    {
        let _ = dir.discard(true);
    }
}

/// A datapath this start created, removed again when the guard drops: every way a
/// start fails after [`open`] cleans up by construction. A start that succeeds
/// disarms it ([`Self::disarm`]); an adopted datapath arms nothing and is left as it
/// was found.
pub(super) struct CreatedDatapath {
    /// The pin directory and interface of a created datapath; `None` once disarmed.
    at: Option<(PathBuf, String)>,
}

impl CreatedDatapath {
    /// Guards the datapath of `config.interface` when this start `created` it.
    pub(super) fn new(config: &Config, created: bool) -> Self {
        let at = created.then(|| (config.pin_dir.clone(), config.interface.clone()));
        Self { at }
    }

    /// The start succeeded: the datapath stays.
    pub(super) fn disarm(mut self) {
        self.at = None;
    }
}

impl Drop for CreatedDatapath {
    fn drop(&mut self) {
        if let Some((pin_dir, interface)) = self.at.take()
            && let Ok(dir) = PinDir::locate(&pin_dir, &interface, false)
        {
            let _ = dir.discard(true);
        }
    }
}
