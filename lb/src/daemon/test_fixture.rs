//! What the daemon's unit tests share: the one-VIP file, the interface's MAC, a
//! service started over the in-memory data plane, and a fresh temporary directory.

use std::path::PathBuf;

use super::{service::Service, state_file::StateFile};
use crate::{config::Config, controller::Controller};
use lb_dataplane::FakeDataplane;

/// One TCP VIP with two backends.
pub(super) const FILE: &str = r#"
interface = "eth0"
[encap]
source_v4 = "192.0.2.1"
[[vip]]
address = "203.0.113.10"
port = 80
protocol = "tcp"
table_size = 1009
[[vip.backend]]
address = "198.51.100.11"
[[vip.backend]]
address = "198.51.100.12"
"#;

/// The interface's MAC.
pub(super) const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

/// A service that applied `text` through `controller` in native mode, keeping runtime
/// changes in `state` (none: no state file).
pub(super) fn start_service(
    controller: Controller<FakeDataplane>,
    text: &str,
    state: Option<StateFile>,
) -> Service<FakeDataplane> {
    let loaded = Config::from_toml(text).unwrap();
    Service::start(
        controller,
        "/etc/lb.toml".into(),
        &loaded,
        MAC,
        "native".into(),
        state,
    )
    .unwrap()
    .0
}

/// A fresh directory under the system's temporary one, its name starting with
/// `prefix`.
pub(super) fn temp_dir(prefix: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}
