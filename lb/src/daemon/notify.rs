//! Telling systemd how the daemon is doing (`Type=notify` in
//! `dist/systemd/lb.service`), over `$NOTIFY_SOCKET` with the `sd-notify` crate
//! (`sd_notify(3)`): `READY=1` once the datapath is attached or adopted and the control
//! socket listens, `STOPPING=1` at shutdown, and a `STATUS=` line for `systemctl
//! status`. Without `$NOTIFY_SOCKET` (not started by systemd) nothing is sent.

use sd_notify::NotifyState;
use tracing::{debug, warn};

fn send(states: &[NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    match sd_notify::notify(false, states) {
        Ok(()) => debug!("told the service manager: {states:?}"),
        Err(e) => warn!("notifying the service manager: {e}"),
    }
}

/// `READY=1` with `status`.
pub(super) fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// `STOPPING=1` with `status`.
pub(super) fn stopping(status: &str) {
    send(&[NotifyState::Stopping, NotifyState::Status(status)]);
}
