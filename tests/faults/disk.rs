//! A full disk under the shipped `tessera::build::build()`: the cache lives
//! on a small tmpfs that the test mounts and fills, leaving less free space
//! than the build needs, by various amounts so that it runs out at
//! different stages (shards, the shuffle's second copy, the manifest, a
//! global query's materialized result).

use super::report::Section;
use super::*;
use std::io::Write;
use tessera::build::{BuildOptions, build};
use tessera::progress::ProgressMode;

/// Unmounts on drop, so a failing test leaves no mount behind.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `bytes` at `at`; `Err` says why it could not.
    fn mount(at: &Path, bytes: u64) -> Result<Tmpfs, String> {
        fs::create_dir_all(at).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(at)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if out.status.success() {
            Ok(Tmpfs(at.to_path_buf()))
        } else {
            Err(format!(
                "cannot mount a tmpfs (this needs root): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Fills the file system holding `dir` until `free` bytes are left (to the
/// page), with a file named `filler`.
fn fill_leaving(dir: &Path, free: u64) -> Result<PathBuf, String> {
    let path = dir.join("filler");
    let mut f = fs::File::create(&path).map_err(|e| e.to_string())?;
    let block = vec![0xA5u8; 64 << 10];
    let mut written = 0u64;
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(_) => break,
        }
    }
    let keep = written.saturating_sub(free.div_ceil(4096) * 4096);
    f.set_len(keep).map_err(|e| e.to_string())?;
    Ok(path)
}

fn options(cache: &Path) -> BuildOptions {
    BuildOptions {
        cache_dir: Some(cache.to_path_buf()),
        threads: Some(2),
        memory_limit: None,
        progress: ProgressMode::Quiet,
        // The disk itself must say it is full: no guard before it.
        max_output: Some(u64::MAX),
        ..Default::default()
    }
}

/// Builds `spec` into `cache` with only `free` bytes left on the tmpfs; it
/// must fail cleanly. Then frees the space and builds again.
fn starve(p: &Project, mnt: &Path, spec: &Path, free: u64) -> Result<String, String> {
    let cache = mnt.join(format!("cache-{}", unique()));
    fs::create_dir_all(&cache).map_err(|e| e.to_string())?;
    let filler = fill_leaving(mnt, free)?;
    let result = build(spec, &options(&cache));
    fs::remove_file(&filler).map_err(|e| e.to_string())?;
    let err = match result {
        Ok(r) => {
            return Err(format!(
                "built {} with only {free} bytes free",
                r.path.display()
            ));
        }
        Err(e) => e.to_string(),
    };
    if !err.to_lowercase().contains("no space left on device")
        || !err.contains(&cache.display().to_string())
    {
        return Err(format!(
            "with {free} bytes free, an unexpected error: {err}"
        ));
    }
    if !artifacts(&cache).is_empty() {
        return Err(format!("an artifact was published on a full disk: {err}"));
    }
    let tmp = entries(&cache.join("tmp"));
    if !tmp.is_empty() {
        return Err(format!("the failed build left {tmp:?} in tmp/"));
    }
    let rebuilt = build(spec, &options(&cache)).map_err(|e| e.to_string())?;
    let (hash, files) = p.reference(spec);
    if rebuilt.hash != hash || snapshot(&rebuilt.path) != files {
        return Err("the rebuild after freeing space is not byte-identical".into());
    }
    verify_cli(&rebuilt.path)?;
    fs::remove_dir_all(&cache).map_err(|e| e.to_string())?;
    Ok(err)
}

pub fn full_disk(p: &Project) -> Result<Section, String> {
    let mut s = Section::new(
        "A full disk",
        "The cache is on a 16 MiB tmpfs mounted by the test, filled until a given amount \
         is free: less than the build needs, by amounts chosen so that it runs out while \
         writing shards, the shuffle's copy, the manifest, or a global query's result. \
         The build is the shipped `tessera::build::build()`. Afterwards the space is \
         freed and the same build runs again in the same cache.",
    );
    let base = p.fresh_dir("disk");
    let mnt = match Tmpfs::mount(&base.join("mnt"), 16 << 20) {
        Ok(m) => m,
        Err(why) => {
            s.skipped = Some(why);
            return Ok(s);
        }
    };
    for spec in [p.chunked(), p.global()] {
        let kind = spec.file_stem().unwrap().to_string_lossy().into_owned();
        let bytes = reference_bytes(p, &spec);
        let fractions: &[(u64, &str)] = if kind == "chunked" {
            &[
                (0, "0"),
                (1, "1/8"),
                (2, "1/4"),
                (4, "1/2"),
                (6, "3/4"),
                (8, "1"),
                (11, "11/8"),
            ]
        } else {
            &[(0, "0"), (4, "1/2")]
        };
        let mut errors = Vec::new();
        for (eighths, label) in fractions {
            let free = bytes * eighths / 8;
            let err = starve(p, &mnt.0, &spec, free)
                .map_err(|e| format!("{kind} build, {label} of its size free: {e}"))?;
            errors.push(format!("{label}: {err}"));
        }
        println!(
            "full disk, {kind} ({bytes} bytes of output):\n  {}",
            errors.join("\n  ")
        );
        let labels: Vec<&str> = fractions.iter().map(|(_, l)| *l).collect();
        s.row(
            format!(
                "{kind} build with {} of its output's size free",
                labels.join(", ")
            ),
            fractions.len(),
            "each stopped with a \"no space left on device\" error naming the file; no \
             artifact and no staging directory left; after freeing space the rebuild in \
             the same cache was byte-identical",
        );
    }
    Ok(s)
}

/// Bytes of the reference artifact of `spec`.
fn reference_bytes(p: &Project, spec: &Path) -> u64 {
    let cache = p.fresh_dir("size");
    let built = build_cli(spec, &cache).unwrap();
    fs::read_dir(&built.path)
        .unwrap()
        .flatten()
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum()
}
