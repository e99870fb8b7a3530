//! [`Backend`]: a backend's key and weight, and the operator text form
//! `ADDR[:PORT][=WEIGHT]` (one backend) and comma-separated lists of it.

use std::{fmt, str::FromStr};

use super::{BackendKey, MaglevError};

/// A backend as the table builder sees it: identity and weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Backend {
    /// The backend's canonical identity.
    pub key: BackendKey,
    /// Relative weight: the backend's share of slots is `weight / sum(weights)`
    /// (only ratios matter). 0 means drained: no slots, no new flows.
    pub weight: u32,
}

impl Backend {
    /// A backend with `key` and `weight`.
    #[must_use]
    pub fn new(key: impl Into<BackendKey>, weight: u32) -> Self {
        Self {
            key: key.into(),
            weight,
        }
    }
}

impl FromStr for Backend {
    type Err = MaglevError;

    /// Parses `ADDR`, `ADDR:PORT`, `[V6ADDR]:PORT` (see [`BackendKey`]), each optionally
    /// followed by `=WEIGHT` (a decimal integer in `0..=4294967295`; default 1).
    /// Examples: `198.51.100.11`, `198.51.100.11:8080=3`, `[2001:db8::1]:80=0`.
    ///
    /// # Errors
    /// [`MaglevError::InvalidAddress`] or [`MaglevError::InvalidWeight`], naming the text.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        // An address never contains '=', so the last one starts the weight.
        let (address, weight) = match text.rsplit_once('=') {
            Some((address, weight_text)) => {
                let weight =
                    parse_weight(weight_text).ok_or_else(|| MaglevError::InvalidWeight {
                        backend: address.to_owned(),
                        text: weight_text.to_owned(),
                    })?;
                (address, weight)
            }
            None => (text, crate::defaults::WEIGHT),
        };
        Ok(Self {
            key: address.parse()?,
            weight,
        })
    }
}

/// A decimal `u32`: ASCII digits only (no sign, no spaces, no fraction).
fn parse_weight(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

impl fmt::Display for Backend {
    /// `KEY=WEIGHT` with the canonical key; parses back to an equal backend.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key, self.weight)
    }
}

/// Parses a comma-separated list of backends (`ADDR[:PORT][=WEIGHT],...`). Spaces around
/// items are ignored; an empty or all-blank text is the empty list. Duplicates are not
/// checked here (the table builder rejects them).
///
/// # Errors
/// The first item's error that fails to parse (see [`Backend`]'s `FromStr`), including an
/// empty item such as in `a,,b`.
pub fn parse_backend_list(text: &str) -> Result<Vec<Backend>, MaglevError> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    text.split(',').map(|item| item.trim().parse()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_cli_form() {
        for (text, key, weight) in [
            ("198.51.100.11", "198.51.100.11", 1),
            ("198.51.100.11=10", "198.51.100.11", 10),
            ("198.51.100.11:8080", "198.51.100.11:8080", 1),
            ("198.51.100.11:8080=0", "198.51.100.11:8080", 0),
            ("2001:db8::1=4294967295", "2001:db8::1", u32::MAX),
            ("[2001:db8::1]:80=7", "[2001:db8::1]:80", 7),
            ("::ffff:198.51.100.11=2", "198.51.100.11", 2),
        ] {
            let backend: Backend = text.parse().unwrap();
            assert_eq!(backend.key.to_string(), key, "{text}");
            assert_eq!(backend.weight, weight, "{text}");
            assert_eq!(backend.to_string().parse::<Backend>().unwrap(), backend);
        }
    }

    #[test]
    fn invalid_weights_name_backend_and_text() {
        // Negative, fractional, non-numeric, empty, signed, padded, too large and
        // exponent weights are each refused with the backend and the text (BR-03.T4, at
        // the text level).
        for weight in ["-1", "1.5", "abc", "", "+1", " 1", "4294967296", "1e3"] {
            let text = format!("198.51.100.11={weight}");
            assert_eq!(
                text.parse::<Backend>().unwrap_err().to_string(),
                format!(
                    "invalid weight {weight:?} for backend 198.51.100.11: \
                     expected an integer from 0 to 4294967295"
                ),
            );
        }
    }

    #[test]
    fn invalid_address_is_named_even_with_a_weight() {
        assert_eq!(
            "198.51.100.300=2".parse::<Backend>().unwrap_err(),
            MaglevError::InvalidAddress {
                text: "198.51.100.300".into()
            }
        );
    }

    #[test]
    fn lists() {
        let list =
            parse_backend_list("198.51.100.11=1, 198.51.100.12=10 ,[2001:db8::1]:80").unwrap();
        assert_eq!(list.len(), 3);
        assert_eq!(list[1].weight, 10);
        assert_eq!(parse_backend_list("").unwrap(), []);
        assert_eq!(parse_backend_list("  ").unwrap(), []);
        assert_eq!(
            parse_backend_list("198.51.100.11,,198.51.100.12").unwrap_err(),
            MaglevError::InvalidAddress {
                text: String::new()
            }
        );
    }
}
