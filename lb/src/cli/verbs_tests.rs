//! The verbs' arguments: typed values, and errors that name the flag and the value.

use clap::Parser;

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use super::{
    backend::{BackendArgs, parse_timeout},
    flow::{FlowArgs, flow_text},
};
use crate::{
    control::{BackendAction, FlowAffinity, FlowReport, FlowSlot},
    defaults,
};

#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Debug, clap::Subcommand)]
enum Verb {
    Backend(BackendArgs),
    Flow(FlowArgs),
}

fn parse(args: &[&str]) -> Result<Verb, clap::Error> {
    Cli::try_parse_from(std::iter::once("lb").chain(args.iter().copied())).map(|c| c.verb)
}

#[test]
fn arguments_parse_into_typed_values() {
    let Verb::Backend(b) = parse(&[
        "backend",
        "drain",
        "--vip",
        "[2001:0db8:f::0010]:53/UDP",
        "--backend",
        "::ffff:198.51.100.11",
    ])
    .unwrap() else {
        panic!("backend");
    };
    assert_eq!(b.action, BackendAction::Drain);
    assert_eq!(b.vip.to_string(), "[2001:db8:f::10]:53/udp");
    assert_eq!(b.backend.to_string(), "198.51.100.11");
    assert_eq!(b.socket.socket, PathBuf::from(defaults::CONTROL_SOCKET));
    let Verb::Flow(f) = parse(&[
        "flow",
        "--vip",
        "203.0.113.10:80/tcp",
        "--client",
        "192.0.2.10:40000",
    ])
    .unwrap() else {
        panic!("flow");
    };
    assert_eq!(f.client, "192.0.2.10:40000".parse::<SocketAddr>().unwrap());
}

/// `lb backend weight ... N` and `drain --timeout|--keep` parse into typed values.
#[test]
fn lifecycle_arguments_parse() {
    let base = [
        "backend",
        "--vip",
        "203.0.113.10:80/tcp",
        "--backend",
        "198.51.100.11",
    ];
    let with = |extra: &[&'static str]| -> Result<BackendArgs, clap::Error> {
        let mut args = base.to_vec();
        args.splice(1..1, extra.iter().copied());
        match parse(&args)? {
            Verb::Backend(b) => Ok(b),
            Verb::Flow(_) => panic!("backend"),
        }
    };
    let b = with(&["weight", "3"]).unwrap();
    assert_eq!((b.action, b.n), (BackendAction::Weight, Some(3)));
    let b = with(&["drain", "--timeout", "5m"]).unwrap();
    assert_eq!(b.timeout, Some(Duration::from_secs(300)));
    assert!(with(&["drain", "--keep"]).unwrap().keep);
    let err = with(&["weight"]).unwrap_err();
    assert!(err.to_string().contains("<N>"), "{err}");
    let err = with(&["drain", "--timeout", "5m", "--keep"]).unwrap_err();
    assert!(err.to_string().contains("cannot be used with"), "{err}");
    let err = with(&["weight", "3", "--weight", "4"]).unwrap_err();
    assert!(err.to_string().contains("cannot be used with"), "{err}");
}

#[test]
fn timeouts_read_seconds_minutes_and_hours() {
    let ok = |t| parse_timeout(t).unwrap().as_secs();
    assert_eq!(
        [ok("90s"), ok("90"), ok("5m"), ok("2h")],
        [90, 90, 300, 7200]
    );
    for bad in ["0", "0m", "5d", "m", "", "-1s", "1.5m"] {
        assert_eq!(
            parse_timeout(bad).unwrap_err(),
            format!("expected a duration above zero such as 90s, 5m or 1h, got `{bad}`")
        );
    }
}

