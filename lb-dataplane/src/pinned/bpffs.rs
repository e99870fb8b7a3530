//! Finding the BPF file system (bpffs) that holds the pins, as the host sees it.
//!
//! Pins live as long as the bpffs instance that holds them, and a bpffs lives as long as
//! a mount of it: one mounted in a short-lived mount namespace dies with it. `ip netns
//! exec` (how test beds, and some operators, start `lb run` in a network namespace)
//! gives the command a private mount namespace with a fresh `/sys`, which hides the
//! host's `/sys/fs/bpf`. So `pin_dir` (default `/sys/fs/bpf/lb`) names a path *in the
//! host's view*, found in this order:
//!
//! 1. in our own view, when the path (or its nearest existing parent) is on a bpffs —
//!    the usual case, also under systemd, whose unit's private mount namespace keeps
//!    the host's `/sys/fs/bpf`;
//! 2. else, when our mount namespace is not the host's: through `/proc/<pid>/root` of a
//!    process in the host's mount namespace — PID 1 when we may look at it, else the
//!    nearest ancestor process in another mount namespace (the one `ip netns exec`
//!    left, when PID 1 is out of reach as on this project's machines); a daemon whose
//!    parent is PID 1 then cannot tell whether its namespace is the host's, and the
//!    start fails with that reason rather than pin into a namespace that dies with it;
//! 3. else, when no bpffs is mounted there at all and the path is under `/sys/fs/bpf`:
//!    a bpffs is mounted at `/sys/fs/bpf` in that host mount namespace (by a forked
//!    child that enters it with `setns`, as Cilium mounts one when missing), and logged.
//!
//! Paths reached through `/proc/<pid>/root` are used through an `O_PATH` descriptor of
//! the bpffs directory held open for the daemon's lifetime (`/proc/self/fd/N/...`), so
//! they stay valid when that process exits. `lb detach` resolves the same way (without
//! mounting), and so finds the same pins from the same network namespace.

use std::{
    ffi::CString,
    io,
    os::{
        fd::{AsRawFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::{Path, PathBuf},
};

use tracing::info;

/// `BPF_FS_MAGIC` (`include/uapi/linux/magic.h`).
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
/// Where bpffs is mounted by convention (systemd mounts it there at boot).
pub(crate) const CONVENTIONAL: &str = "/sys/fs/bpf";

/// Why no bpffs could be found or mounted.
#[derive(Debug, thiserror::Error)]
pub enum BpffsError {
    /// `pin_dir` is not absolute.
    #[error("pin_dir {0}: expected an absolute path")]
    Relative(PathBuf),
    /// No bpffs, and none may be mounted there.
    #[error(
        "pin_dir {path}: no BPF file system (bpffs) holds it{reach}; mount one (`mount -t bpf bpf {mount}`) or set pin_dir to a directory on one"
    )]
    Missing {
        /// The configured path.
        path: PathBuf,
        /// Where one would be mounted.
        mount: String,
        /// Why the host's view could not be used, if it could not.
        reach: String,
    },
    /// Mounting failed.
    #[error("pin_dir {path}: mounting a bpffs at {mount}: {error}")]
    Mount {
        /// The configured path.
        path: PathBuf,
        /// The mount point.
        mount: String,
        /// The kernel's error.
        error: io::Error,
    },
    /// A system call failed.
    #[error("pin_dir {path}: {op}: {error}")]
    Io {
        /// The configured path.
        path: PathBuf,
        /// What failed.
        op: String,
        /// The kernel's error.
        error: io::Error,
    },
}

/// A resolved `pin_dir`: the path to use, and the path as the host shows it.
#[derive(Debug)]
pub struct Bpffs {
    /// Where this process reaches `pin_dir` (the configured path itself, or
    /// `/proc/self/fd/N/<rest>`).
    access: PathBuf,
    /// The configured path (the host's view).
    shown: PathBuf,
    /// The `O_PATH` descriptor `access` goes through, if any.
    _dir: Option<OwnedFd>,
}

impl Bpffs {
    /// The path this process uses.
    pub fn access(&self) -> &Path {
        &self.access
    }

    /// The path in the host's view (the configured one).
    pub fn shown(&self) -> &Path {
        &self.shown
    }
}

/// Whether `path`, or its nearest existing ancestor, is on a bpffs; `None` when no
/// ancestor can be examined at all.
fn on_bpffs(path: &Path) -> Option<(bool, PathBuf)> {
    let mut probe = path.to_path_buf();
    loop {
        if let Some(magic) = fs_magic(&probe) {
            return Some((magic == BPF_FS_MAGIC, probe));
        }
        if !probe.pop() {
            return None;
        }
    }
}

/// The file system magic of `path` (`statfs(2)`), if it exists.
fn fs_magic(path: &Path) -> Option<i64> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs fills the zeroed struct; `c` is a valid C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &raw mut st) } != 0 {
        return None;
    }
    #[allow(
        clippy::cast_possible_wrap,
        reason = "f_type is a magic number, compared as is"
    )]
    Some(st.f_type as i64)
}

