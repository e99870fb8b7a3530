//! The `[api]` table: an address with a port, the certificate and key files when
//! enabled, at least one way in (a client CA or a token), roles that exist, unique
//! token names and common names, limits in their ranges. The files themselves are read
//! by the server when the daemon starts (a missing one stops the start, naming the key).

use std::{collections::HashSet, net::SocketAddr, path::PathBuf, time::Duration};

use super::{Report, in_range, uint};
use crate::{
    config::{
        api::{Api, ApiFile, ApiToken, Role},
        file::UInt,
    },
    defaults,
};

/// `api.max_connections`: 1 to 65536.
const MAX_CONNECTIONS_RANGE: (u32, u32) = (1, 65_536);
/// `api.max_body_bytes`: 1 KiB to 16 MiB.
const MAX_BODY_BYTES_RANGE: (u32, u32) = (1024, 16 << 20);
/// `api.header_timeout_ms`, `api.body_timeout_ms`: 100 ms to 10 minutes.
const TIMEOUT_MS_RANGE: (u32, u32) = (100, 600_000);
/// `api.idempotency_entries`: 1 to 1,000,000.
const IDEMPOTENCY_ENTRIES_RANGE: (u32, u32) = (1, 1_000_000);

/// Validates `[api]`.
pub(super) fn api(file: &ApiFile, r: &mut Report) -> Api {
    let enabled = file.enabled.unwrap_or(defaults::API_ENABLED);
    let text = file.listen.as_deref().unwrap_or(defaults::API_LISTEN);
    let listen = match text.parse::<SocketAddr>() {
        Ok(addr) if addr.port() != 0 => Some(addr),
        _ => {
            r.error(
                "api.listen",
                format!(
                    "expected ADDR:PORT with a port from 1 to 65535 (IPv6 in brackets), got {text:?}"
                ),
            );
            None
        }
    };
    let path = |key: &str, value: &Option<String>, r: &mut Report| match value.as_deref() {
        Some("") => {
            r.error(format!("api.{key}"), "expected a file path, got \"\"");
            None
        }
        Some(p) => Some(PathBuf::from(p)),
        None => {
            if enabled {
                r.error(
                    format!("api.{key}"),
                    "required when api.enabled is true (the server's PEM file)",
                );
            }
            None
        }
    };
    let cert_file = path("cert_file", &file.cert_file, r).unwrap_or_default();
    let key_file = path("key_file", &file.key_file, r).unwrap_or_default();
    let client_ca_file = match file.client_ca_file.as_deref() {
        Some("") => {
            r.error("api.client_ca_file", "expected a file path, got \"\"");
            None
        }
        other => other.map(PathBuf::from),
    };
    let tokens = tokens(file, r);
    let clients = clients(file, r);
    if enabled && client_ca_file.is_none() && tokens.is_empty() {
        r.error(
            "api.enabled",
            "nobody could use the API: set api.client_ca_file or add an [[api.token]]",
        );
    }
    if !clients.is_empty() && client_ca_file.is_none() {
        r.error(
            "api.client",
            "client certificates are only asked for with api.client_ca_file",
        );
    }
    let ms = |key: &str, v: Option<UInt<u32>>, default: u32, r: &mut Report| {
        let v = in_range(r, &format!("api.{key}"), uint(v, default), TIMEOUT_MS_RANGE);
        Duration::from_millis(u64::from(v))
    };
    Api {
        listen: listen.filter(|_| enabled),
        cert_file,
        key_file,
        client_ca_file,
        clients,
        tokens,
        max_connections: in_range(
            r,
            "api.max_connections",
            uint(file.max_connections, defaults::API_MAX_CONNECTIONS),
            MAX_CONNECTIONS_RANGE,
        ),
        max_body_bytes: in_range(
            r,
            "api.max_body_bytes",
            uint(file.max_body_bytes, defaults::API_MAX_BODY_BYTES),
            MAX_BODY_BYTES_RANGE,
        ),
        header_timeout: ms(
            "header_timeout_ms",
            file.header_timeout_ms,
            defaults::API_HEADER_TIMEOUT_MS,
            r,
        ),
        body_timeout: ms(
            "body_timeout_ms",
            file.body_timeout_ms,
            defaults::API_BODY_TIMEOUT_MS,
            r,
        ),
        idempotency_entries: in_range(
            r,
            "api.idempotency_entries",
            uint(file.idempotency_entries, defaults::API_IDEMPOTENCY_ENTRIES),
            IDEMPOTENCY_ENTRIES_RANGE,
        ),
    }
}

