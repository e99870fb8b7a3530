//! `lb-restart-bench`: how long a restarted `lb run` takes to adopt its pinned datapath,
//! and how long writing the state file takes (part of `cargo xtask bench`; needs root).
//!
//! - Restart to adopted: from the new process's start (`ip netns exec ... lb run`)
//!   until it sends `READY=1` on `$NOTIFY_SOCKET`, which it does once the pinned link
//!   runs its build's program (kept when it runs already) and the tables are
//!   reconciled with the file. Measured for
//!   100 VIPs x 100 backends (65,537-slot tables) and for one VIP of 100 backends with
//!   M = 655,373, the median of several restarts (SIGTERM, then start); the same run
//!   measures the first start (which creates the datapath) as the reference.
//! - State file: [`StateFile::save`] (temporary file, fsync, rename, fsync of the
//!   directory) with 1 and with 1,000 runtime changes, against a 1-byte write with the
//!   same fsyncs (the file system's own cost) as the yardstick.

use std::{
    io::Write as _,
    os::unix::net::UnixDatagram,
    path::Path,
    process::Child,
    time::{Duration, Instant},
};

use anyhow::bail;
use lb::{
    config::BackendState,
    controller::{BackendSpec, Override, Overrides},
    daemon::state_file::StateFile,
};
use lb_tests::{
    daemon::{scale_config, start_until_ready, stop_gracefully},
    netns::NetNs,
};

/// Restarts measured per case.
const RESTARTS: usize = 5;

fn config(dir: &Path, vips: usize, backends: usize, table_size: u32) -> String {
    scale_config(dir, vips, backends, table_size, |v, b| {
        [v % 250, b / 250, 1 + b % 250]
    })
}

/// Starts `lb run` in `ns` and returns it once READY=1 arrived, with the time it took.
fn start(ns: &NetNs, dir: &Path, notify: &UnixDatagram) -> anyhow::Result<(Child, Duration)> {
    let (child, _, took) = start_until_ready(ns, dir, notify)?;
    Ok((child, took))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// One case: (first start, median restart to adopted).
fn case(vips: usize, backends: usize, table_size: u32) -> anyhow::Result<(Duration, Duration)> {
    let ns = NetNs::create("lbb-restart-")?;
    ns.ip(&["link", "add", "lb0", "type", "veth", "peer", "name", "lb1"])?;
    ns.ip(&["link", "set", "lb0", "up"])?;
    ns.ip(&["link", "set", "lb1", "up"])?;
    let tmp = lb_tests::daemon::TempDir::new("lbb-restart-")?;
    let dir = tmp.path();
    std::fs::write(dir.join("lb.toml"), config(dir, vips, backends, table_size))?;
    let notify = UnixDatagram::bind(dir.join("notify.sock"))?;
    notify.set_read_timeout(Some(Duration::from_secs(120)))?;
    let (mut child, first) = start(&ns, dir, &notify)?;
    let mut restarts = Vec::new();
    for _ in 0..RESTARTS {
        stop_gracefully(child)?;
        let (next, took) = start(&ns, dir, &notify)?;
        restarts.push(took);
        child = next;
    }
    stop_gracefully(child)?;
    // The namespace's drop removes the pins.
    Ok((first, median(restarts)))
}

/// Median time of `f` over `n` runs.
fn time(n: usize, mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<Duration> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f()?;
        v.push(t.elapsed());
    }
    Ok(median(v))
}

fn state_file() -> anyhow::Result<()> {
    let tmp = lb_tests::daemon::TempDir::new("lbb-state-")?;
    let file = StateFile::new(tmp.path(), "lb0");
    let overrides = |n: usize| {
        Overrides::from_items((0..n).map(|i| {
            Override {
                vip: "203.0.113.10:80/tcp".parse().expect("vip"),
                backend: std::net::IpAddr::from(std::net::Ipv4Addr::from(
                    0x0a00_0001 + u32::try_from(i).expect("fits"),
                ))
                .into(),
                runtime: Some(BackendSpec {
                    weight: 1,
                    state: BackendState::Drain,
                }),
                file: Some(BackendSpec {
                    weight: 1,
                    state: BackendState::Active,
                }),
            }
        }))
    };
    let yard = tmp.path().join("yardstick");
    let yardstick = time(21, || {
        let mut f = std::fs::File::create(&yard)?;
        f.write_all(b"x")?;
        f.sync_all()?;
        std::fs::File::open(tmp.path())?.sync_all()?;
        Ok(())
    })?;
    let one = overrides(1);
    let thousand = overrides(1000);
    let t1 = time(21, || Ok(file.save(&one)?))?;
    let t1000 = time(21, || Ok(file.save(&thousand)?))?;
    println!(
        "state file write (median of 21): 1 change {}, 1,000 changes {}; yardstick (1 byte, same fsyncs) {}",
        ms(t1),
        ms(t1000),
        ms(yardstick)
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    if !lb_tests::is_root() {
        bail!("lb-restart-bench starts lb run in a network namespace: run as root");
    }
    println!(
        "restart to adopted (lb run start until READY=1: program replaced in the pinned link, tables reconciled), median of {RESTARTS} restarts; the first start creates the datapath (reference):"
    );
    for (name, vips, backends, size) in [
        ("100 VIPs x 100 backends, M = 65,537", 100, 100, 65_537),
        ("1 VIP x 100 backends, M = 655,373", 1, 100, 655_373),
    ] {
        let (first, restart) = case(vips, backends, size)?;
        println!(
            "  {name}: restart to adopted {}, first start {}",
            ms(restart),
            ms(first)
        );
    }
    state_file()
}
