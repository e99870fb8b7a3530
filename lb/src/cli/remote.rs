//! The flags that choose the daemon a verb talks to ([`SocketArg`]): its unix socket
//! (`--socket`, the default), or a remote daemon's API (`--remote URL` with `--cacert`,
//! `--cert`/`--key`, `--token-file`, or a client configuration file,
//! `--client-config FILE` / `LB_CLIENT_CONFIG`). Whichever carries the request, the verb
//! renders the same answer the same way.
//!
//! The client configuration file (TOML; relative paths are relative to the file):
//!
//! ```toml
//! url = "https://lb1.example:9443"
//! cacert = "ca.crt"
//! token_file = "deploy.token"   # and/or cert = "...", key = "..."
//! ```

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use crate::{
    api::client::{Credentials, Remote},
    control::{Client, ClientError},
    defaults,
};

/// Where the daemon listens.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct SocketArg {
    /// Control socket of the daemon.
    #[arg(long, default_value = defaults::CONTROL_SOCKET)]
    pub socket: PathBuf,
    /// Talk to a remote daemon's API instead, `https://HOST[:PORT]` (port 443 unless
    /// given).
    #[arg(long, value_name = "URL", env = "LB_REMOTE")]
    pub remote: Option<String>,
    /// With --remote: its credentials.
    #[command(flatten)]
    pub creds: CredentialArgs,
    /// A client configuration file (TOML: url, cacert, cert, key, token_file) for
    /// --remote and its credentials; flags given override its keys.
    #[arg(long, value_name = "FILE", env = "LB_CLIENT_CONFIG")]
    pub client_config: Option<PathBuf>,
}

/// The credential flags for a remote daemon's API (`lb --remote`, `lb fleet`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct CredentialArgs {
    /// With --remote or --instances: the CA certificates (PEM) of the server's
    /// certificate (default: the system's).
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// With --remote or --instances: a client certificate (PEM), for mutual TLS; with
    /// --key.
    #[arg(long, value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// With --remote or --instances: the client certificate's private key (PEM).
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// With --remote or --instances: a file whose first line is the bearer token.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

impl CredentialArgs {
    /// The credentials the flags give.
    pub fn credentials(&self) -> Credentials {
        Credentials {
            cacert: self.cacert.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
            token_file: self.token_file.clone(),
        }
    }
}

/// A client configuration file: a remote daemon and the credentials for it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// The API's URL.
    pub url: Option<String>,
    /// As `--cacert`.
    pub cacert: Option<PathBuf>,
    /// As `--cert`.
    pub cert: Option<PathBuf>,
    /// As `--key`.
    pub key: Option<PathBuf>,
    /// As `--token-file`.
    pub token_file: Option<PathBuf>,
}

impl ClientConfig {
    /// Reads `path`; relative paths in it become relative to its directory.
    ///
    /// # Errors
    /// An unreadable file or bad TOML, naming the file, the flag and the line.
    pub fn load(path: &Path, flag: &str) -> Result<Self, ClientError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ClientError::Remote(format!("{flag} {}: {e}", path.display())))?;
        let mut config: Self = toml::from_str(&text)
            .map_err(|e| ClientError::Remote(format!("{flag} {}: {e}", path.display())))?;
        let dir = path.parent().unwrap_or(Path::new(""));
        for p in [
            &mut config.cacert,
            &mut config.cert,
            &mut config.key,
            &mut config.token_file,
        ]
        .into_iter()
        .flatten()
        {
            *p = dir.join(&*p);
        }
        Ok(config)
    }

    /// The credentials it holds.
    pub fn credentials(&self) -> Credentials {
        Credentials {
            cacert: self.cacert.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
            token_file: self.token_file.clone(),
        }
    }
}

impl SocketArg {
    /// The credentials the flags give.
    pub fn credentials(&self) -> Credentials {
        self.creds.credentials()
    }

    /// The client: of the remote daemon when `--remote` (or the client configuration's
    /// `url`) is given, else of the socket.
    ///
    /// # Errors
    /// [`ClientError::Remote`]: an unreadable client configuration, a bad URL, an
    /// unreadable certificate, key or token file, credentials without `--remote`.
    pub fn client(&self) -> Result<Client, ClientError> {
        let file = match &self.client_config {
            Some(path) => ClientConfig::load(path, "--client-config")?,
            None => ClientConfig::default(),
        };
        let credentials = self.credentials().or(&file.credentials());
        match self.remote.as_ref().or(file.url.as_ref()) {
            Some(url) => Ok(Client::through(Arc::new(Remote::new(url, &credentials)?))),
            None if credentials != Credentials::default() => Err(ClientError::Remote(
                "--cacert, --cert, --key and --token-file are for --remote URL (or a client configuration's url)".into(),
            )),
            None => Ok(Client::new(&self.socket)),
        }
    }
}
