//! The servers a scheme places keys on: [`Server`] (name and weight) and the `--servers`
//! text form, a count `N` (servers `S0` .. `S(N-1)`, weight 1) or a comma-separated list
//! `NAME[=WEIGHT],...`.
//!
//! A name is any text without commas, `=` or white space: `S0`, `web-3`, `198.51.100.11`,
//! `[2001:db8::1]:80`. Names identify servers in every scheme (ring points, rendezvous
//! pairs, the Maglev backend key); the list order matters only to the position-based
//! schemes (mod-N and jump number their buckets in list order).

/// Servers a count may ask for: more only makes the report unreadable.
pub const MAX_SERVERS: usize = 100_000;

/// A server: its name and relative weight (0 = drained: no keys in weighted schemes).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Server {
    /// The server's identity.
    pub name: String,
    /// Relative weight; only ratios matter.
    pub weight: u32,
}

impl Server {
    /// A server `name` of weight `weight`.
    #[must_use]
    pub fn new(name: impl Into<String>, weight: u32) -> Self {
        Self {
            name: name.into(),
            weight,
        }
    }

    /// Parses `NAME` or `NAME=WEIGHT` (weight a decimal `u32`, default 1).
    ///
    /// # Errors
    /// An empty or invalid name, or a weight that is not a decimal `u32`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (name, weight) = match text.split_once('=') {
            Some((name, weight)) => {
                let weight = parse_decimal(weight)
                    .and_then(|w| u32::try_from(w).ok())
                    .ok_or_else(|| {
                        format!(
                            "weight {weight:?} of server {name:?} is not an integer from 0 to \
                             4294967295"
                        )
                    })?;
                (name, weight)
            }
            None => (text, 1),
        };
        check_name(name)?;
        Ok(Self::new(name, weight))
    }
}

/// The name of server `index` in a counted set: `S0`, `S1`, ...
#[must_use]
pub fn numbered_name(index: usize) -> String {
    format!("S{index}")
}

/// Parses `--servers`: a count `N` (`S0` .. `S(N-1)`, weight 1) or a comma-separated list
/// of `NAME[=WEIGHT]`.
///
/// # Errors
/// A count of 0 or above [`MAX_SERVERS`], an invalid item, a duplicate name, or no server
/// with weight > 0.
pub fn parse_servers(text: &str) -> Result<Vec<Server>, String> {
    let text = text.trim();
    let servers = if let Some(count) = parse_decimal(text) {
        if count == 0 {
            return Err("0 servers: give a count from 1 or a list of names".to_owned());
        }
        let count = usize::try_from(count)
            .ok()
            .filter(|&n| n <= MAX_SERVERS)
            .ok_or_else(|| format!("{count} servers is more than {MAX_SERVERS}"))?;
        (0..count)
            .map(|i| Server::new(numbered_name(i), 1))
            .collect()
    } else {
        text.split(',')
            .map(|item| Server::parse(item.trim()))
            .collect::<Result<Vec<_>, _>>()?
    };
    check_set(&servers)?;
    Ok(servers)
}

/// Checks a server set: distinct names and at least one server with weight > 0.
///
/// # Errors
/// The first duplicate name, or an empty or all-drained set.
pub fn check_set(servers: &[Server]) -> Result<(), String> {
    let mut names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(format!("duplicate server {:?}", pair[0]));
    }
    if !servers.iter().any(|s| s.weight > 0) {
        return Err("no server with weight > 0".to_owned());
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty server name".to_owned());
    }
    if let Some(bad) = name.chars().find(|c| c.is_whitespace() || *c == ',') {
        return Err(format!("server name {name:?} contains {bad:?}"));
    }
    Ok(())
}

/// ASCII digits only (no sign, no spaces) as a `u64`.
fn parse_decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_lists() {
        let servers = parse_servers("3").unwrap();
        assert_eq!(
            servers,
            [
                Server::new("S0", 1),
                Server::new("S1", 1),
                Server::new("S2", 1)
            ]
        );
        let servers = parse_servers("a=2, 198.51.100.11 ,[2001:db8::1]:80=0").unwrap();
        assert_eq!(servers[0], Server::new("a", 2));
        assert_eq!(servers[1].name, "198.51.100.11");
        assert_eq!(servers[2].weight, 0);
    }

    #[test]
    fn bad_sets_are_explained() {
        assert!(parse_servers("0").unwrap_err().starts_with("0 servers"));
        assert_eq!(
            parse_servers("a,b,a").unwrap_err(),
            "duplicate server \"a\""
        );
        assert_eq!(
            parse_servers("a=0").unwrap_err(),
            "no server with weight > 0"
        );
        assert_eq!(parse_servers("a,,b").unwrap_err(), "empty server name");
        assert!(parse_servers("a=x").unwrap_err().contains("weight \"x\""));
        assert!(parse_servers("1000001").unwrap_err().contains("more than"));
    }
}
