use super::*;
use crate::cache::TMP_DIR;
use crate::cache::format_gc_report;
use crate::cache::format_listing;
use crate::cache::test_support::{entries_of, hash_n, publish_new, set_last_used, write_set};

#[test]
fn list_shows_artifacts_newest_first() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::new(tmp.path().join("never-created"));
    assert!(cache.list().unwrap().is_empty());
    let (old, new) = (hash_n(20), hash_n(21));
    let a = publish_new(&cache, &old, 100);
    let b = publish_new(&cache, &new, 300);
    set_last_used(&a.path, Duration::from_secs(7200));
    fs::create_dir(cache.root().join("not-a-hash")).unwrap();
    let listed = cache.list().unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].hash, new);
    assert_eq!(listed[0].rows, Some(300));
    assert_eq!(listed[0].name, "set-300");
    assert_eq!(listed[0].bytes, disk_bytes(&b.path));
    assert!(listed[0].bytes > 300 * 4);
    assert!(listed[0].created.is_some());
    assert_eq!(listed[1].hash, old);
    let text = format_listing(&listed);
    assert!(
        text.contains("set-300") && text.contains("2h ago"),
        "{text}"
    );
    assert!(text.contains("2 artifacts"), "{text}");
    let json = serde_json::to_value(&listed).unwrap();
    assert_eq!(json[0]["rows"], 300);
    assert_eq!(json[0]["hash"], new.as_str());
    let age = unix_secs(SystemTime::now()) - json[1]["last_used_unix"].as_u64().unwrap();
    assert!((7199..=7260).contains(&age), "{age}");

    // A lookup counts as a use.
    cache.lookup(&old).unwrap().unwrap();
    assert_eq!(cache.list().unwrap()[0].hash, old);
}

/// Four artifacts used 10 days, 3 days, 2 hours and just now.
fn aged_cache() -> (tempfile::TempDir, Cache, Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::new(tmp.path());
    let ages = [10 * 86400, 3 * 86400, 7200, 0];
    let hashes: Vec<String> = (0..4).map(|i| hash_n(30 + i)).collect();
    for (h, age) in hashes.iter().zip(ages) {
        let a = publish_new(&cache, h, 10);
        set_last_used(&a.path, Duration::from_secs(age));
    }
    (tmp, cache, hashes)
}

fn removed(r: &GcReport) -> Vec<&str> {
    let mut v: Vec<&str> = r.removed.iter().map(|e| e.hash.as_str()).collect();
    v.sort();
    v
}

