//! Packet tracing on the kernel side (`lb trace`): switching the XDP program's trace on
//! and off ([`KernelDataplane::set_trace`]), the reader of its aya-log records
//! ([`TraceReader`]), and the decoder of their text ([`TraceRecord`]).
//!
//! The program logs through aya-log's ring buffer (`AYA_LOGS`); aya-log's userspace
//! reader formats each record into a `log::Record`, which [`TraceReader`] collects
//! instead of handing it to a global logger. The record format is the program's
//! (`lb-ebpf/src/trace.rs`):
//! `lb-trace vip=ADDR:PORT/PROTO client=ADDR:PORT flags=F via=P backend=B slot=S reason=R`.

use std::{
    net::SocketAddr,
    os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd},
    sync::{Arc, Mutex, PoisonError},
};

use aya::{Ebpf, maps::MapData};
use aya_log::EbpfLogger;
use lb_common::{
    maps,
    stats::Reason,
    trace::{Path, TraceFilter},
    types::CONFIG_TRACE,
};

use super::{KernelDataplane, install_tail_call};
use crate::{Dataplane as _, DataplaneError, map_err};

/// The `log::Log` that aya-log's reader writes to: it keeps each record's text.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<String>>>);

impl log::Log for Collector {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record.args().to_string());
    }

    fn flush(&self) {}
}

/// The reader of the XDP program's trace records (aya-log's ring buffer). Readable
/// (its fd, for `tokio::io::unix::AsyncFd`) when records are waiting.
pub struct TraceReader {
    logger: EbpfLogger<Collector>,
    records: Collector,
}

impl TraceReader {
    /// Takes the ring buffer out of the loaded object.
    pub(super) fn new(ebpf: &mut Ebpf) -> Result<Self, DataplaneError> {
        let records = Collector::default();
        let logger = EbpfLogger::init_with_logger(ebpf, records.clone())
            .map_err(|e| DataplaneError::OutOfRange(format!("map {}: {e}", maps::AYA_LOGS)))?;
        Ok(Self { logger, records })
    }

    /// The text of every record waiting, oldest first.
    pub fn drain(&mut self) -> Vec<String> {
        self.logger.flush();
        std::mem::take(
            &mut *self
                .records
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}

impl AsFd for TraceReader {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.logger.as_fd()
    }
}

/// The ring buffer's descriptor: owned by the reader, the same for its whole life.
impl AsRawFd for TraceReader {
    fn as_raw_fd(&self) -> RawFd {
        self.logger.as_raw_fd()
    }
}

/// One decoded trace record: a VIP packet and what the program did with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// The VIP's address and port.
    pub vip: SocketAddr,
    /// Its IP protocol number.
    pub proto: u8,
    /// The client's address and port.
    pub client: SocketAddr,
    /// The TCP flags byte (0 for UDP).
    pub tcp_flags: u8,
    /// Which state chose the backend.
    pub path: Path,
    /// The backend id (0: none).
    pub backend_id: u32,
    /// The table slot read, if one was.
    pub slot: Option<u32>,
    /// The verdict reason.
    pub reason: Reason,
}

impl TraceRecord {
    /// Decodes a record's text; `None` for any other text (another program's log line,
    /// or a malformed one).
    pub fn parse(text: &str) -> Option<Self> {
        let mut fields = text.strip_prefix("lb-trace ")?.split(' ');
        let mut next = |name: &str| fields.next()?.strip_prefix(name)?.strip_prefix('=');
        let (vip, proto) = next("vip")?.split_once('/')?;
        let record = Self {
            vip: vip.parse().ok()?,
            proto: proto.parse().ok()?,
            client: next("client")?.parse().ok()?,
            tcp_flags: next("flags")?.parse().ok()?,
            path: Path::from_code(next("via")?.parse().ok()?)?,
            backend_id: next("backend")?.parse().ok()?,
            slot: Some(next("slot")?.parse::<u32>().ok()?).filter(|&s| s != u32::MAX),
            reason: *Reason::ALL.get(next("reason")?.parse::<usize>().ok()?)?,
        };
        fields.next().is_none().then_some(record)
    }
}

