//! The `bird2` step: the BIRD 2 routing daemon that the multi-instance tests and
//! benchmark run, one `bird -c FILE -s SOCKET -P PIDFILE` per network namespace (a
//! router and each load-balancer instance), driven with `birdc -s SOCKET`.
//!
//! Debian's package ships a `bird.service` unit and an `/etc/init.d/bird` script, and
//! its maintainer scripts start the service right away. A system BIRD in the root
//! namespace would not see the tests' namespaces, but it is a routing daemon with a
//! default configuration syncing the host's kernel tables, which nothing here wants.
//! So the package is installed with the service start denied (a temporary
//! `/usr/sbin/policy-rc.d` answering 101, "action not allowed", the interface that
//! `invoke-rc.d` and `deb-systemd-invoke` consult; an existing policy file is left as
//! it is), and its start at boot is disabled afterwards. Nothing is stopped when the
//! package was already installed: a BIRD the administrator runs is theirs.

use std::{os::unix::fs::PermissionsExt as _, path::Path, process::Command};

use anyhow::Context as _;

use crate::cmd;

/// The Debian package.
pub(super) const PACKAGE: &str = "bird2";

const POLICY: &str = "/usr/sbin/policy-rc.d";

/// `/usr/sbin/policy-rc.d` denying every service action while it lives; removed on drop
/// (only when this process created it).
struct DenyServiceStarts {
    created: bool,
}

impl DenyServiceStarts {
    fn install() -> anyhow::Result<Self> {
        if Path::new(POLICY).exists() {
            eprintln!("xtask setup: {POLICY} exists: it decides whether services start");
            return Ok(Self { created: false });
        }
        std::fs::write(
            POLICY,
            "#!/bin/sh\n# Written by `cargo xtask setup` while it installs bird2.\nexit 101\n",
        )
        .with_context(|| format!("writing {POLICY}"))?;
        let guard = Self { created: true };
        std::fs::set_permissions(POLICY, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("making {POLICY} executable"))?;
        Ok(guard)
    }
}

impl Drop for DenyServiceStarts {
    fn drop(&mut self) {
        if self.created {
            let _ = std::fs::remove_file(POLICY);
        }
    }
}

/// Installs bird2 with its service neither started nor enabled at boot.
pub(super) fn install(
    install_packages: impl FnOnce(&[String]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    {
        let _deny = DenyServiceStarts::install()?;
        install_packages(&[PACKAGE.to_owned()])?;
    }
    // Enabled at boot by the maintainer scripts; `systemctl disable` works without a
    // running systemd and also disables the SysV links.
    if cmd::output(Command::new("systemctl").args(["disable", "bird.service"])).is_none() {
        eprintln!("xtask setup: could not disable bird.service at boot (no systemctl?)");
    }
    if Path::new("/run/bird/bird.ctl").exists() {
        eprintln!(
            "xtask setup: warning: a system BIRD answers on /run/bird/bird.ctl; the tests run their own in their namespaces"
        );
    }
    Ok(())
}
