//! Packing at build time (`pack:`, issue 20): documents of a token field
//! become fixed windows. Checked from the stored records alone: every
//! document's tokens are found exactly once (or counted as cut), best-fit
//! never splits a document that fits, the masks follow the segments, and the
//! windows are byte-identical for any thread count and any cutting of the
//! input into files, row groups and chunks.

use datafusion::arrow::array::{ArrayRef, Int64Array, ListArray};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tessera::build::{BuildOptions, BuildReport, build};
use tessera::progress::ProgressMode;
use tessera_reader::Dataset;

/// Document `d` of the corpus: its tokens are unique over the corpus
/// (`d * 1000 + k + 1`), so a token says which document and place it is.
/// Lengths spread from 1 to 700 with a few empty documents.
fn corpus(n: usize) -> Vec<Vec<i64>> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|d| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = match x % 50 {
                0 => 0,
                1 => 300 + (x >> 8) as usize % 400,
                _ => 1 + (x >> 8) as usize % 120,
            };
            (0..len).map(|k| (d * 1000 + k + 1) as i64).collect()
        })
        .collect()
}

/// Writes the corpus as `files` Parquet files of consecutive documents
/// (`doc-NN.parquet`, in name order), row groups of `group` rows.
fn write(dir: &Path, docs: &[Vec<i64>], files: usize, group: usize) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new(
            "ids",
            DataType::List(Arc::new(Field::new("item", DataType::Int64, true))),
            true,
        ),
    ]));
    let per = docs.len().div_ceil(files);
    for (f, part) in docs.chunks(per).enumerate() {
        let first = f * per;
        let ids: ArrayRef = Arc::new(Int64Array::from(
            (first as i64..(first + part.len()) as i64).collect::<Vec<_>>(),
        ));
        let lists: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(
            part.iter()
                .map(|d| Some(d.iter().map(|&t| Some(t)).collect::<Vec<_>>())),
        ));
        let batch = RecordBatch::try_new(schema.clone(), vec![ids, lists]).expect("batch");
        let props = datafusion::parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(group))
            .build();
        let path = dir.join(format!("doc-{f:02}.parquet"));
        let file = std::fs::File::create(&path).expect("create");
        let mut w = ArrowWriter::try_new(file, schema.clone(), Some(props)).expect("writer");
        w.write(&batch).expect("write");
        w.close().expect("close");
    }
}

fn build_spec(dir: &Path, extra: &str, threads: usize, chunk_bytes: &str) -> BuildReport {
    let spec = format!(
        "version: 1\nname: p\nsources:\n  docs: {{ path: \"data/*.parquet\" }}\n\
         fields:\n  tokens: {{ dtype: u32, column: ids }}\n\
         chunks: {{ target_bytes: {chunk_bytes} }}\n{extra}"
    );
    let path = dir.join("spec.yaml");
    std::fs::write(&path, spec).expect("spec");
    build(
        &path,
        &BuildOptions {
            cache_dir: Some(dir.join(format!("cache-{threads}"))),
            threads: Some(threads),
            memory_limit: Some(256 << 20),
            progress: ProgressMode::Quiet,
            allow_empty: false,
            max_output: None,
        },
    )
    .expect("build")
}

/// One window as read back: tokens, segment ids, positions, loss mask.
struct Win {
    tokens: Vec<u32>,
    seg: Vec<i32>,
    pos: Vec<i32>,
    mask: Vec<u8>,
}

fn windows(ds: &Dataset) -> Vec<Win> {
    (0..ds.len())
        .map(|i| Win {
            tokens: ds.field::<u32>(i, "tokens").expect("tokens").to_vec(),
            seg: ds.field::<i32>(i, "segment_ids").expect("seg").to_vec(),
            pos: ds.field::<i32>(i, "positions").expect("pos").to_vec(),
            mask: ds.field::<u8>(i, "loss_mask").expect("mask").to_vec(),
        })
        .collect()
}

/// Every stored record's bytes, in order (whatever the shards).
fn all_bytes(r: &BuildReport) -> Vec<u8> {
    let ds = Dataset::open(&r.path).expect("open");
    (0..ds.len())
        .flat_map(|i| ds.records(i..i + 1).expect("record").to_vec())
        .collect()
}

/// The pieces of each window: (document, first token index, tokens), from
/// the segment ids; checks positions and the mask on the way.
fn pieces(w: &Win, length: usize, labels: bool) -> Vec<(usize, usize, Vec<u32>)> {
    let seg = &w.seg;
    assert_eq!(seg.len(), w.tokens.len());
    assert_eq!(w.pos.len(), w.tokens.len());
    assert_eq!(w.mask.len(), length);
    let mut out: Vec<(usize, usize, Vec<u32>)> = Vec::new();
    let mut last = 0;
    for (k, &t) in w.tokens.iter().enumerate() {
        assert_eq!(seg[k] == 0, t == 0, "padding and segment 0 go together");
        if t == 0 {
            assert_eq!(w.pos[k], 0);
            continue;
        }
        let (doc, idx) = ((t as usize - 1) / 1000, (t as usize - 1) % 1000);
        if seg[k] != last {
            assert_eq!(seg[k], last + 1, "segments count up from 1");
            assert_eq!(w.pos[k], 0, "a piece starts at position 0");
            out.push((doc, idx, Vec::new()));
        } else {
            assert_eq!(
                doc,
                out.last().expect("piece").0,
                "one document per segment"
            );
            assert_eq!(w.pos[k], w.pos[k - 1] + 1, "positions count within a piece");
        }
        out.last_mut().expect("piece").2.push(t);
        last = seg[k];
    }
    for k in 0..length {
        let want = if labels {
            seg[k + 1] != 0 && seg[k + 1] == seg[k]
        } else {
            seg[k] != 0
        };
        assert_eq!(w.mask[k], u8::from(want), "loss mask at {k}");
    }
    out
}

