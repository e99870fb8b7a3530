//! [`Agent`]: the backend agent's XDP program (`lb_agent`, `lb agent run`) loaded from
//! the embedded object, configured, attached to a backend's interface as a BPF link,
//! and its counters.
//!
//! The agent shares the object with the load balancer but uses only its own maps
//! (`AGENT_CONFIG`, `AGENT_STATS`); the load balancer's maps are created too (aya
//! creates every map of an object), the large ones at a token size. The link lives as
//! long as the [`Agent`]: dropping it (or the process exiting) detaches the program.
//! The counters can be pinned ([`Agent::pin_stats`]) for `lb agent stats` to read from
//! another process ([`read_pinned_stats`]).

use std::path::{Path, PathBuf};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, IterableMap as _, Map, MapData, PerCpuArray},
    programs::{XdpMode, xdp::XdpLinkId},
};
use lb_common::{
    agent::AgentStats,
    maps,
    types::{AGENT_GUE, AGENT_IPIP, AGENT_VALID, AgentConfig},
};

use super::{counters::sum_per_cpu, load_err, prog_err, xdp};
use crate::{DataplaneError, bpf_sys, map_err};

/// Entries of the load balancer's large maps when only the agent is loaded.
const UNUSED_MAP_ENTRIES: u32 = 64;

/// What the agent decapsulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentOptions {
    /// IP-in-IP (IPv4 or IPv6 outer, IPv4 or IPv6 inside).
    pub ipip: bool,
    /// GUE to this UDP destination port (host order); `None`: no GUE.
    pub gue_port: Option<u16>,
}

impl Default for AgentOptions {
    /// Both: IP-in-IP, and GUE to the default port (`encap.gue_port`'s default).
    fn default() -> Self {
        Self {
            ipip: true,
            gue_port: Some(lb_common::types::GUE_DEFAULT_PORT),
        }
    }
}

impl AgentOptions {
    /// The `AGENT_CONFIG` value.
    pub fn config(&self) -> AgentConfig {
        let mut flags = AGENT_VALID;
        if self.ipip {
            flags |= AGENT_IPIP;
        }
        if self.gue_port.is_some() {
            flags |= AGENT_GUE;
        }
        AgentConfig {
            flags,
            gue_port: self.gue_port.unwrap_or(0).to_be(),
            _pad: 0,
        }
    }
}

/// How the program is attached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AgentMode {
    /// Native (driver) XDP.
    #[default]
    Native,
    /// Generic XDP (the kernel's network stack runs it: any interface, slower).
    Generic,
}

/// The backend agent's program, loaded and configured; attached after
/// [`Agent::attach`], detached when dropped.
pub struct Agent {
    pub(super) ebpf: Ebpf,
    link: Option<XdpLinkId>,
    stats: PerCpuArray<MapData, AgentStats>,
    pinned: Option<PathBuf>,
}

impl Agent {
    /// Loads (verifies) `lb_agent` and writes its configuration.
    ///
    /// # Errors
    /// When the object cannot be loaded, the verifier refuses the program, or a map
    /// cannot be written.
    pub fn load(options: &AgentOptions) -> Result<Self, DataplaneError> {
        let mut ebpf = EbpfLoader::new()
            .map_max_entries(maps::CONNTRACK_V4, UNUSED_MAP_ENTRIES)
            .map_max_entries(maps::CONNTRACK_V6, UNUSED_MAP_ENTRIES)
            .map_max_entries(maps::SYN_CACHE, UNUSED_MAP_ENTRIES)
            .map_max_entries(maps::FRAGMENTS, UNUSED_MAP_ENTRIES)
            .load(crate::EBPF_OBJECT)
            .map_err(DataplaneError::Load)?;
        xdp(&mut ebpf, maps::AGENT_PROGRAM)?
            .load()
            .map_err(load_err(maps::AGENT_PROGRAM))?;
        let mut config: Array<MapData, AgentConfig> = take(&mut ebpf, maps::AGENT_CONFIG)?;
        config
            .set(0, options.config(), 0)
            .map_err(map_err(maps::AGENT_CONFIG, "update"))?;
        let stats = take(&mut ebpf, maps::AGENT_STATS)?;
        Ok(Self {
            ebpf,
            link: None,
            stats,
            pinned: None,
        })
    }

