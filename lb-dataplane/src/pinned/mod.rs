//! The pinned datapath: where it lives in bpffs, who controls it, and how it is
//! removed. The datapath outlives the daemon: a restarted `lb run` adopts it
//! ([`super::KernelDataplane::load`] with [`PinDir`]), after migrating it when an
//! older build pinned it with an older map layout ([`migrate`]); `lb detach` removes it.
//!
//! One directory per interface and network namespace:
//!
//! ```text
//! <pin_dir>/netns-<cookie>/<interface>/
//!     meta            layout, instance id, table epoch, attach mode (meta.rs)
//!     owner           pid and control socket of the daemon holding the lock
//!     record          the controller's record: ids and applied state (opaque here)
//!     programs        which build's programs run, by program id (meta.rs)
//!     link            the XDP link (bpf_link): the program stays attached through it
//!     maps/<NAME>     every map of the eBPF object, by its name in the object
//!     tables/<index>  the Maglev table buffers (inner maps of TABLES or TABLES_STD, by
//!                     their index)
//! ```
//!
//! - `<cookie>` is the network namespace's cookie (`SO_NETNS_COOKIE`), which the
//!   kernel never reuses while it runs: a namespace created after another was deleted
//!   can never meet the deleted one's pins, even with the same interface name. At
//!   adoption the pinned link must also be attached to this interface's index.
//! - The lock is an exclusive `flock` on the directory, taken before anything in it is
//!   read and held for the daemon's life; the kernel drops it when the process dies (a
//!   `kill -9` leaves no stale lock).
//! - Pins are kernel memory that no process holds: a leaked directory keeps its maps
//!   (two conntrack maps of 1M entries are about 100 MB) until it is removed.

pub mod bpffs;
mod detach;
pub mod keeper;
pub mod layout;
pub mod meta;
pub mod migrate;

use std::{
    fs::File,
    io,
    os::fd::{AsFd as _, AsRawFd as _},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

pub use bpffs::{Bpffs, BpffsError};
pub use detach::{DetachError, Detached, detach};
pub use keeper::{Mended, PinKeeper};
pub use layout::{Layout, SizeOverride};
pub use meta::{Meta, MetaMap, Owner, ProgramIds, Programs};

use super::bpf_sys;

/// Why the pin directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// No bpffs.
    #[error(transparent)]
    Bpffs(#[from] BpffsError),
    /// Another daemon controls the interface.
    #[error(
        "interface {interface} is controlled by another lb run (pid {pid}, control socket {socket}); stop it first"
    )]
    Held {
        /// The interface.
        interface: String,
        /// That daemon's pid (0 when unknown).
        pid: u32,
        /// Its control socket.
        socket: String,
    },
    /// The pinned datapath cannot be adopted by this build and configuration.
    #[error(
        "the datapath pinned at {dir} is incompatible: {}; it is left untouched and keeps forwarding. `lb run --reset` discards it (and its connection tracking) and starts fresh; `lb detach --interface {interface}` only removes it",
        .differences.join("; ")
    )]
    Incompatible {
        /// The directory (host's view).
        dir: PathBuf,
        /// The interface.
        interface: String,
        /// What differs.
        differences: Vec<String>,
    },
    /// The pinned datapath has a newer map layout than this build knows (a downgrade).
    #[error(
        "the datapath pinned at {dir} has map layout version {pinned}, newer than this build's {ours} (a downgrade): this build cannot read it, which it leaves untouched and forwarding. Run the newer build again, or `lb run --reset` to discard it (and its connection tracking, so every connection) and start fresh; `lb detach --interface {interface}` only removes it"
    )]
    Newer {
        /// The directory (host's view).
        dir: PathBuf,
        /// The interface.
        interface: String,
        /// The pinned datapath's layout version.
        pinned: u32,
        /// This build's (`lb_common::maps::LAYOUT_VERSION`).
        ours: u32,
    },
    /// A file-system or BPF operation failed.
    #[error("{op} {}: {error}", .path.display())]
    Io {
        /// What was done.
        op: &'static str,
        /// On what (host's view when known).
        path: PathBuf,
        /// The error.
        error: io::Error,
    },
    /// The network namespace could not be identified.
    #[error("identifying the network namespace (SO_NETNS_COOKIE needs Linux 5.14): {0}")]
    Netns(io::Error),
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> PinError + use<> {
    let path = path.to_path_buf();
    move |error| PinError::Io { op, path, error }
}

