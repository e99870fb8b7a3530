//! Test and benchmark access to a loaded [`KernelDataplane`] (feature `test-harness`,
//! enabled only by the `lb-tests` crate): `BPF_PROG_TEST_RUN` runs of the load
//! balancer, timed runs through the benchmark harness program `lb_bench`, the verifier's
//! instruction count, raw tables for the guards' tests, and a second table writer for
//! concurrency tests.

use std::sync::{Arc, Mutex};

use aya::{
    Ebpf,
    maps::{Array, MapData, PerCpuArray, PerCpuValues},
    programs::{TestRun as _, TestRunAttrs, TestRunOptions, Xdp},
};
use lb_common::{
    agent::AgentStats,
    maps,
    types::{
        AffinityKey, AgentConfig, BENCH_FRAME_MAX, BENCH_SEQ_MAX, BenchFrame, VipCacheSlot,
        VipEntry, VipKey,
    },
};

use super::{
    KernelDataplane, check_table, check_vip_id, install_tail_call, load_err, lock, prog_err, xdp,
};
use crate::{AgentOptions, DataplaneError, TableImage, map_err, tables::TableSet};

/// Result of one `BPF_PROG_TEST_RUN` invocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestRunOutput {
    /// XDP action returned (`XDP_ABORTED` 0, `XDP_DROP` 1, `XDP_PASS` 2, `XDP_TX` 3,
    /// `XDP_REDIRECT` 4).
    pub action: u32,
    /// The frame as the program left it.
    pub data: Vec<u8>,
    /// Mean run time per repetition in nanoseconds, as measured by the kernel.
    pub duration_ns: u64,
}

/// The program a benchmark run tail-calls after restoring the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchTarget {
    /// The load balancer (`lb_xdp`).
    LoadBalancer,
    /// The load balancer built without packet tracing (`lb_xdp_untraced`).
    Untraced,
    /// The empty reference program (`lb_empty`, `XDP_PASS`).
    Empty,
    /// The program that only returns `XDP_TX` (`lb_tx`): the limit of a live-frames run.
    Tx,
    /// The program that only pushes 20 bytes of headroom, writes an Ethernet header and
    /// returns `XDP_TX` (`lb_tx_encap`): the limit of an encapsulating program.
    TxEncap,
    /// The backend agent (`lb_agent`), configured by
    /// [`KernelDataplane::set_agent_options`].
    Agent,
}

impl BenchTarget {
    /// The program's name in the object.
    fn program(self) -> &'static str {
        match self {
            BenchTarget::LoadBalancer => maps::XDP_PROGRAM,
            BenchTarget::Empty => maps::EMPTY_PROGRAM,
            BenchTarget::Untraced => maps::UNTRACED_PROGRAM,
            BenchTarget::Tx => maps::TX_PROGRAM,
            BenchTarget::TxEncap => maps::TX_ENCAP_PROGRAM,
            BenchTarget::Agent => maps::AGENT_PROGRAM,
        }
    }
}

/// How the harness varies the frame per repetition (`lb_common::types::BenchFrame`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BenchSpec {
    /// Offset of the 4-byte field stamped per repetition (0: none).
    pub vary_offset: u32,
    /// `BENCH_SEQ` entries to draw the stamped values from, a power of two
    /// (0: the flow index itself is stamped); see [`KernelDataplane::set_bench_seq`].
    pub seq_len: u32,
    /// Offset of the 4 bytes odd repetitions replace by `pair_word` (0: none).
    pub pair_offset: u32,
    /// What odd repetitions write at `pair_offset`.
    pub pair_word: [u8; 4],
    /// The repetition counter to start from; `None` continues the previous run's.
    pub counter: Option<u32>,
}

/// Bytes of headroom a test run's output buffer leaves for headers the program pushes.
const TEST_RUN_OUT_SLACK: usize = 256;

impl KernelDataplane {
    /// Writes the backend agent's configuration (`AGENT_CONFIG`) in this object, for
    /// runs of [`BenchTarget::Agent`].
    ///
    /// # Errors
    /// When the map is missing or cannot be written.
    pub fn set_agent_options(&mut self, options: &AgentOptions) -> Result<(), DataplaneError> {
        let map = self
            .ebpf
            .map_mut(maps::AGENT_CONFIG)
            .ok_or(DataplaneError::MissingMap(maps::AGENT_CONFIG))?;
        Array::<&mut MapData, AgentConfig>::try_from(map)
            .map_err(map_err(maps::AGENT_CONFIG, "open"))?
            .set(0, options.config(), 0)
            .map_err(map_err(maps::AGENT_CONFIG, "update"))
    }

