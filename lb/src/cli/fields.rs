//! The options that name a VIP's hash fields on the command line, `--hash-fields` and
//! `--hash-source-prefix` (lb.toml's `vip.hash` and `vip.hash_source_prefix`,
//! [`lb_common::hash_fields`]), for the verbs that predict a flow's table slot offline:
//! `lb hash --hash flow` and `lb table build`. They are checked by
//! [`HashFields::with_source_prefix`], as lb.toml's keys are.

use std::net::IpAddr;

use lb_common::{
    hash_fields::{Fields, HashFields, PrefixError},
    types::{FAMILY_V4, FAMILY_V6},
};

/// `--hash-fields` and `--hash-source-prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct HashFieldArgs {
    /// The VIP's hash fields (lb.toml's `vip.hash`): 5-tuple, src, src+dport or dport,
    /// the fields of a flow that pick its table slot.
    #[arg(long, value_name = "FIELDS", default_value = "5-tuple", value_parser = parse_hash_fields)]
    pub hash_fields: Fields,
    /// With `--hash-fields src` or `src+dport`: the leading bits of the client address
    /// hashed (lb.toml's `vip.hash_source_prefix`; default: the whole address).
    #[arg(long, value_name = "BITS")]
    pub hash_source_prefix: Option<u8>,
}

impl HashFieldArgs {
    /// The option a [`Self::resolve`] error is about.
    pub const PREFIX_OPTION: &'static str = "--hash-source-prefix";

    /// The hash fields of a VIP on address `vip` (its family bounds the prefix).
    ///
    /// # Errors
    /// What is wrong with `--hash-source-prefix` ([`Self::PREFIX_OPTION`]): given with
    /// fields that hash no source address, or longer than the VIP's address (or 0).
    pub fn resolve(&self, vip: IpAddr) -> Result<HashFields, String> {
        let fields = self.hash_fields;
        let Some(prefix) = self.hash_source_prefix else {
            return Ok(HashFields {
                fields,
                ..HashFields::default()
            });
        };
        let family = if vip.is_ipv4() { FAMILY_V4 } else { FAMILY_V6 };
        HashFields::with_source_prefix(fields, family, u32::from(prefix)).map_err(|e| match e {
            PrefixError::NotSource => format!(
                "applies only with --hash-fields src or src+dport, not {}",
                fields.name()
            ),
            PrefixError::OutOfRange { max } => {
                format!("expected a prefix length from 1 to {max} for VIP {vip}, got {prefix}")
            }
        })
    }
}

/// One `--hash-fields` value: a name of lb.toml's `vip.hash`.
fn parse_hash_fields(text: &str) -> Result<Fields, String> {
    Fields::from_name(text).ok_or_else(|| {
        let names: Vec<&str> = Fields::ALL.iter().map(|f| f.name()).collect();
        format!("unknown hash fields {text:?}: {}", names.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_is_checked_against_the_fields_and_the_family() {
        let args = |fields, prefix| HashFieldArgs {
            hash_fields: fields,
            hash_source_prefix: prefix,
        };
        let v4: IpAddr = "203.0.113.10".parse().expect("v4");
        let v6: IpAddr = "2001:db8::10".parse().expect("v6");
        assert_eq!(
            args(Fields::Src, Some(24))
                .resolve(v4)
                .expect("valid")
                .prefix,
            24
        );
        assert_eq!(
            args(Fields::Src, Some(64))
                .resolve(v6)
                .expect("valid")
                .prefix,
            64
        );
        assert_eq!(
            args(Fields::Src, Some(33)).resolve(v4),
            Err("expected a prefix length from 1 to 32 for VIP 203.0.113.10, got 33".to_owned())
        );
        assert_eq!(
            args(Fields::Dport, Some(24)).resolve(v4),
            Err("applies only with --hash-fields src or src+dport, not dport".to_owned())
        );
        assert_eq!(
            args(Fields::FiveTuple, None).resolve(v6),
            Ok(HashFields::default())
        );
        assert!(parse_hash_fields("src+dport").is_ok());
        assert!(parse_hash_fields("dst").is_err());
    }
}