/// The pin directory of one interface in this network namespace.
#[derive(Debug)]
pub struct PinDir {
    bpffs: Bpffs,
    /// Below the bpffs root: `netns-<cookie>/<interface>`.
    relative: PathBuf,
    interface: String,
}

impl PinDir {
    /// The directory for `interface` under `pin_dir` (see [`bpffs::resolve`]); mounts
    /// a bpffs when none is there and `may_mount`. Creates nothing else.
    ///
    /// # Errors
    /// No bpffs, or the namespace cannot be identified.
    pub fn locate(pin_dir: &Path, interface: &str, may_mount: bool) -> Result<Self, PinError> {
        let bpffs = bpffs::resolve(pin_dir, may_mount)?;
        let cookie = bpf_sys::netns_cookie().map_err(PinError::Netns)?;
        Ok(Self {
            bpffs,
            relative: PathBuf::from(format!("netns-{cookie}")).join(interface),
            interface: interface.to_owned(),
        })
    }

    /// The directory as this process reaches it.
    pub fn path(&self) -> PathBuf {
        self.bpffs.access().join(&self.relative)
    }

    /// The directory in the host's view (what `lb status` and logs show).
    pub fn shown(&self) -> PathBuf {
        self.bpffs.shown().join(&self.relative)
    }

    /// The interface.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// The pin of object map `name`.
    pub fn map(&self, name: &str) -> PathBuf {
        self.path().join("maps").join(name)
    }

    /// The pin of table buffer `index` (an index of `TABLES` or `TABLES_STD`).
    pub fn table(&self, index: u32) -> PathBuf {
        self.path().join("tables").join(index.to_string())
    }

    /// The pin of the XDP link.
    pub fn link(&self) -> PathBuf {
        self.path().join("link")
    }

    /// The pin of the `meta` map.
    pub fn meta(&self) -> PathBuf {
        self.path().join("meta")
    }

    /// The pin of the controller's record.
    pub fn record(&self) -> PathBuf {
        self.path().join("record")
    }

    /// The pin of the `programs` map.
    pub fn programs(&self) -> PathBuf {
        self.path().join("programs")
    }

    fn owner(&self) -> PathBuf {
        self.path().join("owner")
    }

    /// Whether anything is pinned here: a pin other than the owner note, in the
    /// directory or in its `maps/` and `tables/` (which [`PinDir::lock`] creates empty).
    pub fn exists(&self) -> bool {
        std::fs::read_dir(self.path()).is_ok_and(|mut d| {
            d.any(|e| e.is_ok_and(|e| e.file_name() != "owner" && pins_under(&e.path()) > 0))
        })
    }

