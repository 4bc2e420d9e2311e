//! The real server's compressed bodies (both of its programs: the game server's StateUpdate,
//! the benchmark's snapshots): `u32 original size` then an LZ4 block, decompressed into one
//! buffer kept between messages, never grown past a limit, and given back when it grew large.

use crate::games::zergcity::codec::DecodeError;

/// A bounded, reused decompression buffer.
#[derive(Debug, Default)]
pub struct Lz4Sized {
    buf: Vec<u8>,
    limit: usize,
}

impl Lz4Sized {
    /// Largest stated size accepted.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// The body of `data` (`u32 size` + LZ4 block), errors counted under `msg`: `truncated`
    /// without a size, `decompressed_too_large` over the limit (nothing allocated),
    /// `lz4_size_mismatch` when the block does not fill the stated size, `lz4_corrupt`.
    pub fn inflate(&mut self, msg: &'static str, data: &[u8]) -> Result<&[u8], DecodeError> {
        let Some((size, block)) = data.split_first_chunk::<4>() else {
            return Err(DecodeError::new(msg, "truncated"));
        };
        let size = u32::from_le_bytes(*size) as usize;
        if size > self.limit {
            return Err(DecodeError::new(msg, "decompressed_too_large"));
        }
        if self.buf.len() < size {
            self.buf.resize(size, 0);
        }
        match lz4_flex::block::decompress_into(block, &mut self.buf[..size]) {
            Ok(n) if n == size => Ok(&self.buf[..size]),
            Ok(_) => Err(DecodeError::new(msg, "lz4_size_mismatch")),
            Err(_) => Err(DecodeError::new(msg, "lz4_corrupt")),
        }
    }

    /// Give a buffer grown past 1 MiB back.
    pub fn shrink(&mut self) {
        if self.buf.len() > 1 << 20 {
            self.buf = Vec::new();
        }
    }
}
