//! `lb trace` in the daemon: one trace session at a time ([`Tracer`]). A session starts
//! when a client sends [`Request::Trace`](crate::control::Request::Trace): the filter is
//! written and the XDP program's trace switched on; its records, read from aya-log's
//! ring buffer ([`read_records`]), are decoded, named (VIP, backend address) and streamed
//! to the client. When the client's connection closes (it exited, was interrupted, or
//! vanished), the stream's receiver is dropped; the session's watcher sees the closed
//! channel and switches tracing off. Nothing else of the daemon depends on a session.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
};

use lb_common::{
    stats::XDP_DROP,
    trace::{TRACE_MATCH_CLIENT, TRACE_MATCH_PORT, TRACE_MATCH_VIP, TraceFilter},
};
use tokio::{io::unix::AsyncFd, sync::mpsc};
use tracing::{info, warn};

use super::Shared;
use crate::{
    config::Vip,
    control::{Response, TraceClient, TraceEvent, TraceStarted, server::Reply, tcp_flags_text},
};
use lb_dataplane::{TraceReader, TraceRecord};
use lb_maglev::flow::addr_bytes;

/// Lines a slow client may fall behind before records are dropped for it.
const BACKLOG: usize = 4_096;

/// The running trace session, if any.
#[derive(Clone, Default)]
pub(super) struct Tracer {
    active: Arc<Mutex<Option<mpsc::Sender<Response>>>>,
}

/// The kernel filter of a trace of `vip` from `client`.
pub(crate) fn filter(vip: Option<&Vip>, client: Option<&TraceClient>) -> TraceFilter {
    let mut f = TraceFilter::default();
    if let Some(vip) = vip {
        f.vip = vip.key();
        f.fields |= TRACE_MATCH_VIP;
    }
    if let Some(c) = client {
        let (addr, family) = addr_bytes(c.addr);
        f.client = addr;
        f.family = family;
        f.fields |= TRACE_MATCH_CLIENT;
        if let Some(port) = c.port {
            f.client_port = port.to_be();
            f.fields |= TRACE_MATCH_PORT;
        }
    }
    f
}

impl Tracer {
    /// Starts a session for a trace of `vip` from `client`, or refuses when one runs.
    pub(super) fn start(
        &self,
        service: &Shared,
        vip: Option<Vip>,
        client: Option<TraceClient>,
    ) -> Reply {
        let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        if active.as_ref().is_some_and(|tx| !tx.is_closed()) {
            return Reply::Once(Response::error(
                "another lb trace is running (one at a time): stop it first",
            ));
        }
        let kernel_filter = filter(vip.as_ref(), client.as_ref());
        {
            let mut s = service.lock().unwrap_or_else(PoisonError::into_inner);
            if let Err(e) = s
                .controller_mut()
                .dataplane_mut()
                .set_trace(Some(&kernel_filter))
            {
                return Reply::Once(Response::error(format!("starting the trace: {e}")));
            }
        }
        let (tx, rx) = mpsc::channel(BACKLOG);
        let started = TraceStarted {
            vip: vip.map(|v| v.to_string()),
            client: client.map(|c| c.to_string()),
        };
        info!(
            "lb trace started (vip {}, client {})",
            started.vip.as_deref().unwrap_or("any"),
            started.client.as_deref().unwrap_or("any")
        );
        let _ = tx.try_send(Response::ok(&started));
        *active = Some(tx.clone());
        let (service, slot) = (Arc::clone(service), Arc::clone(&self.active));
        tokio::spawn(async move {
            tx.closed().await;
            let mut active = slot.lock().unwrap_or_else(PoisonError::into_inner);
            if active.as_ref().is_some_and(|a| a.same_channel(&tx)) {
                *active = None;
            }
            drop(active);
            let mut s = service.lock().unwrap_or_else(PoisonError::into_inner);
            match s.controller_mut().dataplane_mut().set_trace(None) {
                Ok(()) => info!("lb trace stopped (the client closed its connection)"),
                Err(e) => warn!("stopping the trace: {e}"),
            }
        });
        Reply::Stream(rx)
    }

    /// Sends `event` to the running session, if any (dropped when it is behind).
    fn send(&self, event: &TraceEvent) {
        if let Some(tx) = self
            .active
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            let _ = tx.try_send(Response::ok(event));
        }
    }
}

/// The event of record `r`, with the VIP's and the backend's names from `service`.
fn event(service: &Shared, r: &TraceRecord) -> TraceEvent {
    let proto = match r.proto {
        6 => "tcp".to_owned(),
        17 => "udp".to_owned(),
        other => other.to_string(),
    };
    let backend_id = (r.backend_id != 0).then_some(r.backend_id);
    let backend = backend_id.and_then(|id| {
        let s = service.lock().unwrap_or_else(PoisonError::into_inner);
        s.controller()
            .history()
            .records()
            .find(|(_, rec)| rec.id == id)
            .map(|((_, key), _)| key.to_string())
    });
    let action = match r.reason.action() {
        lb_common::stats::XDP_TX => "XDP_TX",
        lb_common::stats::XDP_REDIRECT => "XDP_REDIRECT",
        XDP_DROP => "XDP_DROP",
        _ => "XDP_PASS",
    };
    TraceEvent {
        vip: format!("{}/{proto}", SocketAddr::new(r.vip.ip(), r.vip.port())),
        client: r.client.to_string(),
        tcp_flags: tcp_flags_text(r.tcp_flags),
        decision: r.path.name().to_owned(),
        slot: r.slot,
        backend_id,
        backend,
        reason: r.reason.name().to_owned(),
        action: action.to_owned(),
    }
}

/// Reads the XDP program's trace records as they come and sends them to the running
/// session. Runs until the runtime stops.
pub(super) async fn read_records(reader: TraceReader, service: Shared, tracer: Tracer) {
    // SAFETY: the reader owns the ring buffer's descriptor, which stays open and the
    // same until the reader (owned by the AsyncFd) is dropped.
    let registered =
        unsafe { AsyncFd::register_with_interest(reader, tokio::io::Interest::READABLE) };
    let mut fd = match registered {
        Ok(fd) => fd,
        Err(e) => {
            warn!("lb trace unavailable: watching the trace ring buffer: {e}");
            return;
        }
    };
    loop {
        let mut guard = match fd.readable_mut().await {
            Ok(g) => g,
            Err(e) => {
                warn!("lb trace: the trace ring buffer: {e}");
                return;
            }
        };
        let texts = guard.get_inner_mut().drain();
        guard.clear_ready();
        for text in texts {
            match TraceRecord::parse(&text) {
                Some(record) => tracer.send(&event(&service, &record)),
                None => warn!("lb trace: unreadable record {text:?}"),
            }
        }
    }
}