/// A role's text, or an error at `key`.
fn role(text: &str, key: &str, r: &mut Report) -> Role {
    Role::parse(text).unwrap_or_else(|| {
        r.error(
            key.to_owned(),
            format!("expected \"read-only\" or \"admin\", got {text:?}"),
        );
        Role::ReadOnly
    })
}

/// `[[api.token]]`: names unique and non-empty, files given, roles that exist.
fn tokens(file: &ApiFile, r: &mut Report) -> Vec<ApiToken> {
    let mut names = HashSet::new();
    let mut tokens = Vec::new();
    for (i, t) in file.tokens.iter().enumerate() {
        let at = format!("api.token[{i}]");
        if t.name.is_empty() || t.name.chars().any(char::is_whitespace) {
            r.error(
                format!("{at}.name"),
                format!("expected a name without spaces, got {:?}", t.name),
            );
        } else if !names.insert(t.name.as_str()) {
            r.error(
                format!("{at}.name"),
                format!("token {:?} is defined twice", t.name),
            );
        }
        if t.file.is_empty() {
            r.error(format!("{at}.file"), "expected a file path, got \"\"");
        }
        let role = role(&t.role, &format!("{at}.role"), r);
        tokens.push(ApiToken {
            name: t.name.clone(),
            file: PathBuf::from(&t.file),
            role,
        });
    }
    tokens
}

/// `[[api.client]]`: common names unique and non-empty, roles that exist.
fn clients(file: &ApiFile, r: &mut Report) -> Vec<(String, Role)> {
    let mut names = HashSet::new();
    let mut clients = Vec::new();
    for (i, c) in file.clients.iter().enumerate() {
        let at = format!("api.client[{i}]");
        if c.common_name.is_empty() {
            r.error(
                format!("{at}.common_name"),
                "expected a common name, got \"\"",
            );
        } else if !names.insert(c.common_name.as_str()) {
            r.error(
                format!("{at}.common_name"),
                format!("common name {:?} is mapped twice", c.common_name),
            );
        }
        let role = role(&c.role, &format!("{at}.role"), r);
        clients.push((c.common_name.clone(), role));
    }
    clients
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Role};

    const FILE: &str = "interface = \"eth0\"\n";

    fn errors(api: &str) -> String {
        match Config::from_toml(&format!("{FILE}{api}")) {
            Ok(_) => panic!("accepted:\n{api}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn the_api_is_off_by_default_and_served_once_enabled_with_its_files() {
        let off = Config::from_toml(FILE).unwrap().config.api;
        assert_eq!(off.listen, None);
        let on = Config::from_toml(&format!(
            "{FILE}[api]\nenabled = true\ncert_file = \"/c\"\nkey_file = \"/k\"\n\
             [[api.token]]\nname = \"ci\"\nfile = \"/t\"\nrole = \"admin\"\n"
        ))
        .unwrap()
        .config
        .api;
        assert_eq!(
            on.listen,
            Some(crate::defaults::API_LISTEN.parse().unwrap())
        );
        assert_eq!(on.tokens[0].role, Role::Admin);
    }

    #[test]
    fn api_errors_name_their_key_and_line() {
        let e = errors("[api]\nenabled = true\n");
        assert!(e.contains("api.cert_file: required"), "{e}");
        assert!(e.contains("api.enabled: nobody could use the API"), "{e}");
        let e = errors(
            "[api]\n[[api.token]]\nname = \"a\"\nfile = \"/t\"\nrole = \"root\"\n\
             [[api.token]]\nname = \"a\"\nfile = \"/u\"\nrole = \"admin\"\n",
        );
        assert!(
            e.contains("api.token[0].role: expected \"read-only\" or \"admin\", got \"root\""),
            "{e}"
        );
        assert!(
            e.contains("api.token[1].name: token \"a\" is defined twice"),
            "{e}"
        );
        let e = errors("[api]\nmax_body_bytes = 10\n");
        assert!(
            e.contains("api.max_body_bytes") && e.contains("(line 3)"),
            "{e}"
        );
        let e = errors("[api]\n[[api.client]]\ncommon_name = \"ops\"\nrole = \"admin\"\n");
        assert!(
            e.contains("api.client: client certificates are only asked for"),
            "{e}"
        );
    }
}
