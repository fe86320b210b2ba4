//! JPEG through zune-jpeg directly: the decoder `image` uses, with the
//! options it sets (lenient mode, no size limit of the decoder's own, the
//! same output colour space), so the pixels are the same; but the headers
//! are read once (`image` reads them three times: for the decoder, for the
//! EXIF orientation, and again to decode) and the pixels land in a buffer
//! each thread keeps, instead of a fresh allocation whose pages fault in
//! for every image. A test checks the pixels equal `image`'s.

use super::decode::{from_samples, samples};
use ::image::metadata::Orientation;
use std::cell::RefCell;
use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

/// Decoded pixels kept by a thread for the next image up to this size; a
/// larger image gets a buffer of its own, freed after it.
const KEEP_BYTES: usize = 32 << 20;

thread_local! {
    static PIXELS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A JPEG's header, read: its size and the decoder that will decode it.
pub(super) struct Jpeg<'a> {
    decoder: JpegDecoder<ZCursor<&'a [u8]>>,
    /// Width and height.
    pub(super) size: (u32, u32),
}

fn options(out: ColorSpace) -> DecoderOptions {
    DecoderOptions::default()
        .set_strict_mode(false)
        .set_max_width(usize::MAX)
        .set_max_height(usize::MAX)
        .jpeg_set_out_colorspace(out)
}

/// The colour space `image` decodes a JPEG of `input` into: grey and RGB(A)
/// as they are, everything else (YCbCr, CMYK, YCCK) to RGB.
fn output_of(input: ColorSpace) -> ColorSpace {
    match input {
        ColorSpace::RGB | ColorSpace::RGBA | ColorSpace::Luma | ColorSpace::LumaA => input,
        _ => ColorSpace::RGB,
    }
}

