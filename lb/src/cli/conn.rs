//! `lb conn list`: the connections in the data plane's conntrack maps (IPv4 and IPv6)
//! and the SYN cache's held SYNs, with client, VIP, backend, state, age and idle time,
//! filtered by the daemon as it walks the maps (batched, off its event loop).

use std::fmt::Write as _;

use super::{
    SocketArg,
    offline::{Answer, PinsArg, answer, ask, render},
};
use crate::{
    config::Vip,
    control::{ClientError, ClientPrefix, ConnList, ConnState, PinMap, Request},
};
use lb_maglev::BackendKey;

/// The most rows one answer may carry (about 200 bytes each on the wire, within the
/// client's answer limit).
pub const MAX_LIMIT: usize = 200_000;

/// `lb conn`.
#[derive(Clone, Debug, clap::Args)]
pub struct ConnArgs {
    /// What to do.
    #[command(subcommand)]
    pub verb: ConnVerb,
}

/// The verbs of `lb conn`.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum ConnVerb {
    /// List connections: conntrack entries (IPv4 and IPv6) and held SYNs.
    List(ListArgs),
}

/// `lb conn list`.
#[derive(Clone, Debug, clap::Args)]
pub struct ListArgs {
    /// Only connections to this VIP, `ADDR:PORT/PROTO`.
    #[arg(long)]
    pub vip: Option<Vip>,
    /// Only connections pinned to this backend (its address, as in the file).
    #[arg(long)]
    pub backend: Option<BackendKey>,
    /// Only clients in this prefix, `ADDR[/LEN]` (a bare address is one client).
    #[arg(long)]
    pub client: Option<ClientPrefix>,
    /// Only connections in this state: established, closing (TCP FIN or RST seen),
    /// expired (UDP idle past its timeout), syn (handshake not completed).
    #[arg(long, value_parser = parse_state)]
    pub state: Option<ConnState>,
    /// List at most this many (every match is counted).
    #[arg(long, default_value_t = 1_000, value_parser = parse_limit)]
    pub limit: usize,
    /// Control socket.
    #[command(flatten)]
    pub socket: SocketArg,
    /// The pinned datapath, read when no daemon answers.
    #[command(flatten)]
    pub pins: PinsArg,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Parses `--state`.
fn parse_state(text: &str) -> Result<ConnState, String> {
    text.parse()
}

/// Parses `--limit`: 1 to [`MAX_LIMIT`].
fn parse_limit(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(format!(
            "expected a count from 1 to {MAX_LIMIT}, got {text:?}"
        )),
    }
}

/// Runs `lb conn ...`: from the daemon, else from the pinned datapath (exit 3).
///
/// # Errors
/// The daemon refused (an unknown backend), or neither the daemon nor the pins
/// answered.
pub fn run(args: &ConnArgs) -> Result<Answer, ClientError> {
    let ConnVerb::List(a) = &args.verb;
    let (list, note) = ask(
        &a.socket,
        &a.pins,
        || {
            a.socket.client()?.call::<ConnList>(&Request::Conns {
                vip: a.vip,
                backend: a.backend,
                client: a.client,
                state: a.state,
                limit: a.limit,
            })
        },
        |o| o.conns(a.vip, a.backend, a.client, a.state, a.limit),
    )?;
    let output = render(&list, note.as_ref(), a.json, list_text);
    Ok(answer(output, note.as_ref(), "conn list"))
}

/// A duration in seconds as `45s`, `3m05s`, `2h04m`, `3d02h`.
pub fn duration_text(secs: f64) -> String {
    // Whole seconds: the entries' clocks have about one second of resolution.
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "non-negative seconds, far below u64::MAX"
    )]
    let s = secs.max(0.0) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m{:02}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h{:02}m", s / 3_600, s % 3_600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3_600),
    }
}

