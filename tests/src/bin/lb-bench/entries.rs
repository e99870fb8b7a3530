//! Conntrack entries on a fast-path VIP (`--case entries`): how many flows need per-flow
//! state, in steady state and after a table change.
//!
//! - A VIP on the fast path with 100 backends and a Maglev table of 65,537 slots
//!   (`lb_maglev`, as the daemon builds it). A population of flows is opened with real
//!   handshakes (each flow's SYN, then its ACK) while every slot is clean: the table
//!   decides alone, so conntrack must stay empty (rule T1 of the fast path).
//! - Then a backend is added, as an operator would: Maglev moves about 1 % of the slots
//!   to it, and each moved slot is published dirty with its clean owner. Every flow then
//!   sends one ACK: a flow on a moved slot misses and is pinned to its clean owner (rule
//!   M1), so the entries should be about the moved share of the flows.
//! - The same population on today's path (the fast path off) pins every flow: the
//!   reference, in the same run.

use std::net::{IpAddr, Ipv4Addr};

use anyhow::{Context as _, ensure};
use lb_common::types::{BACKEND_ACTIVE, PROTO_TCP};
use lb_dataplane::{BenchSpec, BenchTarget, Dataplane as _};
use lb_maglev::{Backend, BackendKey, MaglevTable};
use lb_tests::{
    fixture::{Lb, XDP_TX, vip_key},
    packets::{ACK, Flow, L4, VIP4},
};

use crate::{
    Options, sized,
    traffic::{Family, V4_FLAGS_WORD, V4_SEQ, V4_SRC, handshake, source_word},
};

/// Flows in the population.
const FLOWS: u32 = 1_000_000;
/// Backends before the change; the change adds one more.
const BACKENDS: u32 = 100;
/// The added backend's id.
const ADDED: u32 = 1_000;
/// Slots of the VIP's table (`table_size`'s default).
const TABLE_SIZE: u32 = 65_537;
/// The VIP's id and port.
const VIP_ID: u32 = 0;
const VIP_PORT: u16 = 81;
/// The Maglev seed (any fixed value: the tables before and after share it).
const SEED: u64 = 0x6c62_656e_7472_6965;

/// Backend `id`'s address: 198.51.100.0/24 for 1..=100, 198.51.101.1 for [`ADDED`].
fn address(id: u32) -> Ipv4Addr {
    if id == ADDED {
        Ipv4Addr::new(198, 51, 101, 1)
    } else {
        Ipv4Addr::new(198, 51, 100, u8::try_from(id).unwrap_or(0))
    }
}

/// The Maglev table of backends `ids`, as backend ids per slot.
fn maglev(ids: &[u32]) -> anyhow::Result<Vec<u32>> {
    let backends: Vec<Backend> = ids
        .iter()
        .map(|&id| Backend::new(BackendKey::new(IpAddr::V4(address(id)), None), 1))
        .collect();
    let table = MaglevTable::build(&backends, TABLE_SIZE, SEED).context("building the table")?;
    let id_of = |b: &Backend| {
        ids.iter()
            .copied()
            .find(|&id| BackendKey::new(IpAddr::V4(address(id)), None) == b.key)
            .unwrap_or(0)
    };
    let ids_sorted: Vec<u32> = table.backends().iter().map(id_of).collect();
    Ok(table
        .slots()
        .iter()
        .map(|&i| ids_sorted[i as usize])
        .collect())
}

/// One VIP on the fast path (or today's path), every slot clean.
fn setup(fast: bool, opts: &Options) -> anyhow::Result<Lb> {
    let mut lb = Lb::with_ct(opts.ct.max(2 * FLOWS), opts.syn);
    if let Some(mut clock) = lb.dp.take_activity_clock() {
        clock.refresh().context("activity tick")?;
    }
    for id in (1..=BACKENDS).chain([ADDED]) {
        lb.backend(id, address(id), BACKEND_ACTIVE);
    }
    let ids: Vec<u32> = (1..=BACKENDS).collect();
    lb.table(VIP_ID, &maglev(&ids)?);
    let key = lb.vip(VIP_ID, VIP4, VIP_PORT, PROTO_TCP);
    lb.dp.set_fast_path(&key, VIP_ID, fast)?;
    Ok(lb)
}

