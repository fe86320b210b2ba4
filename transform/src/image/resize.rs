//! Fitting decoded pixels into the stored size with `fast_image_resize`
//! (SIMD convolution; its filters follow Pillow's, with 8-bit fixed-point
//! arithmetic of its own, so results may differ from Pillow's by a few
//! levels: docs/SPEC.md states the tolerance the tests hold).
//!
//! The box each fit resizes is computed as Pillow's `ImageOps` computes it,
//! so the same image lands on the same pixels: `resize` stretches the whole
//! image, `shorter_side_then_center_crop` resizes the centred box of the
//! stored aspect ratio (`ImageOps.fit`), `pad` resizes the whole image to
//! fit inside and centres it on zeros (`ImageOps.pad`).

use super::{Filter, Fit, ImageStep};
use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};

fn pixel_type(c: usize) -> PixelType {
    match c {
        1 => PixelType::U8,
        2 => PixelType::U8x2,
        3 => PixelType::U8x3,
        _ => PixelType::U8x4,
    }
}

fn algorithm(f: Filter) -> ResizeAlg {
    match f {
        Filter::Nearest => ResizeAlg::Nearest,
        Filter::Box => ResizeAlg::Convolution(FilterType::Box),
        Filter::Bilinear => ResizeAlg::Convolution(FilterType::Bilinear),
        Filter::Hamming => ResizeAlg::Convolution(FilterType::Hamming),
        Filter::Bicubic => ResizeAlg::Convolution(FilterType::CatmullRom),
        Filter::Lanczos => ResizeAlg::Convolution(FilterType::Lanczos3),
    }
}

/// Python's `round` (half to even), as Pillow's `ImageOps.pad` rounds.
fn round_even(x: f64) -> u32 {
    x.round_ties_even().max(0.0) as u32
}

/// Resizes the `w x h` image `src` (interleaved, `step.channels` channels)
/// into `out` (`step.height x step.width`, interleaved) by `step.fit`.
pub fn fit(step: &ImageStep, src: &[u8], w: u32, h: u32, out: &mut [u8]) -> Result<(), String> {
    let c = usize::from(step.channels);
    let (tw, th) = (step.width, step.height);
    match step.fit {
        Fit::Resize => resize(step, src, (w, h), None, out, (tw, th)),
        Fit::CenterCrop => {
            let (fw, fh) = (f64::from(w), f64::from(h));
            let (live, target) = (fw / fh, f64::from(tw) / f64::from(th));
            let (cw, ch) = if live == target {
                (fw, fh)
            } else if live >= target {
                (target * fh, fh)
            } else {
                (fw, fw / target)
            };
            let crop = ((fw - cw) * 0.5, (fh - ch) * 0.5, cw, ch);
            resize(step, src, (w, h), Some(crop), out, (tw, th))
        }
        Fit::Pad => {
            let (fw, fh) = (f64::from(w), f64::from(h));
            let (im, dest) = (fw / fh, f64::from(tw) / f64::from(th));
            if im == dest {
                return resize(step, src, (w, h), None, out, (tw, th));
            }
            let (nw, nh, x, y) = if im > dest {
                let nh = round_even(fh / fw * f64::from(tw)).clamp(1, th);
                (tw, nh, 0, round_even(f64::from(th - nh) * 0.5))
            } else {
                let nw = round_even(fw / fh * f64::from(th)).clamp(1, tw);
                (nw, th, round_even(f64::from(tw - nw) * 0.5), 0)
            };
            let mut tmp = vec![0u8; nw as usize * nh as usize * c];
            resize(step, src, (w, h), None, &mut tmp, (nw, nh))?;
            out.fill(0);
            let row = nw as usize * c;
            for (r, line) in tmp.chunks_exact(row).enumerate() {
                let at = ((y as usize + r) * tw as usize + x as usize) * c;
                out[at..at + row].copy_from_slice(line);
            }
            Ok(())
        }
    }
}

/// Resizes `src` (or its box `crop`: left, top, width, height) to `to`.
fn resize(
    step: &ImageStep,
    src: &[u8],
    from: (u32, u32),
    crop: Option<(f64, f64, f64, f64)>,
    out: &mut [u8],
    to: (u32, u32),
) -> Result<(), String> {
    let c = usize::from(step.channels);
    if from == to && crop.is_none_or(|b| b == (0.0, 0.0, f64::from(to.0), f64::from(to.1))) {
        out.copy_from_slice(src);
        return Ok(());
    }
    let pt = pixel_type(c);
    let fail = |e: &dyn std::fmt::Display| format!("cannot resize the image: {e}");
    let src = ImageRef::new(from.0, from.1, src, pt).map_err(|e| fail(&e))?;
    let mut dst = Image::from_slice_u8(to.0, to.1, out, pt).map_err(|e| fail(&e))?;
    // RGBA is resampled premultiplied by alpha (as Pillow resizes RGBA,
    // through RGBa), so fully transparent pixels lend no colour.
    let mut opts = ResizeOptions::new()
        .resize_alg(algorithm(step.filter))
        .use_alpha(c == 4);
    if let Some((l, t, w, h)) = crop {
        opts = opts.crop(l, t, w, h);
    }
    Resizer::new()
        .resize(&src, &mut dst, &opts)
        .map_err(|e| fail(&e))
}
