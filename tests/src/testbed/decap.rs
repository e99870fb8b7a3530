//! Backend-side decapsulation: the test beds' backends run the project's backend agent
//! (`lb_agent`, the program `lb agent run` attaches), loaded through lb-dataplane's
//! [`Agent`], so every end-to-end test exercises it. It strips the outer headers of
//! IP-in-IP (4-in-4, 6-in-6, 4-in-6) and of GUE to the GUE port, and passes the inner
//! packet to the backend's stack. What it accepts is chosen at load ([`Accept`]): a
//! test can prove that packets came by GUE by accepting nothing else.
//!
//! Why a BPF decapsulator at all: the project's kernels (Firecracker builds, no loadable
//! modules) are configured without `CONFIG_NET_IPIP`, `CONFIG_IPV6_TUNNEL` and FOU, so
//! `ip link add ... type ipip` fails with "Unknown device type".
//!
//! The program is attached as a BPF link (native mode) from a thread inside the
//! backend's namespace; the link lives as long as [`DecapLink`] and is detached when it
//! is dropped (or when the namespace, and with it the interface, is deleted).

use anyhow::Context as _;
use lb_dataplane::{Agent, AgentMode, AgentOptions};

/// What the program decapsulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accept {
    /// IP-in-IP: IPv4-in-IPv4, IPv6-in-IPv6, IPv4-in-IPv6.
    pub ipip: bool,
    /// GUE to this UDP port (host order).
    pub gue_port: Option<u16>,
}

impl Default for Accept {
    /// Both: IP-in-IP, and GUE to the default port (`lb.toml`'s `encap.gue_port`).
    fn default() -> Self {
        Self {
            ipip: true,
            gue_port: Some(lb_common::types::GUE_DEFAULT_PORT),
        }
    }
}

impl Accept {
    /// GUE to the default port only (`lb agent run --gue-only`).
    pub fn gue_only() -> Self {
        Self {
            ipip: false,
            ..Self::default()
        }
    }
}

/// The backend agent attached to one interface; detached on drop.
pub struct DecapLink {
    agent: Agent,
}

impl std::fmt::Debug for DecapLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DecapLink(lb_agent)")
    }
}

impl DecapLink {
    /// Loads the agent and attaches it in native mode to `iface`, an interface of the
    /// calling thread's network namespace (call it from [`crate::netns::NetNs::enter`]).
    ///
    /// # Errors
    /// When the interface does not exist, the program is rejected, or the attachment
    /// fails (an XDP program is already attached, no native XDP support).
    pub fn attach(iface: &str) -> anyhow::Result<Self> {
        Self::attach_accepting(iface, Accept::default())
    }

    /// As [`Self::attach`], decapsulating only what `accept` names.
    ///
    /// # Errors
    /// As [`Self::attach`].
    pub fn attach_accepting(iface: &str, accept: Accept) -> anyhow::Result<Self> {
        let mut agent = Agent::load(&AgentOptions {
            ipip: accept.ipip,
            gue_port: accept.gue_port,
        })
        .context("loading the backend agent")?;
        agent
            .attach(iface, AgentMode::Native)
            .with_context(|| format!("attaching the backend agent to {iface}"))?;
        Ok(Self { agent })
    }

    /// The agent's counters, summed over the CPUs.
    ///
    /// # Errors
    /// When the counters map cannot be read.
    pub fn stats(&self) -> anyhow::Result<lb_common::agent::AgentStats> {
        Ok(self.agent.stats()?)
    }
}
