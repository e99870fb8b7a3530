//! Watching the pinned datapath while the daemon runs, and mending it: the pins (an
//! `rm -rf` of the pin directory, a bpffs remount) are pinned again from this process's
//! descriptors ([`crate::pinned::PinKeeper`]), and an XDP link found detached from the
//! interface (`bpftool link detach`, the interface deleted and created again) is
//! replaced by a new one. What could not be mended is reported: the daemon shows it as
//! a degraded datapath.

use std::{collections::HashSet, os::fd::BorrowedFd, path::Path};

use tracing::warn;

use super::{KernelDataplane, Pinned};
use crate::{AttachMode, bpf_sys, pinned::Mended};

/// What [`KernelDataplane::check_pins`] found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PinCheck {
    /// The pins found missing, and which were pinned again.
    pub pins: Mended,
    /// Whether the XDP link was found detached from the interface.
    pub detached: bool,
    /// Whether a new link was attached in its place.
    pub reattached: bool,
    /// What is still wrong after the check, each a sentence.
    pub problems: Vec<String>,
}

impl PinCheck {
    /// Whether the check found anything lost (mended or not).
    pub fn found_loss(&self) -> bool {
        !self.pins.lost.is_empty() || self.detached
    }
}

/// Whether a missing pin at `rel` (relative to the pin directory) is one the data plane
/// still uses: every pin but the table buffers of VIPs no longer written (`live` holds
/// the VIP ids written), which the data plane removes itself.
fn still_used(rel: &Path, live: &HashSet<u32>) -> bool {
    match rel.strip_prefix("tables") {
        Ok(index) => index
            .to_str()
            .and_then(|i| i.parse::<u32>().ok())
            .is_some_and(|i| live.contains(&(i / 2))),
        Err(_) => true,
    }
}

/// Whether link `fd` still runs on an interface: `Ok(false)` once detached.
fn link_attached(fd: Option<BorrowedFd<'_>>) -> Result<bool, String> {
    let fd = fd.ok_or("no descriptor of the XDP link is held")?;
    bpf_sys::xdp_link_info(fd)
        .map(|facts| facts.ifindex != 0)
        .map_err(|e| format!("the XDP link cannot be examined: {e}"))
}

impl KernelDataplane {
    /// Takes a descriptor of every pin of the directory (after the attach, so the link
    /// is among them); [`Self::check_pins`] keeps them up to date.
    pub fn keep_pins(&mut self) {
        if let Some(Pinned { dir, keeper, .. }) = self.pinned.as_mut() {
            keeper.refresh(dir);
        }
    }

    /// Checks the pins and the XDP link of an attached pinned data plane and mends what
    /// it can: missing pins are pinned again, a detached link is replaced by a new one
    /// on `iface` in the mode recorded in `meta`. A data plane that is not pinned, or
    /// not attached, has nothing to check.
    pub fn check_pins(&mut self, iface: &str) -> PinCheck {
        let mut check = PinCheck::default();
        let live: HashSet<u32> = self.vip_keys.values().copied().collect();
        let Some(Pinned {
            dir,
            lock,
            keeper,
            link,
            ..
        }) = self.pinned.as_mut()
        else {
            return check;
        };
        if link.is_none() {
            return check;
        }
        check.pins = keeper.mend(dir, lock, |rel| still_used(rel, &live));
        check.problems.extend(
            check
                .pins
                .failed
                .iter()
                .map(|f| format!("pin not restored: {f}")),
        );
        match link_attached(keeper.get("link")) {
            Ok(true) => {}
            Ok(false) => check.detached = true,
            Err(e) => check.problems.push(e),
        }
        if check.detached {
            let mode = self.attached_mode().unwrap_or(AttachMode::Skb);
            match self.attach_pinned(iface, mode) {
                Ok(()) => check.reattached = true,
                Err(e) => {
                    warn!("attaching the XDP program to {iface} again: {e}");
                    check.problems.push(format!(
                        "the XDP program is detached from {iface} and could not be attached again: {e}"
                    ));
                }
            }
        }
        self.keep_pins();
        check
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_table_pin_counts_only_while_its_vip_is_written() {
        let live: HashSet<u32> = [3].into_iter().collect();
        assert!(still_used(Path::new("maps/VIPS"), &live));
        assert!(still_used(Path::new("link"), &live));
        assert!(still_used(Path::new("tables/6"), &live));
        assert!(still_used(Path::new("tables/7"), &live));
        assert!(!still_used(Path::new("tables/8"), &live));
        assert!(!still_used(Path::new("tables/x"), &live));
    }
}