/// The mount namespace of `pid` (`/proc/<pid>/ns/mnt`), if we may read it.
fn mount_ns(pid: &str) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()
}

/// The parent pid of `pid` (`/proc/<pid>/stat`, field 4).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// A process in the host's mount namespace when ours is another: PID 1 if readable,
/// else the nearest ancestor in another mount namespace. `Err` says why none was found
/// when ours differs from PID 1's or PID 1's cannot be read.
fn host_process() -> Result<Option<u32>, String> {
    let ours = mount_ns("self").ok_or("cannot read /proc/self/ns/mnt")?;
    let ancestors = std::iter::successors(parent_of(std::process::id()), |&p| {
        (p > 1).then(|| parent_of(p)).flatten()
    })
    .map(|p| (p, mount_ns(&p.to_string())));
    host_among(&ours, mount_ns("1"), ancestors)
}

/// [`host_process`] over our mount namespace `ours`, PID 1's (`None`: unreadable) and
/// our ancestors from the parent up, each with its mount namespace (`None`:
/// unreadable), ending at PID 1.
///
/// With PID 1's unreadable, a chain of ancestors in our namespace up to PID 1 means we
/// are in the host's (a shell's child). A parent that is PID 1 itself proves nothing:
/// a daemon whose starter exited (`ip netns exec ... &` from a subshell) is re-parented
/// to PID 1 but keeps the private mount namespace `ip netns exec` gave it, and a bpffs
/// mounted there would take the pins with it when the daemon exits.
fn host_among(
    ours: &Path,
    init: Option<PathBuf>,
    ancestors: impl Iterator<Item = (u32, Option<PathBuf>)>,
) -> Result<Option<u32>, String> {
    if let Some(init) = init {
        return Ok((init != ours).then_some(1));
    }
    let mut same = 0;
    for (pid, ns) in ancestors {
        if pid <= 1 {
            break;
        }
        match ns {
            Some(ns) if ns != ours => return Ok(Some(pid)),
            Some(_) => same += 1,
            None => {
                return Err(format!(
                    "the mount namespace of PID 1 and of ancestor {pid} cannot be read"
                ));
            }
        }
    }
    if same == 0 {
        return Err(
            "the mount namespace of PID 1 cannot be read and this process's parent is PID 1, so whether this mount namespace is the host's cannot be told"
                .to_owned(),
        );
    }
    Ok(None)
}

/// `path` without its leading `/`.
fn relative(path: &Path) -> &Path {
    path.strip_prefix("/").unwrap_or(path)
}

/// Opens `dir` as an `O_PATH` directory descriptor.
fn open_path(dir: &Path) -> io::Result<OwnedFd> {
    std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)
        .map(OwnedFd::from)
}

use std::os::unix::fs::OpenOptionsExt as _;

/// Resolves `pin_dir` (see the module documentation); mounts a bpffs when none is there
/// and `may_mount`.
///
/// # Errors
/// [`BpffsError`] naming the path and what is missing or failed.
pub fn resolve(pin_dir: &Path, may_mount: bool) -> Result<Bpffs, BpffsError> {
    if !pin_dir.is_absolute() {
        return Err(BpffsError::Relative(pin_dir.to_path_buf()));
    }
    if let Some((true, _)) = on_bpffs(pin_dir) {
        return Ok(Bpffs {
            access: pin_dir.to_path_buf(),
            shown: pin_dir.to_path_buf(),
            _dir: None,
        });
    }
    let host = host_process();
    if let Ok(Some(pid)) = host {
        let through = PathBuf::from(format!("/proc/{pid}/root")).join(relative(pin_dir));
        if let Some((true, existing)) = on_bpffs(&through) {
            return through_fd(pin_dir, &through, &existing);
        }
    }
    let mount = CONVENTIONAL.to_owned();
    let reach = match &host {
        Err(why) => format!(
            " in this mount namespace ({why}; `ip netns exec` gives its command a private mount namespace, where pins would die with the daemon: start lb run from a process that outlives the start, e.g. `ip netns exec NS lb run ...` from a shell that waits for it, or lb.service with NetworkNamespacePath=)"
        ),
        Ok(_) => String::new(),
    };
    if !may_mount || !pin_dir.starts_with(CONVENTIONAL) || host.is_err() {
        return Err(BpffsError::Missing {
            path: pin_dir.to_path_buf(),
            mount,
            reach,
        });
    }
    let pid = host.ok().flatten();
    mount_bpffs(pid).map_err(|error| BpffsError::Mount {
        path: pin_dir.to_path_buf(),
        mount: mount.clone(),
        error,
    })?;
    match pid {
        Some(pid) => info!(
            "no bpffs was mounted: mounted one at {CONVENTIONAL} in the host's mount namespace (that of pid {pid})"
        ),
        None => info!("no bpffs was mounted: mounted one at {CONVENTIONAL}"),
    }
    match pid {
        None => Ok(Bpffs {
            access: pin_dir.to_path_buf(),
            shown: pin_dir.to_path_buf(),
            _dir: None,
        }),
        Some(pid) => {
            let through = PathBuf::from(format!("/proc/{pid}/root")).join(relative(pin_dir));
            let existing = PathBuf::from(format!("/proc/{pid}/root{CONVENTIONAL}"));
            through_fd(pin_dir, &through, &existing)
        }
    }
}