/// The text form of `lb conn list`: a table, then a line of counts.
pub fn list_text(l: &ConnList) -> String {
    let mut out = String::new();
    if !l.connections.is_empty() {
        let width = |f: fn(&crate::control::Conn) -> usize, title: &str| {
            l.connections
                .iter()
                .map(f)
                .max()
                .unwrap_or(0)
                .max(title.len())
        };
        let cw = width(|c| c.client.len(), "CLIENT");
        let vw = width(|c| c.vip.len(), "VIP");
        let bw = width(|c| backend(c).len(), "BACKEND");
        let _ = writeln!(
            out,
            "{:cw$}  {:vw$}  {:bw$}  {:11}  {:9}  {:>6}  {:>6}",
            "CLIENT", "VIP", "BACKEND", "STATE", "PIN", "AGE", "IDLE"
        );
        for c in &l.connections {
            let age = c.age_secs.map_or_else(|| "-".to_owned(), duration_text);
            let _ = writeln!(
                out,
                "{:cw$}  {:vw$}  {:bw$}  {:11}  {:9}  {age:>6}  {:>6}",
                c.client,
                c.vip,
                backend(c),
                c.state.name(),
                pin_name(c.pin),
                duration_text(c.idle_secs)
            );
        }
    }
    let shown = l.connections.len();
    let _ = write!(out, "{shown} of {} matching connections", l.matched);
    if u64::try_from(shown).unwrap_or(u64::MAX) < l.matched {
        let _ = write!(out, " (--limit {})", l.limit);
    }
    let _ = writeln!(
        out,
        "; walked {} entries (IPv4 and IPv6 conntrack, the exceptions{}) in {:.1} ms",
        l.walked,
        if l.syn_cache {
            ", and the SYN cache's held SYNs as state syn"
        } else {
            ""
        },
        l.walk_ms
    );
    out
}

/// The PIN column: the map a connection was read from, as the JSON names it.
fn pin_name(pin: PinMap) -> &'static str {
    match pin {
        PinMap::Conntrack => "conntrack",
        PinMap::Exception => "exception",
        PinMap::SynCache => "syn_cache",
    }
}

/// The backend column: the address, or the id of a backend no VIP has any more.
fn backend(c: &crate::control::Conn) -> String {
    c.backend
        .clone()
        .unwrap_or_else(|| format!("id {} (removed)", c.backend_id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Conn;

    #[test]
    fn durations_read_as_an_operator_writes_them() {
        assert_eq!(duration_text(0.4), "0s");
        assert_eq!(duration_text(59.9), "59s");
        assert_eq!(duration_text(185.0), "3m05s");
        assert_eq!(duration_text(7_440.0), "2h04m");
        assert_eq!(duration_text(266_400.0), "3d02h");
    }

    #[test]
    fn the_table_says_what_was_left_out() {
        let c = Conn {
            client: "192.0.2.10:40000".into(),
            vip: "203.0.113.10:80/tcp".into(),
            backend: None,
            backend_id: 9,
            state: ConnState::Syn,
            pin: PinMap::Exception,
            age_secs: None,
            idle_secs: 2.0,
        };
        let l = ConnList {
            connections: vec![c],
            matched: 3,
            limit: 1,
            walked: 10,
            syn_cache: true,
            walk_ms: 0.25,
        };
        let text = list_text(&l);
        assert!(text.starts_with("CLIENT"), "{text}");
        assert!(text.contains("id 9 (removed)"), "{text}");
        assert!(text.contains("syn          exception"), "{text}");
        assert!(
            text.contains("1 of 3 matching connections (--limit 1)"),
            "{text}"
        );
        assert!(text.contains("held SYNs"), "{text}");
    }

    #[test]
    fn limits_and_states_are_checked_by_flag() {
        assert!(parse_limit("0").is_err());
        assert!(parse_limit("200001").unwrap_err().contains("200000"));
        assert_eq!(parse_limit("5"), Ok(5));
        assert_eq!(parse_state("syn"), Ok(ConnState::Syn));
    }
}