fn family() -> Family {
    Family {
        name: "v4",
        flow: Flow::new(Ipv4Addr::new(10, 0, 0, 0), 40000, VIP4, VIP_PORT),
        src: V4_SRC,
        flags_word: V4_FLAGS_WORD,
        seq: V4_SEQ,
        vip_id: VIP_ID,
        vip: vip_key(VIP4.into(), VIP_PORT, PROTO_TCP),
    }
}

/// Opens flows `0..FLOWS` with their handshakes; the conntrack entries after.
fn open(lb: &mut Lb, family: &Family) -> anyhow::Result<usize> {
    let identity: Vec<u32> = (0..FLOWS).map(source_word).collect();
    lb.dp.set_bench_seq(&identity)?;
    let (syn, mut pair) = handshake(family)?;
    pair.seq_len = FLOWS.next_power_of_two();
    // 2n repetitions from counter 0 cover flows 0..n (SYN, then ACK).
    pair.counter = Some(0);
    let out = lb
        .dp
        .bench_run_spec(BenchTarget::LoadBalancer, &syn, &pair, None, 2 * FLOWS)?;
    ensure!(
        out.action == XDP_TX,
        "opening the flows: action {}",
        out.action
    );
    Ok(lb.dp.conntrack_len()?.0)
}

/// One ACK of every flow; the conntrack entries after.
fn ack_all(lb: &mut Lb, family: &Family) -> anyhow::Result<usize> {
    let ack = sized(&family.flow, L4::Tcp(ACK));
    let spec = BenchSpec {
        vary_offset: family.src,
        seq_len: FLOWS.next_power_of_two(),
        counter: Some(0),
        ..BenchSpec::default()
    };
    let out = lb
        .dp
        .bench_run_spec(BenchTarget::LoadBalancer, &ack, &spec, None, FLOWS)?;
    ensure!(
        out.action == XDP_TX,
        "an ACK of every flow: action {}",
        out.action
    );
    Ok(lb.dp.conntrack_len()?.0)
}

fn percent(part: usize, whole: usize) -> String {
    #[expect(clippy::cast_precision_loss, reason = "counts below 2^24")]
    let p = 100.0 * part as f64 / whole.max(1) as f64;
    format!("{p:.2} %")
}

/// The section: one row per path.
pub(crate) fn entries(opts: &Options) -> anyhow::Result<()> {
    println!();
    println!(
        "conntrack entries, {} flows opened by handshakes on one VIP (100 backends, Maglev table of {TABLE_SIZE} slots), then a backend added and one ACK of every flow:",
        FLOWS
    );
    println!();
    println!(
        "| path | entries after the handshakes | slots moved by the change | entries after the change | of the flows |"
    );
    println!("|---|---:|---:|---:|---:|");
    let family = family();
    let after: Vec<u32> = (1..=BACKENDS).chain([ADDED]).collect();
    for fast in [true, false] {
        let mut lb = setup(fast, opts)?;
        let steady = open(&mut lb, &family)?;
        lb.table(VIP_ID, &maglev(&after)?);
        let moved = lb
            .dp
            .slot_states(VIP_ID)?
            .context("the VIP's table")?
            .iter()
            .filter(|s| s.is_dirty())
            .count();
        let changed = ack_all(&mut lb, &family)?;
        let path = if fast { "fast path" } else { "today's path" };
        println!(
            "| {path} | {steady} | {moved} ({}) | {changed} | {} |",
            percent(moved, TABLE_SIZE as usize),
            percent(changed, FLOWS as usize)
        );
        if fast {
            ensure!(
                steady == 0,
                "{steady} conntrack entries with every slot clean"
            );
            // Flows spread evenly over the slots: the pinned share is the moved share.
            let expected = moved * FLOWS as usize / TABLE_SIZE as usize;
            ensure!(
                (expected / 2..=expected * 2).contains(&changed),
                "{changed} entries after a change that moved {moved} slots (about {expected} expected)"
            );
        }
    }
    Ok(())
}
