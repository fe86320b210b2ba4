//! One encoded image -> the stored pixels of an [`ImageStep`]: format from
//! the first bytes, size checked against `max_pixels` before any pixel is
//! allocated, decoded, EXIF orientation applied, converted to 8 bits and the
//! stored channels, then fitted and resampled (see [`super::resize`]).
//!
//! Conversion rules (docs/SPEC.md, "Image fields"):
//! - 16-bit samples become 8-bit as round(v / 257);
//! - grey to RGB by replication; RGB to grey as Pillow's `convert("L")`,
//!   L = (19595 R + 38470 G + 7471 B + 32768) >> 16 (ITU-R 601-2 luma);
//! - alpha is dropped for 1 and 3 channels (as Pillow's `convert`); an
//!   image without alpha gets 255 for 4 channels;
//! - CMYK and YCCK JPEGs are converted to RGB by the JPEG decoder.

use super::jpeg::Jpeg;
use super::{ImageStep, Layout};
use ::image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits};
use std::io::Cursor;

/// The formats read, from their first bytes.
fn sniff(bytes: &[u8]) -> Result<ImageFormat, String> {
    match bytes {
        [0xFF, 0xD8, 0xFF, ..] => Ok(ImageFormat::Jpeg),
        [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, ..] => Ok(ImageFormat::Png),
        [
            b'R',
            b'I',
            b'F',
            b'F',
            _,
            _,
            _,
            _,
            b'W',
            b'E',
            b'B',
            b'P',
            ..,
        ] => Ok(ImageFormat::WebP),
        [] => Err("the value is empty (0 bytes), not an image".into()),
        _ => {
            let head: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
            let named = match bytes {
                [b'G', b'I', b'F', ..] => " (a GIF)",
                [b'B', b'M', ..] => " (a BMP)",
                [b'I', b'I', 42, 0, ..] | [b'M', b'M', 0, 42, ..] => " (a TIFF)",
                _ => "",
            };
            Err(format!(
                "not a JPEG, PNG or WebP image{named}: it begins with bytes {}",
                head.join(" ")
            ))
        }
    }
}

/// The stored pixels of `bytes` for `step`, written into `out` (exactly
/// [`ImageStep::value_bytes`] long). The error says what is wrong with the
/// image; the caller names the row and the file.
pub fn decode_into(step: &ImageStep, bytes: &[u8], out: &mut [u8]) -> Result<(), String> {
    debug_assert_eq!(out.len(), step.value_bytes());
    let format = sniff(bytes)?;
    let c = usize::from(step.channels);
    if format == ImageFormat::Jpeg {
        let jpeg = Jpeg::header(bytes)?;
        check_size(step, "JPEG", jpeg.size)?;
        check_jpeg_complete(bytes)?;
        return jpeg.pixels(|raw, from, w, h| {
            if from == c {
                place(step, raw, w, h, out)
            } else {
                place(step, &convert(raw, from, c), w, h, out)
            }
        });
    }
    let what = format!("{format:?}").to_uppercase();
    let reader = ImageReader::with_format(Cursor::new(bytes), format);
    let mut decoder = reader
        .into_decoder()
        .map_err(|e| format!("cannot read the {what} header: {e}"))?;
    check_size(step, &what, decoder.dimensions())?;
    // A second guard: no decoder allocates more than the largest declared
    // image needs (16-bit RGBA), whatever its header said.
    let mut limits = Limits::default();
    limits.max_alloc = Some(step.max_pixels.saturating_mul(8).saturating_add(1 << 26));
    decoder
        .set_limits(limits)
        .map_err(|e| format!("the {what}: {e}"))?;
    let orientation = decoder
        .orientation()
        .unwrap_or(::image::metadata::Orientation::NoTransforms);
    let mut img = DynamicImage::from_decoder(decoder)
        .map_err(|e| format!("cannot decode the {what}: {e}"))?;
    img.apply_orientation(orientation);
    let (w, h) = (img.width(), img.height());
    place(step, &to_channels(img, c), w, h, out)
}

/// Refuses an image whose declared size is empty or more than the step's
/// `max_pixels`, before anything is decoded.
fn check_size(step: &ImageStep, what: &str, (w, h): (u32, u32)) -> Result<(), String> {
    let pixels = u64::from(w) * u64::from(h);
    if pixels > step.max_pixels {
        return Err(format!(
            "the {what} declares {w}x{h} = {pixels} pixels, more than max_pixels ({}); refused \
             before decoding (raise max_pixels if the image is genuine)",
            step.max_pixels
        ));
    }
    if pixels == 0 {
        return Err(format!("the {what} declares an empty size {w}x{h}"));
    }
    Ok(())
}

