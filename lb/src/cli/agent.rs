//! `lb agent`: the backend agent, run on each backend (the counterpart of GLB's
//! `glb-redirect`). `lb agent run` loads the XDP program `lb_agent` from the embedded
//! object, attaches it to an interface as a BPF link and stays in the foreground until
//! SIGTERM or SIGINT, when it detaches it (a stopped agent decapsulates nothing: the
//! service is the function, as with any daemon). Its counters are pinned below
//! `--pin-dir` while it runs, where `lb agent stats` reads them.

use std::path::PathBuf;

use lb_common::agent::{AgentReason, AgentStats};
use lb_dataplane::{Agent, AgentMode, AgentOptions};

use super::{Output, json};

/// Where the agent pins its counters by default.
pub const AGENT_PIN_DIR: &str = "/sys/fs/bpf/lb-agent";

/// `lb agent`.
#[derive(Clone, Debug, clap::Args)]
pub struct AgentArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: AgentAction,
}

/// The verbs of `lb agent`.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum AgentAction {
    /// Decapsulate IP-in-IP and GUE on this backend's interface and follow
    /// second-chance candidates (needs root); stays in the foreground until SIGTERM or
    /// SIGINT, which detach the program.
    Run(RunArgs),
    /// Show the counters of the agent running on an interface.
    Stats(StatsArgs),
}

/// `lb agent run`.
#[derive(Clone, Debug, clap::Args)]
pub struct RunArgs {
    /// The interface the load balancer's packets arrive on (in the current network
    /// namespace).
    #[arg(long)]
    pub interface: String,
    /// The UDP port of GUE (the load balancer's `encap.gue_port`).
    #[arg(long, default_value_t = lb_common::types::GUE_DEFAULT_PORT)]
    pub gue_port: u16,
    /// Decapsulate GUE only: IP-in-IP passes untouched.
    #[arg(long, conflicts_with = "no_gue")]
    pub gue_only: bool,
    /// Decapsulate IP-in-IP only: GUE passes untouched.
    #[arg(long)]
    pub no_gue: bool,
    /// Attach in generic (skb) mode instead of native (driver) XDP: for interfaces
    /// whose driver has no XDP support.
    #[arg(long)]
    pub generic: bool,
    /// Where the counters are pinned (a bpffs directory).
    #[arg(long, default_value = AGENT_PIN_DIR)]
    pub pin_dir: PathBuf,
}

/// `lb agent stats`.
#[derive(Clone, Debug, clap::Args)]
pub struct StatsArgs {
    /// The interface the agent runs on (in the current network namespace).
    #[arg(long)]
    pub interface: String,
    /// Where the agent pins its counters (its `--pin-dir`).
    #[arg(long, default_value = AGENT_PIN_DIR)]
    pub pin_dir: PathBuf,
    /// Print `{"counters": {"<reason>": N, ...}}`.
    #[arg(long)]
    pub json: bool,
}

impl RunArgs {
    /// The program's options.
    pub fn options(&self) -> AgentOptions {
        AgentOptions {
            ipip: !self.gue_only,
            gue_port: (!self.no_gue).then_some(self.gue_port),
        }
    }
}

/// `lb agent run`: attaches, then waits for SIGTERM or SIGINT.
///
/// # Errors
/// A missing privilege, a refused program, an interface that does not exist or already
/// has an XDP program, a signal handler that cannot be set.
pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let missing = lb_dataplane::missing_capabilities();
    if !lb_dataplane::is_root() && !missing.is_empty() {
        anyhow::bail!("lb agent run needs root or {}", missing.join(", "));
    }
    let mut agent = Agent::load(&args.options()).context("loading lb_agent")?;
    let mode = if args.generic {
        AgentMode::Generic
    } else {
        AgentMode::Native
    };
    agent
        .attach(&args.interface, mode)
        .with_context(|| format!("--interface {}: attaching lb_agent", args.interface))?;
    match agent.pin_stats(&args.pin_dir, &args.interface) {
        Ok(path) => tracing::info!("counters pinned at {}", path.display()),
        Err(e) => {
            tracing::warn!("the counters are not pinned (lb agent stats cannot read them): {e}");
        }
    }
    tracing::info!(
        "lb_agent attached to {} ({:?} XDP): {}",
        args.interface,
        mode,
        describe(&args.options())
    );
    notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status("decapsulating"),
    ]);
    wait_for_signal().context("waiting for SIGTERM")?;
    notify(&[sd_notify::NotifyState::Stopping]);
    tracing::info!("detaching lb_agent from {}", args.interface);
    drop(agent);
    Ok(())
}

