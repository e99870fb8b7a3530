//! BIRD 2 in a test namespace: the configurations of an LB host and of the router
//! ([`LbHostBird`], [`RouterBird`]: the book's fleets chapter shows them as they are rendered here, and
//! a test keeps the two equal), and the daemon itself ([`Bird`]), run as
//! `bird -f -c FILE -s SOCKET -P PIDFILE` inside the namespace and asked with
//! `birdc -s SOCKET`.

use std::{
    fmt::Write as _,
    fs::File,
    net::{Ipv4Addr, Ipv6Addr},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

/// The BGP timers both sides use: a silent peer is dropped after 3 s (the hold time),
/// keepalives every second; a session is tried again 1 s after an error (BIRD's
/// defaults, 60 s and up, suit Internet peerings, not a failover).
const TIMERS: &str = "\thold time 3;\n\
                      \tkeepalive time 1;\n\
                      \tconnect delay time 1;\n\
                      \tconnect retry time 2;\n\
                      \terror wait time 1, 5;\n";

/// BIRD on an LB host: learns the VIP routes `lb run` keeps in its announcement table
/// and exports them by eBGP to one router, over IPv4 and IPv6 sessions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LbHostBird {
    /// `router id` (the host's IPv4 address).
    pub router_id: Ipv4Addr,
    /// The host's address on the router link, and the router's, per family.
    pub local4: Ipv4Addr,
    /// The router's IPv4 address.
    pub peer4: Ipv4Addr,
    /// The host's IPv6 address on the router link.
    pub local6: Ipv6Addr,
    /// The router's IPv6 address.
    pub peer6: Ipv6Addr,
    /// The LB hosts' AS number (all instances share it).
    pub local_as: u32,
    /// The router's AS number.
    pub peer_as: u32,
    /// `announce.table` of `lb run`.
    pub table: u32,
    /// The `log` target (`syslog`, or `"FILE"`).
    pub log: String,
}

impl LbHostBird {
    /// The configuration file.
    pub fn render(&self) -> String {
        let mut c = String::new();
        let _ = write!(
            c,
            "# BIRD 2 on an lb host: export the VIP addresses that `lb run` announces.\n\
             router id {};\n\
             log {} all;\n\n\
             protocol device {{\n}}\n\n\
             # lb keeps one route per servable VIP address in kernel table {table}\n\
             # ([announce] table = {table}); the kernel protocols learn them into tables\n\
             # of their own, from netlink notifications as they happen (the scan only\n\
             # repairs a missed one).\n\
             ipv4 table lbvips4;\n\
             ipv6 table lbvips6;\n\n",
            self.router_id,
            self.log,
            table = self.table
        );
        for (family, len) in [("ipv4", 32), ("ipv6", 128)] {
            let short = &family[3..];
            let _ = write!(
                c,
                "protocol kernel kvips{short} {{\n\
                 \tkernel table {};\n\
                 \tlearn;\n\
                 \tscan time 10;\n\
                 \t{family} {{ table lbvips{short}; import where net.len = {len}; export none; }};\n\
                 }}\n\n",
                self.table
            );
        }
        let _ = writeln!(
            c,
            "# eBGP to the router: the VIP addresses out, nothing in. A stopped BIRD is\n\
             # withdrawn at once, a dead host when the hold time runs out; lb run\n\
             # stopped with its datapath forwarding stays announced."
        );
        let sessions = [
            ("ipv4", 32, self.local4.to_string(), self.peer4.to_string()),
            ("ipv6", 128, self.local6.to_string(), self.peer6.to_string()),
        ];
        for (family, len, local, peer) in sessions {
            let short = &family[3..];
            let _ = write!(
                c,
                "protocol bgp router{short} {{\n\
                 \tlocal {local} as {};\n\
                 \tneighbor {peer} as {};\n\
                 {TIMERS}\
                 \t{family} {{ table lbvips{short}; import none; export where net.len = {len}; next hop self; }};\n\
                 }}\n",
                self.local_as, self.peer_as
            );
            if family == "ipv4" {
                c.push('\n');
            }
        }
        c
    }
}

/// One LB host as the router sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterPeer {
    /// The protocol names' stem (`lb1`: sessions `lb1v4`, `lb1v6`).
    pub name: String,
    /// Its IPv4 address on the link.
    pub addr4: Ipv4Addr,
    /// Its IPv6 address on the link.
    pub addr6: Ipv6Addr,
}

/// BIRD on the router in front of the LB hosts: accepts the VIP host routes from each
/// and installs one ECMP route per VIP address with a next hop per host announcing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterBird {
    /// `router id`.
    pub router_id: Ipv4Addr,
    /// The router's AS number.
    pub local_as: u32,
    /// The LB hosts' AS number.
    pub peer_as: u32,
    /// The LB hosts.
    pub peers: Vec<RouterPeer>,
    /// The IPv4 prefix the VIPs are taken from (only host routes in it are accepted).
    pub vips4: String,
    /// The IPv6 prefix the VIPs are taken from.
    pub vips6: String,
    /// The `log` target.
    pub log: String,
}