    /// Creates the directory (and `maps/`, `tables/`) and takes its lock for `owner`.
    /// When another process holds it and says it is exiting, waits up to `wait` for it.
    ///
    /// # Errors
    /// [`PinError::Held`] naming the holder; creation failures.
    pub fn lock(&self, owner: &Owner, wait: Duration) -> Result<PinLock, PinError> {
        let dir = self.path();
        for sub in ["maps", "tables"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(io_err("creating", &self.shown().join(sub)))?;
        }
        let file = File::open(&dir).map_err(io_err("opening", &self.shown()))?;
        let deadline = Instant::now() + wait;
        loop {
            // SAFETY: flock on a descriptor we own.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(io_err("locking", &self.shown())(e));
            }
            let holder = meta::read_owner(&self.owner()).ok().flatten();
            if holder.as_ref().is_some_and(|h| h.exiting) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            let holder = holder.unwrap_or_default();
            return Err(PinError::Held {
                interface: self.interface.clone(),
                pid: holder.pid,
                socket: holder.socket,
            });
        }
        meta::write_owner(&self.owner(), owner).map_err(io_err("writing", &self.shown()))?;
        Ok(PinLock {
            file,
            owner_path: self.owner(),
            owner: owner.clone(),
            reader: false,
        })
    }

    /// A handle on the directory for a reader (`lb status` and the other reading verbs
    /// while no daemon runs): no lock is taken, so a daemon starting meanwhile is never
    /// refused, and nothing is written (the owner note stays the last daemon's).
    ///
    /// # Errors
    /// The directory cannot be opened.
    pub fn reader(&self) -> Result<PinLock, PinError> {
        let file = File::open(self.path()).map_err(io_err("opening", &self.shown()))?;
        Ok(PinLock {
            file,
            owner_path: self.owner(),
            owner: Owner::default(),
            reader: true,
        })
    }

    /// The owner note: the pid and control socket of the daemon that holds, or last
    /// held, the directory.
    pub fn owner_note(&self) -> Option<Owner> {
        meta::read_owner(&self.owner()).ok().flatten()
    }

    /// Whether a process holds the directory's lock (a daemon runs): looked up in
    /// `/proc/locks` by the directory's device and inode, without taking any lock.
    pub fn held(&self) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        let Ok(m) = std::fs::metadata(self.path()) else {
            return false;
        };
        // glibc's gnu_dev_major / gnu_dev_minor.
        let dev = m.dev();
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
        let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
        let wanted = format!("{major:02x}:{minor:02x}:{}", m.ino());
        std::fs::read_to_string("/proc/locks").is_ok_and(|locks| {
            locks.lines().any(|l| {
                let mut words = l.split_whitespace();
                words.nth(1) == Some("FLOCK") && l.split_whitespace().any(|w| w == wanted)
            })
        })
    }

    /// The modification time of the controller's record: when the last change the
    /// daemon applied was stored (every store pins a new record in its place).
    pub fn record_time(&self) -> Option<std::time::SystemTime> {
        std::fs::metadata(self.record())
            .and_then(|m| m.modified())
            .ok()
    }

    /// The object maps pinned under `maps/` with their facts.
    ///
    /// # Errors
    /// When a pin cannot be opened or examined.
    pub(crate) fn pinned_maps(&self) -> Result<Vec<(String, bpf_sys::MapInfo)>, PinError> {
        let dir = self.path().join("maps");
        let mut out = Vec::new();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(out);
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(bpf_sys::REPLACING_SUFFIX) {
                continue;
            }
            let path = entry.path();
            let shown = self.shown().join("maps").join(&name);
            let fd = bpf_sys::open_pinned(&path)
                .map_err(io_err("opening", &shown))?
                .ok_or_else(|| io_err("opening", &shown)(io::ErrorKind::NotFound.into()))?;
            let info = bpf_sys::map_info(fd.as_fd()).map_err(io_err("examining", &shown))?;
            out.push((name, info));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Whether the pinned datapath can be adopted by `layout` with `overrides`: `Ok`
    /// with its `meta` when it can, `Ok(None)` when nothing (complete) is pinned.
    ///
    /// # Errors
    /// [`PinError::Incompatible`] naming every difference.
    pub fn check(
        &self,
        layout: &Layout,
        overrides: &[SizeOverride],
    ) -> Result<Option<MetaMap>, PinError> {
        let meta =
            MetaMap::open(&self.meta()).map_err(io_err("reading", &self.shown().join("meta")))?;
        let Some(meta) = meta else {
            return Ok(None);
        };
        let m = meta.get();
        let mut differences = Vec::new();
        if m.format != layout::FORMAT {
            differences.push(format!(
                "pin directory format {} (this build: {})",
                m.format,
                layout::FORMAT
            ));
        }
        if m.layout_version != lb_common::maps::LAYOUT_VERSION {
            differences.push(format!(
                "map value layout version {} (this build: {})",
                m.layout_version,
                lb_common::maps::LAYOUT_VERSION
            ));
        }
        differences.extend(layout.differences(&self.pinned_maps()?, overrides));
        if differences.is_empty() && m.digest != layout.digest {
            differences.push(format!(
                "layout stamp {} (this build: {})",
                layout::stamp_of(&m.digest),
                layout.stamp()
            ));
        }
        if differences.is_empty() {
            Ok(Some(meta))
        } else {
            Err(PinError::Incompatible {
                dir: self.shown(),
                interface: self.interface.clone(),
                differences,
            })
        }
    }

    /// Removes everything pinned here (the caller holds the lock): the XDP link is
    /// detached first, at once; then every pin, and with `remove_dir` the directory
    /// itself (a daemon keeps it: its lock is on it). Reports what was discarded.
    ///
    /// # Errors
    /// When a pin cannot be removed (what was removed stays removed).
    pub fn discard(&self, remove_dir: bool) -> Result<Discarded, PinError> {
        let mut gone = Discarded::default();
        let dir = self.path();
        for name in [lb_common::maps::CONNTRACK_V4, lb_common::maps::CONNTRACK_V6] {
            if let Ok(Some(fd)) = bpf_sys::open_pinned(&self.map(name))
                && let Ok(info) = bpf_sys::map_info(fd.as_fd())
            {
                gone.conntrack_entries +=
                    bpf_sys::count_keys(fd.as_fd(), info.key_size).unwrap_or(0);
            }
        }
        if let Ok(Some(fd)) = bpf_sys::open_pinned(&self.map(lb_common::maps::VIPS))
            && let Ok(info) = bpf_sys::map_info(fd.as_fd())
        {
            gone.vips = bpf_sys::count_keys(fd.as_fd(), info.key_size).unwrap_or(0);
        }
        if let Ok(Some(fd)) = bpf_sys::open_pinned(&self.link()) {
            gone.detached = bpf_sys::link_detach(fd.as_fd()).is_ok();
        }
        let entries = std::fs::read_dir(&dir).map(|d| d.flatten().collect::<Vec<_>>());
        for entry in entries.unwrap_or_default() {
            if !remove_dir && entry.file_name() == "owner" {
                continue;
            }
            let path = entry.path();
            gone.pins += pins_under(&path);
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(io_err("removing", &self.shown().join(entry.file_name())))?;
        }
        if remove_dir {
            let _ = std::fs::remove_dir(&dir);
            if let Some(netns) = dir.parent() {
                let _ = std::fs::remove_dir(netns);
            }
        } else {
            for sub in ["maps", "tables"] {
                std::fs::create_dir_all(dir.join(sub))
                    .map_err(io_err("creating", &self.shown().join(sub)))?;
            }
        }
        Ok(gone)
    }
}