/// What the agent decapsulates, in words.
fn describe(options: &AgentOptions) -> String {
    match (options.ipip, options.gue_port) {
        (true, Some(port)) => format!("IP-in-IP and GUE to port {port}"),
        (false, Some(port)) => format!("GUE to port {port} only"),
        (true, None) => "IP-in-IP only".to_owned(),
        (false, None) => "nothing".to_owned(),
    }
}

/// Tells systemd (`Type=notify`), when started by it.
fn notify(states: &[sd_notify::NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_some()
        && let Err(e) = sd_notify::notify(false, states)
    {
        tracing::warn!("notifying the service manager: {e}");
    }
}

/// Blocks until SIGTERM or SIGINT.
fn wait_for_signal() -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        Ok(())
    })
}

/// `lb agent stats`.
///
/// # Errors
/// No agent's counters pinned for the interface (none runs, or another `--pin-dir`).
pub fn stats(args: &StatsArgs) -> anyhow::Result<Output> {
    use anyhow::Context as _;
    let path = lb_dataplane::agent::stats_pin(&args.pin_dir, &args.interface)?;
    let stats = lb_dataplane::agent::read_pinned_stats(&path).with_context(|| {
        format!(
            "--interface {}: no agent's counters at {} (is lb agent run running there?)",
            args.interface,
            path.display()
        )
    })?;
    Ok(render(&stats, args.json))
}

/// The counters as text (`name value`, one a line, zeros included) or JSON.
pub fn render(stats: &AgentStats, as_json: bool) -> Output {
    if as_json {
        let counters: serde_json::Map<String, serde_json::Value> = AgentReason::ALL
            .iter()
            .map(|r| (r.name().to_owned(), stats.get(*r).into()))
            .collect();
        return json(&serde_json::json!({ "counters": counters }));
    }
    let width = AgentReason::ALL
        .iter()
        .map(|r| r.name().len())
        .max()
        .unwrap_or(0);
    let mut text = String::new();
    for r in AgentReason::ALL {
        text.push_str(&format!("{:width$}  {}\n", r.name(), stats.get(r)));
    }
    Output::text(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_every_reason_as_text_and_json() {
        let mut stats = AgentStats::default();
        stats.counters[AgentReason::TxCandidate as usize] = 7;
        let text = render(&stats, false).text;
        assert_eq!(text.lines().count(), AgentReason::ALL.len());
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().eq(["tx_candidate", "7"]))
        );
        let value: serde_json::Value = serde_json::from_str(&render(&stats, true).text).unwrap();
        assert_eq!(value["counters"]["tx_candidate"], 7);
        assert_eq!(value["counters"]["decap_gue"], 0);
    }

    #[test]
    fn flags_choose_what_is_decapsulated() {
        let args = |gue_only, no_gue| RunArgs {
            interface: "eth0".into(),
            gue_port: 7000,
            gue_only,
            no_gue,
            generic: false,
            pin_dir: AGENT_PIN_DIR.into(),
        };
        assert_eq!(
            args(false, false).options(),
            AgentOptions {
                ipip: true,
                gue_port: Some(7000)
            }
        );
        assert!(!args(true, false).options().ipip);
        assert_eq!(args(false, true).options().gue_port, None);
        assert_eq!(
            describe(&args(true, false).options()),
            "GUE to port 7000 only"
        );
    }
}
