//! Document streams: the documents one build task found for one split, in
//! record order, as a file in the build's work area (never published).
//!
//! The file is a sequence of documents, each a little-endian `u32` holding
//! the token count `n` (below 2^31) with the top bit set when the document
//! has train bits, then `n` little-endian `u32` token ids, then (with train
//! bits) `n` bytes, 1 where a loss on the token may count.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// The token count's flag for a document with train bits.
const MASKED: u32 = 1 << 31;

/// One task's document stream for one split, as its task reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StreamInfo {
    /// The split's index.
    pub split: usize,
    /// The file name, in the directory the task wrote to.
    pub file: String,
    /// Documents in it.
    pub documents: u64,
    /// Tokens in it.
    pub tokens: u64,
}

/// Writes one document stream.
pub struct StreamWriter {
    path: PathBuf,
    out: BufWriter<File>,
    info: StreamInfo,
}

impl StreamWriter {
    /// Creates `dir/file` for split `split`.
    pub fn create(dir: &Path, file: &str, split: usize) -> std::io::Result<Self> {
        let path = dir.join(file);
        let f = File::create(&path).map_err(|e| with_path(e, &path))?;
        Ok(StreamWriter {
            path,
            out: BufWriter::with_capacity(1 << 20, f),
            info: StreamInfo {
                split,
                file: file.to_string(),
                documents: 0,
                tokens: 0,
            },
        })
    }

    /// Appends one document.
    pub fn push(&mut self, doc: &[u32]) -> std::io::Result<()> {
        self.push_with(doc, None)
    }

    /// Appends one document with a train bit per token.
    pub fn push_masked(&mut self, doc: &[u32], train: &[u8]) -> std::io::Result<()> {
        if train.len() != doc.len() {
            return Err(std::io::Error::other(format!(
                "{} train bits for {} tokens",
                train.len(),
                doc.len()
            )));
        }
        self.push_with(doc, Some(train))
    }

    fn push_with(&mut self, doc: &[u32], train: Option<&[u8]>) -> std::io::Result<()> {
        let n = u32::try_from(doc.len())
            .ok()
            .filter(|n| *n < MASKED)
            .ok_or_else(|| {
                std::io::Error::other(format!(
                    "a document of {} tokens is longer than 2^31",
                    doc.len()
                ))
            })?;
        let head = if train.is_some() { n | MASKED } else { n };
        let mut buf = Vec::with_capacity(5 * doc.len() + 4);
        buf.extend_from_slice(&head.to_le_bytes());
        for t in doc {
            buf.extend_from_slice(&t.to_le_bytes());
        }
        if let Some(bits) = train {
            buf.extend(bits.iter().map(|b| u8::from(*b != 0)));
        }
        self.out
            .write_all(&buf)
            .map_err(|e| with_path(e, &self.path))?;
        self.info.documents += 1;
        self.info.tokens += doc.len() as u64;
        Ok(())
    }

    /// Flushes and closes the file.
    pub fn finish(self) -> std::io::Result<StreamInfo> {
        let f = self
            .out
            .into_inner()
            .map_err(|e| with_path(e.into_error(), &self.path))?;
        f.sync_all().map_err(|e| with_path(e, &self.path))?;
        Ok(self.info)
    }
}

/// Reads a document stream back, one document at a time.
pub struct StreamReader {
    path: PathBuf,
    input: BufReader<File>,
}

impl StreamReader {
    /// Opens `path`.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let f = File::open(path).map_err(|e| with_path(e, path))?;
        Ok(StreamReader {
            path: path.to_path_buf(),
            input: BufReader::with_capacity(1 << 20, f),
        })
    }

    /// The next document into `doc` and its train bits into `train` (left
    /// empty for a document without them); `false` at the end of the stream.
    pub fn next_into(&mut self, doc: &mut Vec<u32>, train: &mut Vec<u8>) -> std::io::Result<bool> {
        let mut len = [0u8; 4];
        match self.input.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(false),
            Err(e) => return Err(with_path(e, &self.path)),
        }
        let head = u32::from_le_bytes(len);
        let n = (head & !MASKED) as usize;
        let mut raw = vec![0u8; 4 * n];
        self.input
            .read_exact(&mut raw)
            .map_err(|e| with_path(e, &self.path))?;
        doc.clear();
        doc.extend(
            raw.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        train.clear();
        if head & MASKED != 0 {
            train.resize(n, 0);
            self.input
                .read_exact(train)
                .map_err(|e| with_path(e, &self.path))?;
        }
        Ok(true)
    }
}

fn with_path(e: std::io::Error, path: &Path) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_read_back_in_order() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut w = StreamWriter::create(dir.path(), "d.bin", 1).expect("create");
        let docs: Vec<Vec<u32>> = vec![vec![1, 2, 3], vec![], vec![u32::MAX, 0]];
        for d in &docs {
            w.push(d).expect("push");
        }
        w.push_masked(&[9, 8], &[0, 1]).expect("push");
        let info = w.finish().expect("finish");
        assert_eq!((info.documents, info.tokens, info.split), (4, 7, 1));
        let mut r = StreamReader::open(&dir.path().join("d.bin")).expect("open");
        let mut got = Vec::new();
        let (mut d, mut t) = (Vec::new(), Vec::new());
        while r.next_into(&mut d, &mut t).expect("read") {
            got.push((d.clone(), t.clone()));
        }
        let mut want: Vec<(Vec<u32>, Vec<u8>)> = docs.into_iter().map(|d| (d, vec![])).collect();
        want.push((vec![9, 8], vec![0, 1]));
        assert_eq!(got, want);
    }

    #[test]
    fn a_cut_stream_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("cut.bin");
        std::fs::write(&p, [3u8, 0, 0, 0, 1, 0, 0, 0]).expect("write");
        let mut r = StreamReader::open(&p).expect("open");
        let err = r
            .next_into(&mut Vec::new(), &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(err.contains("cut.bin"), "{err}");
    }
}
