//! Readers and the cache: a reader process alive during `cache gc`, an
//! artifact of a newer format, and files damaged under `tessera verify` and
//! under an open loader.
//!
//! The reader is this test binary run again as [`child_main`]: it opens the
//! set, says `open <rows>`, waits for a line on stdin, then reads every
//! record through a `Loader` and prints `sum <blake3 of the bytes>`.

use super::report::Section;
use super::*;
use std::io::Write;
use std::process::{Child, ChildStdin};
use tessera_reader::{Dataset, LastBatch, Loader, LoaderConfig};

const READER_ENV: &str = "TESSERA_FAULT_READER";

/// The reader process's body; does nothing unless started by [`Reader`].
pub fn child_main() {
    let Some(dir) = std::env::var_os(READER_ENV) else {
        return;
    };
    let ds = Dataset::open(&dir).expect("open the set");
    println!("open {}", ds.len());
    std::io::stdout().flush().unwrap();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    println!("sum {}", read_all(&ds));
    std::io::stdout().flush().unwrap();
}

/// blake3 of every record in storage order, read through a loader.
fn read_all(ds: &Dataset) -> String {
    let loader = Loader::new(
        ds,
        LoaderConfig {
            batch_size: 256,
            shuffle: false,
            last_batch: LastBatch::Partial,
            threads: 2,
            ..Default::default()
        },
    )
    .expect("loader");
    let mut h = blake3::Hasher::new();
    for batch in loader.epoch(0) {
        h.update(batch.bytes());
    }
    h.finalize().to_hex().to_string()
}

/// What the set in `dir` reads as (opened and closed again, so no lease is
/// left behind).
fn expected_sum(dir: &Path) -> String {
    read_all(&Dataset::open(dir).expect("open"))
}

/// A reader process holding a set open.
struct Reader {
    child: Child,
    stdin: ChildStdin,
    /// Lines of its stdout, read by a thread so that waiting can time out.
    lines: std::sync::mpsc::Receiver<String>,
}

/// How a reader process ended.
enum Ended {
    Sum(String),
    Signal(i32),
    Failed(String),
}

impl Reader {
    /// Starts a reader of `dir` and waits until it has the set open.
    fn open(dir: &Path) -> Result<Reader, String> {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "reader_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(READER_ENV, dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut reader = Reader {
            child,
            stdin,
            lines,
        };
        // libtest prints "test reader_child ... " before the test's own output.
        if reader.line_with("open ").is_none() {
            let _ = reader.child.kill();
            let _ = reader.child.wait();
            return Err(format!("the reader could not open {}", dir.display()));
        }
        Ok(reader)
    }

    /// The next line containing `marker`, from `marker` on; `None` if the
    /// output ends, or nothing comes within the timeout (the child is then
    /// killed).
    fn line_with(&mut self, marker: &str) -> Option<String> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(at) = line.find(marker) {
                        return Some(line[at + marker.len()..].trim().to_string());
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    return None;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Lets the reader read everything; how it ended.
    fn finish(mut self) -> Ended {
        let _ = writeln!(self.stdin, "go");
        let _ = self.stdin.flush();
        let sum = self.line_with("sum ");
        let status = self.child.wait();
        use std::os::unix::process::ExitStatusExt;
        match (sum, status) {
            (Some(s), Ok(st)) if st.success() => {
                Ended::Sum(s.split_whitespace().next().unwrap_or_default().to_string())
            }
            (_, Ok(st)) if st.signal().is_some() => Ended::Signal(st.signal().unwrap_or(0)),
            (_, st) => Ended::Failed(format!("{st:?}")),
        }
    }
}

fn expect_sum(ended: Ended, want: &str, what: &str) -> Result<(), String> {
    match ended {
        Ended::Sum(s) if s == want => Ok(()),
        Ended::Sum(s) => Err(format!("{what}: the reader read {s}, expected {want}")),
        Ended::Signal(n) => Err(format!("{what}: the reader died by signal {n}")),
        Ended::Failed(e) => Err(format!("{what}: the reader failed: {e}")),
    }
}

fn older_than_zero(cache: &Path, force: bool) -> Result<String, String> {
    std::thread::sleep(Duration::from_millis(20));
    let mut args = vec!["--older-than", "0s"];
    if force {
        args.push("--force");
    }
    gc_cli(cache, &args)
}

