//! Namespace plumbing: `ip -batch` runs, sysctls and interface counters, each acting on
//! one namespace the test bed created.
//!
//! Sysctls and counters are read and written from a thread inside the namespace
//! ([`NetNs::enter`]): `/proc/sys/net` and `/proc/thread-self/net` resolve to the calling
//! thread's network namespace, so no process is spawned for them.

use std::{
    io::Write as _,
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

use crate::netns::NetNs;

/// Runs `ip -n <ns> -batch -` with `commands` (one `ip` command line each, without the
/// leading `ip`); stops at the first failing line.
///
/// # Errors
/// When `ip` cannot start or a line fails (the message has `ip`'s stderr).
pub fn ip_batch(ns: &NetNs, commands: &[String]) -> anyhow::Result<()> {
    if commands.is_empty() {
        return Ok(());
    }
    let mut child = Command::new("ip")
        .args(["-n", ns.name(), "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("could not start ip -batch")?;
    {
        let mut stdin = child.stdin.take().context("ip stdin")?;
        for line in commands {
            writeln!(stdin, "{line}").context("writing to ip -batch")?;
        }
    }
    let out = child.wait_with_output().context("waiting for ip -batch")?;
    if !out.status.success() {
        bail!(
            "ip -n {} -batch failed: {}\ncommands:\n{}",
            ns.name(),
            String::from_utf8_lossy(&out.stderr).trim(),
            commands.join("\n")
        );
    }
    Ok(())
}

/// Writes sysctls (`("net/ipv4/ip_forward", "1")`, paths below `/proc/sys`) in `ns`.
///
/// # Errors
/// When the namespace cannot be entered or a write fails.
pub fn sysctls(ns: &NetNs, settings: &[(String, &str)]) -> anyhow::Result<()> {
    ns.enter(|| -> anyhow::Result<()> {
        for (path, value) in settings {
            let full = format!("/proc/sys/{path}");
            std::fs::write(&full, value).with_context(|| format!("writing {value} to {full}"))?;
        }
        Ok(())
    })?
    .with_context(|| format!("sysctls in {}", ns.name()))
}

/// Counters of one interface (`/proc/net/dev` of its namespace).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Packets dropped on receive.
    pub rx_dropped: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Transmit errors.
    pub tx_errors: u64,
    /// Packets dropped on transmit.
    pub tx_dropped: u64,
}

/// The counters of `iface` in `ns`.
///
/// On a veth with a native XDP program (seen on kernel 6.18): every frame received
/// counts in `rx_packets` whatever the program does with it, and frames it sends back
/// with `XDP_TX` count in `tx_packets`; `ethtool -S` has the per-queue XDP counters.
///
/// # Errors
/// When the namespace cannot be entered or `iface` is not listed.
pub fn link_stats(ns: &NetNs, iface: &str) -> anyhow::Result<LinkStats> {
    let text = ns
        .enter(|| std::fs::read_to_string("/proc/thread-self/net/dev"))?
        .context("reading /proc/thread-self/net/dev")?;
    parse_net_dev(&text, iface)
        .with_context(|| format!("interface {iface} in {} (net/dev:\n{text})", ns.name()))
}

/// Parses the line of `iface` in `/proc/net/dev`.
fn parse_net_dev(text: &str, iface: &str) -> Option<LinkStats> {
    text.lines().find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        if name.trim() != iface {
            return None;
        }
        let v: Vec<u64> = rest
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        (v.len() >= 12).then(|| LinkStats {
            rx_bytes: v[0],
            rx_packets: v[1],
            rx_errors: v[2],
            rx_dropped: v[3],
            tx_bytes: v[8],
            tx_packets: v[9],
            tx_errors: v[10],
            tx_dropped: v[11],
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_dev_lines_parse() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
             face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
             lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n   \
             lb0: 1234 12 1 2 0 0 0 3 5678 34 4 5 0 0 0 0\n";
        let s = parse_net_dev(text, "lb0").expect("lb0");
        assert_eq!(
            (s.rx_bytes, s.rx_packets, s.rx_errors, s.rx_dropped),
            (1234, 12, 1, 2)
        );
        assert_eq!(
            (s.tx_bytes, s.tx_packets, s.tx_errors, s.tx_dropped),
            (5678, 34, 4, 5)
        );
        assert!(parse_net_dev(text, "lb1").is_none());
    }
}
