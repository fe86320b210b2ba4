//! `tessera head ART --png DIR`: the first records of an artifact's image
//! fields written as PNG files, one per record and field, and a contact
//! sheet per field (the records side by side in a grid), so a user can look
//! at what a build stored instead of reading numbers.

use image::{ExtendedColorType, ImageFormat};
use std::path::{Path, PathBuf};
use tessera_reader::Dataset;
use tessera_transform::field::{Field, Step};
use tessera_transform::image::{ImageStep, Layout};

/// One image field of an artifact: its name, offset and step.
struct ImageField {
    name: String,
    offset: usize,
    step: ImageStep,
}

/// The image fields of the artifact (from the manifest's canonical spec),
/// all of them or the one named `only`.
fn image_fields(ds: &Dataset, only: Option<&str>) -> Result<Vec<ImageField>, String> {
    let spec = &ds.manifest().spec;
    let mut out = Vec::new();
    let fields = spec
        .get("fields")
        .and_then(|v| v.as_array())
        .cloned()
        .unwrap_or_default();
    for v in &fields {
        let f = Field::from_canonical(v)?;
        let Some(Step::Image(step)) = f.transforms.first().cloned() else {
            continue;
        };
        if only.is_some_and(|o| o != f.name) {
            continue;
        }
        let fl = ds
            .layout()
            .field(&f.name)
            .ok_or_else(|| format!("field {} is not in the record layout", f.name))?;
        out.push(ImageField {
            name: f.name.clone(),
            offset: fl.offset as usize,
            step,
        });
    }
    match (only, out.is_empty()) {
        (Some(name), true) => Err(format!(
            "the artifact has no image field {name:?} (an `image` transform step)"
        )),
        (None, true) => Err("the artifact has no image field (an `image` transform step)".into()),
        _ => Ok(out),
    }
}

/// The pixels of one stored value as interleaved rows (HWC).
fn interleaved(step: &ImageStep, value: &[u8]) -> Vec<u8> {
    let c = usize::from(step.channels);
    match step.layout {
        Layout::Hwc => value.to_vec(),
        Layout::Chw => {
            let plane = value.len() / c;
            let mut out = vec![0u8; value.len()];
            for p in 0..plane {
                for k in 0..c {
                    out[p * c + k] = value[k * plane + p];
                }
            }
            out
        }
    }
}

fn color(c: u8) -> ExtendedColorType {
    match c {
        1 => ExtendedColorType::L8,
        3 => ExtendedColorType::Rgb8,
        _ => ExtendedColorType::Rgba8,
    }
}

fn save(path: &Path, px: &[u8], w: u32, h: u32, c: u8) -> Result<(), String> {
    image::save_buffer_with_format(path, px, w, h, color(c), ImageFormat::Png)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes records `0..n` of each image field (or only `field`) into `dir`
/// as `FIELD-RECORD.png`, and `FIELD-sheet.png`, a grid of them (up to 8
/// a row, 2 pixels apart, on black). Returns the files written.
pub fn write_pngs(
    ds: &Dataset,
    field: Option<&str>,
    n: u64,
    dir: &Path,
) -> Result<Vec<PathBuf>, String> {
    let fields = image_fields(ds, field)?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let n = n.min(ds.len());
    let mut written = Vec::new();
    for f in &fields {
        let (w, h, c) = (f.step.width, f.step.height, f.step.channels);
        let len = f.step.value_bytes();
        let cols = n.clamp(1, 8) as u32;
        let rows = (n as u32).div_ceil(cols).max(1);
        let gap = 2u32;
        let (sw, sh) = (cols * (w + gap) - gap, rows * (h + gap) - gap);
        let mut sheet = vec![0u8; sw as usize * sh as usize * usize::from(c)];
        for i in 0..n {
            let rec = ds
                .record(i)
                .ok_or_else(|| format!("record {i} cannot be read"))?;
            let px = interleaved(&f.step, &rec[f.offset..f.offset + len]);
            let path = dir.join(format!("{}-{i:05}.png", f.name));
            save(&path, &px, w, h, c)?;
            written.push(path);
            let (x0, y0) = ((i as u32 % cols) * (w + gap), (i as u32 / cols) * (h + gap));
            let row = w as usize * usize::from(c);
            for y in 0..h as usize {
                let at = ((y0 as usize + y) * sw as usize + x0 as usize) * usize::from(c);
                sheet[at..at + row].copy_from_slice(&px[y * row..(y + 1) * row]);
            }
        }
        let path = dir.join(format!("{}-sheet.png", f.name));
        save(&path, &sheet, sw, sh, c)?;
        written.push(path);
    }
    Ok(written)
}
