//! The harness itself: `lb run` answers SIGHUP ([`Daemon::reload`]) and is stopped
//! gracefully (its XDP program stays attached: the datapath outlives the daemon); its
//! temporary directory, the daemon process, the bed's namespaces and the pinned
//! datapath are gone afterwards, also when the test panics.

use std::{
    panic::AssertUnwindSafe,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use lb_tests::{
    daemon::{Daemon, DaemonConfig},
    testbed::{LB_IFACE, TestBed},
};

use super::{bed, daemon};

/// Whether the bed's `lb0` has an XDP program attached (`ip link` shows `xdp...`).
fn xdp_attached(bed: &TestBed) -> bool {
    let out = Command::new("ip")
        .args(["-n", bed.lb_ns().name(), "link", "show", "dev", LB_IFACE])
        .output()
        .expect("ip link show");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).contains("xdp")
}

fn dir_of(lb: &Daemon<'_>) -> PathBuf {
    lb.config_path()
        .parent()
        .expect("the daemon's directory")
        .to_owned()
}

/// Whether process `pid` still exists and is an `lb`.
fn lb_running(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains("lb"))
}

fn namespaces_listed(names: &[String]) -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    names
        .iter()
        .filter(|n| list.lines().any(|l| l.split_whitespace().next() == Some(n)))
        .cloned()
        .collect()
}

#[test]
fn the_daemon_stops_gracefully_and_everything_goes_also_on_panic() {
    let bed = bed(1);
    let lb = daemon(&bed, &DaemonConfig::equal([1]));
    let dir = dir_of(&lb);
    let pid = lb.pid();
    assert!(xdp_attached(&bed), "lb run attached nothing to {LB_IFACE}");
    assert!(lb.socket_path().exists() && lb.log_path().exists());
    // SIGHUP with an unchanged file: nothing to do, said once.
    lb.reload().expect("SIGHUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !lb.log().contains("is unchanged; nothing to do") {
        assert!(
            Instant::now() < deadline,
            "no answer to SIGHUP logged:\n{}",
            lb.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(lb.log().contains("SIGHUP: "), "{}", lb.log());
    lb.status().expect("lb status after the reload");
    let log = lb.stop().expect("a graceful stop");
    assert!(log.contains("SIGTERM"), "{log}");
    assert!(log.contains("the datapath stays attached to lb0"), "{log}");
    assert!(xdp_attached(&bed), "the datapath outlives the daemon");
    assert!(!lb_running(pid));
    assert!(!Path::new(&dir).exists(), "{} is left", dir.display());
    let pins = bed.lb_ns().pin_dir().expect("the namespace's cookie");
    assert!(pins.join(LB_IFACE).exists(), "{} pinned", pins.display());
    drop(bed);
    assert!(!pins.exists(), "{} is left", pins.display());

    let mut seen: Option<(u32, PathBuf, Vec<String>)> = None;
    let panicked = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let bed = super::bed(1);
        let lb = daemon(&bed, &DaemonConfig::equal([1]));
        seen = Some((lb.pid(), dir_of(&lb), bed.namespace_names()));
        panic!("a failing test");
    }));
    assert!(panicked.is_err());
    let (pid, dir, names) = seen.expect("the daemon started");
    assert!(!lb_running(pid), "lb run ({pid}) still runs");
    assert!(!dir.exists(), "{} is left", dir.display());
    assert_eq!(namespaces_listed(&names), Vec::<String>::new());
}
