//! Hostile and malformed specs, `tests/bad_specs/*.yaml`: YAML bombs, huge
//! numbers, special files, path tricks, SQL that tries to write files or to
//! escape the planner's query, expressions that overflow or divide by zero.
//!
//! Each file starts with `# expect: <line>` lines: exactly what `tessera
//! build` must print on stderr. Every spec is built by the `tessera` binary
//! (the code path users run) from a directory of fixtures it may refer to
//! (`data/part-000.parquet`, `small.csv`, a fifo, a socket, symlink loops,
//! ...), under an address-space limit and a timeout, so an out-of-memory
//! abort or a hang fails the test instead of the machine. The build must exit
//! with status 1 (not a signal), print exactly the expected lines (with the
//! fixture directory written `$DIR`), and leave no artifact in its cache.
//!
//! `TESSERA_BLESS=1 cargo test --test bad_specs` rewrites the `# expect:`
//! lines from the actual output, for review with `git diff`.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Address space each build may use: 1 GiB. A build of these small specs
/// needs about 60 MiB of memory; the rest is thread stacks and mappings.
const ADDRESS_SPACE_KIB: u64 = 1 << 20;
/// Longest a spec may take to fail. Each fails in well under a second when
/// all is well; the margin is for a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(60);
const EXPECT: &str = "# expect: ";

fn bad_specs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad_specs")
}

/// The fixtures specs may refer to, in one directory shared by every run.
/// The socket is kept open as long as the returned listener lives.
fn fixtures(dir: &Path) -> std::os::unix::net::UnixListener {
    use std::os::unix::fs::symlink;
    let rows = common::rows(200, 7);
    common::write_parquet(&dir.join("data"), &rows, 1, 100);
    fs::write(dir.join("small.csv"), "id,x\n1,0.5\n2,1.5\n").unwrap();
    fs::create_dir_all(dir.join("mixed")).unwrap();
    fs::write(dir.join("mixed/a.csv"), "id,x\n1,0.5\n").unwrap();
    fs::copy(
        dir.join("data/part-000.parquet"),
        dir.join("mixed/b.parquet"),
    )
    .unwrap();
    fs::create_dir_all(dir.join("fifos")).unwrap();
    for fifo in ["fifo.csv", "fifos/only.csv"] {
        let ok = Command::new("mkfifo").arg(dir.join(fifo)).status();
        assert!(ok.is_ok_and(|s| s.success()), "mkfifo {fifo}");
    }
    symlink("loop.csv", dir.join("loop.csv")).unwrap();
    symlink("pong.csv", dir.join("ping.csv")).unwrap();
    symlink("ping.csv", dir.join("pong.csv")).unwrap();
    symlink("missing.csv", dir.join("dangling.csv")).unwrap();
    symlink("/dev/zero", dir.join("zero.csv")).unwrap();
    fs::create_dir_all(dir.join("looping/inner")).unwrap();
    fs::write(dir.join("looping/a.csv"), "id,x\n1,0.5\n").unwrap();
    symlink("self.csv", dir.join("looping/inner/self.csv")).unwrap();
    fs::create_dir_all(dir.join("dirloop/sub")).unwrap();
    fs::write(dir.join("dirloop/sub/a.csv"), "id,x\n1,0.5\n").unwrap();
    symlink("..", dir.join("dirloop/sub/up")).unwrap();
    std::os::unix::net::UnixListener::bind(dir.join("sock.csv")).unwrap()
}

/// `program` run through `sh` with the address-space limit set.
fn limited(program: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(program);
    cmd
}

/// The limit really applies to what `limited` runs.
#[test]
fn the_address_space_limit_applies() {
    let out = limited("cat").arg("/proc/self/limits").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("Max address space"))
        .unwrap_or_default();
    let bytes = (ADDRESS_SPACE_KIB << 10).to_string();
    assert_eq!(
        line.split_whitespace().nth(3),
        Some(bytes.as_str()),
        "{line}"
    );
}

