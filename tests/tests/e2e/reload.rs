//! Reloads as an operator sees them (issue 32, stage 3): `lb config diff` says what a
//! reload of a file would change in the running daemon and exits as diff(1) does; the
//! reload, once done, leaves nothing to diff; every reload logs what it changed in the
//! same words; with `reload = "signal"` a write waits for SIGHUP or `lb reload`.

use std::{
    process::{Command, Output},
    time::{Duration, Instant},
};

use lb_tests::daemon::{Daemon, DaemonConfig, TempDir, backend_addr, lb_binary, vip_text};

use super::{bed, daemon};

/// `lb config diff ARGS` against `lb`'s socket.
fn config_diff(lb: &Daemon<'_>, args: &[&str]) -> Output {
    Command::new(lb_binary())
        .args(["config", "diff"])
        .args(args)
        .arg("--socket")
        .arg(lb.socket_path())
        .output()
        .expect("lb config diff")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The bed's configuration with b3 added, b1 reweighted to 2, allowed sources on the
/// IPv4 TCP VIP, and `[announce]` enabled.
fn changed(base: &DaemonConfig) -> DaemonConfig {
    let mut c = DaemonConfig::weighted([(1, 2), (2, 1), (3, 1)]);
    c.extra = "\n[announce]\nenabled = true\n".into();
    c.vip_keys = vec![(
        vip_text(false, true),
        "allowed_sources = [\"192.0.2.0/24\"]".into(),
    )];
    c.metrics.clone_from(&base.metrics);
    c
}

/// Waits until `f` holds for the daemon's log.
fn wait_log(lb: &Daemon<'_>, what: &str, f: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f(&lb.log()) {
        assert!(Instant::now() < deadline, "no {what}:\n{}", lb.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn config_diff_says_what_a_reload_would_change_and_exits_as_diff() {
    let bed = bed(3);
    let base = DaemonConfig::equal(1..=2);
    let lb = daemon(&bed, &base);
    let same = config_diff(&lb, &[]);
    assert_eq!(same.status.code(), Some(0), "{same:?}");
    assert!(
        stdout(&same).ends_with(": no change\n"),
        "{}",
        stdout(&same)
    );

    let dir = TempDir::new("lb-e2e-diff-").expect("temp dir");
    let file = dir.path().join("next.toml");
    let next = changed(&base);
    std::fs::write(&file, next.to_toml(&lb.socket_path())).expect("write");
    let file_arg = file.to_str().expect("UTF-8 path");
    let out = config_diff(&lb, &[file_arg]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = stdout(&out);
    eprintln!("lb config diff:\n{text}");
    let v4 = vip_text(false, true);
    let (b1, b3) = (backend_addr(1, false), backend_addr(3, false));
    for want in [
        "announce.enabled false -> true".to_owned(),
        format!("VIP {v4}: allowed_sources [] -> [\"192.0.2.0/24\"]"),
        format!("VIP {v4}: backend {b3} added (weight 1, active)"),
        format!("VIP {v4}: backend {b1} reweighted weight 1 -> 2"),
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(&want)),
            "{want:?} in\n{text}"
        );
    }
    let moved = text
        .lines()
        .find(|l| l.starts_with(&format!("VIP {v4}: ")) && l.contains("slots move"))
        .unwrap_or_else(|| panic!("slots moved of {v4} in\n{text}"));
    assert!(!moved.contains(": 0 of"), "{moved}");
    // The IPv6 VIPs: allowed sources unchanged, so no such line.
    let v6 = vip_text(true, true);
    assert!(
        !text.contains(&format!("VIP {v6}: allowed_sources")),
        "{text}"
    );

    // An invalid file: exit 2, its problem with the line.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "interface = 3\n").expect("write");
    let out = config_diff(&lb, &[bad.to_str().expect("UTF-8")]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("interface"),
        "{out:?}"
    );

    // The reload applies it; then the daemon's own file has nothing left to diff.
    lb.write_config(&next).expect("write the daemon's file");
    wait_log(&lb, "reload", |log| log.contains("reloading"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let after = config_diff(&lb, &[]);
        if after.status.code() == Some(0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still a diff after the reload: {after:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Replaces the daemon's file with `text` atomically.
fn write_file(lb: &Daemon<'_>, text: &str) {
    let tmp = lb.dir().join(".lb.toml.next");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, lb.config_path()).expect("rename");
}

/// Backend 1's weight in the IPv4 TCP VIP, as `lb status` shows it.
fn weight_of_b1(lb: &Daemon<'_>) -> u32 {
    let (vip, b1) = (vip_text(false, true), backend_addr(1, false).to_string());
    lb.status()
        .expect("lb status")
        .vips
        .iter()
        .filter(|v| v.vip == vip)
        .flat_map(|v| v.backends.iter())
        .find(|b| b.address == b1)
        .expect("b1")
        .weight
}

#[test]
fn a_reload_logs_what_it_changed_and_reload_signal_waits_for_sighup() {
    let bed = bed(2);
    let base = DaemonConfig::equal(1..=2);
    let lb = daemon(&bed, &base);
    let v4 = vip_text(false, true);

    // An allowed_sources change and [announce] enabled: each reported by the reload.
    let mut next = base.clone();
    next.extra = "\n[announce]\nenabled = true\n".into();
    next.vip_keys = vec![(v4.clone(), "allowed_sources = [\"192.0.2.0/24\"]".into())];
    lb.write_config(&next).expect("write");
    wait_log(&lb, "the announce line", |log| {
        log.contains("reload: announce.enabled false -> true")
    });
    wait_log(&lb, "the allowed_sources line", |log| {
        log.contains(&format!(
            "reload: VIP {v4}: allowed_sources [] -> [\"192.0.2.0/24\"]"
        ))
    });
    assert!(!lb.log().contains("reload: no change"), "{}", lb.log());

    // reload = "signal", applied by this (automatic) reload.
    let signal =
        |c: &DaemonConfig| format!("reload = \"signal\"\n{}", c.to_toml(&lb.socket_path()));
    write_file(&lb, &signal(&next));
    wait_log(&lb, "the reload key's line", |log| {
        log.contains("reload: reload \"auto\" -> \"signal\"")
    });

    // A write is now only logged; SIGHUP applies it.
    let mut heavier = next.clone();
    heavier.backends[0].weight = 3;
    write_file(&lb, &signal(&heavier));
    wait_log(&lb, "the ignored write", |log| {
        log.contains("not reloaded until SIGHUP")
    });
    std::thread::sleep(Duration::from_millis(1_000));
    assert_eq!(weight_of_b1(&lb), 1, "{}", lb.log());
    lb.reload().expect("SIGHUP");
    let deadline = Instant::now() + Duration::from_secs(20);
    while weight_of_b1(&lb) != 3 {
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not apply:\n{}",
            lb.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let b1 = backend_addr(1, false);
    wait_log(&lb, "the reweight line", |log| {
        log.contains(&format!(
            "reload: VIP {v4}: backend {b1} reweighted weight 1 -> 3"
        ))
    });

    // `lb reload` reloads as SIGHUP does and answers what the reload changes.
    let mut lighter = next;
    lighter.backends[0].weight = 2;
    write_file(&lb, &signal(&lighter));
    wait_log(&lb, "the second ignored write", |log| {
        log.matches("not reloaded until SIGHUP").count() >= 2
    });
    let out = lb.cli(&["reload"]).expect("lb reload");
    assert!(
        out.contains(&format!("VIP {v4}: backend {b1} reweighted weight 3 -> 2")),
        "{out}"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while weight_of_b1(&lb) != 2 {
        assert!(
            Instant::now() < deadline,
            "lb reload did not apply:\n{}",
            lb.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