/// The pins at `path`: 1 for a file, the pins inside for a directory (0 when empty).
fn pins_under(path: &Path) -> u64 {
    match std::fs::read_dir(path) {
        Ok(entries) => entries.flatten().map(|e| pins_under(&e.path())).sum(),
        Err(_) => 1,
    }
}

/// What [`PinDir::discard`] removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Discarded {
    /// Established flows in the conntrack maps (IPv4 and IPv6).
    pub conntrack_entries: u64,
    /// VIPs.
    pub vips: u64,
    /// Whether an attached XDP link was detached.
    pub detached: bool,
    /// Pins removed: the files of the directory and of its subdirectories (the owner
    /// note aside when the directory stays).
    pub pins: u64,
}

impl std::fmt::Display for Discarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} conntrack entries, {} VIPs{}",
            self.conntrack_entries,
            self.vips,
            if self.detached {
                ", the attached XDP program"
            } else {
                ""
            }
        )
    }
}

/// The directory's lock, held until dropped (or until the process ends).
#[derive(Debug)]
pub struct PinLock {
    file: File,
    owner_path: PathBuf,
    owner: Owner,
    /// A reader's handle ([`PinDir::reader`]): no lock, never writes the owner note.
    reader: bool,
}

impl PinLock {
    /// Tells a starting daemon that this one is exiting, so that it waits for the lock
    /// instead of refusing.
    pub fn mark_exiting(&mut self) {
        if self.reader {
            return;
        }
        self.owner.exiting = true;
        let _ = meta::write_owner(&self.owner_path, &self.owner);
    }

    /// The descriptor of the locked directory.
    pub fn dir(&self) -> std::os::fd::BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// Takes the lock again on `dir` after the locked directory was removed (an
    /// `rm -rf` under the running daemon): creates it (and `maps/`, `tables/`) again,
    /// locks it and writes the owner note.
    ///
    /// # Errors
    /// [`PinError::Held`] when another process took the new directory meanwhile;
    /// creation failures (bpffs unmounted, for one).
    pub fn relock(&mut self, dir: &PinDir) -> Result<(), PinError> {
        let fresh = dir.lock(&self.owner, Duration::ZERO)?;
        *self = fresh;
        Ok(())
    }
}
