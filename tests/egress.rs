//! `toolwire proxy` reaching its upstream the way a company's network
//! makes it (PROTOCOL.md 12.2): through a real forward proxy (Debian's
//! squid, started here on a loopback port), to a TLS upstream whose
//! certificate a throwaway CA made by `openssl` signed, with the official
//! Anthropic SDK as the client.
//!
//! The upstream is the fake provider (tests/fake_provider) behind a TLS
//! front (tokio-rustls) on 127.0.0.1, named `provider.test`: loopback is
//! never proxied, so the name must be one the proxy resolves and toolwire
//! does not; squid's own `hosts_file` maps it to 127.0.0.1, and nothing
//! else on the machine knows it.

#[path = "common/agent_py.rs"]
mod agent_py;
mod fake_provider;
#[path = "common/proxy_process.rs"]
mod proxy_process;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use fake_provider::FakeProvider;
use serde_json::{Value, json};
use tokio::process::Child;

const LIMIT: Duration = Duration::from_secs(120);
const NAME: &str = "provider.test";
/// A name squid refuses to open a tunnel to.
const REFUSED: &str = "refused.test";

fn run(cmd: &mut std::process::Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A throwaway CA and a server certificate it signed for `provider.test`
/// (and `refused.test`), made with the openssl command.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn make_pki(dir: &Path) -> Pki {
    let p = |name: &str| dir.join(name);
    let openssl = || {
        let mut cmd = std::process::Command::new("openssl");
        cmd.current_dir(dir);
        cmd
    };
    // A P-256 key, unencrypted, with each request.
    let key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    run(openssl().args(["req", "-x509"]).args(key).args([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=toolwire test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]));
    run(openssl().arg("req").args(key).args([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=provider.test",
    ]));
    std::fs::write(
        p("server.ext"),
        format!(
            "subjectAltName=DNS:{NAME},DNS:{REFUSED},IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
        ),
    )
    .unwrap();
    run(openssl().args([
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]));
    Pki {
        ca: p("ca.pem"),
        cert: p("server.pem"),
        key: p("server.key"),
    }
}