#[test]
fn best_fit_keeps_every_document_that_fits_whole_and_loses_no_token() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let docs = corpus(3000);
    write(&dir.join("data"), &docs, 1, 1000);
    let length = 256;
    let r = build_spec(
        dir,
        &format!(
            "pack: {{ length: {length}, algorithm: best_fit, labels: true, group_docs: 500 }}\n"
        ),
        2,
        "32KiB",
    );
    let ds = Dataset::open(&r.path).expect("open");
    let cap = length + 1;
    let mut found: BTreeMap<usize, Vec<(usize, Vec<u32>)>> = BTreeMap::new();
    let mut pad = 0u64;
    for w in windows(&ds) {
        assert_eq!(w.tokens.len(), cap);
        pad += w.tokens.iter().filter(|t| **t == 0).count() as u64;
        for (doc, idx, toks) in pieces(&w, length, true) {
            found.entry(doc).or_default().push((idx, toks));
        }
    }
    let mut split_docs = 0;
    for (d, doc) in docs.iter().enumerate() {
        if doc.is_empty() {
            assert!(!found.contains_key(&d));
            continue;
        }
        let mut ps = found
            .remove(&d)
            .unwrap_or_else(|| panic!("document {d} is missing"));
        if doc.len() <= cap {
            assert_eq!(ps.len(), 1, "document {d} fits a window but was split");
        } else {
            split_docs += 1;
        }
        ps.sort();
        let joined: Vec<u32> = ps.into_iter().flat_map(|(_, t)| t).collect();
        let want: Vec<u32> = doc.iter().map(|&t| t as u32).collect();
        assert_eq!(joined, want, "document {d}'s tokens");
    }
    assert!(found.is_empty());
    let stats = &r.pack.as_ref().expect("pack report")["all"];
    let tokens: usize = docs.iter().map(Vec::len).sum();
    assert_eq!(stats["tokens"].as_u64(), Some(tokens as u64));
    assert_eq!(stats["windows"].as_u64(), Some(ds.len()));
    assert_eq!(stats["padding_tokens"].as_u64(), Some(pad));
    assert_eq!(stats["split_documents"].as_u64(), Some(split_docs));
    assert_eq!(stats["documents"].as_u64(), Some(docs.len() as u64));
    let frac = stats["padding_fraction"].as_f64().expect("fraction");
    assert!(frac < 0.02, "best_fit padded {frac}");
    // The manifest carries the same figures.
    assert_eq!(ds.manifest().build["pack"]["all"], *stats);
}

#[test]
fn concat_with_labels_covers_the_stream_once_and_windows_share_one_token() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let docs = corpus(500);
    write(&dir.join("data"), &docs, 1, 100);
    let length = 64;
    let r = build_spec(
        dir,
        &format!("pack: {{ length: {length}, algorithm: concat, labels: true }}\n"),
        1,
        "32KiB",
    );
    let ds = Dataset::open(&r.path).expect("open");
    let stream: Vec<u32> = docs.iter().flatten().map(|&t| t as u32).collect();
    let ws = windows(&ds);
    for (k, w) in ws.iter().enumerate() {
        pieces(w, length, true);
        let lo = k * length;
        let hi = (lo + length + 1).min(stream.len());
        let real: Vec<u32> = w.tokens.iter().copied().filter(|t| *t != 0).collect();
        assert_eq!(real, stream[lo..hi].to_vec(), "window {k}");
    }
    assert_eq!(ws.len(), (stream.len() - 1).div_ceil(length));
}

#[test]
fn windows_are_byte_identical_for_any_threads_files_and_chunks() {
    let docs = corpus(2000);
    for spec in [
        "pack: { length: 128, algorithm: best_fit, group_docs: 300 }\n",
        "pack: { length: 100, algorithm: concat, labels: true, overflow: truncate }\n",
    ] {
        let mut seen: Option<Vec<u8>> = None;
        for (files, group, threads, chunk) in [
            (1, 2000, 1, "64MiB"),
            (1, 37, 2, "4KiB"),
            (8, 50, 2, "8KiB"),
            (3, 1000, 1, "4KiB"),
        ] {
            let tmp = tempfile::tempdir().expect("tmp");
            write(&tmp.path().join("data"), &docs, files, group);
            let r = build_spec(tmp.path(), spec, threads, chunk);
            let bytes = all_bytes(&r);
            match &seen {
                None => seen = Some(bytes),
                Some(b) => assert!(
                    *b == bytes,
                    "{spec}: {files} files, row groups of {group}, {threads} threads, chunks of {chunk} differ"
                ),
            }
        }
    }
}

