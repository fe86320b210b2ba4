//! Image fields end to end, on images this test makes with the `image`
//! crate: byte-identical records for 1 and 2 threads and for any cutting of
//! the input into files and row groups; bytes and path columns giving the
//! same pixels; bad images (corrupt, truncated, unsupported, a
//! decompression bomb, a missing file, a URL) as errors naming the row and
//! the file, or skipped and counted with `on_error: skip`. Pixels are
//! compared with Pillow's decode and resize in python/tests/test_images.py.

use datafusion::arrow::array::{ArrayRef, BinaryArray, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use image::{ImageFormat, Rgb, RgbImage};
use std::io::Cursor;
use std::path::PathBuf;
use std::sync::Arc;
use tessera::build::{BuildOptions, BuildReport, build};
use tessera::progress::ProgressMode;
use tessera_reader::Dataset;

/// Rows whose value is not a good image, and what each is.
const CORRUPT: usize = 5; // random bytes
const TRUNCATED: usize = 11; // a JPEG cut in half
const GIF: usize = 17; // a GIF header (unsupported)
const BOMB: usize = 23; // a PNG declaring 100000 x 100000 pixels
const ROWS: usize = 30;

/// A deterministic picture of `w x h` with gradients and a bright square.
fn picture(w: u32, h: u32, seed: u32) -> RgbImage {
    RgbImage::from_fn(w, h, |x, y| {
        let sq = (x / 8 + y / 8 + seed).is_multiple_of(3);
        Rgb([
            ((x * 255) / w.max(1)) as u8,
            ((y * 255) / h.max(1)) as u8,
            if sq { 250 } else { (seed * 37 % 200) as u8 },
        ])
    })
}

fn encode(img: &RgbImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Vec::new();
    img.write_to(&mut Cursor::new(&mut out), format)
        .expect("encode");
    out
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 == 1 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// A small PNG whose header declares `w x h` pixels (its data is tiny).
fn bomb(w: u32, h: u32) -> Vec<u8> {
    let mut png = encode(&picture(4, 4, 0), ImageFormat::Png);
    // Signature (8), IHDR length (4), "IHDR" (4), width, height.
    png[16..20].copy_from_slice(&w.to_be_bytes());
    png[20..24].copy_from_slice(&h.to_be_bytes());
    let crc = crc32(&png[12..29]);
    png[29..33].copy_from_slice(&crc.to_be_bytes());
    png
}

/// The value of row `i`: JPEG or PNG pictures of varied sizes, and the bad
/// values at their rows.
fn value(i: usize) -> Vec<u8> {
    let (w, h) = (40 + (i as u32 * 7) % 50, 30 + (i as u32 * 11) % 45);
    let pic = picture(w, h, i as u32);
    match i {
        CORRUPT => (0..300u32).map(|k| (k * 31 % 251) as u8).collect(),
        TRUNCATED => {
            let j = encode(&picture(320, 240, 1), ImageFormat::Jpeg);
            j[..j.len() / 2].to_vec()
        }
        GIF => b"GIF89a\x10\x00\x10\x00".to_vec(),
        BOMB => bomb(100_000, 100_000),
        _ if i.is_multiple_of(2) => encode(&pic, ImageFormat::Jpeg),
        _ => encode(&pic, ImageFormat::Png),
    }
}

struct Project {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

/// Writes the rows (id, img bytes, path) into `files` Parquet files of row
/// groups of `group_rows`, and each value as a file under `images/`.
fn project(files: usize, group_rows: usize) -> Project {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().to_path_buf();
    std::fs::create_dir_all(root.join("data")).expect("data");
    std::fs::create_dir_all(root.join("images")).expect("images");
    let values: Vec<Vec<u8>> = (0..ROWS).map(value).collect();
    let names: Vec<String> = (0..ROWS).map(|i| format!("img{i:03}.bin")).collect();
    for (v, n) in values.iter().zip(&names) {
        std::fs::write(root.join("images").join(n), v).expect("image file");
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("img", DataType::Binary, false),
        Field::new("path", DataType::Utf8, false),
    ]));
    let per = ROWS.div_ceil(files);
    for f in 0..files {
        let range = f * per..((f + 1) * per).min(ROWS);
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(
                range.clone().map(|i| i as i64),
            )),
            Arc::new(BinaryArray::from_iter_values(
                range.clone().map(|i| values[i].as_slice()),
            )),
            Arc::new(StringArray::from_iter_values(
                range.clone().map(|i| names[i].as_str()),
            )),
        ];
        let b = RecordBatch::try_new(schema.clone(), cols).expect("batch");
        let file =
            std::fs::File::create(root.join(format!("data/part-{f:03}.parquet"))).expect("parquet");
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(group_rows))
            .build();
        let mut w = ArrowWriter::try_new(file, schema.clone(), Some(props)).expect("writer");
        w.write(&b).expect("write");
        w.close().expect("close");
    }
    Project { _tmp: tmp, root }
}

