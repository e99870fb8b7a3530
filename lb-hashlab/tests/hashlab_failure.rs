//! A server failure's fan-out through the lab: rendezvous hands each of the failed
//! server's keys to its runner-up (checked against every score), and bad names are
//! reported as `--fail`'s.

use lb_hashlab::{
    Input, KeySet, LabInput, Params, SchemeKind, parse_servers, rendezvous::Rendezvous,
};

fn input(fail: &str) -> LabInput {
    LabInput {
        servers: parse_servers("10").unwrap(),
        keys: KeySet::generate(5_000, 3).unwrap(),
        key_source: "generated".into(),
        schemes: vec![SchemeKind::Ring],
        params: Params {
            table_size: 4_099,
            ..Params::default()
        },
        vnodes_sweep: vec![],
        epsilon_sweep: vec![],
        events: vec![],
        peer: None,
        hot: 1,
        replicas: 1,
        replication: None,
        fail: Some(fail.into()),
    }
}

#[test]
fn rendezvous_hands_each_key_to_its_runner_up() {
    let lab = input("S3");
    let report = lb_hashlab::run(&lab).unwrap();
    let failure = report.failure.as_ref().unwrap();
    let row = failure
        .rows
        .iter()
        .find(|r| r.scheme == "rendezvous")
        .unwrap();
    let rendezvous = Rendezvous::new(&lab.servers, lab.params.hash).unwrap();
    let mut expected = [0_u64; 10];
    for key in lab.keys.keys() {
        let mut scores = rendezvous.scores(key);
        scores.sort_by(|a, b| b.2.total_cmp(&a.2));
        if scores[0].0 == 3 {
            expected[scores[1].0] += 1;
        }
    }
    let total: u64 = expected.iter().sum();
    assert_eq!(row.keys, total);
    for receiver in &row.receivers {
        let index: usize = receiver.server[1..].parse().unwrap();
        assert_eq!(receiver.keys, expected[index], "{}", receiver.server);
    }
    assert_eq!(row.receivers.len(), 9);
    let text = report.to_text();
    assert!(
        text.contains("\nfailure of S3 (10 servers): who takes its keys\n"),
        "{text}"
    );
    assert!(
        text.contains("\njump        not defined: S3 is bucket 3 of 0..9"),
        "{text}"
    );
}

#[test]
fn the_last_server_fails_under_jump_too() {
    let report = lb_hashlab::run(&input("S9")).unwrap();
    let jump = report.failure.unwrap().rows.pop().unwrap();
    assert_eq!(jump.scheme, "jump");
    assert!(jump.note.is_none());
    assert_eq!((jump.receivers.len(), jump.between_stayed), (9, 0));
}

#[test]
fn an_unknown_server_is_named() {
    let error = lb_hashlab::run(&input("S10")).unwrap_err();
    assert_eq!(
        (error.input, error.problem.as_str()),
        (Input::Fail, "no server \"S10\"")
    );
}
