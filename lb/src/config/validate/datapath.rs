//! `[icmp]` and the per-flow outer headers of `[encap]` (`source_prefix_v4`,
//! `source_prefix_v6`, `flow_label`, `gue_port`): the data plane's optional behaviour.

use super::{Report, in_range, uint};
use crate::{
    config::{
        IcmpConfig, OuterConfig,
        file::{EncapFile, IcmpFile},
    },
    defaults,
};
use lb_dataplane::prefix::Prefix;

/// `icmp.rate_limit`: at least one message per second, at most a million.
const RATE_LIMIT_RANGE: (u32, u32) = (1, 1_000_000);
/// `icmp.burst`.
const BURST_RANGE: (u32, u32) = (1, 100_000);
/// `encap.source_prefix_v4` lengths: at least 2 addresses, at most a /8.
const PREFIX_V4_LEN: (u8, u8) = (8, 31);
/// `encap.source_prefix_v6` lengths.
const PREFIX_V6_LEN: (u8, u8) = (16, 127);

/// `[icmp]`.
pub(super) fn icmp(file: &IcmpFile, r: &mut Report) -> IcmpConfig {
    IcmpConfig {
        too_big: file.too_big.unwrap_or(defaults::ICMP_TOO_BIG),
        echo: file.echo.unwrap_or(defaults::ICMP_ECHO),
        rate_limit: in_range(
            r,
            "icmp.rate_limit",
            uint(file.rate_limit, defaults::ICMP_RATE_LIMIT),
            RATE_LIMIT_RANGE,
        ),
        burst: in_range(
            r,
            "icmp.burst",
            uint(file.burst, defaults::ICMP_BURST),
            BURST_RANGE,
        ),
    }
}

/// The per-flow outer header keys of `[encap]`.
pub(super) fn outer(file: &EncapFile, r: &mut Report) -> OuterConfig {
    let flow_label_hash = match file.flow_label.as_deref().unwrap_or(defaults::FLOW_LABEL) {
        "inner" => false,
        "hash" => true,
        other => {
            r.error(
                "encap.flow_label",
                format!("expected \"inner\" or \"hash\", got {other:?}"),
            );
            false
        }
    };
    OuterConfig {
        source_prefix_v4: source_prefix(
            file.source_prefix_v4.as_deref(),
            "encap.source_prefix_v4",
            true,
            r,
        ),
        source_prefix_v6: source_prefix(
            file.source_prefix_v6.as_deref(),
            "encap.source_prefix_v6",
            false,
            r,
        ),
        flow_label_hash,
        gue_port: in_range(
            r,
            "encap.gue_port",
            uint(file.gue_port, defaults::GUE_PORT),
            (1, u16::MAX),
        ),
    }
}

fn source_prefix(text: Option<&str>, path: &str, v4: bool, r: &mut Report) -> Option<Prefix> {
    let text = text?;
    let prefix = match text.parse::<Prefix>() {
        Ok(p) => p,
        Err(e) => {
            r.error(path, e.to_string());
            return None;
        }
    };
    let (family, (min, max)) = if v4 {
        ("IPv4", PREFIX_V4_LEN)
    } else {
        ("IPv6", PREFIX_V6_LEN)
    };
    if prefix.is_ipv4() != v4 {
        r.error(path, format!("expected an {family} prefix, got {text:?}"));
        return None;
    }
    if !(min..=max).contains(&prefix.length()) {
        r.error(
            path,
            format!(
                "expected a prefix length from {min} to {max} (its host bits come from the \
                 flow hash), got {prefix}"
            ),
        );
        return None;
    }
    Some(prefix)
}

#[cfg(test)]
mod tests;