/// A [`Bpffs`] reached through `/proc/<pid>/root`: an `O_PATH` descriptor of
/// `existing` (a directory on the bpffs), and the rest of the path below it.
fn through_fd(pin_dir: &Path, through: &Path, existing: &Path) -> Result<Bpffs, BpffsError> {
    let fd = open_path(existing).map_err(|error| BpffsError::Io {
        path: pin_dir.to_path_buf(),
        op: format!("opening {}", existing.display()),
        error,
    })?;
    let rest = through.strip_prefix(existing).unwrap_or(Path::new(""));
    Ok(Bpffs {
        access: PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())).join(rest),
        shown: pin_dir.to_path_buf(),
        _dir: Some(fd),
    })
}

/// Mounts a bpffs (mode 0700) at [`CONVENTIONAL`] in the mount namespace of `pid`
/// (a forked child enters it; `setns` into a mount namespace is refused to a
/// multi-threaded process), or in ours when `None`.
fn mount_bpffs(pid: Option<u32>) -> io::Result<()> {
    let target = CString::new(CONVENTIONAL).map_err(io::Error::other)?;
    let fstype = c"bpf";
    let data = c"mode=0700";
    let Some(pid) = pid else {
        // SAFETY: valid C strings; mount(2) only reads them.
        let rc = unsafe {
            libc::mount(
                fstype.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                data.as_ptr().cast(),
            )
        };
        return if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        };
    };
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/mnt"))?;
    // SAFETY: the child only makes system calls (setns, mount, _exit) before exiting:
    // nothing that could depend on locks held by other threads at fork time.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(io::Error::last_os_error());
    }
    if child == 0 {
        // SAFETY: raw system calls on valid arguments, then _exit; see above.
        unsafe {
            let mut code = 0;
            if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNS) != 0 {
                code = 100 + *libc::__errno_location();
            } else if libc::mount(
                fstype.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                data.as_ptr().cast(),
            ) != 0
            {
                code = *libc::__errno_location();
            }
            libc::_exit(code.min(255));
        }
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    if unsafe { libc::waitpid(child, &raw mut status, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
        Some(0) => Ok(()),
        Some(code) if code >= 100 => Err(io::Error::other(format!(
            "entering the mount namespace of pid {pid}: {}",
            io::Error::from_raw_os_error(code - 100)
        ))),
        Some(code) => Err(io::Error::from_raw_os_error(code)),
        None => Err(io::Error::other("the mounting child was killed")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_refused() {
        let e = resolve(Path::new("lb"), false).unwrap_err();
        assert_eq!(e.to_string(), "pin_dir lb: expected an absolute path");
    }

    #[test]
    fn a_path_on_no_bpffs_is_refused_without_mounting() {
        let e = resolve(Path::new("/proc/lb-no-such-dir"), false).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("pin_dir /proc/lb-no-such-dir: no BPF file system (bpffs) holds it"),
            "{e}"
        );
    }

    #[test]
    fn the_host_namespace_is_found_or_its_absence_proved() {
        let ours = Path::new("mnt:[2]");
        let host = || Some(PathBuf::from("mnt:[1]"));
        let same = || Some(PathBuf::from("mnt:[2]"));
        // PID 1 readable: it decides.
        assert_eq!(host_among(ours, host(), std::iter::empty()), Ok(Some(1)));
        assert_eq!(host_among(ours, same(), std::iter::empty()), Ok(None));
        // PID 1 unreadable: the nearest ancestor in another namespace...
        let chain = [(40, same()), (30, host()), (1, None)];
        assert_eq!(host_among(ours, None, chain.into_iter()), Ok(Some(30)));
        // ...or a chain of ancestors in ours up to PID 1: ours is the host's.
        let chain = [(40, same()), (30, same()), (1, None)];
        assert_eq!(host_among(ours, None, chain.into_iter()), Ok(None));
        // An unreadable ancestor, or a parent that is PID 1 (a re-parented daemon that
        // may sit in a private namespace): no answer, and no bpffs is mounted here.
        let chain = [(40, same()), (30, None), (1, None)];
        assert!(host_among(ours, None, chain.into_iter()).is_err());
        let e = host_among(ours, None, [(1, None)].into_iter()).unwrap_err();
        assert!(e.contains("parent is PID 1"), "{e}");
    }

    #[test]
    fn parent_pids_come_from_proc_stat() {
        let me = std::process::id();
        let parent = parent_of(me).expect("a parent");
        // SAFETY: getppid has no preconditions.
        let expected = unsafe { libc::getppid() };
        assert_eq!(i64::from(parent), i64::from(expected));
    }
}
