//! Certificates for a TLS server, made fresh at every start with `rcgen`:
//! a throwaway certificate authority and a server certificate it signs for
//! `127.0.0.1`, `::1` and `localhost`, written as PEM files next to the
//! server. Clients trust the server by trusting that CA's file, and nothing
//! else does: each server has a CA of its own.

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::error::Error;

/// The PEM files of one TLS server, all inside its private directory.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsFiles {
    /// The certificate authority that signed the server's certificate:
    /// what a client must trust (`--cacert`, a rustls root store, ...).
    pub ca_cert: PathBuf,
    /// The server's certificate, valid for `127.0.0.1`, `::1` and `localhost`.
    pub server_cert: PathBuf,
    /// The server's private key.
    pub server_key: PathBuf,
}

/// Names the certificate subjects carry, so a look at one says where it came from.
const CA_NAME: &str = "embedded-valkey throwaway CA";
const SERVER_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Makes a CA and a server certificate and writes them into `dir` (created if needed).
pub(crate) fn write_tls_files(dir: &Path) -> Result<TlsFiles, Error> {
    fs::create_dir_all(dir).map_err(|err| Error::io(format!("creating {}", dir.display()), err))?;
    let (ca_pem, cert_pem, key_pem) = generate().map_err(|err| Error::Certificate {
        reason: err.to_string(),
    })?;
    let files = TlsFiles {
        ca_cert: dir.join("ca.pem"),
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server.key"),
    };
    for (path, pem) in [
        (&files.ca_cert, ca_pem),
        (&files.server_cert, cert_pem),
        (&files.server_key, key_pem),
    ] {
        fs::write(path, pem)
            .map_err(|err| Error::io(format!("writing {}", path.display()), err))?;
    }
    Ok(files)
}

/// The CA certificate, the server certificate and the server key, as PEM.
fn generate() -> Result<(String, String, String), rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, CA_NAME);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate()?;
    let names: Vec<String> = SERVER_NAMES.iter().map(|&name| name.to_owned()).collect();
    let mut params = CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(DnType::CommonName, SERVER_NAMES[0]);
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = params.signed_by(&server_key, &issuer)?;

    Ok((ca_cert.pem(), server_cert.pem(), server_key.serialize_pem()))
}
