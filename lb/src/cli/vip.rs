//! `lb vip withdraw|announce --vip V`: the operator's maintenance switch for one VIP
//! address's BGP announcement on this instance (the running daemon applies it with the
//! rest of its announcement rule). Every VIP of an address shares its route, so `--vip`
//! takes the address (`203.0.113.10`, `2001:db8:f::10`) or any VIP of it
//! (`203.0.113.10:80/tcp`).

use std::net::IpAddr;

use super::{Output, SocketArg};
use crate::{
    config::Vip,
    control::{ClientError, VipAction},
};

/// `lb vip`.
#[derive(Clone, Debug, clap::Args)]
pub struct VipArgs {
    /// withdraw (stop announcing this address from this instance) | announce (undo).
    #[arg(value_enum)]
    pub action: VipAction,
    /// The VIP address, or a VIP of it (`ADDR:PORT/PROTO`).
    #[arg(long, value_parser = parse_address)]
    pub vip: IpAddr,
    /// Control socket.
    #[command(flatten)]
    pub socket: SocketArg,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Parses `--vip`: an address, or a VIP whose address is taken.
///
/// # Errors
/// Neither form.
pub fn parse_address(text: &str) -> Result<IpAddr, String> {
    if let Ok(addr) = text.parse::<IpAddr>() {
        return Ok(addr.to_canonical());
    }
    text.parse::<Vip>().map(|v| v.addr).map_err(|_| {
        format!(
            "expected a VIP address (203.0.113.10, 2001:db8:f::10) or ADDR:PORT/PROTO, got {text:?}"
        )
    })
}

/// Runs `lb vip`.
///
/// # Errors
/// The daemon is unreachable or refused (announcements off, not a VIP address).
pub fn run(args: &VipArgs) -> Result<Output, ClientError> {
    let change = args.socket.client()?.vip(args.action, args.vip)?;
    Ok(if args.json {
        super::json(&change)
    } else {
        Output::text(change.lines.join("\n") + "\n")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vip_takes_an_address_or_a_vip_of_it() {
        let v4: IpAddr = "203.0.113.10".parse().unwrap();
        assert_eq!(parse_address("203.0.113.10"), Ok(v4));
        assert_eq!(parse_address("203.0.113.10:80/tcp"), Ok(v4));
        assert_eq!(parse_address("::ffff:203.0.113.10"), Ok(v4));
        assert_eq!(
            parse_address("[2001:db8:f::10]:53/udp"),
            Ok("2001:db8:f::10".parse().unwrap())
        );
        let err = parse_address("vip1").unwrap_err();
        assert!(err.contains("got \"vip1\""), "{err}");
    }
}
