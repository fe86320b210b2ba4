//! Image fields: encoded images (JPEG, PNG, WebP bytes, or paths to such
//! files) decoded once, at build time, into fixed-shape `u8` pixels.
//!
//! An `image` step says the stored size, channels and layout, how the image
//! is fitted into that size, the resampling filter, what a bad image does,
//! and the largest image it decodes. Decoding is not bit-exact across
//! decoder versions, so the decoders' names and versions
//! ([`IMAGE_LIBRARIES`]) are in the step's canonical JSON and enter the
//! artifact hash. The pixels are made by [`decode::Decoder`], the one
//! implementation the compiler and the serving path share.

pub mod decode;
mod jpeg;
pub mod resize;
pub mod rows;

use serde_json::{Value, json};
use std::path::PathBuf;

/// The decoders and the resizer, with their exact versions (pinned in
/// Cargo.toml; a test checks Cargo.lock agrees). Part of an image step's
/// meaning: another version may give other pixels.
pub const IMAGE_LIBRARIES: &[&str] = &[
    "image 0.25.10",
    "zune-jpeg 0.5.15",
    "png 0.18.1",
    "image-webp 0.2.4",
    "fast_image_resize 6.1.0",
];

/// The largest image decoded by default, in pixels (width x height):
/// 100 megapixels. A larger declared size is refused before any pixel
/// buffer is allocated.
pub const DEFAULT_MAX_PIXELS: u64 = 100_000_000;

/// How pixels are ordered in the stored value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `[height, width, channels]` (interleaved, what the decoders give).
    Hwc,
    /// `[channels, height, width]` (planar, what PyTorch models take).
    Chw,
}

/// How an image of another aspect ratio is fitted into the stored size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// Stretched to the size (the aspect ratio changes).
    Resize,
    /// The largest centred box of the size's aspect ratio is resized to the
    /// size (Pillow's `ImageOps.fit`; a shorter-side resize then a centre
    /// crop, computed as one resize of a fractional box).
    CenterCrop,
    /// Resized to fit inside the size, keeping the aspect ratio, and centred
    /// on zeros (Pillow's `ImageOps.pad` with colour 0).
    Pad,
}

/// The resampling filter (Pillow's names; convolution filters computed
/// like Pillow's, see docs/SPEC.md for the tolerance).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    /// Nearest pixel.
    Nearest,
    /// Box (area average).
    Box,
    /// Triangle (bilinear).
    Bilinear,
    /// Hamming window.
    Hamming,
    /// Cubic with a = -0.5 (Catmull-Rom, Pillow's BICUBIC).
    Bicubic,
    /// Lanczos with 3 lobes (Pillow's LANCZOS).
    Lanczos,
}

/// What a corrupt, truncated, unsupported or too large image does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnError {
    /// The build stops with an error naming the row (and the file).
    #[default]
    Error,
    /// The row is left out of the artifact and counted in the build report
    /// and the manifest (`build.skipped`).
    Skip,
}

/// What an `image` step says (spec: `transform: { image: { ... } }`).
#[derive(Clone, Debug)]
pub struct ImageStep {
    /// Stored height in pixels.
    pub height: u32,
    /// Stored width in pixels.
    pub width: u32,
    /// 1 (grey), 3 (RGB) or 4 (RGBA).
    pub channels: u8,
    /// Pixel order of the stored value.
    pub layout: Layout,
    /// How the aspect ratio is handled.
    pub fit: Fit,
    /// Resampling filter.
    pub filter: Filter,
    /// What a bad image does.
    pub on_error: OnError,
    /// For a text column: the folder the paths are relative to, as written
    /// (relative to the spec's folder).
    pub base: Option<String>,
    /// The largest image decoded, in pixels.
    pub max_pixels: u64,
    /// The decoders the pixels come from ([`IMAGE_LIBRARIES`] when built).
    pub libraries: Vec<String>,
    /// `base` resolved (not part of the meaning): where paths are read from.
    pub base_dir: Option<PathBuf>,
}

impl Default for ImageStep {
    fn default() -> Self {
        ImageStep {
            height: 0,
            width: 0,
            channels: 3,
            layout: Layout::Hwc,
            fit: Fit::Resize,
            filter: Filter::Bilinear,
            on_error: OnError::Error,
            base: None,
            max_pixels: DEFAULT_MAX_PIXELS,
            libraries: IMAGE_LIBRARIES.iter().map(|s| s.to_string()).collect(),
            base_dir: None,
        }
    }
}

impl PartialEq for ImageStep {
    /// Equal when they mean the same (the resolved folder is not compared).
    fn eq(&self, o: &Self) -> bool {
        self.canonical_json() == o.canonical_json()
    }
}

impl ImageStep {
    /// The stored shape: `[H, W, C]` or `[C, H, W]`.
    pub fn shape(&self) -> Vec<u64> {
        let (h, w, c) = (
            u64::from(self.height),
            u64::from(self.width),
            u64::from(self.channels),
        );
        match self.layout {
            Layout::Hwc => vec![h, w, c],
            Layout::Chw => vec![c, h, w],
        }
    }