/// What one run of the binary did.
struct Outcome {
    code: Option<i32>,
    stderr: String,
    seconds: f64,
}

/// Runs `tessera args...` in `dir` under the address-space limit and the
/// timeout. A run that outlives the timeout is killed and reported as a hang.
fn run_limited(dir: &Path, args: &[&str]) -> Result<Outcome, String> {
    let started = Instant::now();
    let mut child = limited(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start tessera: {e}"))?;
    let mut stderr = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("hung: still running after {TIMEOUT:?}; killed"));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Ok(Outcome {
        code: status.code(),
        stderr: reader.join().unwrap_or_default(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The expected lines at the top of a spec file.
fn expected_lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map_while(|l| l.strip_prefix(EXPECT).map(str::to_string))
        .collect()
}

/// The file with its `# expect:` lines replaced by `lines`.
fn with_expected(bytes: &[u8], lines: &[String]) -> Vec<u8> {
    let mut rest = bytes;
    while rest.starts_with(EXPECT.as_bytes()) {
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        rest = &rest[end..];
    }
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(format!("{EXPECT}{l}\n").as_bytes());
    }
    out.extend_from_slice(rest);
    out
}

/// Artifact directories (64 hex digits) under `cache`.
fn artifacts_in(cache: &Path) -> Vec<String> {
    fs::read_dir(cache)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.len() == 64 && n.bytes().all(|b| b.is_ascii_hexdigit()))
                .collect()
        })
        .unwrap_or_default()
}

/// Builds one spec file copied into `dir`; `Err` says what went wrong.
fn check_spec(dir: &Path, spec: &Path, bless: bool) -> Result<f64, String> {
    let name = spec
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bytes = fs::read(spec).map_err(|e| e.to_string())?;
    let expected = expected_lines(&bytes);
    if expected.is_empty() && !bless {
        return Err("no `# expect:` line".into());
    }
    let file = format!("{name}.yaml");
    fs::write(dir.join(&file), &bytes).map_err(|e| e.to_string())?;
    let cache = format!("cache-{name}");
    let out = run_limited(dir, &["build", &file, "--cache-dir", &cache, "-q"])?;
    let shown = out.stderr.replace(&dir.display().to_string(), "$DIR");
    let actual: Vec<String> = shown.lines().map(str::to_string).collect();
    let left = artifacts_in(&dir.join(&cache));
    if !left.is_empty() {
        return Err(format!("published artifacts {left:?}; stderr: {shown}"));
    }
    if out.code != Some(1) {
        return Err(format!(
            "exit status {:?} (a signal or success, not an error); stderr: {shown}",
            out.code
        ));
    }
    if bless && actual != expected {
        fs::write(spec, with_expected(&bytes, &actual)).map_err(|e| e.to_string())?;
        return Ok(out.seconds);
    }
    if actual != expected {
        return Err(format!(
            "stderr differs\n  expected: {expected:?}\n  actual:   {actual:?}"
        ));
    }
    Ok(out.seconds)
}