pub fn reader_during_gc(p: &Project) -> Result<Section, String> {
    let mut s = Section::new(
        "Readers and `cache gc`",
        "An open shard set holds a lease: a shared lock on its `manifest.json`, which \
         the operating system drops when the reader closes the set or dies. `cache gc` \
         deletes an artifact only while holding that lock exclusively. The reader here \
         is a separate process; every process that opens the set, DataLoader workers \
         included, holds its own lease (python/tests/test_lease.py runs the same check \
         with PyTorch DataLoader workers).",
    );
    let spec = p.chunked();

    // A reader alive during gc.
    let cache = p.fresh_dir("lease");
    let built = build_cli(&spec, &cache)?;
    let want = expected_sum(&built.path);
    let reader = Reader::open(&built.path)?;
    let dry = gc_cli(&cache, &["--older-than", "0s", "--dry-run"])?;
    let out = older_than_zero(&cache, false)?;
    let kept = format!("kept {}: open in a reader", built.hash);
    if !out.contains(&kept) || !dry.contains(&kept) {
        return Err(format!("gc did not keep the open artifact: {dry}\n{out}"));
    }
    verify_cli(&built.path)?;
    expect_sum(reader.finish(), &want, "after gc")?;
    let out = older_than_zero(&cache, false)?;
    if !out.contains(&format!("removed {}", built.hash)) || built.path.exists() {
        return Err(format!(
            "gc kept the artifact after its reader exited: {out}"
        ));
    }
    s.row(
        "`cache gc --older-than 0s` (and `--dry-run`) while a reader process has the \
         artifact open",
        2,
        "kept and reported as \"open in a reader\"; the reader then read every record, \
         identical; once it had exited, the next gc removed the artifact",
    );

    // --force removes it anyway; the open maps keep working.
    let built = build_cli(&spec, &cache)?;
    let reader = Reader::open(&built.path)?;
    let out = older_than_zero(&cache, true)?;
    if !out.contains(&format!("removed {}", built.hash)) || built.path.exists() {
        return Err(format!("gc --force kept the open artifact: {out}"));
    }
    expect_sum(reader.finish(), &want, "after gc --force")?;
    let reopen = Dataset::open(&built.path)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    if !reopen.contains("manifest.json") {
        return Err(format!("reopening a removed set: {reopen}"));
    }
    s.row(
        "`cache gc --older-than 0s --force` while a reader process has the artifact open",
        1,
        "removed; the reader, whose shards were already mapped, still read every record, \
         identical; opening the set again fails naming `manifest.json`",
    );

    // An artifact written by a newer tessera.
    let built = build_cli(&spec, &cache)?;
    let manifest = built.path.join("manifest.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&fs::read(&manifest).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    let newer = u64::from(tessera_reader::LATEST_FORMAT_VERSION) + 1;
    json["format_version"] = serde_json::json!(newer);
    fs::write(&manifest, serde_json::to_vec(&json).unwrap()).map_err(|e| e.to_string())?;
    let out = older_than_zero(&cache, false)?;
    if !out.contains("written by a newer tessera") || !built.path.exists() {
        return Err(format!("gc removed an artifact of a newer format: {out}"));
    }
    let mut ls = tessera();
    ls.args(["cache", "ls", "--cache-dir"]).arg(&cache);
    let listing = run(ls)?;
    if !listing.contains("(newer format)") {
        return Err(format!("cache ls: {listing}"));
    }
    let out = older_than_zero(&cache, true)?;
    if built.path.exists() {
        return Err(format!("gc --force kept the newer artifact: {out}"));
    }
    s.row(
        "`cache gc --older-than 0s` over an artifact whose manifest has a newer format \
         version, then with `--force`",
        2,
        "kept and reported as written by a newer tessera (`cache ls` shows \"(newer \
         format)\"); `--force` removed it",
    );
    Ok(s)
}

/// One way to damage a shard set in place.
struct Damage {
    what: &'static str,
    /// Changes the set in `dir`; returns the name of the file it damaged.
    apply: fn(&Path) -> String,
    /// What `tessera verify` says (a fragment of its error).
    verify_says: &'static str,
    /// What an already open loader then does.
    open_loader: OpenLoader,
    /// Whether a build finds the damage when the set is in the cache (a
    /// cache hit checks the manifest and every shard's size, and hashes
    /// nothing) and so builds the artifact again.
    build_notices: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum OpenLoader {
    /// Reads the set as it was when opened.
    Unchanged,
    /// Reads the damaged bytes.
    Damaged,
    /// Is killed by SIGBUS when it touches pages the file no longer has.
    Sigbus,
}

fn first_shard(dir: &Path) -> String {
    let m: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    m["shards"][0]["file"].as_str().unwrap().to_string()
}

const DAMAGES: &[Damage] = &[
    Damage {
        what: "one byte of a shard's records overwritten in place",
        apply: |dir| {
            let shard = first_shard(dir);
            let path = dir.join(&shard);
            let mut bytes = fs::read(&path).unwrap();
            let i = tessera_reader::HEADER_LEN + 100;
            bytes[i] ^= 0xFF;
            fs::write(&path, bytes).unwrap();
            shard
        },
        verify_says: "checksum mismatch",
        open_loader: OpenLoader::Damaged,
        build_notices: false,
    },
    Damage {
        what: "a shard truncated in place to its header and a few records",
        apply: |dir| {
            let shard = first_shard(dir);
            let f = fs::OpenOptions::new()
                .write(true)
                .open(dir.join(&shard))
                .unwrap();
            f.set_len(tessera_reader::HEADER_LEN as u64 + 64).unwrap();
            shard
        },
        verify_says: "truncated or overwritten?",
        open_loader: OpenLoader::Sigbus,
        build_notices: true,
    },
    Damage {
        what: "a shard deleted",
        apply: |dir| {
            let shard = first_shard(dir);
            fs::remove_file(dir.join(&shard)).unwrap();
            shard
        },
        verify_says: "file listed in the manifest is missing",
        open_loader: OpenLoader::Unchanged,
        build_notices: true,
    },
    Damage {
        what: "the manifest edited: a shard's blake3 changed",
        apply: |dir| {
            let path = dir.join("manifest.json");
            let mut m: serde_json::Value =
                serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
            m["shards"][0]["blake3"] = serde_json::json!("0".repeat(64));
            fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
            first_shard(dir)
        },
        verify_says: "checksum mismatch",
        open_loader: OpenLoader::Unchanged,
        build_notices: false,
    },
    Damage {
        what: "the manifest edited: cut in half",
        apply: |dir| {
            let path = dir.join("manifest.json");
            let bytes = fs::read(&path).unwrap();
            fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
            "manifest.json".to_string()
        },
        verify_says: "invalid manifest",
        open_loader: OpenLoader::Unchanged,
        build_notices: true,
    },
    Damage {
        what: "the manifest deleted",
        apply: |dir| {
            fs::remove_file(dir.join("manifest.json")).unwrap();
            "manifest.json".to_string()
        },
        verify_says: "manifest.json",
        open_loader: OpenLoader::Unchanged,
        build_notices: true,
    },
];

fn copy_set(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap().flatten() {
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

pub fn damaged_files(p: &Project) -> Result<Section, String> {
    let mut s = Section::new(
        "Damaged files under `tessera verify` and under an open loader",
        "Each damage is done three times to a fresh copy of a built shard set: before \
         `tessera verify`; while a reader process has the set open (it then reads every \
         record); and to the artifact in the cache, before the same `tessera build` runs \
         again. Shards are memory-mapped and a published shard is never modified, so an \
         open reader keeps reading what it mapped unless the bytes change in place. \
         Known limit: a shard truncated *in place* while a process has it mapped kills \
         that process with SIGBUS on its next read of the lost pages (the kernel gives a \
         mapped reader no other signal); tessera itself never truncates or rewrites a \
         published file, so only an outside writer can do this. A cache hit checks the \
         manifest and the shards' sizes but hashes nothing (it takes milliseconds), so \
         damage that keeps every size is found by `tessera verify`, not by a build.",
    );
    let cache = p.fresh_dir("damage");
    let built = build_cli(&p.chunked(), &cache)?;
    let want = expected_sum(&built.path);
    for d in DAMAGES {
        // Under verify.
        let dir = p.fresh_dir("verify");
        copy_set(&built.path, &dir);
        let file = (d.apply)(&dir);
        let err = match verify_cli(&dir) {
            Ok(()) => return Err(format!("{}: verify passed", d.what)),
            Err(e) => e,
        };
        if !err.contains(d.verify_says) || !err.contains(&file) {
            return Err(format!(
                "{}: verify should name {file} and say {:?}: {err}",
                d.what, d.verify_says
            ));
        }
        // Under an open loader.
        let dir = p.fresh_dir("open");
        copy_set(&built.path, &dir);
        let reader = Reader::open(&dir)?;
        (d.apply)(&dir);
        let ended = reader.finish();
        let loader = match (d.open_loader, ended) {
            (OpenLoader::Unchanged, ended) => {
                expect_sum(ended, &want, d.what)?;
                "reads every record as it was when opened"
            }
            (OpenLoader::Damaged, Ended::Sum(sum)) if sum != want => {
                "reads the changed bytes (`verify`, or opening with verification, \
                 notices)"
            }
            (OpenLoader::Sigbus, Ended::Signal(7)) => {
                "is **killed by SIGBUS** when it touches the pages the file no longer has \
                 (known limit, above)"
            }
            (_, Ended::Sum(sum)) => {
                return Err(format!("{}: the open reader read {sum}", d.what));
            }
            (_, Ended::Signal(n)) => return Err(format!("{}: reader died by signal {n}", d.what)),
            (_, Ended::Failed(e)) => return Err(format!("{}: reader failed: {e}", d.what)),
        };
        // In the cache, then the same build again.
        let cache = p.fresh_dir("damaged-cache");
        let again = build_cli(&p.chunked(), &cache)?;
        (d.apply)(&again.path);
        let hit = build_cli(&p.chunked(), &cache)?.cache_hit;
        let rebuild = if d.build_notices {
            if hit {
                return Err(format!("{}: the build did not notice", d.what));
            }
            rerun_identical(p, &p.chunked(), &cache)?;
            "the next build replaces the artifact, byte-identical"
        } else {
            if !hit || verify_cli(&again.path).is_ok() {
                return Err(format!("{}: expected an unnoticed cache hit", d.what));
            }
            "the next build is a cache hit on the damaged artifact (`verify` finds it)"
        };
        s.row(
            d.what,
            3,
            format!(
                "`verify` exits 1 naming `{file}` (\"{}\"); an open loader {loader}; \
                 in the cache, {rebuild}",
                d.verify_says
            ),
        );
    }
    Ok(s)
}