    /// Attaches the program to `iface` (an interface of the calling thread's network
    /// namespace) as a BPF link.
    ///
    /// # Errors
    /// No such interface, another XDP program attached, or (native) no driver support.
    pub fn attach(&mut self, iface: &str, mode: AgentMode) -> Result<(), DataplaneError> {
        let mode = match mode {
            AgentMode::Native => XdpMode::Driver,
            AgentMode::Generic => XdpMode::Skb,
        };
        let prog = xdp(&mut self.ebpf, maps::AGENT_PROGRAM)?;
        self.link = Some(
            prog.attach(iface, mode)
                .map_err(prog_err(maps::AGENT_PROGRAM))?,
        );
        Ok(())
    }

    /// The counters, summed over the CPUs.
    ///
    /// # Errors
    /// When the map cannot be read.
    pub fn stats(&self) -> Result<AgentStats, DataplaneError> {
        sum_per_cpu(&self.stats, 0, maps::AGENT_STATS, accumulate)
    }

    /// Pins the counters at `dir/netns-<cookie>/<iface>/AGENT_STATS` ([`stats_pin`]),
    /// removed again when the agent is dropped; returns the path.
    ///
    /// # Errors
    /// When the directory cannot be made (no bpffs at `dir`) or the pin fails.
    pub fn pin_stats(&mut self, dir: &Path, iface: &str) -> Result<PathBuf, DataplaneError> {
        let path = stats_pin(dir, iface)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|error| DataplaneError::Syscall {
                op: format!("creating {}", parent.display()),
                error,
            })?;
        }
        // A pin left by an agent that was killed: this one replaces it.
        let _ = std::fs::remove_file(&path);
        self.stats
            .map()
            .pin(&path)
            .map_err(|e| DataplaneError::Syscall {
                op: format!("pinning {}", path.display()),
                error: std::io::Error::other(e.to_string()),
            })?;
        self.pinned = Some(path.clone());
        Ok(path)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(path) = self.pinned.take() {
            let _ = std::fs::remove_file(&path);
            if let Some(parent) = path.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
        if let (Some(link), Ok(prog)) = (self.link.take(), xdp(&mut self.ebpf, maps::AGENT_PROGRAM))
        {
            let _ = prog.detach(link);
        }
    }
}

/// Where an agent on `iface` of the calling thread's network namespace pins its
/// counters below `dir`: `dir/netns-<cookie>/<iface>/AGENT_STATS`.
///
/// # Errors
/// When the namespace's cookie cannot be read.
pub fn stats_pin(dir: &Path, iface: &str) -> Result<PathBuf, DataplaneError> {
    let cookie = bpf_sys::netns_cookie().map_err(|error| DataplaneError::Syscall {
        op: "reading the network namespace cookie".into(),
        error,
    })?;
    Ok(dir
        .join(format!("netns-{cookie}"))
        .join(iface)
        .join(maps::AGENT_STATS))
}

/// The counters an agent pinned at `path`, summed over the CPUs.
///
/// # Errors
/// No pin at `path` (no agent runs there), or it cannot be read.
pub fn read_pinned_stats(path: &Path) -> Result<AgentStats, DataplaneError> {
    let data = MapData::from_pin(path).map_err(map_err(maps::AGENT_STATS, "open the pin"))?;
    let map = Map::from_map_data(data).map_err(map_err(maps::AGENT_STATS, "open"))?;
    let stats = PerCpuArray::try_from(map).map_err(map_err(maps::AGENT_STATS, "open"))?;
    sum_per_cpu(&stats, 0, maps::AGENT_STATS, accumulate)
}

pub(super) fn accumulate(total: &mut AgentStats, cpu: &AgentStats) {
    for (t, c) in total.counters.iter_mut().zip(cpu.counters) {
        *t += c;
    }
}

/// Takes map `name` out of the object as the typed map `T`.
fn take<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, DataplaneError>
where
    T: TryFrom<Map, Error = aya::maps::MapError>,
{
    let map = ebpf
        .take_map(name)
        .ok_or(DataplaneError::MissingMap(name))?;
    T::try_from(map).map_err(map_err(name, "open"))
}