impl KernelDataplane {
    /// Starts tracing the VIP packets `filter` selects (`Some`), or stops (`None`).
    /// The filter is written before the configuration's `CONFIG_TRACE` bit is set, so
    /// the program never applies a stale filter; the bit is kept across later
    /// configuration writes until tracing stops.
    ///
    /// # Errors
    /// When a map update fails (tracing is then as it was).
    pub fn set_trace(&mut self, filter: Option<&TraceFilter>) -> Result<(), DataplaneError> {
        if let Some(filter) = filter {
            self.trace_filter
                .set(0, *filter, 0)
                .map_err(map_err(maps::TRACE_FILTER, "update"))?;
        }
        let was = self.tracing;
        self.tracing = filter.is_some();
        if let Some(config) = self.written_config {
            let written = self.set_config(&config);
            if written.is_err() {
                self.tracing = was;
            }
            written?;
        }
        Ok(())
    }

    /// Whether tracing is on.
    pub fn is_tracing(&self) -> bool {
        self.tracing
    }

    /// The reader of the trace records; `None` once taken.
    pub fn take_trace_reader(&mut self) -> Option<TraceReader> {
        self.trace_reader.take()
    }

    /// `flags` with the trace bit as this data plane keeps it.
    pub(super) fn trace_flags(&self, flags: u32) -> u32 {
        if self.tracing {
            flags | CONFIG_TRACE
        } else {
            flags & !CONFIG_TRACE
        }
    }
}

/// Loads the trace program (`lb_trace`) and puts it in `TRACE_PROGS`, where the load
/// balancer tail-calls it for a traced packet. A pinned `TRACE_PROGS` (an adopted
/// datapath) still holds the last daemon's `lb_trace`: this replaces it, so the array
/// never keeps the program of an earlier build.
pub(super) fn load_trace_program(ebpf: &mut Ebpf) -> Result<(), DataplaneError> {
    install_tail_call(ebpf, maps::TRACE_PROGRAM, maps::TRACE_PROGS, 0)
}

/// The map type of `TRACE_FILTER`.
pub(super) type TraceFilterMap = aya::maps::Array<MapData, TraceFilter>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_of_both_families_decode_and_anything_else_does_not() {
        let v4 = TraceRecord::parse(
            "lb-trace vip=203.0.113.10:80/6 client=192.0.2.60:40001 flags=2 via=3 backend=7 \
             slot=1234 reason=4",
        )
        .unwrap();
        assert_eq!(v4.vip, "203.0.113.10:80".parse().unwrap());
        assert_eq!(v4.proto, 6);
        assert_eq!(v4.client, "192.0.2.60:40001".parse().unwrap());
        assert_eq!((v4.tcp_flags, v4.path, v4.backend_id), (2, Path::Syn, 7));
        assert_eq!((v4.slot, v4.reason), (Some(1234), Reason::TxEncap));
        let v6 = TraceRecord::parse(
            "lb-trace vip=[2001:db8:f::10]:53/17 client=[2001:db8::7]:5353 flags=0 via=1 \
             backend=9 slot=4294967295 reason=4",
        )
        .unwrap();
        assert_eq!(v6.client, "[2001:db8::7]:5353".parse().unwrap());
        assert_eq!((v6.path, v6.slot), (Path::CtFast, None));
        for bad in [
            "hello",
            "lb-trace vip=203.0.113.10:80/6",
            "lb-trace vip=203.0.113.10:80/6 client=192.0.2.60:40001 flags=2 via=9 backend=7 \
             slot=1 reason=4",
            "lb-trace vip=203.0.113.10:80/6 client=192.0.2.60:40001 flags=2 via=3 backend=7 \
             slot=1 reason=99",
            "lb-trace vip=203.0.113.10:80/6 client=192.0.2.60:40001 flags=2 via=3 backend=7 \
             slot=1 reason=4 extra",
        ] {
            assert_eq!(TraceRecord::parse(bad), None, "{bad}");
        }
    }
}
