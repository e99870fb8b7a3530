//! The API's TLS side (rustls with the `ring` provider): the server configuration from
//! the `[api]` files, and the common name of a verified client certificate.
//!
//! Mutual TLS: with `api.client_ca_file`, client certificates are verified against its
//! CAs (RFC 5280 path validation by webpki). Without tokens a certificate is required,
//! so a client without one, or with one of another CA, fails the handshake; with tokens
//! a client may present none and authenticate with its token instead (one presented is
//! still verified).

use std::{path::Path, sync::Arc};

use anyhow::{Context as _, bail};
use rustls::{
    RootCertStore, ServerConfig,
    crypto::ring,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
    server::WebPkiClientVerifier,
};

use crate::config::Api;

/// Reads every certificate of a PEM file; `key` names the configuration key.
fn certificates(path: &Path, key: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .with_context(|| format!("api.{key}: reading {}", path.display()))?;
    if certs.is_empty() {
        bail!("api.{key}: {} holds no certificate", path.display());
    }
    Ok(certs)
}

/// The server's rustls configuration: its certificate and key, TLS 1.2 and 1.3 with
/// ring's cipher suites, HTTP/1.1 by ALPN, and the client verifier of `api`.
///
/// # Errors
/// A file that cannot be read or holds no certificate or key (the error names the key),
/// a key that does not match the certificate, a CA file without a usable CA.
pub fn server_config(api: &Api) -> anyhow::Result<Arc<ServerConfig>> {
    let provider = Arc::new(ring::default_provider());
    let chain = certificates(&api.cert_file, "cert_file")?;
    let key = PrivateKeyDer::from_pem_file(&api.key_file)
        .with_context(|| format!("api.key_file: reading {}", api.key_file.display()))?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .context("api: TLS protocol versions")?;
    let builder = match &api.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for ca in certificates(path, "client_ca_file")? {
                roots.add(ca).with_context(|| {
                    format!("api.client_ca_file: {}: unusable CA", path.display())
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if api.tokens.is_empty() {
                verifier
            } else {
                verifier.allow_unauthenticated()
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .context("api.client_ca_file: building the client verifier")?,
            )
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .context("api.cert_file and api.key_file do not make a usable pair")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The subject common name (CN) of a verified client certificate (DER), if it has one
/// (the first CN when several).
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let cn = parsed.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}
