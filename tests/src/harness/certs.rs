//! Test certificates, generated at test time with rcgen: a CA ([`TestCa`]) that issues server
//! and client certificates (or expired ones, or ones for another host), written as PEM files
//! into a temp dir the servers and clients read them from.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// PEM files of one issued certificate.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// What to issue.
#[derive(Debug, Clone)]
pub struct CertSpec {
    /// Subject RDNs in the order they are encoded, e.g. `[(O, "Acme"), (CN, "alice")]`.
    pub subject: Vec<(DnType, String)>,
    /// DNS names and IP addresses (as text) for the SAN.
    pub hosts: Vec<String>,
    /// E-mail addresses for the SAN.
    pub emails: Vec<String>,
    /// Valid for servers (`serverAuth`), clients (`clientAuth`), or both.
    pub server: bool,
    /// Valid for clients.
    pub client: bool,
    /// Expired since 2001.
    pub expired: bool,
}

impl CertSpec {
    /// A certificate for `127.0.0.1` and `localhost`, usable as server and client (as route
    /// certificates are).
    pub fn localhost() -> Self {
        Self {
            subject: vec![(DnType::CommonName, "localhost".into())],
            hosts: vec!["127.0.0.1".into(), "localhost".into()],
            emails: Vec::new(),
            server: true,
            client: true,
            expired: false,
        }
    }

    /// A client certificate with subject `subject`.
    pub fn client(subject: &[(DnType, &str)]) -> Self {
        Self {
            subject: subject
                .iter()
                .map(|(t, v)| (t.clone(), v.to_string()))
                .collect(),
            hosts: Vec::new(),
            emails: Vec::new(),
            server: false,
            client: true,
            expired: false,
        }
    }
}

/// A certificate authority whose files live in `dir`.
pub struct TestCa {
    dir: tempfile::TempDir,
    name: String,
    params: CertificateParams,
    key: KeyPair,
    /// The CA certificate (PEM file).
    pub ca_file: PathBuf,
    issued: usize,
}

impl TestCa {
    /// A fresh CA named `name`.
    pub fn new(name: &str) -> anyhow::Result<TestCa> {
        let dir = tempfile::Builder::new()
            .prefix("jetraft-certs-")
            .tempdir()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("{name} test CA"));
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let ca_file = dir.path().join(format!("{name}-ca.pem"));
        std::fs::write(&ca_file, cert.pem())?;
        Ok(TestCa {
            dir,
            name: name.to_string(),
            params,
            key,
            ca_file,
            issued: 0,
        })
    }

    /// Where the files are.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Issues a certificate for `spec`, written to `<name>-<n>.pem` / `-key.pem`.
    pub fn issue(&mut self, spec: &CertSpec) -> anyhow::Result<CertFiles> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        for (t, v) in &spec.subject {
            dn.push(t.clone(), v.clone());
        }
        params.distinguished_name = dn;
        for h in &spec.hosts {
            params.subject_alt_names.push(match h.parse() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(h.clone().try_into()?),
            });
        }
        for e in &spec.emails {
            params
                .subject_alt_names
                .push(SanType::Rfc822Name(e.clone().try_into()?));
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        if spec.server {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ServerAuth);
        }
        if spec.client {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ClientAuth);
        }
        if spec.expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let key = KeyPair::generate()?;
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer)?;
        self.issued += 1;
        let base = self
            .dir
            .path()
            .join(format!("{}-{}", self.name, self.issued));
        let files = CertFiles {
            cert: base.with_extension("pem"),
            key: base.with_extension("key"),
        };
        std::fs::write(&files.cert, cert.pem())?;
        std::fs::write(&files.key, key.serialize_pem())?;
        Ok(files)
    }
}

/// A `tls { }` block for a server certificate, plus `extra` settings inside it.
pub fn tls_block(server: &CertFiles, extra: &str) -> String {
    format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  {extra}\n}}\n",
        server.cert.display(),
        server.key.display()
    )
}
