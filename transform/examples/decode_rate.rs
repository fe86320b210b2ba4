//! Images per second of one core through the image step (decode, orient,
//! convert, fit to 224x224, bilinear), over the JPEG/PNG/WebP files of a
//! folder, each decoded `--rounds` times; benches/images.py compares the
//! build with Pillow, this isolates the decode for profiling.
//!
//! ```text
//! cargo run --release -p tessera-shards-transform --example decode_rate -- DIR [--rounds 20]
//! ```

use std::time::Instant;
use tessera_transform::image::decode::decode_into;
use tessera_transform::image::{Filter, Fit, ImageStep};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: decode_rate DIR [--rounds N]");
        std::process::exit(2);
    };
    let rounds: usize = match (args.next().as_deref(), args.next()) {
        (Some("--rounds"), Some(n)) => n.parse().unwrap_or(20),
        _ => 20,
    };
    let mut files: Vec<Vec<u8>> = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    names.sort();
    for p in names {
        if let Ok(b) = std::fs::read(&p) {
            files.push(b);
        }
    }
    let step = ImageStep {
        height: 224,
        width: 224,
        channels: 3,
        fit: Fit::CenterCrop,
        filter: Filter::Bilinear,
        ..Default::default()
    };
    let mut out = vec![0u8; step.value_bytes()];
    let t = Instant::now();
    let mut n = 0usize;
    for _ in 0..rounds {
        for f in &files {
            if let Err(e) = decode_into(&step, f, &mut out) {
                eprintln!("{e}");
                std::process::exit(1);
            }
            n += 1;
        }
    }
    let s = t.elapsed().as_secs_f64();
    println!("{n} images in {s:.3} s: {:.0} images/s", n as f64 / s);
}
