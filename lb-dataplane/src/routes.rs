//! The announcement table in the kernel: [`RouteTable`], its one real implementation
//! [`IpRoutes`] (iproute2's `ip`), and [`flush`] for commands that remove the data
//! plane without a daemon (`lb detach`: [`crate::pinned::detach`]). The
//! daemon decides which routes the table holds (`daemon::announce`); this module only
//! reads and writes them, so it sits at the bottom of the layers, usable by both.
//!
//! Why routes through `ip` rather than a netlink library: iproute2 is already a
//! run-time dependency (the next-hop neighbours are managed with `ip neigh`), the
//! routes change only when an address's announcement changes (never per packet or per
//! probe), and one `ip -batch` run writes any number of them; `ip -j route show` gives
//! a listing to reconcile against, so a route removed or added behind the daemon's back
//! is repaired on the next check. Every route the daemon writes carries the configured
//! route protocol number, and only routes carrying it are listed and removed: the rest
//! of the table is never touched.

use std::{
    collections::BTreeSet,
    io::Write as _,
    net::IpAddr,
    process::{Command, Stdio},
};

/// Why the table could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// `ip` could not be run.
    #[error("cannot run ip (iproute2): {0}")]
    Spawn(#[from] std::io::Error),
    /// `ip` refused; its message.
    #[error("ip: {0}")]
    Ip(String),
    /// `ip -j` printed something that is not its JSON.
    #[error("unreadable output of ip -j route show: {0}")]
    Parse(String),
}

/// Where the daemon's routes are: those of `table` carrying `protocol` (the
/// configuration's `announce.table` and `announce.protocol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnounceTable {
    /// The kernel routing table.
    pub table: u32,
    /// The route protocol number.
    pub protocol: u8,
}

/// The kernel routing table that holds the announced VIP addresses, one host route
/// (`/32`, `/128`) each.
pub trait RouteTable: Send {
    /// The host routes of `table` that carry `protocol`.
    ///
    /// # Errors
    /// The table cannot be read.
    fn list(&mut self, table: u32, protocol: u8) -> Result<BTreeSet<IpAddr>, RouteError>;

    /// Adds a host route for each of `add` and removes the one of each of `remove`
    /// (best effort: the caller lists the table again to see what holds).
    ///
    /// # Errors
    /// `ip` could not be run or refused a line.
    fn write(
        &mut self,
        table: u32,
        protocol: u8,
        add: &[IpAddr],
        remove: &[IpAddr],
    ) -> Result<(), RouteError>;
}

/// The route of `addr` as `ip route` takes it: `blackhole 203.0.113.10/32 table 100
/// proto 76`. The family follows from the address.
fn route_spec(addr: IpAddr, table: u32, protocol: u8) -> String {
    let len = if addr.is_ipv4() { 32 } else { 128 };
    format!("blackhole {addr}/{len} table {table} proto {protocol}")
}

/// [`RouteTable`] of the calling process's network namespace, through `ip`.
#[derive(Clone, Copy, Debug, Default)]
pub struct IpRoutes;

impl IpRoutes {
    fn list_family(family: &str, table: u32, protocol: u8) -> Result<Vec<IpAddr>, RouteError> {
        let out = Command::new("ip")
            .args(["-j", family, "route", "show", "table"])
            .arg(table.to_string())
            .args(["proto", &protocol.to_string()])
            .output()?;
        if !out.status.success() {
            let message = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            // The kernel creates a table with its first route: none yet is empty.
            if message.contains("table does not exist") {
                return Ok(Vec::new());
            }
            return Err(RouteError::Ip(message));
        }
        parse_listing(&out.stdout)
    }
}