    /// The backend agent's counters in this object (`AGENT_STATS`), summed over the
    /// CPUs: what runs of [`BenchTarget::Agent`] counted.
    ///
    /// # Errors
    /// When the map is missing or cannot be read.
    pub fn agent_stats(&self) -> Result<AgentStats, DataplaneError> {
        let map = self
            .ebpf
            .map(maps::AGENT_STATS)
            .ok_or(DataplaneError::MissingMap(maps::AGENT_STATS))?;
        let per_cpu = PerCpuArray::<&MapData, AgentStats>::try_from(map)
            .map_err(map_err(maps::AGENT_STATS, "open"))?
            .get(&0, 0)
            .map_err(map_err(maps::AGENT_STATS, "lookup"))?;
        let mut total = AgentStats::default();
        for cpu in per_cpu.iter() {
            super::agent::accumulate(&mut total, cpu);
        }
        Ok(total)
    }

    /// Runs the load balancer once on `frame` with `BPF_PROG_TEST_RUN`.
    ///
    /// # Errors
    /// [`DataplaneError::Program`] when the kernel refuses the run.
    pub fn test_run(&mut self, frame: &[u8]) -> Result<TestRunOutput, DataplaneError> {
        self.test_run_with(frame, None, 1)
    }

    /// Runs the load balancer `repeat` times on `frame`, with the context's ingress
    /// interface set to `ingress_ifindex` (an interface of the calling thread's network
    /// namespace; default: loopback). The kernel reuses one buffer, so from the second
    /// repetition an encapsulating run sees its own output: use [`Self::bench_run`] for
    /// timing.
    ///
    /// # Errors
    /// [`DataplaneError::Program`] when the kernel refuses the run.
    pub fn test_run_with(
        &mut self,
        frame: &[u8],
        ingress_ifindex: Option<u32>,
        repeat: u32,
    ) -> Result<TestRunOutput, DataplaneError> {
        run_program(
            &mut self.ebpf,
            maps::XDP_PROGRAM,
            frame,
            ingress_ifindex,
            repeat,
        )
    }

    /// Times `target` with the benchmark harness: `lb_bench` restores `frame` (exactly
    /// `BENCH_FRAME_MAX` bytes) before every one of `repeat` repetitions, stamps a
    /// counter (continued from the previous run) at `vary_offset` when it is non-zero,
    /// and tail-calls `target`. The context's ingress interface is `ingress_ifindex`
    /// (see [`Self::test_run_with`]).
    ///
    /// # Errors
    /// [`DataplaneError::OutOfRange`] for a frame of another length; program or map
    /// failures.
    pub fn bench_run(
        &mut self,
        target: BenchTarget,
        frame: &[u8],
        vary_offset: u32,
        ingress_ifindex: Option<u32>,
        repeat: u32,
    ) -> Result<TestRunOutput, DataplaneError> {
        let spec = BenchSpec {
            vary_offset,
            ..BenchSpec::default()
        };
        self.bench_run_spec(target, frame, &spec, ingress_ifindex, repeat)
    }

    /// [`Self::bench_run`] with the frame varied as `spec` says.
    ///
    /// # Errors
    /// As [`Self::bench_run`]; [`DataplaneError::OutOfRange`] for a `seq_len` that is
    /// not a power of two up to `BENCH_SEQ_MAX`.
    pub fn bench_run_spec(
        &mut self,
        target: BenchTarget,
        frame: &[u8],
        spec: &BenchSpec,
        ingress_ifindex: Option<u32>,
        repeat: u32,
    ) -> Result<TestRunOutput, DataplaneError> {
        let bytes = self.prepare_bench(target, frame, spec)?;
        run_program(
            &mut self.ebpf,
            maps::BENCH_PROGRAM,
            &bytes,
            ingress_ifindex,
            repeat,
        )
    }

