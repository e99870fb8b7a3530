//! Network namespaces created for one test and deleted when dropped (also on panic).
//!
//! Names are unique per process and call (`<prefix><pid>-<n>`), so two runs can proceed
//! at once. Only namespaces created here are ever touched.
//!
//! Pins outlive namespaces: an `lb run` in a namespace pins its datapath under the
//! default `pin_dir` in a directory of the namespace's cookie
//! (`/sys/fs/bpf/lb/netns-<cookie>`), which deleting the namespace does not free. So
//! dropping a [`NetNs`] also removes that directory (whatever a test left pinned there,
//! also when it failed).

use std::{
    fs::File,
    os::fd::AsRawFd as _,
    process::{Command, Output},
    sync::atomic::{AtomicU32, Ordering},
};

use anyhow::{Context as _, bail};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A named network namespace (`ip netns add`), deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
    /// The namespace's cookie (`SO_NETNS_COOKIE`), which names its pin directory.
    cookie: Option<u64>,
}

/// The cookie of the calling thread's network namespace.
fn netns_cookie() -> std::io::Result<u64> {
    /// `SO_NETNS_COOKIE`.
    const SO_NETNS_COOKIE: libc::c_int = 71;
    let sock = std::os::unix::net::UnixDatagram::unbound()?;
    let mut cookie = 0u64;
    let mut len = libc::socklen_t::try_from(size_of::<u64>()).unwrap_or(8);
    // SAFETY: getsockopt writes at most `len` bytes into `cookie`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            (&raw mut cookie).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cookie)
}

/// The default root of pinned datapaths (`pin_dir`), in the host's view.
pub const PIN_ROOT: &str = "/sys/fs/bpf/lb";

impl NetNs {
    /// Creates a namespace named `<prefix><pid>-<n>` with its loopback up.
    ///
    /// # Errors
    /// When `ip netns add` fails (not root, iproute2 missing).
    pub fn create(prefix: &str) -> anyhow::Result<Self> {
        let name = format!(
            "{prefix}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        run(Command::new("ip").args(["netns", "add", &name]))?;
        let mut ns = Self { name, cookie: None };
        ns.cookie = ns.enter(netns_cookie)?.ok();
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The directory where datapaths of this namespace are pinned under the default
    /// `pin_dir` (one subdirectory per interface).
    pub fn pin_dir(&self) -> Option<std::path::PathBuf> {
        self.cookie
            .map(|c| std::path::Path::new(PIN_ROOT).join(format!("netns-{c}")))
    }

    /// Runs `ip -n <ns> ARGS...`.
    ///
    /// # Errors
    /// When `ip` exits non-zero; the message includes its stderr.
    pub fn ip(&self, args: &[&str]) -> anyhow::Result<()> {
        run(Command::new("ip").args(["-n", &self.name]).args(args))
    }

    /// Runs a command inside the namespace (`ip netns exec`) and returns its output.
    ///
    /// # Errors
    /// When the command cannot be started.
    pub fn exec(&self, program: &str, args: &[&str]) -> anyhow::Result<Output> {
        Command::new("ip")
            .args(["netns", "exec", &self.name, program])
            .args(args)
            .output()
            .with_context(|| format!("ip netns exec {} {program}", self.name))
    }

    /// Runs `f` on a thread whose network namespace is this one and returns its result.
    ///
    /// # Errors
    /// When the namespace cannot be entered.
    ///
    /// # Panics
    /// Re-raises a panic of `f`.
    pub fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> anyhow::Result<T> {
        let path = format!("/run/netns/{}", self.name);
        let file = File::open(&path).with_context(|| format!("open {path}"))?;
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    // SAFETY: setns only changes this (scoped, short-lived) thread's network
                    // namespace; the fd is valid for the duration of the call.
                    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                    if rc != 0 {
                        return Err(std::io::Error::last_os_error())
                            .with_context(|| format!("setns into {path}"));
                    }
                    Ok(f())
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        if let Some(dir) = self.pin_dir() {
            // Unlinking the pins frees the maps; the XDP link goes with the namespace.
            let _ = std::fs::remove_dir_all(dir);
        }
        // Deleting the namespace also removes every interface inside it.
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .output();
    }
}

/// Runs a command and fails with its stderr when it exits non-zero.
///
/// # Errors
/// When the command cannot start or exits non-zero.
pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("could not start {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