impl Project {
    fn build(&self, fields: &str, threads: usize) -> Result<BuildReport, String> {
        let spec = format!(
            "version: 1\nname: images\nsources:\n  s: {{ path: data/ }}\nfields:\n{fields}"
        );
        let path = self.root.join(format!("spec-{threads}.yaml"));
        std::fs::write(&path, spec).expect("spec");
        let opts = BuildOptions {
            cache_dir: Some(self.root.join(format!("cache-{threads}"))),
            threads: Some(threads),
            memory_limit: None,
            progress: ProgressMode::Quiet,
            allow_empty: false,
            max_output: None,
        };
        build(&path, &opts).map_err(|e| e.to_string())
    }
}

const SKIP: &str = "  id: { dtype: i64, column: id }
  pixels: { dtype: u8, column: img, transform: { image: { size: [24, 32], channels: 3,
            fit: shorter_side_then_center_crop, filter: bilinear, on_error: skip } } }
  grey: { dtype: u8, column: img, transform: { image: { size: [16, 16], channels: 1,
          layout: CHW, fit: pad, filter: lanczos, on_error: skip } } }
";

/// Every record of the artifact, in order.
fn records(report: &BuildReport) -> Vec<Vec<u8>> {
    let ds = Dataset::open(&report.path).expect("open");
    (0..ds.len())
        .map(|i| ds.record(i).expect("record").to_vec())
        .collect()
}

fn shard_bytes(report: &BuildReport) -> Vec<Vec<u8>> {
    let m: serde_json::Value = serde_json::from_slice(
        &std::fs::read(report.path.join("manifest.json")).expect("manifest"),
    )
    .expect("json");
    m["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .map(|s| {
            let f = s["file"].as_str().expect("file");
            std::fs::read(report.path.join(f)).expect("shard")
        })
        .collect()
}

#[test]
fn records_are_identical_for_any_threads_and_cutting_and_bad_images_are_skipped() {
    let one = project(1, 1000);
    let r1 = one.build(SKIP, 1).expect("build, 1 thread");
    let r2 = one.build(SKIP, 2).expect("build, 2 threads");
    assert!(!r1.cache_hit && !r2.cache_hit);
    assert_eq!(
        r1.hash, r2.hash,
        "the thread count is not part of the meaning"
    );
    assert_eq!(shard_bytes(&r1), shard_bytes(&r2), "shard files differ");
    let recs = records(&r1);
    // The four bad rows are skipped by both image fields, counted per field.
    assert_eq!(recs.len(), ROWS - 4);
    assert_eq!(r1.rows_kept, ROWS as u64);
    let skipped = r1.skipped.clone().expect("skipped counts");
    assert_eq!(skipped, serde_json::json!({ "grey": 4, "pixels": 4 }));
    let ids: Vec<i64> = recs
        .iter()
        .map(|r| i64::from_le_bytes(r[..8].try_into().expect("8")))
        .collect();
    let want: Vec<i64> = (0..ROWS as i64)
        .filter(|&i| ![CORRUPT, TRUNCATED, GIF, BOMB].contains(&(i as usize)))
        .collect();
    assert_eq!(ids, want);
    // The manifest records the counts too.
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(r1.path.join("manifest.json")).expect("manifest"))
            .expect("json");
    assert_eq!(m["build"]["skipped"], skipped);
    let fields = m["layout"]["fields"].as_array().expect("fields");
    let shape = |name: &str| {
        fields
            .iter()
            .find(|f| f["name"] == name)
            .map(|f| f["shape"].clone())
    };
    assert_eq!(shape("pixels"), Some(serde_json::json!([24, 32, 3])));
    assert_eq!(shape("grey"), Some(serde_json::json!([1, 16, 16])));

    // Other cuttings: 3 files of row groups of 4, 7 files of row groups of 1.
    for (files, group) in [(3, 4), (7, 1)] {
        let p = project(files, group);
        for threads in [1, 2] {
            let r = p.build(SKIP, threads).expect("build");
            assert_eq!(
                records(&r),
                recs,
                "{files} files, groups of {group}, {threads} threads"
            );
            assert_eq!(r.skipped, Some(skipped.clone()));
        }
    }
}