    /// Prepares the harness for `target` on `frame` varied as `spec` says (as
    /// [`Self::bench_run_spec`]) and returns a handle whose runs may come from several
    /// threads at once, each on its own CPU: the concurrent benchmark. Every CPU's
    /// repetition counter starts from the same value, so threads that must see
    /// different flows pass frames that differ elsewhere (e.g. their source ports).
    ///
    /// # Errors
    /// As [`Self::bench_run_spec`].
    pub fn bench_runner(
        &mut self,
        target: BenchTarget,
        frame: &[u8],
        spec: &BenchSpec,
    ) -> Result<BenchRunner<'_>, DataplaneError> {
        self.prepare_bench(target, frame, spec)?;
        let prog: &Xdp = xdp(&mut self.ebpf, maps::BENCH_PROGRAM)?;
        Ok(BenchRunner { prog })
    }

    /// Runs `target` through the harness `repeat` times in `BPF_PROG_TEST_RUN`'s
    /// live-frames mode (`BPF_F_TEST_XDP_LIVE_FRAMES`, kernel 5.18+, batches of
    /// `batch` frames): frames the program returns with `XDP_TX` really leave through
    /// `ifindex` (an interface of the calling thread's network namespace). Returns the
    /// mean time per repetition (ns) as the kernel measured it.
    ///
    /// # Errors
    /// As [`Self::bench_run_spec`]; the kernel refuses live frames without an ingress
    /// interface.
    pub fn bench_live(
        &mut self,
        target: BenchTarget,
        frame: &[u8],
        spec: &BenchSpec,
        ifindex: u32,
        repeat: u32,
        batch: u32,
    ) -> Result<u64, DataplaneError> {
        let bytes = self.prepare_bench(target, frame, spec)?;
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        let ctx: Vec<u8> = [0, len, 0, ifindex, 0, 0]
            .iter()
            .flat_map(|v: &u32| v.to_ne_bytes())
            .collect();
        let prog = xdp(&mut self.ebpf, maps::BENCH_PROGRAM)?;
        let mut opts = TestRunOptions::new();
        opts.data_in = Some(&bytes);
        opts.ctx_in = Some(&ctx);
        opts.repeat = repeat;
        opts.attrs = TestRunAttrs::new().xdp_live_frames(batch);
        let result = prog.test_run(opts).map_err(prog_err(maps::BENCH_PROGRAM))?;
        Ok(u64::try_from(result.duration.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Writes `values` into `BENCH_SEQ` (entry `i` = `values[i]`, its 4 bytes as the
    /// harness stamps them).
    ///
    /// # Errors
    /// [`DataplaneError::OutOfRange`] for more than `BENCH_SEQ_MAX` values; map
    /// failures.
    pub fn set_bench_seq(&mut self, values: &[u32]) -> Result<(), DataplaneError> {
        if values.len() > BENCH_SEQ_MAX as usize {
            return Err(DataplaneError::OutOfRange(format!(
                "{} benchmark sequence values, at most {BENCH_SEQ_MAX}",
                values.len()
            )));
        }
        let seq = self
            .ebpf
            .map_mut(maps::BENCH_SEQ)
            .ok_or(DataplaneError::MissingMap(maps::BENCH_SEQ))?;
        let mut seq =
            Array::<&mut MapData, u32>::try_from(seq).map_err(map_err(maps::BENCH_SEQ, "open"))?;
        for (i, value) in (0u32..).zip(values) {
            seq.set(i, value, 0)
                .map_err(map_err(maps::BENCH_SEQ, "update"))?;
        }
        Ok(())
    }

    /// Loads the harness and `target`, points `BENCH_PROGS[0]` at `target` and writes
    /// `BENCH_FRAME`; returns the frame's bytes.
    fn prepare_bench(
        &mut self,
        target: BenchTarget,
        frame: &[u8],
        spec: &BenchSpec,
    ) -> Result<[u8; BENCH_FRAME_MAX], DataplaneError> {
        let bytes: [u8; BENCH_FRAME_MAX] = frame.try_into().map_err(|_| {
            DataplaneError::OutOfRange(format!(
                "benchmark frames must be exactly {BENCH_FRAME_MAX} bytes, got {}",
                frame.len()
            ))
        })?;
        let seq_entries = match spec.seq_len {
            n if n == 0 || n.is_power_of_two() && n <= BENCH_SEQ_MAX => n,
            n => {
                return Err(DataplaneError::OutOfRange(format!(
                    "benchmark sequence length {n} is not a power of two up to {BENCH_SEQ_MAX}"
                )));
            }
        };
        let bench = xdp(&mut self.ebpf, maps::BENCH_PROGRAM)?;
        if bench.fd().is_err() {
            bench.load().map_err(load_err(maps::BENCH_PROGRAM))?;
        }
        install_tail_call(&mut self.ebpf, target.program(), maps::BENCH_PROGS, 0)?;
        let frames = self
            .ebpf
            .map_mut(maps::BENCH_FRAME)
            .ok_or(DataplaneError::MissingMap(maps::BENCH_FRAME))?;
        let mut frames = PerCpuArray::<&mut MapData, BenchFrame>::try_from(frames)
            .map_err(map_err(maps::BENCH_FRAME, "open"))?;
        // Unless the spec says where to start, the per-repetition counter continues
        // from the highest CPU's, so that flows varied by it stay new in every run
        // whichever CPU runs it. Every CPU starts from the same counter: runs on
        // several CPUs at once vary frames that differ elsewhere (their ports).
        let previous = frames
            .get(&0, 0)
            .map_err(map_err(maps::BENCH_FRAME, "lookup"))?;
        let highest = previous.iter().map(|f| f.counter).max().unwrap_or(0);
        let per_cpu: Vec<BenchFrame> = previous
            .iter()
            .map(|_| BenchFrame {
                vary_offset: spec.vary_offset,
                counter: spec.counter.unwrap_or(highest),
                bytes,
                seq_entries,
                pair_offset: spec.pair_offset,
                pair_word: spec.pair_word,
                outer_rewritten: u32::from(target == BenchTarget::Agent),
            })
            .collect();
        let values = PerCpuValues::try_from(per_cpu)
            .map_err(|e| DataplaneError::OutOfRange(format!("{}: {e}", maps::BENCH_FRAME)))?;
        frames
            .set(0, values, 0)
            .map_err(map_err(maps::BENCH_FRAME, "update"))?;
        Ok(bytes)
    }

    /// Moves the time at which the program first saw VIP `vip_id`'s current table
    /// (`TABLE_SEEN`) `secs` seconds into the past, as if the table had been live that
    /// much longer: for tests and benchmarks of SYNs outside the window after a table
    /// change. Nothing happens if no packet has seen the table yet.
    ///
    /// # Errors
    /// Map failures.
    pub fn age_table_seen(&mut self, vip_id: u32, secs: u32) -> Result<(), DataplaneError> {
        let seen = self
            .ebpf
            .map_mut(maps::TABLE_SEEN)
            .ok_or(DataplaneError::MissingMap(maps::TABLE_SEEN))?;
        let mut seen = Array::<&mut MapData, u64>::try_from(seen)
            .map_err(map_err(maps::TABLE_SEEN, "open"))?;
        let word = seen
            .get(&vip_id, 0)
            .map_err(map_err(maps::TABLE_SEEN, "lookup"))?;
        if word >> 32 == 0 {
            return Ok(());
        }
        // The low half counts 2^30 ns ticks.
        let ticks = u32::try_from((u64::from(secs) * 1_000_000_000) >> 30).unwrap_or(u32::MAX);
        #[expect(clippy::cast_possible_truncation, reason = "the word's low half")]
        let first = (word as u32).wrapping_sub(ticks);
        seen.set(vip_id, (word & !0xffff_ffff) | u64::from(first), 0)
            .map_err(map_err(maps::TABLE_SEEN, "update"))?;
        Ok(())
    }

    /// Moves every affinity pin's time (`AFFINITY`) `secs` seconds into the past, as
    /// if its client had been idle that much longer: for tests of the affinity timeout.
    /// Returns the pins moved.
    ///
    /// # Errors
    /// Map failures.
    pub fn age_affinity(&mut self, secs: u32) -> Result<usize, DataplaneError> {
        let keys: Vec<AffinityKey> = self
            .affinity
            .keys()
            .collect::<Result<_, _>>()
            .map_err(map_err(maps::AFFINITY, "iterate"))?;
        let mut moved = 0;
        for key in keys {
            let Ok(mut entry) = self.affinity.get(&key, 0) else {
                continue;
            };
            entry.stamp_ns = entry
                .stamp_ns
                .saturating_sub(u64::from(secs) * 1_000_000_000);
            self.affinity
                .insert(key, entry, 0)
                .map_err(map_err(maps::AFFINITY, "update"))?;
            moved += 1;
        }
        Ok(moved)
    }

    /// The harness's repetition counter after the last run: the highest of the CPUs'
    /// counters (each CPU counts its own repetitions).
    ///
    /// # Errors
    /// Map failures.
    pub fn bench_counter(&mut self) -> Result<u32, DataplaneError> {
        let frames = self
            .ebpf
            .map_mut(maps::BENCH_FRAME)
            .ok_or(DataplaneError::MissingMap(maps::BENCH_FRAME))?;
        let frames = PerCpuArray::<&mut MapData, BenchFrame>::try_from(frames)
            .map_err(map_err(maps::BENCH_FRAME, "open"))?;
        Ok(frames
            .get(&0, 0)
            .map_or(0, |f| f.iter().map(|f| f.counter).max().unwrap_or(0)))
    }

    /// Instructions the verifier processed for program `name` (`verified_insns`,
    /// kernel 5.16+).
    ///
    /// # Errors
    /// When the program is unknown or its info cannot be read.
    pub fn verified_instructions(
        &mut self,
        name: &'static str,
    ) -> Result<Option<u32>, DataplaneError> {
        let prog = xdp(&mut self.ebpf, name)?;
        if prog.fd().is_err() {
            prog.load().map_err(load_err(name))?;
        }
        let info = prog.info().map_err(prog_err(name))?;
        Ok(info.verified_instruction_count())
    }

    /// Installs a table map of clean `slots` whose header says `size`, without any
    /// validation: for tests of the data plane's guards against a corrupt table (a size
    /// field of 0 or larger than the map).
    ///
    /// # Errors
    /// Failures creating, filling or swapping the map.
    pub fn install_raw_table(
        &mut self,
        vip_id: u32,
        size: u32,
        slots: &[u32],
    ) -> Result<(), DataplaneError> {
        check_vip_id(vip_id)?;
        lock(&self.tables).install_raw(vip_id, size, slots)
    }

    /// Where VIP `vip_id`'s table buffers A and B are in the outer maps: (in `TABLES`,
    /// in `TABLES_STD`) each.
    ///
    /// # Errors
    /// When an outer map cannot be read.
    pub fn table_places(&self, vip_id: u32) -> Result<[(bool, bool); 2], DataplaneError> {
        check_vip_id(vip_id)?;
        lock(&self.tables).places(vip_id)
    }

    /// The `VIPS` entry of `key` (its id, flags and table epoch), if it has one.
    ///
    /// # Errors
    /// When `VIPS` cannot be read.
    pub fn vip_entry(&self, key: &VipKey) -> Result<Option<VipEntry>, DataplaneError> {
        lock(&self.tables).vip_entry(key)
    }

    /// A second handle on the tables, usable from another thread.
    pub fn table_writer(&self) -> TableWriter {
        TableWriter {
            tables: Arc::clone(&self.tables),
        }
    }

    /// RCU grace periods waited for by table changes so far.
    pub fn grace_periods(&self) -> u64 {
        lock(&self.tables).grace_periods()
    }

    /// `key`'s `VIP_CACHE` slot, as the program reads it.
    pub fn vip_cache_slot(&self, key: &VipKey) -> VipCacheSlot {
        lock(&self.tables).cache_slot(key)
    }

    /// Overwrites `key`'s `VIP_CACHE` slot with `slot` (a test of what the program
    /// trusts; the daemon's bookkeeping is unchanged).
    pub fn write_vip_cache_slot(&mut self, key: &VipKey, slot: &VipCacheSlot) {
        lock(&self.tables).write_cache_slot(key, slot);
    }

    /// Deletes `key`'s `VIPS` entry and nothing else (its `VIP_CACHE` slot and
    /// `VIP_INFO` element stay): shows which packets the cache alone serves.
    ///
    /// # Errors
    /// Map failures.
    pub fn delete_vips_entry(&mut self, key: &VipKey) -> Result<(), DataplaneError> {
        lock(&self.tables).delete_vips_entry(key)
    }
}

/// The benchmark harness prepared by [`KernelDataplane::bench_runner`]: `Sync`, so that
/// threads pinned to different CPUs run it at the same time (`BPF_PROG_TEST_RUN` with
/// `repeat` runs every repetition on the calling thread's CPU).
pub struct BenchRunner<'a> {
    prog: &'a Xdp,
}

impl BenchRunner<'_> {
    /// Runs the harness `repeat` times on `frame` (exactly `BENCH_FRAME_MAX` bytes; its
    /// Ethernet header must be the prepared frame's, which the harness restores) on the
    /// calling thread's CPU, with the context's ingress interface `ingress_ifindex`.
    ///
    /// # Errors
    /// [`DataplaneError::OutOfRange`] for a frame of another length;
    /// [`DataplaneError::Program`] when the kernel refuses the run.
    pub fn run(
        &self,
        frame: &[u8],
        ingress_ifindex: Option<u32>,
        repeat: u32,
    ) -> Result<TestRunOutput, DataplaneError> {
        if frame.len() != BENCH_FRAME_MAX {
            return Err(DataplaneError::OutOfRange(format!(
                "benchmark frames must be exactly {BENCH_FRAME_MAX} bytes, got {}",
                frame.len()
            )));
        }
        run_xdp(
            self.prog,
            maps::BENCH_PROGRAM,
            frame,
            ingress_ifindex,
            repeat,
        )
    }
}

/// A second handle on the tables (shared with the [`KernelDataplane`] it came from),
/// to install tables from another thread while the first runs packets.
pub struct TableWriter {
    tables: Arc<Mutex<TableSet>>,
}

impl TableWriter {
    /// Installs `table` as VIP `vip_id`'s table (see
    /// [`crate::Dataplane::install_table`]).
    ///
    /// # Errors
    /// As [`crate::Dataplane::install_table`].
    pub fn install_table(
        &mut self,
        vip_id: u32,
        table: &TableImage<'_>,
    ) -> Result<(), DataplaneError> {
        check_table(vip_id, table)?;
        lock(&self.tables).install(vip_id, table)
    }
}

/// Runs program `name` `repeat` times on `frame` with `BPF_PROG_TEST_RUN`.
pub(super) fn run_program(
    ebpf: &mut Ebpf,
    name: &'static str,
    frame: &[u8],
    ingress_ifindex: Option<u32>,
    repeat: u32,
) -> Result<TestRunOutput, DataplaneError> {
    run_xdp(xdp(ebpf, name)?, name, frame, ingress_ifindex, repeat)
}

/// Runs the loaded program `prog` (named `name`) `repeat` times on `frame` with
/// `BPF_PROG_TEST_RUN`, on the calling thread's CPU.
fn run_xdp(
    prog: &Xdp,
    name: &'static str,
    frame: &[u8],
    ingress_ifindex: Option<u32>,
    repeat: u32,
) -> Result<TestRunOutput, DataplaneError> {
    let mut out = vec![0u8; frame.len() + TEST_RUN_OUT_SLACK];
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
    // egress_ifindex (u32 each); data_end must equal the frame length.
    let ctx: Option<Vec<u8>> = ingress_ifindex.map(|ifindex| {
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        [0, len, 0, ifindex, 0, 0]
            .iter()
            .flat_map(|v: &u32| v.to_ne_bytes())
            .collect()
    });
    let mut opts = TestRunOptions::new();
    opts.data_in = Some(frame);
    opts.data_out = Some(&mut out);
    opts.ctx_in = ctx.as_deref();
    opts.repeat = repeat;
    let result = prog.test_run(opts).map_err(prog_err(name))?;
    out.truncate(result.data_size_out as usize);
    Ok(TestRunOutput {
        action: result.return_value,
        data: out,
        duration_ns: u64::try_from(result.duration.as_nanos()).unwrap_or(u64::MAX),
    })
}

impl super::Agent {
    /// Runs the agent once on `frame` with `BPF_PROG_TEST_RUN`, with the context's
    /// ingress interface `ingress_ifindex` (see [`KernelDataplane::test_run_with`]).
    ///
    /// # Errors
    /// [`DataplaneError::Program`] when the kernel refuses the run.
    pub fn test_run(
        &mut self,
        frame: &[u8],
        ingress_ifindex: Option<u32>,
    ) -> Result<TestRunOutput, DataplaneError> {
        run_program(
            &mut self.ebpf,
            maps::AGENT_PROGRAM,
            frame,
            ingress_ifindex,
            1,
        )
    }
}
