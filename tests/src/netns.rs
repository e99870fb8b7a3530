//! Network namespaces created for one test and deleted when dropped (also on panic).
//!
//! Names are unique per process and call (`<prefix><pid>-<n>`), so two runs can proceed
//! at once. Only namespaces created here are ever touched.

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
}

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
        let ns = Self { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
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