/// The host-route destinations of `ip -j route show` output (`[{"type":"blackhole",
/// "dst":"203.0.113.10",...}]`); wider prefixes are not the daemon's and are skipped.
fn parse_listing(json: &[u8]) -> Result<Vec<IpAddr>, RouteError> {
    // `ip -j` prints nothing at all for an empty table.
    if json.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let routes: Vec<serde_json::Value> =
        serde_json::from_slice(json).map_err(|e| RouteError::Parse(e.to_string()))?;
    Ok(routes
        .iter()
        .filter_map(|r| r.get("dst")?.as_str())
        .filter_map(|dst| {
            let (addr, len) = dst.split_once('/').unwrap_or((dst, ""));
            let addr: IpAddr = addr.parse().ok()?;
            let host = match len {
                "" => true,
                len => len == if addr.is_ipv4() { "32" } else { "128" },
            };
            host.then_some(addr)
        })
        .collect())
}

impl RouteTable for IpRoutes {
    fn list(&mut self, table: u32, protocol: u8) -> Result<BTreeSet<IpAddr>, RouteError> {
        let mut all: BTreeSet<IpAddr> = Self::list_family("-4", table, protocol)?
            .into_iter()
            .collect();
        all.extend(Self::list_family("-6", table, protocol)?);
        Ok(all)
    }

    fn write(
        &mut self,
        table: u32,
        protocol: u8,
        add: &[IpAddr],
        remove: &[IpAddr],
    ) -> Result<(), RouteError> {
        if add.is_empty() && remove.is_empty() {
            return Ok(());
        }
        // `-force`: a line that fails (a route already gone) does not stop the others.
        let mut child = Command::new("ip")
            .args(["-force", "-batch", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            for a in add {
                writeln!(stdin, "route replace {}", route_spec(*a, table, protocol))?;
            }
            for a in remove {
                writeln!(stdin, "route del {}", route_spec(*a, table, protocol))?;
            }
        }
        let out = child.wait_with_output()?;
        if out.status.success() {
            Ok(())
        } else {
            Err(RouteError::Ip(
                String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            ))
        }
    }
}

/// Removes every route of `table` carrying `protocol` (what an `lb run` announced),
/// for a command that removes the data plane while no daemon runs; returns how many
/// were removed.
///
/// # Errors
/// The table cannot be read, or routes remain after the removal.
pub fn flush(table: u32, protocol: u8) -> Result<usize, RouteError> {
    let mut routes = IpRoutes;
    let present: Vec<IpAddr> = routes.list(table, protocol)?.into_iter().collect();
    // A failed line is seen in the listing below.
    let written = routes.write(table, protocol, &[], &present);
    let left = routes.list(table, protocol)?;
    if !left.is_empty() {
        return Err(written.err().unwrap_or_else(|| {
            RouteError::Ip(format!("{} routes remain in table {table}", left.len()))
        }));
    }
    Ok(present.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_keep_host_routes_only() {
        let json = br#"[{"type":"blackhole","dst":"203.0.113.10","flags":[]},
            {"type":"blackhole","dst":"2001:db8:f::10","dev":"lo","metric":1024},
            {"type":"blackhole","dst":"203.0.113.0/24"},
            {"type":"blackhole","dst":"203.0.113.11/32"},
            {"type":"unicast","dst":"default"}]"#;
        let got = parse_listing(json).expect("parses");
        let want: Vec<IpAddr> = ["203.0.113.10", "2001:db8:f::10", "203.0.113.11"]
            .iter()
            .map(|a| a.parse().expect("address"))
            .collect();
        assert_eq!(got, want);
        assert!(parse_listing(b"").expect("empty").is_empty());
        assert!(parse_listing(b"[]\n").expect("empty").is_empty());
        assert!(parse_listing(b"{oops").is_err());
    }

    #[test]
    fn route_specs_name_type_prefix_table_and_protocol() {
        let v4: IpAddr = "203.0.113.10".parse().expect("v4");
        let v6: IpAddr = "2001:db8:f::10".parse().expect("v6");
        assert_eq!(
            route_spec(v4, 100, 76),
            "blackhole 203.0.113.10/32 table 100 proto 76"
        );
        assert_eq!(
            route_spec(v6, 4242, 200),
            "blackhole 2001:db8:f::10/128 table 4242 proto 200"
        );
    }
}
