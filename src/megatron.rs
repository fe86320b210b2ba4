//! Export of a packed token set as a Megatron-style indexed dataset: a
//! `.bin` file of token ids and a `.idx` file that says where each sequence
//! starts (docs/FORMAT.md, section 16).
//!
//! Each window becomes one sequence and one document holding the window's
//! token ids without its padding, so a Megatron job reading the pair at the
//! packed length sees the windows tessera built. Layout of the `.idx` (all
//! little-endian): the 9 bytes `MMIDIDX\0\0`, version `u64` = 1, the dtype
//! code `u8`, the sequence count `u64`, the document count `u64` (one more
//! than the sequences), then the sequence lengths (`i32` each), the byte offsets
//! in the `.bin` (`i64` each) and the document starts (`i64` each: 0, 1, ...).

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use tessera_reader::{DType, Dataset};

/// What an export wrote.
#[derive(Debug, serde::Serialize)]
pub struct Exported {
    /// The `.bin` file.
    pub bin: PathBuf,
    /// The `.idx` file.
    pub idx: PathBuf,
    /// Sequences (windows) written.
    pub sequences: u64,
    /// Token ids written.
    pub tokens: u64,
    /// The Megatron dtype name of the ids.
    pub dtype: &'static str,
}

/// The index header's magic.
pub const MAGIC: &[u8; 9] = b"MMIDIDX\x00\x00";

/// Megatron's dtype code and name for ids stored as `d`, and the dtype
/// they are written as (Megatron has no u32: those are written as i32 and
/// must be below 2^31).
fn megatron_dtype(d: DType) -> Option<(u8, &'static str, DType)> {
    Some(match d {
        DType::U8 => (1, "uint8", DType::U8),
        DType::I8 => (2, "int8", DType::I8),
        DType::I16 => (3, "int16", DType::I16),
        DType::I32 | DType::U32 => (4, "int32", DType::I32),
        DType::I64 => (5, "int64", DType::I64),
        DType::U16 => (8, "uint16", DType::U16),
        _ => return None,
    })
}

/// Writes `prefix.bin` and `prefix.idx` for the windows of `ds` (a packed
/// set, or a view of one split of it).
pub fn export(ds: &Dataset, prefix: &Path) -> Result<Exported, String> {
    let pack = ds
        .manifest()
        .spec
        .get("pack")
        .filter(|p| !p.is_null())
        .ok_or_else(|| {
            format!(
                "{}: not a packed set (its spec has no pack section); Megatron export writes packed windows",
                ds.dir().display()
            )
        })?;
    let field = pack["field"]
        .as_str()
        .ok_or_else(|| "the manifest's pack section lacks `field`".to_string())?;
    let layout = ds.layout();
    let tokens_field = layout
        .field(field)
        .ok_or_else(|| format!("the layout lacks the packed field {field:?}"))?;
    let seg_field = layout
        .field(crate::pack::SEGMENT_IDS)
        .ok_or_else(|| "the layout lacks segment_ids".to_string())?;
    let slots = tokens_field.shape.first().copied().unwrap_or(0) as usize;
    let (code, name, out_dtype) = megatron_dtype(tokens_field.dtype).ok_or_else(|| {
        format!(
            "token dtype {} has no Megatron counterpart",
            tokens_field.dtype.name()
        )
    })?;
    let bin = with_ext(prefix, "bin");
    let idx = with_ext(prefix, "idx");
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e: std::io::Error| format!("{}: {e}", p.display())
    };
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(&bin).map_err(io(&bin))?);
    let size = out_dtype.size();
    let mut lengths: Vec<i32> = Vec::with_capacity(ds.len() as usize);
    let mut pointers: Vec<i64> = Vec::with_capacity(ds.len() as usize);
    let mut offset: i64 = 0;
    let mut tokens = 0u64;
    let mut buf = Vec::with_capacity(slots * 8);
    for i in 0..ds.len() {
        let rec = ds
            .record(i)
            .ok_or_else(|| format!("window {i} cannot be read"))?;
        let seg = &rec[seg_field.offset as usize..];
        let ids = &rec[tokens_field.offset as usize..];
        buf.clear();
        let mut n = 0usize;
        for k in 0..slots {
            if i32::from_le_bytes(seg[4 * k..4 * k + 4].try_into().unwrap_or([0; 4])) == 0 {
                break;
            }
            let v = read_int(ids, k, tokens_field.dtype);
            if out_dtype == DType::I32 && v > i64::from(i32::MAX) {
                return Err(format!(
                    "window {i}: token id {v} does not fit Megatron's int32"
                ));
            }
            buf.extend_from_slice(&v.to_le_bytes()[..size]);
            n += 1;
        }
        out.write_all(&buf).map_err(io(&bin))?;
        lengths.push(n as i32);
        pointers.push(offset);
        offset += (n * size) as i64;
        tokens += n as u64;
    }
    out.into_inner()
        .map_err(|e| format!("{}: {}", bin.display(), e.error()))?
        .sync_all()
        .map_err(io(&bin))?;
    let count = lengths.len() as u64;
    let mut head = Vec::with_capacity(34 + lengths.len() * 20);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&1u64.to_le_bytes());
    head.push(code);
    head.extend_from_slice(&count.to_le_bytes());
    head.extend_from_slice(&(count + 1).to_le_bytes());
    for l in &lengths {
        head.extend_from_slice(&l.to_le_bytes());
    }
    for p in &pointers {
        head.extend_from_slice(&p.to_le_bytes());
    }
    for d in 0..=count {
        head.extend_from_slice(&(d as i64).to_le_bytes());
    }
    std::fs::write(&idx, &head).map_err(io(&idx))?;
    Ok(Exported {
        bin,
        idx,
        sequences: count,
        tokens,
        dtype: name,
    })
}

fn with_ext(prefix: &Path, ext: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_os_string();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// Element `k` of an integer field starting at `bytes`.
fn read_int(bytes: &[u8], k: usize, d: DType) -> i64 {
    let n = d.size();
    let mut b = [0u8; 8];
    b[..n].copy_from_slice(&bytes[k * n..k * n + n]);
    match d {
        DType::I8 => i64::from(b[0] as i8),
        DType::I16 => i64::from(i16::from_le_bytes([b[0], b[1]])),
        DType::I32 => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        _ => i64::from_le_bytes(b),
    }
}
