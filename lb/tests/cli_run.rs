//! `lb run` through the real binary: a start that fails says why on standard error, as
//! a JSON log line under `--log-format json` (no root needed: it fails before anything
//! is attached).

use std::process::Command;

fn run_failing(log_format: &str, rust_log: Option<&str>) -> (i32, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lb"));
    command.args([
        "--log-format",
        log_format,
        "run",
        "--config",
        "/nonexistent/lb-cli-run-test.toml",
    ]);
    match rust_log {
        Some(filter) => command.env("RUST_LOG", filter),
        None => command.env_remove("RUST_LOG"),
    };
    let out = command.output().expect("run the lb binary");
    let stderr = String::from_utf8(out.stderr).expect("UTF-8");
    (out.status.code().unwrap_or(-1), stderr)
}

#[test]
fn a_failed_start_is_a_json_log_line_under_log_format_json() {
    for rust_log in [None, Some("off")] {
        let (status, stderr) = run_failing("json", rust_log);
        assert_eq!(status, 1, "{stderr}");
        let lines: Vec<serde_json::Value> = stderr
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
            .collect();
        let last = lines.last().expect("a line");
        assert_eq!(last["level"], "ERROR", "{stderr}");
        let message = last["fields"]["message"].as_str().expect("a message");
        assert!(message.starts_with("lb: "), "{message}");
    }
}

#[test]
fn a_failed_start_is_plain_text_by_default() {
    let (status, stderr) = run_failing("text", Some("off"));
    assert_eq!(status, 1, "{stderr}");
    assert!(stderr.starts_with("lb: "), "{stderr}");
}