#[test]
fn windows_are_cut_into_shards_of_the_target_size() {
    // The windows go to shard files on a writer thread: the cut must fall
    // after the same window whatever the batches it was handed.
    let docs = corpus(2000);
    let pack = "pack: { length: 512, algorithm: best_fit, group_docs: 300 }\n";
    let tmp = tempfile::tempdir().expect("tmp");
    write(&tmp.path().join("data"), &docs, 3, 200);
    let one = build_spec(tmp.path(), pack, 2, "8KiB");
    let ds = Dataset::open(&one.path).expect("open");
    assert_eq!(
        ds.manifest().shards.len(),
        1,
        "one shard at the default size"
    );
    let stride = ds.manifest().layout.stride;
    // 11 windows and a bit per shard.
    let target = tessera_reader::HEADER_LEN as u64 + 11 * stride + stride / 2;
    let tmp2 = tempfile::tempdir().expect("tmp");
    write(&tmp2.path().join("data"), &docs, 3, 200);
    let cut = build_spec(
        tmp2.path(),
        &format!("{pack}shards: {{ target_bytes: {target} }}\n"),
        2,
        "8KiB",
    );
    let cut_ds = Dataset::open(&cut.path).expect("open");
    cut_ds.verify().expect("every shard's hash");
    let shards = &cut_ds.manifest().shards;
    assert!(shards.len() > 3, "{} shards", shards.len());
    let (last, full) = shards.split_last().expect("shards");
    assert!(
        full.iter().all(|s| s.rows == 11),
        "{:?}",
        shards.iter().map(|s| s.rows).collect::<Vec<_>>()
    );
    assert!((1..=11).contains(&last.rows));
    assert_eq!(
        all_bytes(&cut),
        all_bytes(&one),
        "the same windows, in order"
    );
}

#[test]
fn overflow_truncate_and_drop_are_counted_in_the_report() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let docs = corpus(400);
    write(&dir.join("data"), &docs, 2, 100);
    let long: Vec<&Vec<i64>> = docs.iter().filter(|d| d.len() > 200).collect();
    assert!(!long.is_empty());
    let r = build_spec(
        dir,
        "pack: { length: 200, overflow: truncate }\n",
        2,
        "32KiB",
    );
    let s = &r.pack.as_ref().expect("pack")["all"];
    let cut: usize = long.iter().map(|d| d.len() - 200).sum();
    assert_eq!(s["truncated_documents"].as_u64(), Some(long.len() as u64));
    assert_eq!(s["truncated_tokens"].as_u64(), Some(cut as u64));
    let r = build_spec(dir, "pack: { length: 200, overflow: drop }\n", 2, "32KiB");
    let s = &r.pack.as_ref().expect("pack")["all"];
    assert_eq!(s["dropped_documents"].as_u64(), Some(long.len() as u64));
    let kept: usize = docs.iter().filter(|d| d.len() <= 200).map(Vec::len).sum();
    assert_eq!(s["tokens"].as_u64(), Some(kept as u64));
}

#[test]
fn splits_pack_separately_and_a_shuffle_keeps_the_windows() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let docs = corpus(1000);
    write(&dir.join("data"), &docs, 2, 100);
    let split = "split: { key: id, weights: { train: 0.8, val: 0.2 } }\n";
    let plain = build_spec(
        dir,
        &format!("pack: {{ length: 128 }}\n{split}"),
        2,
        "32KiB",
    );
    let shuffled = build_spec(
        dir,
        &format!("pack: {{ length: 128 }}\n{split}order: {{ shuffle_seed: 3 }}\n"),
        2,
        "32KiB",
    );
    let p = plain.pack.as_ref().expect("pack");
    let docs_in = |s: &str| p[s]["documents"].as_u64().unwrap_or(0);
    assert_eq!(docs_in("train") + docs_in("val"), docs.len() as u64);
    assert!(docs_in("val") > 100 && docs_in("train") > 600);
    for s in ["train", "val"] {
        let a = Dataset::open(&plain.path)
            .expect("open")
            .split(s)
            .expect("split");
        let b = Dataset::open(&shuffled.path)
            .expect("open")
            .split(s)
            .expect("split");
        assert_eq!(a.len(), p[s]["windows"].as_u64().unwrap_or(0));
        let mut wa: Vec<Vec<u8>> = (0..a.len())
            .map(|i| a.record(i).expect("rec").to_vec())
            .collect();
        let mut wb: Vec<Vec<u8>> = (0..b.len())
            .map(|i| b.record(i).expect("rec").to_vec())
            .collect();
        assert_ne!(wa, wb, "{s}: the shuffle changed nothing");
        wa.sort();
        wb.sort();
        assert_eq!(wa, wb, "{s}: the shuffle changed the windows");
    }
}
