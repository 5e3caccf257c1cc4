//! TLS on the HTTP listener ([http] tls_certificate and tls_key): rustls with ring, the certificate
//! chain and key read once at start, so a mistake in either stops `accountd serve` with its name.

use std::path::Path;
use std::sync::Arc;

use gputokens::config::TlsFiles;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

/// The acceptor for `files`, or what is wrong with them.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    let certificates = CertificateDer::pem_file_iter(&files.certificate)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| named(&files.certificate, "tls_certificate", e))?;
    if certificates.is_empty() {
        return Err(format!("[http] tls_certificate {}: holds no certificate", files.certificate.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| named(&files.key, "tls_key", e))?;
    // ring, as the clients' rustls (ureq) has it: one small crypto library, which links statically
    // into sbalance. rustls deprecated it for lacking post-quantum key exchange, which a site's own
    // network does not need against today's threat.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_no_client_auth().with_single_cert(certificates, key))
        .map_err(|e| format!("[http] tls_certificate and tls_key: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn named(path: &Path, key: &str, e: impl std::fmt::Display) -> String {
    format!("[http] {key} {}: {e}", path.display())
}
