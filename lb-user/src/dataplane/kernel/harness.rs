//! Test and benchmark access to a loaded [`KernelDataplane`] (feature `test-harness`,
//! enabled only by the `lb-tests` crate): `BPF_PROG_TEST_RUN` runs of the load
//! balancer, timed runs through the benchmark harness program `lb_bench`, the verifier's
//! instruction count, raw tables for the guards' tests, and a second table writer for
//! concurrency tests.

use std::sync::{Arc, Mutex};

use aya::{
    Ebpf,
    maps::{Array, MapData, ProgramArray},
    programs::{TestRun as _, TestRunOptions},
};
use lb_common::{
    maps,
    types::{BENCH_FRAME_MAX, BenchFrame},
};

use super::{KernelDataplane, check_table, check_vip_id, lock, prog_err, xdp};
use crate::dataplane::{DataplaneError, TableImage, map_err, tables::TableSet};

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
    /// The empty reference program (`lb_empty`).
    Empty,
}

/// Bytes of headroom a test run's output buffer leaves for headers the program pushes.
const TEST_RUN_OUT_SLACK: usize = 256;

impl KernelDataplane {
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
        let bytes: [u8; BENCH_FRAME_MAX] = frame.try_into().map_err(|_| {
            DataplaneError::OutOfRange(format!(
                "benchmark frames must be exactly {BENCH_FRAME_MAX} bytes, got {}",
                frame.len()
            ))
        })?;
        for name in [
            maps::EMPTY_PROGRAM,
            maps::UNTRACED_PROGRAM,
            maps::BENCH_PROGRAM,
        ] {
            let prog = xdp(&mut self.ebpf, name)?;
            if prog.fd().is_err() {
                prog.load().map_err(prog_err(name))?;
            }
        }
        let target_name = match target {
            BenchTarget::LoadBalancer => maps::XDP_PROGRAM,
            BenchTarget::Empty => maps::EMPTY_PROGRAM,
            BenchTarget::Untraced => maps::UNTRACED_PROGRAM,
        };
        let fd = xdp(&mut self.ebpf, target_name)?
            .fd()
            .map_err(prog_err(target_name))?
            .try_clone()
            .map_err(|error| DataplaneError::Syscall {
                op: format!("dup fd of {target_name}"),
                error,
            })?;
        let progs = self
            .ebpf
            .map_mut(maps::BENCH_PROGS)
            .ok_or(DataplaneError::MissingMap(maps::BENCH_PROGS))?;
        ProgramArray::<&mut MapData>::try_from(progs)
            .map_err(map_err(maps::BENCH_PROGS, "open"))?
            .set(0, &fd, 0)
            .map_err(map_err(maps::BENCH_PROGS, "update"))?;
        let frames = self
            .ebpf
            .map_mut(maps::BENCH_FRAME)
            .ok_or(DataplaneError::MissingMap(maps::BENCH_FRAME))?;
        let mut frames = Array::<&mut MapData, BenchFrame>::try_from(frames)
            .map_err(map_err(maps::BENCH_FRAME, "open"))?;
        // The per-repetition counter continues across runs, so that flows varied by it
        // stay new in every run.
        let counter = frames.get(&0, 0).map_or(0, |f| f.counter);
        let frame = BenchFrame {
            vary_offset,
            counter,
            bytes,
        };
        frames
            .set(0, frame, 0)
            .map_err(map_err(maps::BENCH_FRAME, "update"))?;
        run_program(
            &mut self.ebpf,
            maps::BENCH_PROGRAM,
            &bytes,
            ingress_ifindex,
            repeat,
        )
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
            prog.load().map_err(prog_err(name))?;
        }
        let info = prog.info().map_err(prog_err(name))?;
        Ok(info.verified_instruction_count())
    }

    /// Installs a table map whose entries, header included, are `raw` verbatim, without
    /// any validation: for tests of the data plane's guards against a corrupt table (a
    /// size field of 0 or larger than the map).
    ///
    /// # Errors
    /// Failures creating, filling or swapping the map.
    pub fn install_raw_table(&mut self, vip_id: u32, raw: &[u32]) -> Result<(), DataplaneError> {
        check_vip_id(vip_id)?;
        lock(&self.tables).install_raw(vip_id, raw)
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
}

/// A second handle on the tables (shared with the [`KernelDataplane`] it came from),
/// to install tables from another thread while the first runs packets.
pub struct TableWriter {
    tables: Arc<Mutex<TableSet>>,
}

impl TableWriter {
    /// Installs `table` as VIP `vip_id`'s table (see
    /// [`crate::dataplane::Dataplane::install_table`]).
    ///
    /// # Errors
    /// As [`crate::dataplane::Dataplane::install_table`].
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
fn run_program(
    ebpf: &mut Ebpf,
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
    let prog = xdp(ebpf, name)?;
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