/// A TLS front on 127.0.0.1 for the (plain HTTP) fake provider: each
/// connection's bytes, once decrypted, go to the provider as they are.
async fn tls_front(pki: &Pki, to: std::net::SocketAddr) -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&pki.cert)
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_file(&pki.key).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that refuses our certificate ends here.
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let Ok(mut plain) = tokio::net::TcpStream::connect(to).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    port
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Debian's squid on a loopback port, resolving `provider.test` and
/// `refused.test` to 127.0.0.1 from a hosts file of its own, tunnelling to
/// the first and refusing the second.
struct Squid {
    child: std::process::Child,
    /// Its service name (`-n`), unique to this squid: it names the
    /// shared-memory segments squid makes in /dev/shm.
    service: String,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Squid {
    /// Stopped with SIGTERM, as squid wants to be, so it removes its
    /// shared-memory segments; whatever a squid that had to be killed
    /// left there goes after it.
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        // SAFETY: signalling the squid this test started.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while matches!(self.child.try_wait(), Ok(None)) {
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Ok(entries) = std::fs::read_dir("/dev/shm") {
            for entry in entries.flatten() {
                if entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{}-", self.service))
                {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }
}

impl Squid {
    async fn start() -> Squid {
        // As root, squid works as `nobody`: its files must be reachable, so
        // they go under /tmp itself, not under $TMPDIR (`.ci/run` makes that
        // a private 0700 directory `nobody` cannot enter). Removed on drop.
        let dir = tempfile::Builder::new()
            .prefix("toolwire-squid-")
            .tempdir_in("/tmp")
            .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let port = free_port();
        let d = dir.path().display();
        std::fs::write(
            dir.path().join("hosts"),
            format!("127.0.0.1 {NAME}\n127.0.0.1 {REFUSED}\n"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("squid.conf"),
            format!(
                "http_port 127.0.0.1:{port}\n\
                 hosts_file {d}/hosts\n\
                 dns_nameservers 127.0.0.1\n\
                 acl refused dstdomain {REFUSED}\n\
                 http_access deny refused\n\
                 http_access allow all\n\
                 cache deny all\n\
                 cache_mem 8 MB\n\
                 pid_filename none\n\
                 pinger_enable off\n\
                 cache_log {d}/cache.log\n\
                 access_log stdio:{d}/access.log\n\
                 coredump_dir {d}\n\
                 cache_effective_user nobody\n\
                 shutdown_lifetime 0 seconds\n"
            ),
        )
        .unwrap();
        // Letters and digits only, as squid wants it.
        let service = format!("toolwiretest{port}");
        let child = std::process::Command::new("squid")
            .args(["-N", "-n", &service, "-f"])
            .arg(dir.path().join("squid.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
            .spawn()
            .expect("squid is not installed: apt-get install squid (.ci/apt/egress.txt)");
        let squid = Squid {
            child,
            service,
            port,
            dir,
        };
        let mut squid = squid;
        let deadline = std::time::Instant::now() + LIMIT;
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            let exited = squid.child.try_wait().unwrap();
            assert!(
                exited.is_none() && std::time::Instant::now() < deadline,
                "squid did not listen ({exited:?}): {}{}",
                std::fs::read_to_string(squid.dir.path().join("stderr")).unwrap_or_default(),
                squid.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        squid
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("cache.log")).unwrap_or_default()
    }

    /// Wait until squid has logged a tunnel it opened (`TCP_TUNNEL/200`)
    /// for `connect` (`CONNECT host:port`).
    async fn wait_for_tunnel(&self, connect: &str) {
        let deadline = std::time::Instant::now() + LIMIT;
        while !self
            .tunnels()
            .iter()
            .any(|l| l.contains("TCP_TUNNEL/200") && l.contains(connect))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "squid logged no tunnel: {:?}",
                self.tunnels()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The tunnels squid logged so far (`CONNECT host:port` lines; a
    /// tunnel is logged when it closes).
    fn tunnels(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("access.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("CONNECT"))
            .map(str::to_owned)
            .collect()
    }
}

/// The whole set-up: the provider, its TLS front, squid, the CA.
struct Rig {
    fake: FakeProvider,
    front: u16,
    squid: Squid,
    pki: Pki,
    _dir: tempfile::TempDir,
}

async fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let fake = FakeProvider::start().await;
    let front = tls_front(&pki, fake.addr).await;
    let squid = Squid::start().await;
    Rig {
        fake,
        front,
        squid,
        pki,
        _dir: dir,
    }
}

/// A running `toolwire proxy` whose Anthropic upstream is `upstream`.
struct Proxy {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

async fn start_proxy(upstream: &str, extra_toml: &str, envs: &[(&str, &str)]) -> Proxy {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolwire.toml"),
        format!("durability = \"none\"\n[proxy]\n{extra_toml}\n[proxy.upstreams]\nanthropic = \"{upstream}\"\n"),
    )
    .unwrap();
    let (child, url, mut lines) = proxy_process::start_env(
        dir.path(),
        &["--listen", "127.0.0.1:0"],
        "toolwire=warn",
        "proxy",
        envs,
    )
    .await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Proxy {
        child,
        url,
        _dir: dir,
    }
}

impl Proxy {
    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// `toolwire proxy` started with `envs` and `toml`, expected to refuse to
/// start; returns what it said.
fn refused_start(toml: &str, envs: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolwire.toml"), toml).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"));
    cmd.args(["proxy", "--listen", "127.0.0.1:0"])
        .current_dir(dir.path())
        .stdin(Stdio::null());
    for var in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(envs.iter().copied());
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "the proxy started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// One Messages request with a key, answered with (status, body).
async fn one_request(base: &str) -> (u16, String) {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let response = client
        .post(format!("{base}/v1/messages"))
        .header("x-api-key", "sk-ant-secret-key")
        .header("anthropic-version", "2023-06-01")
        .json(&json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "hello"}],
        }))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// Through `HTTPS_PROXY` to a TLS upstream whose CA is only in
/// `SSL_CERT_FILE`: the official SDK's loop works and every request went
/// through squid's tunnel.
#[tokio::test]
async fn through_the_forward_proxy_with_the_ca_in_ssl_cert_file() {
    let rig = rig().await;
    let upstream = format!("https://{NAME}:{}", rig.front);
    let ca = rig.pki.ca.display().to_string();
    let squid = rig.squid.url();
    let proxy = start_proxy(
        &upstream,
        "",
        &[("HTTPS_PROXY", &squid), ("SSL_CERT_FILE", &ca)],
    )
    .await;
    let out = agent_py::run(&["anthropic", &proxy.url, "loop", "--turns", "3"]).await;
    assert_eq!(out["turns"], 3);
    assert_eq!(rig.fake.received().len(), 3);
    assert!(rig.fake.received().iter().all(|r| r.status == 200));
    // The proxy's pooled connection closes with it, and squid logs it.
    proxy.stop().await;
    rig.squid
        .wait_for_tunnel(&format!("CONNECT {NAME}:{}", rig.front))
        .await;

    // The same with the lower-case variable and the CA from `[proxy] ca_file`.
    let before = rig.fake.received().len();
    let proxy = start_proxy(
        &upstream,
        &format!("ca_file = {:?}", ca),
        &[("https_proxy", &squid)],
    )
    .await;
    let (status, body) = one_request(&proxy.url).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(rig.fake.received().len(), before + 1);
    proxy.stop().await;
}

/// Without the CA, the handshake fails: a 502 in Anthropic's error shape
/// naming the host, the proxy and the certificate problem, and never the
/// key. Squid refusing the tunnel is a 502 saying so.
#[tokio::test]
async fn an_untrusted_certificate_or_a_refused_tunnel_is_a_502_that_says_why() {
    let rig = rig().await;
    let squid = rig.squid.url();
    let proxy = start_proxy(
        &format!("https://{NAME}:{}", rig.front),
        "",
        &[("HTTPS_PROXY", &squid)],
    )
    .await;
    let (status, body) = one_request(&proxy.url).await;
    assert_eq!(status, 502, "{body}");
    let error: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["type"], "error", "{body}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("https://{NAME}:{}", rig.front)),
        "{message}"
    );
    eprintln!("the 502: {message}");
    assert!(message.contains("certificate problem"), "{message}");
    assert!(message.contains("UnknownIssuer"), "{message}");
    assert!(
        message.contains(&format!("through the proxy {squid} (HTTPS_PROXY)")),
        "{message}"
    );
    assert!(!message.contains("sk-ant-secret-key"), "{message}");
    assert!(rig.fake.received().is_empty());
    proxy.stop().await;

    let ca = rig.pki.ca.display().to_string();
    let proxy = start_proxy(
        &format!("https://{REFUSED}:{}", rig.front),
        "",
        &[("HTTPS_PROXY", &squid), ("SSL_CERT_FILE", &ca)],
    )
    .await;
    let (status, body) = one_request(&proxy.url).await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("the forward proxy refused the connection"),
        "{body}"
    );
    assert!(body.contains(REFUSED), "{body}");
    assert!(rig.fake.received().is_empty());
    proxy.stop().await;
}

/// `NO_PROXY` and `[proxy] system_proxy = false` send the request direct
/// (where `provider.test` does not resolve: squid sees nothing), and
/// loopback never goes through a proxy, even a dead one.
#[tokio::test]
async fn no_proxy_system_proxy_off_and_loopback_go_direct() {
    let rig = rig().await;
    let squid = rig.squid.url();
    let ca = rig.pki.ca.display().to_string();
    let upstream = format!("https://{NAME}:{}", rig.front);
    for (toml, envs) in [
        (
            "",
            vec![
                ("HTTPS_PROXY", squid.as_str()),
                ("NO_PROXY", ".test"),
                ("SSL_CERT_FILE", &ca),
            ],
        ),
        (
            "system_proxy = false",
            vec![("HTTPS_PROXY", squid.as_str()), ("SSL_CERT_FILE", &ca)],
        ),
    ] {
        let proxy = start_proxy(&upstream, toml, &envs).await;
        let (status, body) = one_request(&proxy.url).await;
        assert_eq!(status, 502, "{toml} {envs:?}: {body}");
        assert!(!body.contains("through the proxy"), "{body}");
        assert!(body.contains(&upstream), "{body}");
        // A tunnel squid opened would be in its log once the proxy and
        // its connections are gone; squid refuses nothing here, so a
        // request through it is logged either way.
        proxy.stop().await;
        assert!(
            rig.squid.tunnels().is_empty(),
            "{toml} {envs:?}: {:?}",
            rig.squid.tunnels()
        );
    }

    let dead = format!("http://127.0.0.1:{}", free_port());
    let proxy = start_proxy(
        &format!("https://127.0.0.1:{}", rig.front),
        "",
        &[
            ("HTTPS_PROXY", &dead),
            ("ALL_PROXY", &dead),
            ("SSL_CERT_FILE", &ca),
        ],
    )
    .await;
    let (status, body) = one_request(&proxy.url).await;
    assert_eq!(status, 200, "{body}");
    proxy.stop().await;
}

/// Bad proxy URLs and unreadable CA files stop the proxy at start, naming
/// the variable or key (and never the value, which may hold a password).
#[test]
fn bad_proxy_urls_and_unreadable_ca_files_are_configuration_errors() {
    let toml = "[proxy]\n";
    let said = refused_start(toml, &[("HTTPS_PROXY", "http://user:hunter2@[broken")]);
    assert!(said.contains("HTTPS_PROXY is not a proxy URL"), "{said}");
    assert!(!said.contains("hunter2"), "{said}");
    let said = refused_start(toml, &[("all_proxy", "socks5://proxy:1080")]);
    assert!(said.contains("all_proxy names a SOCKS proxy"), "{said}");
    let said = refused_start(toml, &[("SSL_CERT_FILE", "/nonexistent/ca.pem")]);
    assert!(said.contains("SSL_CERT_FILE=/nonexistent/ca.pem"), "{said}");
    let said = refused_start("[proxy]\nca_file = \"missing.pem\"\n", &[]);
    assert!(said.contains("[proxy] ca_file"), "{said}");
    assert!(said.contains("missing.pem: cannot read it"), "{said}");
}