    /// Bytes of one stored value.
    pub fn value_bytes(&self) -> usize {
        self.height as usize * self.width as usize * usize::from(self.channels)
    }

    /// The arguments of the step's canonical JSON.
    pub fn canonical_json(&self) -> Value {
        json!({
            "base": self.base,
            "channels": self.channels,
            "filter": self.filter.name(),
            "fit": self.fit.name(),
            "layout": self.layout.name(),
            "libraries": self.libraries,
            "max_pixels": self.max_pixels,
            "on_error": self.on_error.name(),
            "size": [self.height, self.width],
        })
    }

    /// Reads the step back from its canonical arguments.
    pub fn from_canonical(args: &Value) -> Result<ImageStep, String> {
        let size = args
            .get("size")
            .and_then(Value::as_array)
            .and_then(|a| match a.as_slice() {
                [h, w] => Some((h.as_u64()?, w.as_u64()?)),
                _ => None,
            })
            .ok_or("`size` is not [height, width]")?;
        let (height, width) = (
            u32::try_from(size.0).map_err(|_| "height is too large")?,
            u32::try_from(size.1).map_err(|_| "width is too large")?,
        );
        let text = |key: &str| -> Result<&str, String> {
            args.get(key)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("lacks the string `{key}`"))
        };
        let channels = args
            .get("channels")
            .and_then(Value::as_u64)
            .and_then(|c| u8::try_from(c).ok())
            .filter(|c| matches!(c, 1 | 3 | 4))
            .ok_or("`channels` is not 1, 3 or 4")?;
        let libraries = args
            .get("libraries")
            .and_then(Value::as_array)
            .ok_or("lacks `libraries`")?
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or("`libraries` holds a non-string")?;
        Ok(ImageStep {
            height,
            width,
            channels,
            layout: Layout::parse(text("layout")?)?,
            fit: Fit::parse(text("fit")?)?,
            filter: Filter::parse(text("filter")?)?,
            on_error: OnError::parse(text("on_error")?)?,
            base: args.get("base").and_then(Value::as_str).map(str::to_string),
            max_pixels: args
                .get("max_pixels")
                .and_then(Value::as_u64)
                .ok_or("lacks `max_pixels`")?,
            libraries,
            base_dir: None,
        })
    }

    /// `Err` naming both lists when the step was built with other decoders
    /// than this program has.
    pub fn check_libraries(&self) -> Result<(), String> {
        if self
            .libraries
            .iter()
            .map(String::as_str)
            .eq(IMAGE_LIBRARIES.iter().copied())
        {
            Ok(())
        } else {
            Err(format!(
                "the artifact's images were decoded with {}, this program has {}; the pixels \
                 could differ, so rebuild the artifact",
                self.libraries.join(", "),
                IMAGE_LIBRARIES.join(", ")
            ))
        }
    }
}

macro_rules! names {
    ($t:ty, $what:literal, $($v:path => $n:literal),+ $(,)?) => {
        impl $t {
            /// Every name, in the spec's spelling.
            pub const NAMES: &'static [&'static str] = &[$($n),+];

            /// The name as the spec writes it.
            pub fn name(self) -> &'static str {
                match self { $($v => $n),+ }
            }

            /// Reads a name; the error lists the names.
            pub fn parse(s: &str) -> Result<Self, String> {
                match s {
                    $($n => Ok($v),)+
                    other => Err(format!(
                        "unknown {} {other:?} (expected one of: {})",
                        $what,
                        Self::NAMES.join(", ")
                    )),
                }
            }
        }
    };
}

names!(Layout, "layout", Layout::Hwc => "HWC", Layout::Chw => "CHW");
names!(Fit, "fit",
    Fit::Resize => "resize",
    Fit::CenterCrop => "shorter_side_then_center_crop",
    Fit::Pad => "pad",
);
names!(Filter, "filter",
    Filter::Nearest => "nearest",
    Filter::Box => "box",
    Filter::Bilinear => "bilinear",
    Filter::Hamming => "hamming",
    Filter::Bicubic => "bicubic",
    Filter::Lanczos => "lanczos",
);
names!(OnError, "on_error", OnError::Error => "error", OnError::Skip => "skip");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_file_has_the_recorded_versions() {
        for lib in IMAGE_LIBRARIES {
            crate::test_support::assert_locked(lib);
        }
    }

    #[test]
    fn canonical_json_round_trips() {
        let s = ImageStep {
            height: 32,
            width: 48,
            channels: 1,
            layout: Layout::Chw,
            fit: Fit::Pad,
            filter: Filter::Lanczos,
            on_error: OnError::Skip,
            base: Some("photos/".into()),
            max_pixels: 1000,
            ..ImageStep::default()
        };
        let back = ImageStep::from_canonical(&s.canonical_json());
        assert_eq!(back, Ok(s.clone()));
        assert_eq!(s.shape(), vec![1, 32, 48]);
        assert!(ImageStep::from_canonical(&json!({"size": [1]})).is_err());
    }
}