#[test]
fn path_columns_give_the_pixels_of_the_bytes_and_decoders_enter_the_hash() {
    let p = project(2, 8);
    let by_bytes = p.build(SKIP, 2).expect("bytes");
    let by_path = p
        .build(
            &SKIP
                .replace("column: img", "column: path")
                .replace("on_error: skip", "on_error: skip, base: images/"),
            1,
        )
        .expect("paths");
    assert_ne!(by_bytes.hash, by_path.hash);
    assert_eq!(records(&by_bytes), records(&by_path));
    let canonical: serde_json::Value = serde_json::from_slice(
        &std::fs::read(by_path.path.join("manifest.json")).expect("manifest"),
    )
    .expect("json");
    let step = &canonical["spec"]["fields"][1]["transforms"][0]["image"];
    assert_eq!(step["base"], "images/");
    let libs: Vec<&str> = step["libraries"]
        .as_array()
        .expect("libraries")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(libs, tessera_transform::image::IMAGE_LIBRARIES);
}

#[test]
fn an_exact_size_png_is_stored_as_is_in_either_layout() {
    let p = project(1, 100);
    // Row 1 is a PNG of 47 x 41 (lossless): stored at its own size, the
    // pixels are the picture's, in HWC and in CHW order.
    let (w, h) = (40 + 7, 30 + 11);
    let fields = format!(
        "  id: {{ dtype: i64, column: id }}\n  \
         hwc: {{ dtype: u8, column: img, transform: {{ image: {{ size: [{h}, {w}], on_error: skip }} }} }}\n  \
         chw: {{ dtype: u8, column: img, transform: {{ image: {{ size: [{h}, {w}], layout: CHW, on_error: skip }} }} }}\n"
    );
    let r = p.build(&fields, 2).expect("build");
    let ds = Dataset::open(&r.path).expect("open");
    let rec = ds.record(1).expect("record 1");
    assert_eq!(i64::from_le_bytes(rec[..8].try_into().expect("8")), 1);
    let off = |n: &str| ds.layout().field(n).expect(n).offset as usize;
    let pic = picture(w, h, 1);
    let n = (w * h * 3) as usize;
    assert_eq!(&rec[off("hwc")..off("hwc") + n], pic.as_raw().as_slice());
    let plane = (w * h) as usize;
    for (px, rgb) in pic.pixels().enumerate() {
        for c in 0..3 {
            assert_eq!(
                rec[off("chw") + c * plane + px],
                rgb.0[c],
                "pixel {px} channel {c}"
            );
        }
    }
}

fn error_of(p: &Project, fields: &str) -> String {
    p.build(fields, 2).expect_err("a bad image stops the build")
}

