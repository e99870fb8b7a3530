//! The data-plane interface: loading the embedded XDP object, attaching it to an
//! interface, running it through `BPF_PROG_TEST_RUN`, and reading its maps.
//!
//! This is the only module of the workspace that touches aya.

use aya::{
    Ebpf, EbpfLoader,
    maps::PerCpuArray,
    programs::{ProgramError, TestRun, TestRunOptions, Xdp, XdpMode, xdp::XdpLinkId},
};
use lb_common::{maps, stats::GlobalStats};

/// Errors of the data-plane interface. Each names the object (map, program,
/// interface) that failed.
#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    /// The embedded object could not be parsed or its maps created.
    #[error("loading the eBPF object: {0}")]
    Load(#[from] aya::EbpfError),
    /// A program operation (verify, attach, detach, test run) failed.
    #[error("program {program}: {source}")]
    Program {
        /// Program name in the object.
        program: &'static str,
        /// What aya reported.
        source: ProgramError,
    },
    /// A map lookup or update failed.
    #[error("map {map}: {source}")]
    Map {
        /// Map name in the object.
        map: &'static str,
        /// What aya reported.
        source: aya::maps::MapError,
    },
    /// A map the program must define is missing from the object.
    #[error("map {0} is missing from the eBPF object")]
    MissingMap(&'static str),
    /// The program is not attached, so it cannot be detached.
    #[error("the program is not attached")]
    NotAttached,
}

/// How to attach the XDP program (kernel doc: `Documentation/networking/xdp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// Native (driver) XDP, `XDP_FLAGS_DRV_MODE`.
    Native,
    /// Generic XDP in the kernel stack, `XDP_FLAGS_SKB_MODE`.
    Skb,
}

/// Result of one `BPF_PROG_TEST_RUN` invocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestRunOutput {
    /// XDP action returned by the program (`XDP_ABORTED` 0, `XDP_DROP` 1, `XDP_PASS` 2,
    /// `XDP_TX` 3, `XDP_REDIRECT` 4).
    pub action: u32,
    /// The frame as the program left it.
    pub data: Vec<u8>,
    /// Mean run time per repetition in nanoseconds, as measured by the kernel.
    pub duration_ns: u64,
}

/// Largest frame a test run can return: the input plus headroom the program may add.
const TEST_RUN_OUT_SLACK: usize = 256;

/// The loaded XDP program and its maps.
pub struct Dataplane {
    ebpf: Ebpf,
    link: Option<XdpLinkId>,
}

impl Dataplane {
    /// Loads the embedded object ([`crate::EBPF_OBJECT`]) and verifies the XDP program.
    ///
    /// # Errors
    /// [`DataplaneError::Load`] when the object or a map cannot be created (for example
    /// without `CAP_BPF`), [`DataplaneError::Program`] when the verifier rejects it.
    pub fn load() -> Result<Self, DataplaneError> {
        let mut ebpf = EbpfLoader::new().load(crate::EBPF_OBJECT)?;
        let prog = xdp_program(&mut ebpf)?;
        prog.load().map_err(|source| DataplaneError::Program {
            program: maps::XDP_PROGRAM,
            source,
        })?;
        Ok(Self { ebpf, link: None })
    }

    /// Attaches the program to `iface` in `mode`.
    ///
    /// # Errors
    /// [`DataplaneError::Program`] when the interface does not exist or the kernel refuses
    /// the mode.
    pub fn attach(&mut self, iface: &str, mode: AttachMode) -> Result<(), DataplaneError> {
        let mode = match mode {
            AttachMode::Native => XdpMode::Driver,
            AttachMode::Skb => XdpMode::Skb,
        };
        let prog = xdp_program(&mut self.ebpf)?;
        let link = prog
            .attach(iface, mode)
            .map_err(|source| DataplaneError::Program {
                program: maps::XDP_PROGRAM,
                source,
            })?;
        self.link = Some(link);
        Ok(())
    }

