//! TLS for `https` probes (rustls with the ring provider): a client configuration that
//! verifies the certificate against the configured or system CAs, or one that accepts
//! any certificate while still checking the handshake's signatures (verification off,
//! the default for backends addressed by IP).

use std::{fs, sync::Arc};

use rustls::{
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::{WebPkiSupportedAlgorithms, ring},
    pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject as _},
};
use tokio::net::TcpStream;
use tokio_rustls::{TlsConnector, client::TlsStream};

use super::SetupError;
use crate::{
    outcome::{Failure, Stage},
    settings::TlsCheck,
};

/// The client configuration of `tls`.
///
/// # Errors
/// [`SetupError`] when the CA file or the system trust store cannot be read.
pub(super) fn client_config(tls: &TlsCheck) -> Result<Arc<ClientConfig>, SetupError> {
    let provider = Arc::new(ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| SetupError(format!("TLS versions: {e}")))?;
    let mut config = if tls.verify {
        builder
            .with_root_certificates(roots(tls)?)
            .with_no_client_auth()
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate {
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth()
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn roots(tls: &TlsCheck) -> Result<RootCertStore, SetupError> {
    let mut roots = RootCertStore::empty();
    match &tls.ca_file {
        Some(path) => {
            let pem = fs::read(path)
                .map_err(|e| SetupError(format!("cannot read {}: {e}", path.display())))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| SetupError(format!("{}: {e}", path.display())))?;
                roots
                    .add(cert)
                    .map_err(|e| SetupError(format!("{}: {e}", path.display())))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(SetupError(
                    "tls_verify = true but the system trust store has no certificates: set ca_file"
                        .to_owned(),
                ));
            }
        }
    }
    Ok(roots)
}

/// A TLS session over `stream`, for `name`.
///
/// # Errors
/// [`Failure::Tls`] (handshake refused or certificate not accepted), or a reset.
pub(super) async fn handshake(
    stream: TcpStream,
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
) -> Result<TlsStream<TcpStream>, Failure> {
    TlsConnector::from(config)
        .connect(name, stream)
        .await
        .map_err(|e| {
            match e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            {
                Some(tls) => Failure::Tls(tls.to_string()),
                None => Failure::from_io(Stage::Tls, &e),
            }
        })
}

/// Accepts every certificate chain, but checks that the server holds the key of the
/// certificate it sent (the handshake signatures), so a probe still talks TLS properly.
#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
