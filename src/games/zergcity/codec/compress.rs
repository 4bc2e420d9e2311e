//! LZ4 on the receiving side (§8): the reused, bounded decompression buffer.

use super::*;

/// The receiver's decompression buffer: reused across packets (no allocation per packet once
/// it has grown to the largest snapshot seen), and never grown beyond `limit`.
#[derive(Debug, Clone)]
pub struct Decompressor {
    buf: Vec<u8>,
    limit: usize,
}

impl Default for Decompressor {
    fn default() -> Self {
        Self::new(MAX_PAYLOAD)
    }
}

impl Decompressor {
    /// A buffer that accepts stated sizes up to `limit` bytes (at most 16 MiB).
    pub fn new(limit: usize) -> Self {
        Self {
            buf: Vec::new(),
            limit: limit.min(MAX_PAYLOAD),
        }
    }

    /// Bytes allocated so far (tests check a lying size allocated nothing).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Accept stated sizes up to `limit` bytes (at most 16 MiB) from now on; the buffer is
    /// kept, and given back if it is larger than the new limit.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit.min(MAX_PAYLOAD);
        if self.buf.capacity() > self.limit {
            self.buf = Vec::new();
        }
    }

    /// Decompress `block` that claims to expand to `size` bytes; checked before anything is
    /// allocated, and the output must be exactly `size` bytes.
    pub fn decompress(
        &mut self,
        msg: &'static str,
        block: &[u8],
        size: u32,
    ) -> Result<&[u8], DecodeError> {
        let size = size as usize;
        if size > self.limit {
            return Err(DecodeError::new(msg, "decompressed_too_large"));
        }
        if size > block.len().saturating_mul(LZ4_MAX_RATIO) {
            return Err(DecodeError::new(msg, "impossible_size"));
        }
        if self.buf.len() < size {
            // A new zeroed allocation (fresh pages) rather than growing and filling the old
            // one: the buffer only grows to the largest size seen.
            self.buf = vec![0; size];
        }
        let out = &mut self.buf[..size];
        match lz4_flex::block::decompress_into(block, out) {
            Ok(n) if n == size => Ok(&self.buf[..size]),
            Ok(_) | Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) => {
                Err(DecodeError::new(msg, "size_mismatch"))
            }
            Err(_) => Err(DecodeError::new(msg, "lz4_corrupt")),
        }
    }
}
