//! Who a request comes from and what it may do ([`Principal`]): a bearer token
//! (`Authorization: Bearer SECRET`, RFC 6750) matched against the `[[api.token]]`
//! secrets, or else the verified client certificate's common name mapped by
//! `[[api.client]]`.
//!
//! Each token's secret is the first line of its file, trimmed, re-read whenever the
//! file's modification time or size changes, so a token is rotated by rewriting its
//! file (no restart). Secrets are compared as SHA-256 digests with a constant-time
//! equality over every configured token (no early exit), so neither the time of a
//! refusal nor the length of a secret tells an attacker how close a guess was. A
//! secret shorter than [`MIN_SECRET_BYTES`] never matches.

use std::{collections::HashMap, sync::Mutex, time::SystemTime};

use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;
use tracing::warn;

use crate::config::{Api, ApiToken, Role};

/// Shortest secret accepted (bytes): 128 bits of hex.
pub const MIN_SECRET_BYTES: usize = 32;

/// Who made a request, and their role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// `token:NAME` or `cert:CN`, as changes are logged.
    pub who: String,
    /// What they may do.
    pub role: Role,
}

/// Why a request was not authenticated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// No token and no certificate (401).
    #[error("no credentials: send Authorization: Bearer TOKEN or a client certificate")]
    Missing,
    /// A token that matches none (401).
    #[error("unknown token")]
    UnknownToken,
    /// A verified certificate whose common name has no role (403).
    #[error("client certificate {0:?} has no role ([[api.client]])")]
    UnmappedCertificate(String),
}

/// A token's secret as last read: the file's (modification time, size) and the
/// secret's digest (`None`: unusable).
type Cached = Option<((Option<SystemTime>, u64), Option<[u8; 32]>)>;

/// The authenticator of one server.
pub struct Auth {
    tokens: Vec<(ApiToken, Mutex<Cached>)>,
    clients: HashMap<String, Role>,
}

impl Auth {
    /// The authenticator of `api`.
    pub fn new(api: &Api) -> Self {
        Self {
            tokens: api
                .tokens
                .iter()
                .map(|t| (t.clone(), Mutex::new(None)))
                .collect(),
            clients: api.clients.iter().cloned().collect(),
        }
    }

    /// Reads every token file once, so that a missing or short one is reported at start.
    ///
    /// # Errors
    /// The first token file that cannot be read or holds too short a secret.
    pub fn check_files(&self) -> anyhow::Result<()> {
        for (i, (token, cache)) in self.tokens.iter().enumerate() {
            if digest(token, cache).is_none() {
                anyhow::bail!(
                    "api.token[{i}].file: {} cannot be read or holds a secret shorter than {MIN_SECRET_BYTES} bytes",
                    token.file.display()
                );
            }
        }
        Ok(())
    }

    /// Who sent a request with `authorization` (the header's value) over a connection
    /// whose verified certificate has `common_name`. A bearer token, when sent, decides.
    ///
    /// # Errors
    /// [`Refused`].
    pub fn authenticate(
        &self,
        authorization: Option<&[u8]>,
        common_name: Option<&str>,
    ) -> Result<Principal, Refused> {
        if let Some(value) = authorization {
            let secret = value
                .strip_prefix(b"Bearer ")
                .ok_or(Refused::UnknownToken)?
                .trim_ascii();
            return self.token(secret).ok_or(Refused::UnknownToken);
        }
        let cn = common_name.ok_or(Refused::Missing)?;
        let role = self
            .clients
            .get(cn)
            .ok_or_else(|| Refused::UnmappedCertificate(cn.to_owned()))?;
        Ok(Principal {
            who: format!("cert:{cn}"),
            role: *role,
        })
    }

    /// The token whose secret is `secret`, compared with every token in constant time.
    fn token(&self, secret: &[u8]) -> Option<Principal> {
        let presented: [u8; 32] = Sha256::digest(secret).into();
        let mut found = None;
        for (token, cache) in &self.tokens {
            let Some(expected) = digest(token, cache) else {
                continue;
            };
            if bool::from(expected.ct_eq(&presented)) && secret.len() >= MIN_SECRET_BYTES {
                found = Some(Principal {
                    who: format!("token:{}", token.name),
                    role: token.role,
                });
            }
        }
        found
    }
}

/// The digest of `token`'s secret, re-read when its file changed.
fn digest(token: &ApiToken, cache: &Mutex<Cached>) -> Option<[u8; 32]> {
    let stamp = std::fs::metadata(&token.file)
        .ok()
        .map(|m| (m.modified().ok(), m.len()));
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    let Some(stamp) = stamp else {
        *cache = None;
        return None;
    };
    if let Some((seen, digest)) = &*cache
        && *seen == stamp
    {
        return *digest;
    }
    let digest = std::fs::read_to_string(&token.file).ok().and_then(|text| {
        let secret = text.lines().next().unwrap_or("").trim();
        if secret.len() < MIN_SECRET_BYTES {
            warn!(
                "api: token {:?}: {} holds a secret shorter than {MIN_SECRET_BYTES} bytes; it is refused",
                token.name,
                token.file.display()
            );
            return None;
        }
        Some(Sha256::digest(secret.as_bytes()).into())
    });
    *cache = Some((stamp, digest));
    digest
}