#[test]
fn bad_images_are_errors_that_name_the_row_and_the_file() {
    let p = project(1, 100);
    let field = |col: &str, extra: &str| {
        format!(
            "  pixels: {{ dtype: u8, column: {col}, transform: {{ image: {{ size: [8, 8]{extra} }} }} }}\n"
        )
    };
    // Bytes: the first bad row (row 6 counting from 1) is named.
    let e = error_of(&p, &field("img", ""));
    assert!(
        e.contains("row 6") && e.contains("not a JPEG, PNG or WebP"),
        "{e}"
    );
    // Paths: the file is named, and a truncated JPEG is an error.
    let only = |i: usize| {
        format!(
            "  pixels: {{ dtype: u8, expr: \"CASE WHEN id = {i} THEN path ELSE 'img000.bin' END\", transform: {{ image: {{ size: [8, 8], base: images }} }} }}\n"
        )
    };
    let e = error_of(&p, &only(TRUNCATED));
    assert!(
        e.contains("img011.bin") && e.contains("truncated") && e.contains("row 12"),
        "{e}"
    );
    let e = error_of(&p, &only(GIF));
    assert!(e.contains("img017.bin") && e.contains("a GIF"), "{e}");
    // A bomb is refused from its header, before any pixel is allocated.
    let e = error_of(&p, &only(BOMB));
    assert!(
        e.contains("100000x100000 = 10000000000 pixels") && e.contains("max_pixels"),
        "{e}"
    );
    // max_pixels is the limit: a 47 x 41 image is refused under 1000.
    let e = error_of(&p, &field("img", ", max_pixels: 1000"));
    assert!(
        e.contains("row 1") && e.contains("refused before decoding"),
        "{e}"
    );
    // A missing file, and a URL.
    let e = error_of(
        &p,
        "  pixels: { dtype: u8, expr: \"'nope.jpg'\", transform: { image: { size: [8, 8] } } }\n",
    );
    assert!(e.contains("nope.jpg") && e.contains("cannot read"), "{e}");
    let e = error_of(
        &p,
        "  pixels: { dtype: u8, expr: \"'https://example.com/a.jpg'\", transform: { image: { size: [8, 8] } } }\n",
    );
    assert!(e.contains("https:// URL") && e.contains("not URLs"), "{e}");
}

#[test]
fn head_writes_png_files_that_decode_to_the_stored_pixels() {
    let p = project(1, 100);
    let r = p.build(SKIP, 2).expect("build");
    let out = p.root.join("png");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["head", r.path.to_str().expect("utf-8"), "-n", "5", "--png"])
        .arg(&out)
        .output()
        .expect("tessera head");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let ds = Dataset::open(&r.path).expect("open");
    let off = |n: &str| ds.layout().field(n).expect(n).offset as usize;
    for i in 0..5u64 {
        let rec = ds.record(i).expect("record");
        let rgb = image::open(out.join(format!("pixels-{i:05}.png")))
            .expect("png")
            .into_rgb8();
        assert_eq!((rgb.width(), rgb.height()), (32, 24));
        assert_eq!(
            rgb.as_raw().as_slice(),
            &rec[off("pixels")..off("pixels") + 24 * 32 * 3]
        );
        // The grey field is stored CHW ([1, 16, 16]): one plane, the PNG's rows.
        let grey = image::open(out.join(format!("grey-{i:05}.png")))
            .expect("png")
            .into_luma8();
        assert_eq!(
            grey.as_raw().as_slice(),
            &rec[off("grey")..off("grey") + 256]
        );
    }
    // The contact sheet: 5 records in one row, 2 pixels apart.
    let sheet = image::open(out.join("pixels-sheet.png"))
        .expect("sheet")
        .into_rgb8();
    assert_eq!((sheet.width(), sheet.height()), (5 * 34 - 2, 24));
    let rec3 = ds.record(3).expect("record 3");
    let px = sheet.get_pixel(3 * 34 + 5, 7).0;
    let at = off("pixels") + (7 * 32 + 5) * 3;
    assert_eq!(px, [rec3[at], rec3[at + 1], rec3[at + 2]]);
    // A field that is not an image is refused by name.
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args([
            "head",
            r.path.to_str().expect("utf-8"),
            "--field",
            "id",
            "--png",
        ])
        .arg(&out)
        .output()
        .expect("tessera head");
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("no image field \"id\""));
}
