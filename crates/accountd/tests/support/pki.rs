//! A site's own certificate authority for the TLS tests, made with openssl: a CA, accountd's
//! certificate for one address signed by it, and another CA that signed nothing of the site's.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct SiteCa {
    dir: tempfile::TempDir,
}

impl SiteCa {
    /// A CA and a certificate for accountd at `ip` (its subjectAltName), in a directory every
    /// user may read (the key files are root's).
    pub fn for_address(ip: &str) -> SiteCa {
        let dir = tempfile::Builder::new().prefix("gputokens-pki-").tempdir().unwrap();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(dir.path()).output().unwrap();
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        let ca = |name: &str, subject: &str| {
            let (key, pem) = (format!("{name}.key"), format!("{name}.pem"));
            openssl(
                &[&["req", "-x509"][..], &ec, &["-days", "2", "-subj", subject, "-keyout", &key, "-out", &pem]]
                    .concat(),
            );
        };
        ca("ca", "/CN=gputokens test CA");
        ca("other", "/CN=someone else");
        openssl(
            &[&["req"][..], &ec, &["-subj", &format!("/CN={ip}"), "-keyout", "accountd.key", "-out", "accountd.csr"]]
                .concat(),
        );
        std::fs::write(dir.path().join("san.ext"), format!("subjectAltName=IP:{ip}\nbasicConstraints=CA:FALSE\n"))
            .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "accountd.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "accountd.pem",
        ]);
        for readable in ["", "ca.pem", "other.pem", "accountd.pem"] {
            let mode = if readable.is_empty() { 0o755 } else { 0o644 };
            std::fs::set_permissions(dir.path().join(readable), std::os::unix::fs::PermissionsExt::from_mode(mode))
                .unwrap();
        }
        SiteCa { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `[http]` keys that give the listener this certificate.
    pub fn http_keys(&self) -> String {
        let d = self.dir.path().display();
        format!("tls_certificate = \"{d}/accountd.pem\"\ntls_key = \"{d}/accountd.key\"\n")
    }

    /// The site's CA (`[accountd] ca_file`), and another one.
    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }

    pub fn other_ca(&self) -> PathBuf {
        self.path("other.pem")
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
