//! The backend agent's per-packet cost (`lb_agent`, issue 31): a GUE packet without
//! candidates decapsulated, and the second chance's two outcomes on a backend, a packet
//! whose connection has a socket here (delivered) and one without (sent on to the next
//! candidate). IPv4 only: an IPv6 packet with its outer headers and a candidate does not
//! fit the harness's 128-byte frame.
//!
//! The agent runs through the same harness as the load balancer (the frame restored
//! before every repetition, then a tail call), in the benchmark's namespace with `lb0`
//! as the ingress interface: the socket lookup and the next hop's FIB lookup see that
//! namespace. Its VIP is on the loopback with a listener and one connection, as on a
//! backend. Every timed run must count its case's `AgentReason` once per repetition.

use std::net::IpAddr;

use anyhow::{Context as _, ensure};
use lb_common::{
    agent::AgentReason,
    types::{BENCH_FRAME_MAX, GUE_DEFAULT_PORT, SecondChance},
};
use lb_dataplane::{AgentOptions, BenchTarget};
use lb_tests::{
    fixture::{Lb, XDP_PASS, XDP_TX},
    netns::NetNs,
    packets::{
        ACK, Flow, GW_MAC, Gue, L4, LB_MAC, LocalConnection, Outer, VIP4, backend4,
        encapsulated_with, with_candidates,
    },
};

use super::{Options, median};

/// The cases' names (`--case` keeps those that contain its text).
const DECAP: &str = "agent: GUE decapsulated (no candidate)";
const SOCKET_HERE: &str = "agent: second chance, socket here (delivered)";
const NO_SOCKET: &str = "agent: second chance, no socket (sent to the next candidate)";

/// One agent case: the frame, the action and the counter every repetition must give.
struct AgentCase {
    name: &'static str,
    frame: Vec<u8>,
    action: u32,
    reason: AgentReason,
}

/// `inner` sent GUE from the load balancer to backend 1, with `candidates` if any,
/// from the gateway's MAC to `lb0`'s.
fn received(inner: &[u8], candidates: Option<&SecondChance>) -> Vec<u8> {
    let outer = Outer {
        gue: Some(Gue {
            sport: 50_000,
            dport: GUE_DEFAULT_PORT,
        }),
        ..Outer::default()
    };
    let plain = encapsulated_with(inner, backend4(1).into(), LB_MAC, GW_MAC, &outer);
    candidates.map_or(plain.clone(), |sc| with_candidates(&plain, sc))
}

/// [`received`] for an ACK of `flow`, its payload padded so the frame is exactly
/// `BENCH_FRAME_MAX` bytes.
fn sized(flow: &Flow, candidates: Option<&SecondChance>) -> anyhow::Result<Vec<u8>> {
    let bare = received(&flow.frame(L4::Tcp(ACK), &[]), candidates).len();
    let pad = BENCH_FRAME_MAX
        .checked_sub(bare)
        .context("an agent frame longer than the harness's")?;
    Ok(received(
        &flow.frame(L4::Tcp(ACK), &vec![0x61; pad]),
        candidates,
    ))
}

/// The cases, for the connection `here` (a socket on this host) and a 4-tuple without
/// one.
fn cases(here: &Flow) -> anyhow::Result<Vec<AgentCase>> {
    let stranger = Flow::new(here.src, here.sport.wrapping_add(1), here.dst, here.dport);
    let sc = SecondChance::new(&[backend4(2).into()])
        .map_err(|e| anyhow::anyhow!("one candidate: {e:?}"))?;
    Ok(vec![
        AgentCase {
            name: DECAP,
            frame: sized(here, None)?,
            action: XDP_PASS,
            reason: AgentReason::DecapGue,
        },
        AgentCase {
            name: SOCKET_HERE,
            frame: sized(here, Some(&sc))?,
            action: XDP_PASS,
            reason: AgentReason::DecapSocket,
        },
        AgentCase {
            name: NO_SOCKET,
            frame: sized(&stranger, Some(&sc))?,
            action: XDP_TX,
            reason: AgentReason::TxCandidate,
        },
    ])
}

/// Times `case` against the empty program, alternately (`opts.runs` runs of
/// `opts.repeat`); returns (agent, empty, median over empty, fastest runs' difference).
fn time(lb: &mut Lb, case: &AgentCase, lb0: u32, opts: &Options) -> anyhow::Result<[i64; 4]> {
    let (mut agent, mut empty, mut over) = (vec![], vec![], vec![]);
    let ns = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    for _ in 0..opts.runs {
        let e = lb
            .dp
            .bench_run(BenchTarget::Empty, &case.frame, 0, Some(lb0), opts.repeat)?;
        let before = lb.dp.agent_stats()?.get(case.reason);
        let a = lb
            .dp
            .bench_run(BenchTarget::Agent, &case.frame, 0, Some(lb0), opts.repeat)?;
        let counted = lb.dp.agent_stats()?.get(case.reason) - before;
        ensure!(
            e.action == XDP_PASS && a.action == case.action && counted == u64::from(opts.repeat),
            "{}: action {} (expected {}), {counted} of {} repetitions counted {}",
            case.name,
            a.action,
            case.action,
            opts.repeat,
            case.reason.name()
        );
        over.push(ns(a.duration_ns) - ns(e.duration_ns));
        agent.push(a.duration_ns);
        empty.push(e.duration_ns);
    }
    let fastest =
        ns(agent.iter().copied().min().unwrap_or(0)) - ns(empty.iter().copied().min().unwrap_or(0));
    Ok([ns(median(agent)), ns(median(empty)), median(over), fastest])
}

/// The agent's rows of the data-plane table, run from the benchmark namespace's thread
/// (`ns` is that namespace, `lb0` its ingress interface).
pub(crate) fn rows(lb: &mut Lb, ns: &NetNs, lb0: u32, opts: &Options) -> anyhow::Result<()> {
    let kept = |name: &str| opts.case.as_ref().is_none_or(|c| name.contains(c.as_str()));
    if ![DECAP, SOCKET_HERE, NO_SOCKET].into_iter().any(kept) {
        return Ok(());
    }
    lb.dp.set_agent_options(&AgentOptions::default())?;
    ns.ip(&["link", "set", "lo", "up"])?;
    ns.ip(&["addr", "add", &format!("{VIP4}/32"), "dev", "lo"])?;
    let connection = LocalConnection::open(IpAddr::from(VIP4), 80).context("connection")?;
    let here = connection.flow;
    for case in cases(&here)?.into_iter().filter(|c| kept(c.name)) {
        let [agent, empty, over, fastest] = time(lb, &case, lb0, opts)?;
        println!(
            "| {} | fib | {agent} | {empty} | {over} | {fastest} | - |",
            case.name
        );
    }
    Ok(())
}
