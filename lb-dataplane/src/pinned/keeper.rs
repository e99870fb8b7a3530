//! Keeping the pins while the daemon runs: a descriptor of every pin of the directory,
//! to pin it again when it goes.
//!
//! A pin is a name in bpffs for a kernel object (a map, the XDP link); the object lives
//! while a name or a descriptor refers to it. An `rm -rf` of the pin directory removes
//! the names only: the running daemon still holds the objects, but the next daemon
//! would find nothing to adopt, and when this one exits, its descriptor of the XDP link
//! goes and the program is detached. The [`PinKeeper`] holds a descriptor of every pin
//! it saw ([`PinKeeper::refresh`]) and pins each missing one again from it
//! ([`PinKeeper::mend`]), recreating the directory (and its lock) first.

use std::{
    collections::BTreeMap,
    io,
    os::fd::{AsFd as _, OwnedFd},
    path::{Path, PathBuf},
};

use super::{PinDir, PinLock};
use crate::bpf_sys;

/// Descriptors of the pins of one directory, by path relative to it (`maps/VIPS`,
/// `tables/7`, `link`, ...).
#[derive(Debug, Default)]
pub struct PinKeeper {
    kept: BTreeMap<PathBuf, OwnedFd>,
}

/// What [`PinKeeper::mend`] found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mended {
    /// Pins found missing, relative to the directory.
    pub lost: Vec<String>,
    /// Of those, pinned again from this process's descriptors.
    pub repinned: Vec<String>,
    /// Of those, not pinned again, each with why.
    pub failed: Vec<String>,
    /// Whether the directory itself was gone (and its lock with it).
    pub dir_lost: bool,
}

/// The pins under `dir`, relative to `root` (subdirectories walked; the owner note and
/// the temporary names of a pin being replaced left out).
fn pins(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            pins(root, &path, out);
        } else if name != "owner"
            && !name.ends_with(bpf_sys::REPLACING_SUFFIX)
            && let Ok(rel) = path.strip_prefix(root)
        {
            out.push(rel.to_path_buf());
        }
    }
}

impl PinKeeper {
    /// Takes a descriptor of every pin now in `dir` (replacing the one kept for the
    /// same name: the daemon replaces some pins, the record and table buffers). Pins
    /// that cannot be opened are skipped.
    pub fn refresh(&mut self, dir: &PinDir) {
        let root = dir.path();
        let mut found = Vec::new();
        pins(&root, &root, &mut found);
        for rel in found {
            if let Ok(Some(fd)) = bpf_sys::open_pinned(&root.join(&rel)) {
                self.kept.insert(rel, fd);
            }
        }
    }

    /// Forgets the pins for which `gone` is true (pins this process removed itself).
    pub fn forget(&mut self, mut gone: impl FnMut(&Path) -> bool) {
        self.kept.retain(|rel, _| !gone(rel));
    }

    /// The descriptor kept for `rel` (a path relative to the directory).
    pub fn get(&self, rel: &str) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.kept.get(Path::new(rel)).map(|fd| fd.as_fd())
    }

    /// Pins again every kept pin missing from `dir`, except those `expected` says this
    /// process removed (they are forgotten). A directory that is gone is created again
    /// and `lock` moved to it (its lock went with the old one, so a second daemon could
    /// have taken the interface).
    pub fn mend(
        &mut self,
        dir: &PinDir,
        lock: &mut PinLock,
        mut expected: impl FnMut(&Path) -> bool,
    ) -> Mended {
        let root = dir.path();
        let mut out = Mended::default();
        let missing: Vec<PathBuf> = self
            .kept
            .keys()
            .filter(|rel| !root.join(rel).exists())
            .cloned()
            .collect();
        self.forget(|rel| missing.iter().any(|m| m == rel) && !expected(rel));
        let missing: Vec<PathBuf> = missing.into_iter().filter(|m| expected(m)).collect();
        if missing.is_empty() {
            return out;
        }
        out.dir_lost = !root.join("owner").exists();
        if out.dir_lost
            && let Err(e) = lock.relock(dir)
        {
            out.failed.push(format!("the directory's lock: {e}"));
        }
        for rel in missing {
            let shown = rel.display().to_string();
            out.lost.push(shown.clone());
            match self.repin(&root, &rel) {
                Ok(()) => out.repinned.push(shown),
                Err(e) => out.failed.push(format!("{shown}: {e}")),
            }
        }
        out
    }

    /// Pins the kept descriptor of `rel` at `root/rel` (its directory created).
    fn repin(&self, root: &Path, rel: &Path) -> io::Result<()> {
        let fd = self
            .kept
            .get(rel)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        bpf_sys::pin(fd.as_fd(), &path)
    }
}
