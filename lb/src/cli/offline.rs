//! The reading verbs' fallback when no daemon answers (`lb status`, `lb stats`, `lb
//! flow`, `lb conn list`): the answer is read from the pinned datapath
//! ([`crate::daemon::offline`]) and says so, on its first line in text and as
//! `daemon` in JSON; the verb then exits with [`EXIT_NO_DAEMON`].

use std::path::PathBuf;

use serde::Serialize;

use super::{Output, SocketArg, json};
use crate::{
    control::ClientError,
    daemon::offline::{self, DaemonAbsent, Offline},
    defaults,
};

/// Exit status of a reading verb answered from the pins (the datapath forwards, its
/// daemon does not run): 3, as `lb status` of a degraded datapath.
pub const EXIT_NO_DAEMON: i32 = 3;

/// Where the pinned datapath is, for reading it when no daemon answers.
#[derive(Clone, Debug, clap::Args)]
pub struct PinsArg {
    /// With no daemon answering: the bpffs directory of the pinned datapath (`pin_dir`
    /// of the configuration).
    #[arg(long, default_value = defaults::PIN_DIR)]
    pub pin_dir: PathBuf,
    /// With no daemon answering: the interface whose pinned datapath to read (default:
    /// the one the daemon of --socket held, else the only one pinned).
    #[arg(long)]
    pub interface: Option<String>,
}

/// What a reading verb answers: its output, its exit status, and the message of a
/// non-zero exit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The output.
    pub output: Output,
    /// The exit status (0, or [`EXIT_NO_DAEMON`], or `lb status`'s 3 for a degraded
    /// datapath).
    pub exit: i32,
    /// The message for standard error when `exit` is not 0.
    pub message: String,
}

/// Asks the daemon (`online`), or, when none answers on the socket, the pins
/// (`offline`); returns the value and, for the pins, what they say about the daemon.
///
/// # Errors
/// The daemon refused; or none answered and the pins could not answer (the error names
/// both).
pub(super) fn ask<T>(
    socket: &SocketArg,
    pins: &PinsArg,
    online: impl FnOnce() -> Result<T, ClientError>,
    offline: impl FnOnce(&Offline) -> Result<T, String>,
) -> Result<(T, Option<DaemonAbsent>), ClientError> {
    match online() {
        Ok(value) => Ok((value, None)),
        Err(ClientError::Connect { path, error }) => {
            let unreachable = format!("cannot reach the lb daemon at {path}: {error}");
            let opened = offline::open(&socket.socket, &pins.pin_dir, pins.interface.as_deref())
                .map_err(|e| {
                    ClientError::Refused(format!(
                        "{unreachable}; and no datapath to read instead: {e}"
                    ))
                })?;
            let value = offline(&opened).map_err(|e| {
                ClientError::Refused(format!("{unreachable}; reading the pinned datapath: {e}"))
            })?;
            Ok((value, Some(opened.note)))
        }
        Err(e) => Err(e),
    }
}

/// The output of `value` (`text` renders it) and, when it came from the pins, the
/// note: first in text, as `daemon` in JSON.
pub(super) fn render<T: Serialize>(
    value: &T,
    note: Option<&DaemonAbsent>,
    as_json: bool,
    text: impl FnOnce(&T) -> String,
) -> Output {
    let Some(note) = note else {
        return if as_json {
            json(value)
        } else {
            Output::text(text(value))
        };
    };
    if as_json {
        let mut v = serde_json::to_value(value).unwrap_or_default();
        if let serde_json::Value::Object(fields) = &mut v {
            fields.insert(
                "daemon".to_owned(),
                serde_json::to_value(note).unwrap_or_default(),
            );
        }
        json(&v)
    } else {
        Output::text(format!("{}\n{}", note.message, text(value)))
    }
}

/// The answer of verb `verb`: exit 0 from the daemon, [`EXIT_NO_DAEMON`] from the pins.
pub(super) fn answer(output: Output, note: Option<&DaemonAbsent>, verb: &str) -> Answer {
    match note {
        None => Answer {
            output,
            exit: 0,
            message: String::new(),
        },
        Some(n) => Answer {
            output,
            exit: EXIT_NO_DAEMON,
            message: format!(
                "lb {verb}: daemon not running: answered read-only from the datapath pinned at {}",
                n.pin_dir
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note() -> DaemonAbsent {
        DaemonAbsent {
            running: false,
            message: "daemon not running; datapath forwarding, generation 3, state as of \
                      2026-12-06T02:40:05Z (5 s ago)"
                .to_owned(),
            generation: 3,
            state_as_of: Some("2026-12-06T02:40:05Z".to_owned()),
            state_age_secs: Some(5),
            pin_dir: "/sys/fs/bpf/lb/netns-1/eth0".to_owned(),
            interface: "eth0".to_owned(),
            last_pid: 42,
        }
    }

    #[test]
    fn an_answer_from_the_pins_says_so_in_text_json_and_exit_status() {
        let value = serde_json::json!({ "vips": [] });
        let n = note();
        let text = render(&value, Some(&n), false, |_| "VIP lines\n".to_owned());
        assert_eq!(text.text, format!("{}\nVIP lines\n", n.message));
        let as_json = render(&value, Some(&n), true, |_| String::new());
        let v: serde_json::Value = serde_json::from_str(&as_json.text).expect("JSON");
        assert_eq!(v["daemon"]["generation"], 3);
        assert_eq!(v["daemon"]["running"], false);
        assert_eq!(v["vips"], serde_json::json!([]));
        let a = answer(text, Some(&n), "stats");
        assert_eq!(a.exit, EXIT_NO_DAEMON);
        assert!(
            a.message.starts_with("lb stats: daemon not running"),
            "{}",
            a.message
        );
    }

    #[test]
    fn a_daemons_answer_is_unchanged() {
        let value = serde_json::json!({ "vips": [] });
        let plain = render(&value, None, true, |_| String::new());
        let v: serde_json::Value = serde_json::from_str(&plain.text).expect("JSON");
        assert!(v.get("daemon").is_none());
        assert_eq!(answer(plain, None, "status").exit, 0);
    }
}