fn sorted(v: &[&String]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

#[test]
fn gc_keep_newest() {
    let (_tmp, cache, h) = aged_cache();
    let dry = cache.gc(Some(1), None, true, false).unwrap();
    assert_eq!(removed(&dry), sorted(&[&h[0], &h[1], &h[2]]));
    assert_eq!(cache.list().unwrap().len(), 4, "a dry run removes nothing");
    assert!(format_gc_report(&dry, true).contains("would remove 3 artifacts"));

    let r = cache.gc(Some(2), None, false, false).unwrap();
    assert_eq!(removed(&r), sorted(&[&h[0], &h[1]]));
    assert_eq!(r.kept, 2);
    assert!(r.freed_bytes() > 0);
    let left: Vec<String> = cache.list().unwrap().into_iter().map(|e| e.hash).collect();
    assert_eq!(left, vec![h[3].clone(), h[2].clone()]);
    assert!(
        !cache
            .root()
            .join(LOCKS_DIR)
            .join(format!("{}.lock", h[0]))
            .exists()
    );
    assert!(entries_of(&cache.root().join(TMP_DIR)).is_empty());
}

#[test]
fn gc_older_than_and_both_bounds() {
    let (_tmp, cache, h) = aged_cache();
    let day = Duration::from_secs(86400);
    let r = cache.gc(Some(3), Some(day), true, false).unwrap();
    assert_eq!(removed(&r), sorted(&[&h[0]]), "the 3 newest are protected");
    let r = cache.gc(None, Some(day), false, false).unwrap();
    assert_eq!(removed(&r), sorted(&[&h[0], &h[1]]));
    let r = cache.gc(None, None, false, false).unwrap();
    assert!(r.removed.is_empty(), "no bounds: nothing sound is removed");
    assert_eq!(cache.list().unwrap().len(), 2);
}

#[test]
fn gc_spares_running_builds_and_removes_debris() {
    let (_tmp, cache, h) = aged_cache();
    // h[0] is locked (being republished, say): gc must leave it alone.
    let publishing = cache.lock(&h[0]).unwrap();
    // Another hash is being built: its staging directory must survive.
    let building_hash = hash_n(97);
    let building = cache.lock(&building_hash).unwrap();
    let staging = building.stage().unwrap();
    let m = write_set(staging.path(), &building_hash, 5);
    // A crashed build left its staging directory and its lock file.
    let crashed = hash_n(99);
    let debris = cache
        .root()
        .join(TMP_DIR)
        .join(format!("{crashed}.4242.x-0"));
    fs::create_dir_all(&debris).unwrap();
    fs::write(debris.join("shard-00000.bin"), vec![0u8; 10_000]).unwrap();
    drop(cache.lock(&crashed).unwrap());
    // An unusable artifact directory.
    let broken = hash_n(98);
    fs::create_dir(cache.root().join(&broken)).unwrap();

    let r = cache.gc(Some(2), None, false, false).unwrap();
    assert_eq!(r.skipped_in_use, vec![h[0].clone()]);
    assert_eq!(removed(&r), sorted(&[&h[1], &broken]));
    assert_eq!(r.temp_removed, vec![debris.clone()]);
    assert!(r.temp_bytes >= 10_000);
    assert_eq!(r.locks_removed, 1, "only the crashed build's lock file");
    assert!(!debris.exists());
    assert!(cache.root().join(&h[0]).exists());
    let text = format_gc_report(&r, false);
    assert!(text.contains("a build of it is running"), "{text}");

    // The running build goes on to publish normally.
    assert!(staging.path().exists());
    staging.publish(&m).unwrap();
    assert!(cache.lookup(&building_hash).unwrap().is_some());
    drop(publishing);
}

/// An artifact open in a reader survives gc (dry run or not), and goes
/// once the reader closes it; `force` removes it while open.
#[test]
fn gc_keeps_artifacts_open_in_a_reader_unless_forced() {
    let (_tmp, cache, h) = aged_cache();
    let reader = tessera_reader::Dataset::open(cache.root().join(&h[0])).unwrap();
    let dry = cache
        .gc(None, Some(Duration::from_secs(60)), true, false)
        .unwrap();
    assert_eq!(dry.skipped_open, vec![h[0].clone()]);
    assert_eq!(removed(&dry), sorted(&[&h[1], &h[2]]));
    let r = cache
        .gc(None, Some(Duration::from_secs(60)), false, false)
        .unwrap();
    assert_eq!(r.skipped_open, vec![h[0].clone()]);
    assert_eq!(removed(&r), sorted(&[&h[1], &h[2]]));
    let text = format_gc_report(&r, false);
    assert!(
        text.contains(&format!("kept {}: open in a reader", h[0])),
        "{text}"
    );
    assert!(text.ends_with("kept 2\n"), "the open one and h[3]: {text}");
    // The reader still reads every record.
    let sum: u64 = (0..reader.len())
        .map(|i| {
            u64::from(u32::from_le_bytes(
                reader.record(i).unwrap().try_into().unwrap(),
            ))
        })
        .sum();
    assert_eq!(sum, 45);
    drop(reader);
    let r = cache
        .gc(None, Some(Duration::from_secs(60)), false, false)
        .unwrap();
    assert_eq!(removed(&r), sorted(&[&h[0]]));

    let reader = tessera_reader::Dataset::open(cache.root().join(&h[3])).unwrap();
    let r = cache.gc(None, Some(Duration::ZERO), false, true).unwrap();
    assert!(r.skipped_open.is_empty());
    assert_eq!(removed(&r), sorted(&[&h[3]]));
    // Its maps outlive the deletion.
    assert_eq!(reader.record(9).unwrap(), 9u32.to_le_bytes());
}

/// An artifact of a newer format is kept by gc, even though this tessera
/// cannot read it; `force` removes it.
#[test]
fn gc_keeps_artifacts_of_a_newer_format_unless_forced() {
    let (_tmp, cache, h) = aged_cache();
    let manifest = cache.root().join(&h[0]).join(MANIFEST_FILE);
    let mut json: serde_json::Value =
        serde_json::from_slice(&fs::read(&manifest).unwrap()).unwrap();
    json["format_version"] = serde_json::json!(tessera_reader::LATEST_FORMAT_VERSION + 1);
    json["a_key_from_the_future"] = serde_json::json!(true);
    fs::write(&manifest, serde_json::to_vec(&json).unwrap()).unwrap();
    set_last_used(&cache.root().join(&h[0]), Duration::from_secs(10 * 86400));
    let listed = cache.list().unwrap();
    let entry = listed.iter().find(|e| e.hash == h[0]).unwrap();
    assert_eq!(
        entry.newer_format,
        Some(u64::from(tessera_reader::LATEST_FORMAT_VERSION) + 1)
    );
    assert!(format_listing(&listed).contains("(newer format)"));
    assert!(cache.lookup(&h[0]).unwrap().is_none(), "not usable here");

    let r = cache.gc(Some(0), None, false, false).unwrap();
    let v = u64::from(tessera_reader::LATEST_FORMAT_VERSION) + 1;
    assert_eq!(r.skipped_newer, vec![(h[0].clone(), v)]);
    assert!(!removed(&r).contains(&h[0].as_str()));
    assert!(cache.root().join(&h[0]).exists());
    let text = format_gc_report(&r, false);
    assert!(
        text.contains(&format!("written by a newer tessera (format version {v})")),
        "{text}"
    );

    let r = cache.gc(None, None, false, true).unwrap();
    assert_eq!(removed(&r), vec![h[0].as_str()]);
    assert!(!cache.root().join(&h[0]).exists());
}

#[test]
fn gc_prunes_the_stat_cache() {
    use crate::fingerprint::{SourceFiles, fingerprint_inputs};
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::new(tmp.path().join("c"));
    let input = tmp.path().join("in.csv");
    fs::write(&input, b"a\n1\n").unwrap();
    let mut stat = cache.load_stat_cache();
    stat.set_racy_window(Duration::ZERO);
    let src = SourceFiles {
        source: "s".into(),
        root: tmp.path().to_path_buf(),
        files: vec![input.clone()],
        hash_bytes: false,
    };
    fingerprint_inputs(&[src], &mut stat).unwrap();
    stat.save().unwrap();
    fs::remove_file(&input).unwrap();
    let r = cache.gc(None, None, false, false).unwrap();
    assert_eq!(r.stat_entries_pruned, 1);
    assert!(cache.load_stat_cache().is_empty());
}
