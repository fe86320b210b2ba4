//! Hexadecimal digests: the only spelling of a hash tessera writes (file
//! names, manifests, cache keys) is lowercase hex.

use std::io::Read;

/// Lowercase hex of a byte string.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Whether `s` is a 256-bit digest as [`hex`] writes it: 64 lowercase hex
/// digits. Only such names are joined to a cache directory, so a name that
/// passes cannot point outside it.
pub fn is_hex_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Hex blake3 of everything `r` yields, read 1 MiB at a time.
pub fn hash_reader(r: &mut impl Read) -> std::io::Result<String> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(hasher.finalize().as_bytes()))
}

/// A writer that hashes (blake3) everything that passes through it into
/// `inner`: a file's digest without reading it back.
pub struct HashingWriter<W: std::io::Write> {
    inner: W,
    hasher: blake3::Hasher,
}

impl<W: std::io::Write> HashingWriter<W> {
    /// A writer into `inner`, with nothing hashed yet.
    pub fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: blake3::Hasher::new(),
        }
    }

    /// The inner writer and the lowercase hex blake3 of what was written.
    pub fn finish(self) -> (W, String) {
        (self.inner, hex(self.hasher.finalize().as_bytes()))
    }
}

impl<W: std::io::Write> std::io::Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_two_digits_a_byte() {
        assert_eq!(hex(&[]), "");
        assert_eq!(hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
        // blake3's own formatting is an independent implementation.
        let h = blake3::hash(b"tessera");
        assert_eq!(hex(h.as_bytes()), h.to_hex().as_str());
    }

    #[test]
    fn digests_are_64_lowercase_hex_digits() {
        let h = hex(blake3::hash(b"x").as_bytes());
        assert!(is_hex_digest(&h));
        assert!(!is_hex_digest(&h.to_uppercase()));
        assert!(!is_hex_digest(&h[1..]));
        assert!(!is_hex_digest(&format!("{}/", &h[1..])));
        assert!(!is_hex_digest(&format!("{}..", &h[2..])));
        assert!(!is_hex_digest(""));
    }

    #[test]
    fn hash_reader_hashes_across_buffer_boundaries() {
        let data: Vec<u8> = (0..(3 << 20) + 17).map(|i| (i % 251) as u8).collect();
        let got = hash_reader(&mut &data[..]).unwrap();
        assert_eq!(got, blake3::hash(&data).to_hex().as_str());
    }

    #[test]
    fn a_hashing_writer_gives_the_digest_of_what_it_wrote() {
        use std::io::Write;
        let mut w = HashingWriter::new(Vec::new());
        w.write_all(b"shuffle ").expect("write");
        w.write_all(b"bytes").expect("write");
        let (inner, digest) = w.finish();
        assert_eq!(inner, b"shuffle bytes");
        assert_eq!(digest, hex(blake3::hash(b"shuffle bytes").as_bytes()));
    }
}