impl<'a> Jpeg<'a> {
    /// Reads the header of `bytes`.
    pub(super) fn header(bytes: &'a [u8]) -> Result<Jpeg<'a>, String> {
        let bad = |e: zune_jpeg::errors::DecodeErrors| format!("cannot read the JPEG header: {e}");
        // Decoding into RGB, the common case, is chosen before the header
        // is read (the colour conversion is picked then); another output
        // takes a second decoder, as `image` sets it up.
        let mut decoder =
            JpegDecoder::new_with_options(ZCursor::new(bytes), options(ColorSpace::RGB));
        decoder.decode_headers().map_err(bad)?;
        let input = decoder
            .input_colorspace()
            .ok_or("cannot read the JPEG header: no colour space")?;
        let out = output_of(input);
        if out != ColorSpace::RGB {
            decoder = JpegDecoder::new_with_options(ZCursor::new(bytes), options(out));
            decoder.decode_headers().map_err(bad)?;
        }
        let (w, h) = decoder
            .dimensions()
            .ok_or("cannot read the JPEG header: no size")?;
        Ok(Jpeg {
            decoder,
            size: (w as u32, h as u32),
        })
    }

    /// Decodes the image, applies its EXIF orientation, and calls `f` with
    /// its 8-bit interleaved samples, their channel count (1 grey, 2
    /// grey+alpha, 3 RGB, 4 RGBA), width and height.
    pub(super) fn pixels<R>(
        mut self,
        f: impl FnOnce(&[u8], usize, u32, u32) -> Result<R, String>,
    ) -> Result<R, String> {
        let orientation = self
            .decoder
            .exif()
            .and_then(|e| Orientation::from_exif_chunk(e))
            .unwrap_or(Orientation::NoTransforms);
        let c = self
            .decoder
            .output_colorspace()
            .map_or(3, |s| s.num_components());
        let len = self
            .decoder
            .output_buffer_size()
            .ok_or("the JPEG's size overflows")?;
        let (w, h) = self.size;
        let decode = |buf: &mut [u8], decoder: &mut JpegDecoder<ZCursor<&[u8]>>| {
            decoder
                .decode_into(buf)
                .map_err(|e| format!("cannot decode the JPEG: {e}"))
        };
        if orientation != Orientation::NoTransforms || len > KEEP_BYTES {
            let mut buf = vec![0u8; len];
            decode(&mut buf, &mut self.decoder)?;
            if orientation == Orientation::NoTransforms {
                return f(&buf, c, w, h);
            }
            let mut img = from_samples(w, h, buf, c).ok_or_else(|| {
                format!("the JPEG decoded to the wrong number of bytes for {w}x{h}")
            })?;
            img.apply_orientation(orientation);
            let (w, h) = (img.width(), img.height());
            let (c, raw) = samples(img);
            return f(&raw, c, w, h);
        }
        PIXELS.with(|cell| {
            // A buffer borrowed already (not possible: `f` does not decode)
            // is not shared; a fresh one is used instead.
            let mut own = Vec::new();
            let mut kept = cell.try_borrow_mut();
            let buf = match kept.as_deref_mut() {
                Ok(v) => v,
                Err(_) => &mut own,
            };
            if buf.len() < len {
                buf.resize(len, 0);
            }
            let buf = &mut buf[..len];
            decode(buf, &mut self.decoder)?;
            f(buf, c, w, h)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::image::codecs::jpeg::JpegEncoder;
    use ::image::{DynamicImage, ExtendedColorType, ImageDecoder, ImageReader};
    use std::io::Cursor;

    /// A JPEG of `w x h` with `c` channels (1 or 3) of a smooth pattern.
    fn jpeg(w: u32, h: u32, c: usize, quality: u8) -> Vec<u8> {
        let px: Vec<u8> = (0..w * h)
            .flat_map(|i| {
                let (x, y) = (i % w, i / w);
                let rgb = [(x * 7 + y) as u8, (y * 5) as u8, ((x ^ y) * 3) as u8];
                rgb.into_iter().take(c)
            })
            .collect();
        let mut out = Vec::new();
        let color = if c == 1 {
            ExtendedColorType::L8
        } else {
            ExtendedColorType::Rgb8
        };
        JpegEncoder::new_with_quality(&mut out, quality)
            .encode(&px, w, h, color)
            .expect("encode");
        out
    }

    /// `bytes` with an EXIF segment whose orientation tag is `tag`, right
    /// after the start-of-image marker.
    fn with_orientation(bytes: &[u8], tag: u16) -> Vec<u8> {
        let mut tiff = b"II*\0\x08\0\0\0".to_vec();
        tiff.extend_from_slice(&1u16.to_le_bytes()); // one entry
        tiff.extend_from_slice(&0x0112u16.to_le_bytes()); // orientation
        tiff.extend_from_slice(&3u16.to_le_bytes()); // SHORT
        tiff.extend_from_slice(&1u32.to_le_bytes());
        tiff.extend_from_slice(&tag.to_le_bytes());
        tiff.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // padding, no next IFD
        let mut seg = b"Exif\0\0".to_vec();
        seg.extend_from_slice(&tiff);
        let mut out = bytes[..2].to_vec();
        out.extend_from_slice(&[0xFF, 0xE1]);
        out.extend_from_slice(&((seg.len() + 2) as u16).to_be_bytes());
        out.extend_from_slice(&seg);
        out.extend_from_slice(&bytes[2..]);
        out
    }

    /// What `image` makes of `bytes`: decoded, oriented, and its samples.
    fn by_image(bytes: &[u8]) -> (Vec<u8>, usize, u32, u32) {
        let mut d = ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .expect("format")
            .into_decoder()
            .expect("header");
        let o = d.orientation().expect("orientation");
        let mut img = DynamicImage::from_decoder(d).expect("decode");
        img.apply_orientation(o);
        let c = usize::from(img.color().channel_count());
        (img.as_bytes().to_vec(), c, img.width(), img.height())
    }

    fn by_jpeg(bytes: &[u8]) -> (Vec<u8>, usize, u32, u32) {
        Jpeg::header(bytes)
            .expect("header")
            .pixels(|raw, c, w, h| Ok((raw.to_vec(), c, w, h)))
            .expect("decode")
    }

    #[test]
    fn pixels_are_those_image_decodes() {
        for (w, h, c, q) in [
            (64, 48, 3, 90),
            (33, 17, 3, 50),
            (40, 30, 1, 85),
            (8, 8, 3, 100),
        ] {
            let b = jpeg(w, h, c, q);
            let (px, pc, pw, ph) = by_jpeg(&b);
            assert_eq!((pc, pw, ph), (c, w, h));
            assert_eq!((px, pc, pw, ph), by_image(&b), "{w}x{h}x{c} q{q}");
        }
    }

    #[test]
    fn exif_orientation_is_applied_as_image_applies_it() {
        let b = jpeg(40, 24, 3, 90);
        for tag in 1..=8u16 {
            let o = with_orientation(&b, tag);
            let ours = by_jpeg(&o);
            assert_eq!(ours, by_image(&o), "orientation {tag}");
            // 5 to 8 turn the image by a quarter: width and height swap.
            let size = if tag >= 5 { (24, 40) } else { (40, 24) };
            assert_eq!((ours.2, ours.3), size, "orientation {tag}");
        }
        // Orientation 1 is the image as stored.
        assert_eq!(by_jpeg(&with_orientation(&b, 1)), by_jpeg(&b));
        assert_ne!(by_jpeg(&with_orientation(&b, 3)), by_jpeg(&b));
    }

    #[test]
    fn a_kept_buffer_from_a_larger_image_gives_the_same_pixels() {
        let big = jpeg(96, 64, 3, 90);
        let small = jpeg(20, 10, 3, 90);
        let first = by_jpeg(&small);
        by_jpeg(&big);
        assert_eq!(by_jpeg(&small), first);
        assert_eq!(first.0.len(), 20 * 10 * 3);
    }

    #[test]
    fn a_broken_header_is_an_error() {
        let b = jpeg(16, 16, 3, 90);
        let e = Jpeg::header(&b[..20]).err().expect("an error");
        assert!(e.contains("JPEG header"), "{e}");
    }
}