/// The `w x h` image `src` (interleaved, the step's channels) fitted into
/// `out` in the step's layout.
fn place(step: &ImageStep, src: &[u8], w: u32, h: u32, out: &mut [u8]) -> Result<(), String> {
    let c = usize::from(step.channels);
    match step.layout {
        Layout::Hwc => super::resize::fit(step, src, w, h, out),
        Layout::Chw => {
            let mut hwc = vec![0u8; out.len()];
            super::resize::fit(step, src, w, h, &mut hwc)?;
            let plane = out.len() / c;
            for (p, px) in hwc.chunks_exact(c).enumerate() {
                for (k, &v) in px.iter().enumerate() {
                    out[k * plane + p] = v;
                }
            }
            Ok(())
        }
    }
}

/// A JPEG must hold its end-of-image marker (FF D9) after its last
/// start-of-scan: the JPEG decoder fills a truncated scan with grey rather
/// than failing, and a truncated file is an error here.
fn check_jpeg_complete(bytes: &[u8]) -> Result<(), String> {
    let marker = |m: u8| move |p: &[u8]| p == [0xFF, m];
    // The last end-of-image marker is found from the end (it is the last
    // two bytes of a whole file); then no start-of-scan may follow it and
    // one must come before it (searched from the start: the first scan
    // follows the headers), which is "the last scan ends with the image".
    let eoi = bytes.windows(2).rposition(marker(0xD9));
    let (head, tail) = bytes.split_at(eoi.unwrap_or(bytes.len()));
    let scan_after = tail.windows(2).any(marker(0xDA));
    if !scan_after && !head.windows(2).any(marker(0xDA)) {
        return Err("the JPEG has no image data (no start-of-scan marker)".into());
    }
    if eoi.is_none() || scan_after {
        return Err(format!(
            "the JPEG is truncated: its {} bytes end before the end-of-image marker",
            bytes.len()
        ));
    }
    Ok(())
}

/// The image as 8-bit samples of `c` channels, interleaved.
fn to_channels(img: DynamicImage, c: usize) -> Vec<u8> {
    match samples(img) {
        (from, raw) if from == c => raw,
        (from, raw) => convert(&raw, from, c),
    }
}

/// The image's 8-bit interleaved samples and their channel count (1 grey,
/// 2 grey+alpha, 3 RGB, 4 RGBA): 16-bit samples as round(v / 257), keeping
/// their channels; any other type as RGBA.
pub(super) fn samples(img: DynamicImage) -> (usize, Vec<u8>) {
    let img = match img {
        DynamicImage::ImageLuma16(b) => gray16(b.width(), b.height(), b.into_raw(), 1),
        DynamicImage::ImageLumaA16(b) => gray16(b.width(), b.height(), b.into_raw(), 2),
        DynamicImage::ImageRgb16(b) => gray16(b.width(), b.height(), b.into_raw(), 3),
        DynamicImage::ImageRgba16(b) => gray16(b.width(), b.height(), b.into_raw(), 4),
        other => other,
    };
    match img {
        DynamicImage::ImageLuma8(b) => (1, b.into_raw()),
        DynamicImage::ImageLumaA8(b) => (2, b.into_raw()),
        DynamicImage::ImageRgb8(b) => (3, b.into_raw()),
        DynamicImage::ImageRgba8(b) => (4, b.into_raw()),
        other => (4, other.to_rgba8().into_raw()),
    }
}

/// 16-bit samples to 8-bit as round(v / 257), as an image of `c` channels.
fn gray16(w: u32, h: u32, raw: Vec<u16>, c: usize) -> DynamicImage {
    let bytes: Vec<u8> = raw
        .iter()
        .map(|&v| ((u32::from(v) * 255 + 32767) / 65535) as u8)
        .collect();
    from_samples(w, h, bytes, c).unwrap_or_else(|| DynamicImage::new_rgba8(w, h))
}

/// `w x h` interleaved 8-bit samples of `c` channels as an image; `None`
/// when their number does not match.
pub(super) fn from_samples(w: u32, h: u32, bytes: Vec<u8>, c: usize) -> Option<DynamicImage> {
    match c {
        1 => ::image::GrayImage::from_raw(w, h, bytes).map(DynamicImage::from),
        2 => ::image::GrayAlphaImage::from_raw(w, h, bytes).map(DynamicImage::from),
        3 => ::image::RgbImage::from_raw(w, h, bytes).map(DynamicImage::from),
        _ => ::image::RgbaImage::from_raw(w, h, bytes).map(DynamicImage::from),
    }
}

/// Pillow's `convert("L")` luma of an RGB pixel (ITU-R 601-2).
#[inline]
pub fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((19595 * u32::from(r) + 38470 * u32::from(g) + 7471 * u32::from(b) + 0x8000) >> 16) as u8
}