impl RouterBird {
    /// The configuration file.
    pub fn render(&self) -> String {
        let mut c = format!(
            "# BIRD 2 on the router: one ECMP route per VIP address, a next hop per lb host.\n\
             # With net.ipv4.fib_multipath_hash_policy = 1 (and its IPv6 twin) the kernel\n\
             # spreads flows by their 5-tuple.\n\
             router id {};\n\
             log {} all;\n\n\
             protocol device {{\n}}\n\n",
            self.router_id, self.log
        );
        for family in ["ipv4", "ipv6"] {
            let _ = write!(
                c,
                "protocol kernel {{\n\
                 \tmerge paths on;\n\
                 \t{family} {{ import none; export all; }};\n\
                 }}\n\n"
            );
        }
        for (family, range, len) in [("ipv4", &self.vips4, 32), ("ipv6", &self.vips6, 128)] {
            let short = &family[3..];
            let _ = write!(
                c,
                "template bgp lbhost{short} {{\n\
                 \tlocal as {};\n\
                 {TIMERS}\
                 \t{family} {{ import where net ~ [ {range}{{{len},{len}}} ]; export none; }};\n\
                 }}\n\n",
                self.local_as
            );
        }
        for p in &self.peers {
            let _ = writeln!(
                c,
                "protocol bgp {name}v4 from lbhost4 {{ neighbor {} as {}; }}\n\
                 protocol bgp {name}v6 from lbhost6 {{ neighbor {} as {}; }}",
                p.addr4,
                self.peer_as,
                p.addr6,
                self.peer_as,
                name = p.name
            );
        }
        c
    }
}

/// How long [`Bird::start`] waits for the control socket.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Poll period of the waits.
const POLL: Duration = Duration::from_millis(20);

/// A running BIRD in a namespace (`bird -f`, a child of this process); killed on drop.
#[derive(Debug)]
pub struct Bird {
    child: Option<Child>,
    ns: String,
    config: PathBuf,
    socket: PathBuf,
    pidfile: PathBuf,
    log: PathBuf,
}

impl Bird {
    /// Writes `config` to `<dir>/<name>.conf` and starts BIRD with it inside the
    /// namespace `ns`; waits until `birdc` answers.
    ///
    /// # Errors
    /// BIRD is missing (`cargo xtask setup` installs bird2), refuses the file, or does
    /// not answer in time; the message has its log.
    pub fn start(ns: &str, dir: &Path, name: &str, config: &str) -> anyhow::Result<Self> {
        let path = dir.join(format!("{name}.conf"));
        std::fs::write(&path, config).with_context(|| format!("writing {}", path.display()))?;
        let mut bird = Self {
            child: None,
            ns: ns.to_owned(),
            config: path,
            socket: dir.join(format!("{name}.ctl")),
            pidfile: dir.join(format!("{name}.pid")),
            log: dir.join(format!("{name}.log")),
        };
        bird.spawn()?;
        Ok(bird)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = File::create(&self.log).context("creating the BIRD log")?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns, "bird", "-f", "-c"])
            .arg(&self.config)
            .arg("-s")
            .arg(&self.socket)
            .arg("-P")
            .arg(&self.pidfile)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        // SAFETY: the closure runs between fork and exec and only calls prctl(2),
        // which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                let signal = libc::c_ulong::try_from(libc::SIGKILL).unwrap_or(9);
                if libc::prctl(libc::PR_SET_PDEATHSIG, signal, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .context("starting bird (install bird2: cargo xtask setup)")?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                self.child = None;
                bail!("bird exited at start ({status}): {}", self.log_text());
            }
            if self.socket.exists() && self.birdc(&["show", "status"]).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "bird did not answer within {START_TIMEOUT:?}: {}",
                    self.log_text()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Runs `birdc -s SOCKET ARGS...` and returns its output.
    ///
    /// # Errors
    /// `birdc` cannot run or fails.
    pub fn birdc(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("birdc")
            .arg("-s")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running birdc")?;
        if !out.status.success() {
            bail!(
                "birdc {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Whether BGP protocol `name` is `Established`.
    pub fn established(&self, name: &str) -> bool {
        self.birdc(&["show", "protocols", name]).is_ok_and(|out| {
            out.lines()
                .any(|l| l.starts_with(name) && l.contains("Established"))
        })
    }

    /// Whether it runs (it has not exited or been killed).
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Sends `signal` to BIRD (SIGKILL: it dies at once; the kernel closes its BGP
    /// connections, so its peers drop its routes without waiting for a timer).
    ///
    /// # Errors
    /// BIRD does not run.
    pub fn signal(&mut self, signal: libc::c_int) -> anyhow::Result<()> {
        let child = self.child.as_mut().context("bird is not running")?;
        let pid = libc::pid_t::try_from(child.id()).context("pid")?;
        // SAFETY: kill(2) with the pid of our own, not yet reaped, child.
        if unsafe { libc::kill(pid, signal) } != 0 {
            return Err(std::io::Error::last_os_error()).context("kill");
        }
        if signal == libc::SIGKILL {
            let _ = child.wait();
            self.child = None;
            let _ = std::fs::remove_file(&self.socket);
        }
        Ok(())
    }

    /// Starts it again with the same configuration (after [`Self::signal`] SIGKILL).
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn restart(&mut self) -> anyhow::Result<()> {
        if self.running() {
            self.signal(libc::SIGKILL)?;
        }
        self.spawn()
    }
}

impl Drop for Bird {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if std::thread::panicking() {
                eprintln!(
                    "--- log of bird ({}) ---\n{}--- end ---",
                    self.config.display(),
                    self.log_text()
                );
            }
            // SIGKILL ends a stopped (SIGSTOP) BIRD too.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