#[test]
fn every_bad_spec_fails_with_its_expected_error() {
    let bless = std::env::var_os("TESSERA_BLESS").is_some_and(|v| v == "1");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _socket = fixtures(dir);
    let mut specs: Vec<PathBuf> = fs::read_dir(bad_specs_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    specs.sort();
    assert!(specs.len() >= 60, "only {} bad specs", specs.len());

    let queue = Mutex::new(specs.iter());
    let failures = Mutex::new(Vec::new());
    let slowest = Mutex::new((0.0f64, String::new()));
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let Some(spec) = queue.lock().unwrap().next() else {
                        break;
                    };
                    let name = spec.file_name().unwrap().to_string_lossy().into_owned();
                    match check_spec(dir, spec, bless) {
                        Ok(secs) => {
                            let mut slow = slowest.lock().unwrap();
                            if secs > slow.0 {
                                *slow = (secs, name);
                            }
                        }
                        Err(why) => failures.lock().unwrap().push(format!("{name}: {why}")),
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    let (secs, name) = slowest.into_inner().unwrap();
    println!("{} bad specs, slowest {name} in {secs:.2}s", specs.len());
    assert!(
        failures.is_empty(),
        "{} of {} bad specs failed:\n{}",
        failures.len(),
        specs.len(),
        failures.join("\n")
    );
}

/// The spec file itself is hostile: an endless device, a fifo that would
/// block, a directory, a file too large, bytes that are not text.
#[test]
fn hostile_spec_paths_fail_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ok = Command::new("mkfifo").arg(dir.join("fifo.yaml")).status();
    assert!(ok.is_ok_and(|s| s.success()));
    fs::create_dir(dir.join("dir.yaml")).unwrap();
    fs::write(dir.join("huge.yaml"), vec![b'#'; 5 << 20]).unwrap();
    fs::write(dir.join("binary.yaml"), b"version: 1\nname: \xff\xfe\n").unwrap();
    std::os::unix::fs::symlink("self.yaml", dir.join("self.yaml")).unwrap();
    let cases = [
        (
            "/dev/zero",
            "error: /dev/zero: cannot read the spec: it is a character device, not a regular file",
        ),
        (
            "fifo.yaml",
            "error: fifo.yaml: cannot read the spec: it is a fifo (named pipe), not a regular file",
        ),
        (
            "dir.yaml",
            "error: dir.yaml: cannot read the spec: it is a directory, not a regular file",
        ),
        (
            "huge.yaml",
            "error: huge.yaml: cannot read the spec: it is 5242880 bytes; a spec may be at most 4194304 bytes (4 MiB)",
        ),
        (
            "binary.yaml",
            "error: binary.yaml: cannot read the spec: it is not UTF-8 text (line 2, byte 17 is not valid UTF-8)",
        ),
        (
            "self.yaml",
            "error: self.yaml: cannot read the spec: it is a symlink loop (its links lead back to themselves)",
        ),
        (
            "missing.yaml",
            "error: missing.yaml: cannot read the spec: No such file or directory (os error 2)",
        ),
    ];
    for (spec, expected) in cases {
        let out = run_limited(dir, &["build", spec, "--cache-dir", "cache", "-q"]).unwrap();
        assert_eq!(out.code, Some(1), "{spec}: {}", out.stderr);
        assert_eq!(out.stderr.trim_end(), expected, "{spec}");
    }
    assert!(artifacts_in(&dir.join("cache")).is_empty());
}

/// Command-line numbers out of range are refused by the argument parser
/// (an infinite step time used to panic, a huge thread count to hang, a huge
/// prefetch depth to abort on a failed allocation).
#[test]
fn out_of_range_arguments_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cases: [(&[&str], &str); 6] = [
        (
            &["bench", ".", "--step-ms", "inf"],
            "invalid value 'inf' for '--step-ms <STEP_MS>': \"inf\" is not a step time in milliseconds from 0 to 60000",
        ),
        (
            &["bench", ".", "--step-ms", "NaN"],
            "\"NaN\" is not a step time in milliseconds from 0 to 60000",
        ),
        (
            &["bench", ".", "--step-ms", "1e300"],
            "\"1e300\" is not a step time in milliseconds from 0 to 60000",
        ),
        (
            &["bench", ".", "--prefetch", "100000000"],
            "\"100000000\" is not a prefetch depth from 1 to 1024",
        ),
        (
            &["build", "x.yaml", "--threads", "100000"],
            "\"100000\" is not a thread count from 1 to 1024",
        ),
        (
            &["build", "x.yaml", "--threads", "0"],
            "\"0\" is not a thread count from 1 to 1024",
        ),
    ];
    for (args, expected) in cases {
        let out = run_limited(dir, args).unwrap();
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(expected), "{args:?}: {}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    }
}
