//! A test CA made in the test (rcgen), and server certificates it signs for 127.0.0.1 and
//! localhost: git trusts the CA through `http.sslCAInfo`, gixd is given the chain and key as PEM
//! files.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};

/// A certificate authority of one test.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    /// The CA's certificate, PEM, for `git -c http.sslCAInfo=…`.
    pub ca_pem: PathBuf,
}

impl TestCa {
    /// A new CA whose certificate is written into `dir`.
    pub fn new(dir: &Path, name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name.push(DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let ca_pem = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&ca_pem, issuer.pem()).unwrap();
        TestCa { issuer, ca_pem }
    }

    /// A server certificate for 127.0.0.1 and localhost signed by this CA, and its key: written
    /// as `<stem>-cert.pem` and `<stem>-key.pem` into `dir`.
    pub fn server(&self, dir: &Path, stem: &str) -> gixd::config::TlsFiles {
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, stem);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let files = gixd::config::TlsFiles {
            cert: dir.join(format!("{stem}-cert.pem")),
            key: dir.join(format!("{stem}-key.pem")),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        files
    }
}