#[test]
fn bad_arguments_are_refused_naming_the_flag_and_the_value() {
    // These never reach the daemon: the CLI refuses them (usage error, exit status 2).
    let cases: [(&[&str], &str, &str); 4] = [
        (
            &[
                "backend",
                "drain",
                "--vip",
                "203.0.113.10:80/tcp",
                "--backend",
                "198.51.100.13",
                "--timeout",
                "5x",
            ],
            "'--timeout <DURATION>'",
            "expected a duration above zero such as 90s, 5m or 1h, got `5x`",
        ),
        (
            &[
                "backend",
                "add",
                "--vip",
                "203.0.113.10",
                "--backend",
                "198.51.100.13",
            ],
            "'--vip <VIP>'",
            "expected ADDR:PORT/PROTO (e.g. 203.0.113.10:80/tcp), got \"203.0.113.10\"",
        ),
        (
            &[
                "backend",
                "add",
                "--vip",
                "203.0.113.10:80/tcp",
                "--backend",
                "bogus",
            ],
            "'--backend <BACKEND>'",
            "invalid backend address \"bogus\": expected ADDR, ADDR:PORT or [V6ADDR]:PORT",
        ),
        (
            &[
                "flow",
                "--vip",
                "203.0.113.10:80/tcp",
                "--client",
                "192.0.2.10",
            ],
            "'--client <CLIENT>'",
            "expected ADDR:PORT (IPv6 in brackets), got \"192.0.2.10\"",
        ),
    ];
    for (args, flag, message) in cases {
        let err = parse(args).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{args:?}");
        let text = err.to_string();
        assert!(
            text.contains(flag) && text.contains(message),
            "{args:?}: {text}"
        );
    }
}

#[test]
fn text_forms() {
    let f = FlowReport {
        vip: "203.0.113.10:80/tcp".into(),
        client: "192.0.2.10:40000".into(),
        slot: 7,
        table_backend: Some("198.51.100.11".into()),
        pinned: None,
        fast_path: None,
        candidate: None,
        affinity: None,
    };
    assert_eq!(
        flow_text(&f),
        "flow 192.0.2.10:40000 -> 203.0.113.10:80/tcp: slot 7 -> 198.51.100.11; not in \
         conntrack (the next packet takes the table's choice)\n"
    );
    let dirty = FlowReport {
        fast_path: Some(FlowSlot {
            state: "dirty".into(),
            clean_owner: Some("198.51.100.12".into()),
            decided_by: "clean-owner".into(),
        }),
        ..f.clone()
    };
    assert!(
        flow_text(&dirty).ends_with(
            "\nfast path: slot dirty (clean owner 198.51.100.12); the next packet misses and \
             goes to the clean owner\n"
        ),
        "{}",
        flow_text(&dirty)
    );
    let second = FlowReport {
        candidate: Some("198.51.100.12".into()),
        ..dirty
    };
    assert!(
        flow_text(&second).ends_with(
            "\nsecond chance: the next packet names 198.51.100.12 (the slot's clean owner) as \
             candidate\n"
        ),
        "{}",
        flow_text(&second)
    );
    let sticky = |backend: Option<&str>, decides| FlowReport {
        affinity: Some(FlowAffinity {
            timeout_secs: 300,
            backend: backend.map(Into::into),
            idle_secs: backend.map(|_| 12),
            decides,
        }),
        ..f.clone()
    };
    assert!(
        flow_text(&sticky(Some("198.51.100.12"), true)).ends_with(
            "\naffinity: timeout 300 s; client pinned to 198.51.100.12 (idle 12 s): its next \
             new connection goes there\n"
        ),
        "{}",
        flow_text(&sticky(Some("198.51.100.12"), true))
    );
    assert!(
        flow_text(&sticky(Some("198.51.100.12"), false)).contains("no longer decides"),
        "{}",
        flow_text(&sticky(Some("198.51.100.12"), false))
    );
    assert!(
        flow_text(&sticky(None, false)).ends_with(
            "; no pin for this client: its next new connection takes the table's choice\n"
        ),
        "{}",
        flow_text(&sticky(None, false))
    );
}