    /// Detaches the program from the interface it was attached to.
    ///
    /// # Errors
    /// [`DataplaneError::NotAttached`] if it is not attached, [`DataplaneError::Program`]
    /// when the kernel refuses.
    pub fn detach(&mut self) -> Result<(), DataplaneError> {
        let link = self.link.take().ok_or(DataplaneError::NotAttached)?;
        let prog = xdp_program(&mut self.ebpf)?;
        prog.detach(link).map_err(|source| DataplaneError::Program {
            program: maps::XDP_PROGRAM,
            source,
        })
    }

    /// Whether the program is currently attached by this handle.
    pub fn is_attached(&self) -> bool {
        self.link.is_some()
    }

    /// Runs the program once on `frame` with `BPF_PROG_TEST_RUN`.
    ///
    /// # Errors
    /// [`DataplaneError::Program`] when the kernel refuses the run.
    pub fn test_run(&mut self, frame: &[u8]) -> Result<TestRunOutput, DataplaneError> {
        self.test_run_repeat(frame, 1)
    }

    /// Runs the program `repeat` times on `frame` (the kernel reuses one buffer, so a
    /// program that rewrites the frame sees its own output from the second run on).
    ///
    /// # Errors
    /// [`DataplaneError::Program`] when the kernel refuses the run.
    pub fn test_run_repeat(
        &mut self,
        frame: &[u8],
        repeat: u32,
    ) -> Result<TestRunOutput, DataplaneError> {
        let mut out = vec![0u8; frame.len() + TEST_RUN_OUT_SLACK];
        let prog = xdp_program(&mut self.ebpf)?;
        let mut opts = TestRunOptions::new();
        opts.data_in = Some(frame);
        opts.data_out = Some(&mut out);
        opts.repeat = repeat;
        let result = prog
            .test_run(opts)
            .map_err(|source| DataplaneError::Program {
                program: maps::XDP_PROGRAM,
                source,
            })?;
        out.truncate(result.data_size_out as usize);
        Ok(TestRunOutput {
            action: result.return_value,
            data: out,
            duration_ns: u64::try_from(result.duration.as_nanos()).unwrap_or(u64::MAX),
        })
    }

    /// Global counters summed over all CPUs.
    ///
    /// # Errors
    /// [`DataplaneError::Map`] when the per-CPU array cannot be read.
    pub fn global_stats(&self) -> Result<GlobalStats, DataplaneError> {
        let map = self
            .ebpf
            .map(maps::GLOBAL_STATS)
            .ok_or(DataplaneError::MissingMap(maps::GLOBAL_STATS))?;
        let array =
            PerCpuArray::<_, GlobalStats>::try_from(map).map_err(|source| DataplaneError::Map {
                map: maps::GLOBAL_STATS,
                source,
            })?;
        let per_cpu = array.get(&0, 0).map_err(|source| DataplaneError::Map {
            map: maps::GLOBAL_STATS,
            source,
        })?;
        let mut total = GlobalStats::default();
        for cpu in per_cpu.iter() {
            total.rx_packets += cpu.rx_packets;
        }
        Ok(total)
    }

    /// Number of instructions the verifier processed for the XDP program
    /// (`verified_insns` of `bpf_prog_info`, kernel 5.16+).
    ///
    /// # Errors
    /// [`DataplaneError::Program`] when the program info cannot be read.
    pub fn verified_instructions(&mut self) -> Result<Option<u32>, DataplaneError> {
        let prog = xdp_program(&mut self.ebpf)?;
        let info = prog.info().map_err(|source| DataplaneError::Program {
            program: maps::XDP_PROGRAM,
            source,
        })?;
        Ok(info.verified_instruction_count())
    }
}

/// The XDP program of the object, by name.
fn xdp_program(ebpf: &mut Ebpf) -> Result<&mut Xdp, DataplaneError> {
    let prog = ebpf
        .program_mut(maps::XDP_PROGRAM)
        .ok_or(DataplaneError::Program {
            program: maps::XDP_PROGRAM,
            source: ProgramError::NotLoaded,
        })?;
    prog.try_into().map_err(|source| DataplaneError::Program {
        program: maps::XDP_PROGRAM,
        source,
    })
}
