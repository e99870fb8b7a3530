//! `lb backend add|remove|drain|undrain|weight`: a runtime change of one backend of a
//! VIP, through the control socket (kept across reloads and restarts; `lb overrides`
//! lists it).

use std::time::Duration;

use super::{Output, SocketArg, json};
use crate::{
    config::Vip,
    control::{BackendAction, ClientError},
};
use lb_maglev::BackendKey;

/// `lb backend`.
#[derive(Clone, Debug, clap::Args)]
pub struct BackendArgs {
    /// add | remove | drain | undrain | weight.
    #[arg(value_enum)]
    pub action: BackendAction,
    /// The weight (`lb backend weight ... N`; the same as --weight).
    #[arg(
        value_name = "N",
        required_if_eq("action", "weight"),
        conflicts_with = "weight"
    )]
    pub n: Option<u32>,
    /// The VIP, `ADDR:PORT/PROTO` (e.g. 203.0.113.10:80/tcp).
    #[arg(long)]
    pub vip: Vip,
    /// The backend address.
    #[arg(long)]
    pub backend: BackendKey,
    /// Weight (add, undrain).
    #[arg(long)]
    pub weight: Option<u32>,
    /// Drain: remove the backend when its last connection ends or after this long,
    /// whichever is first (e.g. 90s, 5m, 1h).
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub timeout: Option<Duration>,
    /// Drain: stay drained (cancels a pending --timeout removal).
    #[arg(long, conflicts_with = "timeout")]
    pub keep: bool,
    /// Control socket.
    #[command(flatten)]
    pub socket: SocketArg,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `lb backend`.
///
/// # Errors
/// The daemon is unreachable or refused the change.
pub fn backend(args: &BackendArgs) -> Result<Output, ClientError> {
    let change = args.socket.client()?.backend(
        args.action,
        args.vip,
        args.backend,
        args.n.or(args.weight),
        (args.timeout, args.keep),
    )?;
    Ok(if args.json {
        json(&change)
    } else {
        let mut text = change.summary.clone() + "\n";
        for line in &change.lines {
            text.push_str(line);
            text.push('\n');
        }
        Output::text(text)
    })
}

/// Parses `--timeout`: a whole number of seconds, minutes or hours (`90s`, `5m`, `1h`;
/// a bare number is seconds), above zero.
///
/// # Errors
/// Not such a duration.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let bad = || format!("expected a duration above zero such as 90s, 5m or 1h, got `{text}`");
    let (digits, unit) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&text[..i], c),
        _ => (text, 's'),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let secs = match unit {
        's' => Some(n),
        'm' => n.checked_mul(60),
        'h' => n.checked_mul(3600),
        _ => None,
    };
    match secs {
        Some(s) if s > 0 => Ok(Duration::from_secs(s)),
        _ => Err(bad()),
    }
}
