//! Membership changes to compare: [`Event`] and its `--event` text form, and what a change
//! does to a server list ([`Event::apply`]).
//!
//! - `add:NAME[=W]`: a server joins, at the end of the list (jump's new bucket);
//! - `remove:NAME`: a server leaves; the servers after it move up one position (jump
//!   and mod-N renumber their buckets: jump only removes at the end);
//! - `grow:K` / `shrink:K`: `K` servers named `S<n>`, `S<n+1>`, ... join at the end, or
//!   the last `K` leave (jump's native growth and shrink);
//! - `weight:NAME=W`: a server's weight changes (0 = drained; mod-N and jump are
//!   unweighted and ignore it).

use std::fmt;

use super::servers::{Server, check_set, numbered_name};

/// One membership change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A server joins at the end.
    Add(Server),
    /// The named server leaves.
    Remove(String),
    /// `K` numbered servers join at the end.
    Grow(usize),
    /// The last `K` servers leave.
    Shrink(usize),
    /// The named server's weight becomes the given one.
    Weight(String, u32),
}

/// A server list after an event, and what changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The new list.
    pub servers: Vec<Server>,
    /// Names that joined.
    pub added: Vec<String>,
    /// Names that left.
    pub removed: Vec<String>,
    /// The first list position whose server changed identity (`None` if only weights
    /// changed or servers were only appended): where mod-N and jump renumber.
    pub renumbered_from: Option<usize>,
}

impl std::str::FromStr for Event {
    type Err = String;

    /// Parses the forms of the module documentation.
    fn from_str(text: &str) -> Result<Self, String> {
        parse_event(text).map_err(|problem| format!("event {text:?}: {problem}"))
    }
}

fn parse_event(text: &str) -> Result<Event, String> {
    let (kind, arg) = text
        .split_once(':')
        .ok_or("expected add:NAME[=W], remove:NAME, grow:K, shrink:K or weight:NAME=W")?;
    let count = |arg: &str| {
        arg.parse::<usize>()
            .ok()
            .filter(|&k| k > 0)
            .ok_or_else(|| format!("{arg:?} is not a server count (1 or more)"))
    };
    match kind {
        "add" => Server::parse(arg).map(Event::Add),
        "remove" => Server::parse(arg).map(|s| Event::Remove(s.name)),
        "grow" => count(arg).map(Event::Grow),
        "shrink" => count(arg).map(Event::Shrink),
        "weight" if arg.contains('=') => {
            Server::parse(arg).map(|s| Event::Weight(s.name, s.weight))
        }
        "weight" => Err("expected weight:NAME=W".to_owned()),
        _ => Err(format!(
            "unknown kind {kind:?}: add, remove, grow, shrink or weight"
        )),
    }
}

impl fmt::Display for Event {
    /// The `--event` text form; parses back to an equal event.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Add(server) if server.weight == 1 => write!(f, "add:{}", server.name),
            Self::Add(server) => write!(f, "add:{}={}", server.name, server.weight),
            Self::Remove(name) => write!(f, "remove:{name}"),
            Self::Grow(k) => write!(f, "grow:{k}"),
            Self::Shrink(k) => write!(f, "shrink:{k}"),
            Self::Weight(name, weight) => write!(f, "weight:{name}={weight}"),
        }
    }
}

impl Event {
    /// The list `servers` after this event.
    ///
    /// # Errors
    /// Adding a name that exists, removing or reweighting one that does not, shrinking
    /// by all servers or more, or leaving no server with weight > 0.
    pub fn apply(&self, servers: &[Server]) -> Result<Applied, String> {
        let position = |name: &str| {
            servers
                .iter()
                .position(|s| s.name == name)
                .ok_or_else(|| format!("{self}: no server {name:?}"))
        };
        let mut next = servers.to_vec();
        let (mut added, mut removed, mut renumbered_from) = (Vec::new(), Vec::new(), None);
        match self {
            Self::Add(server) => {
                next.push(server.clone());
                added.push(server.name.clone());
            }
            Self::Remove(name) => {
                let at = position(name)?;
                next.remove(at);
                removed.push(name.clone());
                renumbered_from = (at < next.len()).then_some(at);
            }
            Self::Grow(k) => {
                for _ in 0..*k {
                    let name = numbered_name(next.len());
                    added.push(name.clone());
                    next.push(Server::new(name, 1));
                }
            }
            Self::Shrink(k) => {
                if *k >= servers.len() {
                    return Err(format!(
                        "{self}: the list has only {} servers",
                        servers.len()
                    ));
                }
                removed.extend(next.drain(servers.len() - k..).map(|s| s.name));
            }
            Self::Weight(name, weight) => next[position(name)?].weight = *weight,
        }
        check_set(&next).map_err(|problem| format!("{self}: {problem}"))?;
        Ok(Applied {
            servers: next,
            added,
            removed,
            renumbered_from,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::servers::parse_servers;

    #[test]
    fn events_parse_and_print() {
        for text in [
            "add:S5",
            "add:web=3",
            "remove:S2",
            "grow:2",
            "shrink:1",
            "weight:S0=0",
        ] {
            assert_eq!(text.parse::<Event>().unwrap().to_string(), text);
        }
        assert_eq!(
            "drop:S1".parse::<Event>().unwrap_err(),
            "event \"drop:S1\": unknown kind \"drop\": add, remove, grow, shrink or weight"
        );
        assert!("grow:0".parse::<Event>().is_err());
        assert!("weight:S0".parse::<Event>().is_err());
        assert!("S1".parse::<Event>().is_err());
    }

    #[test]
    fn events_change_lists() {
        let servers = parse_servers("4").unwrap();
        let applied = Event::Remove("S1".into()).apply(&servers).unwrap();
        assert_eq!(applied.servers.len(), 3);
        assert_eq!(applied.renumbered_from, Some(1));
        let applied = Event::Remove("S3".into()).apply(&servers).unwrap();
        assert_eq!(applied.renumbered_from, None);
        let applied = Event::Grow(2).apply(&servers).unwrap();
        assert_eq!(applied.added, ["S4", "S5"]);
        let applied = Event::Shrink(2).apply(&servers).unwrap();
        assert_eq!(applied.removed, ["S2", "S3"]);
        assert!(Event::Shrink(4).apply(&servers).is_err());
        assert!(Event::Add(Server::new("S0", 1)).apply(&servers).is_err());
        assert!(Event::Remove("x".into()).apply(&servers).is_err());
        let one = parse_servers("1").unwrap();
        assert!(Event::Weight("S0".into(), 0).apply(&one).is_err());
    }
}