/// Interleaved samples of `from` channels (1 grey, 2 grey+alpha, 3 RGB,
/// 4 RGBA) as `to` channels (1, 3, 4), by the rules of the module.
pub fn convert(raw: &[u8], from: usize, to: usize) -> Vec<u8> {
    if from == to {
        return raw.to_vec();
    }
    let n = raw.len() / from;
    let mut out = Vec::with_capacity(n * to);
    for px in raw.chunks_exact(from) {
        let (g, rgb, a) = match from {
            1 => (px[0], [px[0]; 3], 255),
            2 => (px[0], [px[0]; 3], px[1]),
            3 => (luma(px[0], px[1], px[2]), [px[0], px[1], px[2]], 255),
            _ => (luma(px[0], px[1], px[2]), [px[0], px[1], px[2]], px[3]),
        };
        match to {
            1 => out.push(g),
            3 => out.extend_from_slice(&rgb),
            _ => {
                out.extend_from_slice(&rgb);
                out.push(a);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::{Filter, Fit};

    fn png(w: u32, h: u32, f: impl Fn(u32, u32) -> [u8; 3]) -> Vec<u8> {
        let img = ::image::RgbImage::from_fn(w, h, |x, y| ::image::Rgb(f(x, y)));
        let mut out = Vec::new();
        img.write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
            .expect("encode");
        out
    }

    fn step(h: u32, w: u32, c: u8) -> ImageStep {
        ImageStep {
            height: h,
            width: w,
            channels: c,
            filter: Filter::Bilinear,
            ..ImageStep::default()
        }
    }

    #[test]
    fn same_size_is_a_copy_in_either_layout() {
        let bytes = png(3, 2, |x, y| [x as u8, y as u8, 7]);
        let mut out = vec![0; 18];
        decode_into(&step(2, 3, 3), &bytes, &mut out).expect("decode");
        assert_eq!(out, [0, 0, 7, 1, 0, 7, 2, 0, 7, 0, 1, 7, 1, 1, 7, 2, 1, 7]);
        let mut chw = vec![0; 18];
        let s = ImageStep {
            layout: Layout::Chw,
            ..step(2, 3, 3)
        };
        decode_into(&s, &bytes, &mut chw).expect("decode");
        assert_eq!(chw, [0, 1, 2, 0, 1, 2, 0, 0, 0, 1, 1, 1, 7, 7, 7, 7, 7, 7]);
    }

    #[test]
    fn a_jpeg_must_end_its_last_scan_with_the_image() {
        let mut whole = Vec::new();
        ::image::codecs::jpeg::JpegEncoder::new_with_quality(&mut whole, 90)
            .encode(&[7u8; 16 * 8 * 3], 16, 8, ::image::ExtendedColorType::Rgb8)
            .expect("encode");
        assert_eq!(check_jpeg_complete(&whole), Ok(()));
        let cut = &whole[..whole.len() - 3];
        assert!(check_jpeg_complete(cut).unwrap_err().contains("truncated"));
        // An end-of-image marker before a scan (an embedded thumbnail's)
        // does not make a cut file whole.
        let mut thumb_then_cut = whole[..whole.len() - 2].to_vec();
        thumb_then_cut.splice(2..2, [0xFF, 0xD9]);
        let sos = whole
            .windows(2)
            .position(|p| p == [0xFF, 0xDA])
            .expect("a scan");
        assert!(sos > 2);
        assert!(
            check_jpeg_complete(&thumb_then_cut)
                .unwrap_err()
                .contains("truncated")
        );
        let sos_free: Vec<u8> = whole[..sos].iter().chain(&[0xFF, 0xD9]).copied().collect();
        assert!(
            check_jpeg_complete(&sos_free)
                .unwrap_err()
                .contains("no image data")
        );
        let mut out = vec![0; 12];
        let e = decode_into(&step(2, 2, 3), cut, &mut out).unwrap_err();
        assert!(e.contains("truncated"), "{e}");
    }

    #[test]
    fn grey_is_pillow_luma() {
        assert_eq!(luma(255, 255, 255), 255);
        assert_eq!(luma(255, 0, 0), 76);
        assert_eq!(luma(0, 255, 0), 150);
        assert_eq!(luma(0, 0, 255), 29);
        assert_eq!(convert(&[10, 20, 30, 40], 4, 3), [10, 20, 30]);
        assert_eq!(convert(&[9, 200], 2, 4), [9, 9, 9, 200]);
    }

    #[test]
    fn bad_images_say_what_is_wrong() {
        let mut out = vec![0; 12];
        let s = step(2, 2, 3);
        let e = decode_into(&s, b"GIF89a....", &mut out).unwrap_err();
        assert!(e.contains("a GIF"), "{e}");
        let e = decode_into(&s, b"", &mut out).unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let good = png(40, 30, |x, y| [x as u8, y as u8, 0]);
        let e = decode_into(&s, &good[..good.len() / 2], &mut out).unwrap_err();
        assert!(e.contains("PNG"), "{e}");
        let small = ImageStep {
            max_pixels: 1199,
            ..s.clone()
        };
        let e = decode_into(&small, &good, &mut out).unwrap_err();
        assert!(e.contains("40x30 = 1200 pixels"), "{e}");
        decode_into(&ImageStep { fit: Fit::Pad, ..s }, &good, &mut out).expect("decode");
    }
}
