//! A `Read + Seek` view of an input file, local or in an object store (then
//! fetched in ranged GETs as it is read).

use super::{head, is_url, object, read_range};
use bytes::Bytes;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// Size of [`RemoteFile`]'s first ranged read (a header, a footer); each
/// further read doubles it up to [`MAX_BLOCK`].
const FIRST_BLOCK: u64 = 256 << 10;
const MAX_BLOCK: u64 = 8 << 20;

/// A `Read + Seek` view of one object, fetched in ranged GETs (256 KiB at
/// first, doubling up to 8 MiB) as it is read.
pub struct RemoteFile {
    url: String,
    size: u64,
    pos: u64,
    buf: Bytes,
    buf_start: u64,
    block: u64,
}

/// Something to read an input file through.
pub trait ReadSeek: Read + Seek + Send {}
impl<T: Read + Seek + Send> ReadSeek for T {}

/// Opens an input file, local or remote, and returns it with its size.
pub fn open_input(path: &Path) -> io::Result<(Box<dyn ReadSeek>, u64)> {
    if let Some(url) = path.to_str().filter(|u| is_url(u)) {
        let f = open(url)?;
        let size = f.size;
        return Ok((Box::new(f), size));
    }
    let f = std::fs::File::open(path)?;
    let size = f.metadata()?.len();
    Ok((Box::new(f), size))
}

/// The size of an input file, local or remote.
pub fn input_size(path: &Path) -> io::Result<u64> {
    match path.to_str().filter(|u| is_url(u)) {
        Some(url) => match object(url) {
            Some(o) => Ok(o.size),
            None => Ok(head(url)?.size),
        },
        None => Ok(std::fs::metadata(path)?.len()),
    }
}

/// Opens the object at `url` for reading. Its size is the listed one.
pub fn open(url: &str) -> io::Result<RemoteFile> {
    let size = match object(url) {
        Some(o) => o.size,
        None => head(url)?.size,
    };
    Ok(RemoteFile {
        url: url.to_string(),
        size,
        pos: 0,
        buf: Bytes::new(),
        buf_start: 0,
        block: FIRST_BLOCK,
    })
}

impl RemoteFile {
    /// The object's size.
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl Read for RemoteFile {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.size || out.is_empty() {
            return Ok(0);
        }
        let in_buf =
            self.pos >= self.buf_start && self.pos < self.buf_start + self.buf.len() as u64;
        if !in_buf {
            let end = (self.pos + self.block.max(out.len() as u64)).min(self.size);
            self.block = (self.block * 2).min(MAX_BLOCK);
            self.buf = read_range(&self.url, self.pos..end)?;
            self.buf_start = self.pos;
            if self.buf.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{}: the object ended early", self.url),
                ));
            }
        }
        let off = (self.pos - self.buf_start) as usize;
        let n = out.len().min(self.buf.len() - off);
        out[..n].copy_from_slice(&self.buf[off..off + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for RemoteFile {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.size.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = target
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}
