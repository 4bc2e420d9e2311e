//! Bounds-checked reading and writing of wire formats, shared by every codec.
//!
//! Each protocol's `codec.rs` keeps its own byte *rules* (layouts, validation order, counter
//! names); this module only owns the mechanics those rules are written in, so that a bounds
//! check, an endianness conversion or a LEB128 varint exists once instead of once per codec.
//!
//! - [`Reader`] reads from a borrowed datagram and never panics: every read is checked and a
//!   short buffer is a [`WireError`], never an index out of bounds.
//! - [`Writer`] writes into a caller's `&mut [u8]` (the engine's transmit buffer), so encoding
//!   allocates nothing; running out of room is a [`WireError::Overflow`].
//! - Both are generic over the integer byte order ([`Le`], [`Be`]), chosen at compile time: a
//!   codec says once which order its integers use and the conversion compiles to a plain load.
//!   Where a protocol leaves the order of floats to a runtime option (R-Type's `float_order`),
//!   [`Reader::f32_in`] and [`Writer::f32_in`] take an [`Order`] value.

use std::fmt::Debug;

use thiserror::Error;

/// Byte order of a [`Reader`] or [`Writer`], fixed at compile time.
///
/// A trait with a constant rather than a runtime flag: codecs never switch their integer order,
/// and the constant lets the compiler drop the branch on the hot path.
pub trait ByteOrder: Copy + Debug + Default + Send + Sync + 'static {
    /// The same order as a runtime value.
    const ORDER: Order;
}

/// Little-endian (cafe).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Le;

/// Big-endian, network order (R-Type, City).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Be;

impl ByteOrder for Le {
    const ORDER: Order = Order::Little;
}

impl ByteOrder for Be {
    const ORDER: Order = Order::Big;
}

/// A byte order chosen at run time (a protocol option such as R-Type's float order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Least significant byte first.
    #[default]
    Little,
    /// Most significant byte first (network order).
    Big,
}

/// Why a read or a write failed. `what` names the field kind being read or written (`"u32"`,
/// `"varint"`, `"bytes"`, ...), so a failure says what was expected where.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WireError {
    /// Fewer bytes left than the field needs.
    #[error("truncated reading {what} at byte {at}: {needed} needed, {available} left")]
    Truncated {
        /// The kind of field (`"u32"`, `"varint"`, `"bytes"`, ...).
        what: &'static str,
        /// Byte offset where it starts.
        at: usize,
        /// Bytes it needs.
        needed: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// The caller's buffer has no room for the field.
    #[error("no room writing {what} at byte {at}: {needed} needed, {available} left")]
    Overflow {
        /// The kind of field (`"u32"`, `"varint"`, `"bytes"`, ...).
        what: &'static str,
        /// Byte offset where it starts.
        at: usize,
        /// Bytes it needs.
        needed: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// A LEB128 varint ran past 10 bytes.
    #[error("varint longer than 10 bytes at byte {at}")]
    VarintOverlong {
        /// Byte offset where it starts.
        at: usize,
    },
    /// A LEB128 varint's 10th byte carries bits beyond 64.
    #[error("varint overflows u64 at byte {at}")]
    VarintOverflow {
        /// Byte offset where it starts.
        at: usize,
    },
    /// A length prefix claims more bytes than remain.
    #[error("length {len} of {what} at byte {at} runs past the {available} bytes left")]
    LengthOverrun {
        /// The kind of field (`"u32"`, `"varint"`, `"bytes"`, ...).
        what: &'static str,
        /// Byte offset where it starts.
        at: usize,
        /// The length the prefix claims.
        len: u64,
        /// Bytes that were left.
        available: usize,
    },
    /// A string field is not UTF-8.
    #[error("string at byte {at} is not UTF-8")]
    BadUtf8 {
        /// Byte offset where it starts.
        at: usize,
    },
    /// Bytes left after the last field of a fixed layout.
    #[error("{remaining} trailing bytes at byte {at}")]
    TrailingBytes {
        /// Byte offset where it starts.
        at: usize,
        /// How many bytes are left over.
        remaining: usize,
    },
}

impl WireError {
    /// The stable short name codecs count decode errors under (`message.reason`). These names
    /// are a contract with tests and users, so they never change.
    pub fn reason(&self) -> &'static str {
        match self {
            WireError::Truncated { .. } => "truncated",
            WireError::Overflow { .. } => "buffer_too_small",
            WireError::VarintOverlong { .. } => "varint_overlong",
            WireError::VarintOverflow { .. } => "varint_overflow",
            WireError::LengthOverrun { .. } => "length_overrun",
            WireError::BadUtf8 { .. } => "bad_utf8",
            WireError::TrailingBytes { .. } => "trailing_bytes",
        }
    }
}

/// Codecs whose inner decode errors are bare reason names use `?` on wire reads directly.
impl From<WireError> for &'static str {
    fn from(e: WireError) -> Self {
        e.reason()
    }
}

/// A read's or a write's result.
pub type WireResult<T = ()> = Result<T, WireError>;

/// Largest LEB128 encoding of a u64.
pub const VARINT_MAX_LEN: usize = 10;

/// A bounds-checked reader over a borrowed buffer, integers in byte order `O`.
#[derive(Debug, Clone)]
pub struct Reader<'a, O: ByteOrder> {
    buf: &'a [u8],
    at: usize,
    _order: O,
}

macro_rules! read_int {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("One `", stringify!($t), "` in the reader's byte order.")]
        #[inline]
        pub fn $name(&mut self) -> WireResult<$t> {
            let b = self.array_named::<{ std::mem::size_of::<$t>() }>(stringify!($t))?;
            Ok(match O::ORDER {
                Order::Little => <$t>::from_le_bytes(b),
                Order::Big => <$t>::from_be_bytes(b),
            })
        }
    )*};
}

impl<'a, O: ByteOrder> Reader<'a, O> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self {
            buf,
            at: 0,
            _order: O::default(),
        }
    }

    /// Bytes read so far (the offset of the next read).
    pub fn position(&self) -> usize {
        self.at
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The bytes from offset `start` up to the current position (a validated span a decoded
    /// message keeps borrowing, e.g. a list parsed once to check it and again on demand).
    pub fn since(&self, start: usize) -> &'a [u8] {
        self.buf.get(start.min(self.at)..self.at).unwrap_or(&[])
    }

    /// The next `n` bytes, consumed.
    #[inline]
    pub fn take(&mut self, n: usize) -> WireResult<&'a [u8]> {
        self.take_named(n, "bytes")
    }

    #[inline]
    fn take_named(&mut self, n: usize, what: &'static str) -> WireResult<&'a [u8]> {
        let available = self.remaining();
        if n > available {
            return Err(WireError::Truncated {
                what,
                at: self.at,
                needed: n,
                available,
            });
        }
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    /// Skip `n` bytes.
    pub fn skip(&mut self, n: usize) -> WireResult {
        self.take_named(n, "skip").map(drop)
    }

    /// The next byte, not consumed.
    pub fn peek_u8(&self) -> WireResult<u8> {
        self.buf.get(self.at).copied().ok_or(WireError::Truncated {
            what: "u8",
            at: self.at,
            needed: 1,
            available: 0,
        })
    }

    /// A fixed-size array (names, records read as a block).
    #[inline]
    pub fn array<const N: usize>(&mut self) -> WireResult<[u8; N]> {
        self.array_named::<N>("array")
    }

    #[inline]
    fn array_named<const N: usize>(&mut self, what: &'static str) -> WireResult<[u8; N]> {
        let s = self.take_named(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    /// One byte.
    #[inline]
    pub fn u8(&mut self) -> WireResult<u8> {
        Ok(self.array_named::<1>("u8")?[0])
    }

    /// One signed byte.
    #[inline]
    pub fn i8(&mut self) -> WireResult<i8> {
        Ok(self.array_named::<1>("i8")?[0] as i8)
    }

    read_int!(u16: u16, i16: i16, u32: u32, i32: i32, u64: u64, i64: i64);

    /// An IEEE 754 `f32` in the reader's byte order.
    #[inline]
    pub fn f32(&mut self) -> WireResult<f32> {
        self.f32_in(O::ORDER)
    }

    /// An `f32` in an order given at run time (floats whose order is a protocol option).
    #[inline]
    pub fn f32_in(&mut self, order: Order) -> WireResult<f32> {
        let b = self.array_named::<4>("f32")?;
        Ok(match order {
            Order::Little => f32::from_le_bytes(b),
            Order::Big => f32::from_be_bytes(b),
        })
    }

    /// LEB128: 7 bits a byte, low group first, at most [`VARINT_MAX_LEN`] bytes; the 10th byte
    /// may only be 0 or 1. Non-minimal encodings are accepted, as LEB128 allows them.
    pub fn varint(&mut self) -> WireResult<u64> {
        let start = self.at;
        let mut v: u64 = 0;
        for i in 0..VARINT_MAX_LEN {
            let b = self.array_named::<1>("varint")?[0];
            if i == VARINT_MAX_LEN - 1 {
                if b & 0x80 != 0 {
                    return Err(WireError::VarintOverlong { at: start });
                }
                if b > 1 {
                    return Err(WireError::VarintOverflow { at: start });
                }
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(WireError::VarintOverlong { at: start })
    }

    /// A varint length, then that many bytes.
    pub fn len_prefixed(&mut self) -> WireResult<&'a [u8]> {
        let at = self.at;
        let n = self.varint()?;
        let available = self.remaining();
        if n > available as u64 {
            return Err(WireError::LengthOverrun {
                what: "bytes",
                at,
                len: n,
                available,
            });
        }
        self.take_named(n as usize, "bytes")
    }

    /// A varint-length-prefixed UTF-8 string.
    pub fn string(&mut self) -> WireResult<&'a str> {
        let at = self.at;
        std::str::from_utf8(self.len_prefixed()?).map_err(|_| WireError::BadUtf8 { at })
    }

    /// Everything left, consumed.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.at..];
        self.at = self.buf.len();
        s
    }

    /// Fixed layouts end here: anything left is [`WireError::TrailingBytes`].
    pub fn expect_end(&self) -> WireResult {
        match self.remaining() {
            0 => Ok(()),
            remaining => Err(WireError::TrailingBytes {
                at: self.at,
                remaining,
            }),
        }
    }
}

/// A writer into a caller's buffer, integers in byte order `O`. Nothing is allocated; a field
/// that does not fit is [`WireError::Overflow`] and leaves the buffer's written part as it was.
#[derive(Debug)]
pub struct Writer<'b, O: ByteOrder> {
    buf: &'b mut [u8],
    at: usize,
    _order: O,
}

macro_rules! write_int {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[doc = concat!("One `", stringify!($t), "` in the writer's byte order.")]
        #[inline]
        pub fn $name(&mut self, v: $t) -> WireResult {
            let b = match O::ORDER {
                Order::Little => v.to_le_bytes(),
                Order::Big => v.to_be_bytes(),
            };
            self.put(&b, stringify!($t))
        }
    )*};
}

impl<'b, O: ByteOrder> Writer<'b, O> {
    /// A writer at the start of `buf` (nothing written yet).
    pub fn new(buf: &'b mut [u8]) -> Self {
        Self {
            buf,
            at: 0,
            _order: O::default(),
        }
    }

    /// Bytes written so far: the encoded length once the message is complete.
    pub fn position(&self) -> usize {
        self.at
    }

    /// Room left in the caller's buffer.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }

    /// The capacity of the caller's buffer.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Drop what was written after `at` (undo a partly written entry that did not fit).
    pub fn rewind(&mut self, at: usize) {
        self.at = self.at.min(at);
    }

    #[inline]
    fn put(&mut self, b: &[u8], what: &'static str) -> WireResult {
        let available = self.remaining();
        if b.len() > available {
            return Err(WireError::Overflow {
                what,
                at: self.at,
                needed: b.len(),
                available,
            });
        }
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
        Ok(())
    }

    /// Raw bytes, no length prefix.
    #[inline]
    pub fn bytes(&mut self, b: &[u8]) -> WireResult {
        self.put(b, "bytes")
    }

    /// One byte.
    #[inline]
    pub fn u8(&mut self, v: u8) -> WireResult {
        self.put(&[v], "u8")
    }

    /// One signed byte.
    #[inline]
    pub fn i8(&mut self, v: i8) -> WireResult {
        self.put(&[v as u8], "i8")
    }

    write_int!(u16: u16, i16: i16, u32: u32, i32: i32, u64: u64, i64: i64);

    /// An `f32` in the writer's byte order.
    #[inline]
    pub fn f32(&mut self, v: f32) -> WireResult {
        self.f32_in(O::ORDER, v)
    }

    /// An `f32` in an order given at run time.
    #[inline]
    pub fn f32_in(&mut self, order: Order, v: f32) -> WireResult {
        let b = match order {
            Order::Little => v.to_le_bytes(),
            Order::Big => v.to_be_bytes(),
        };
        self.put(&b, "f32")
    }

    /// LEB128, low group first (the shortest encoding).
    pub fn varint(&mut self, mut v: u64) -> WireResult {
        let mut tmp = [0u8; VARINT_MAX_LEN];
        let mut n = 0;
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                tmp[n] = b;
                n += 1;
                break;
            }
            tmp[n] = b | 0x80;
            n += 1;
        }
        self.put(&tmp[..n], "varint")
    }

    /// A varint length, then the bytes.
    pub fn len_prefixed(&mut self, b: &[u8]) -> WireResult {
        let start = self.at;
        self.varint(b.len() as u64)?;
        self.bytes(b).inspect_err(|_| self.at = start)
    }

    /// A varint-length-prefixed string.
    pub fn string(&mut self, s: &str) -> WireResult {
        self.len_prefixed(s.as_bytes())
    }

    /// Overwrite a `u16` written earlier at `at` (a length or count known only at the end).
    pub fn patch_u16(&mut self, at: usize, v: u16) -> WireResult {
        let b = match O::ORDER {
            Order::Little => v.to_le_bytes(),
            Order::Big => v.to_be_bytes(),
        };
        self.patch(at, &b, "u16")
    }

    /// Overwrite a `u32` written earlier at `at`.
    pub fn patch_u32(&mut self, at: usize, v: u32) -> WireResult {
        let b = match O::ORDER {
            Order::Little => v.to_le_bytes(),
            Order::Big => v.to_be_bytes(),
        };
        self.patch(at, &b, "u32")
    }

    fn patch(&mut self, at: usize, b: &[u8], what: &'static str) -> WireResult {
        // Only what was already written may be patched.
        match self.buf[..self.at].get_mut(at..at.saturating_add(b.len())) {
            Some(dst) => {
                dst.copy_from_slice(b);
                Ok(())
            }
            None => Err(WireError::Overflow {
                what,
                at,
                needed: b.len(),
                available: self.at.saturating_sub(at),
            }),
        }
    }
}

/// Overwrite a `u32` in an encoded datagram, if it is long enough (stamping a per-client
/// sequence into a shared copy). A datagram too short is left alone.
pub fn patch_u32_at<O: ByteOrder>(datagram: &mut [u8], at: usize, v: u32) {
    let b = match O::ORDER {
        Order::Little => v.to_le_bytes(),
        Order::Big => v.to_be_bytes(),
    };
    if let Some(dst) = datagram.get_mut(at..at.saturating_add(4)) {
        dst.copy_from_slice(&b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_integers_in_both_orders() {
        let b = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08];
        let mut le = Reader::<Le>::new(&b);
        assert_eq!(le.u16(), Ok(0x0201));
        assert_eq!(le.u32(), Ok(0x0605_0403));
        assert_eq!(le.i16(), Ok(0x0807));
        assert!(le.is_empty());
        let mut be = Reader::<Be>::new(&b);
        assert_eq!(be.u64(), Ok(0x0102_0304_0506_0708));
        let mut be = Reader::<Be>::new(&[0xFF, 0xFE, 0x80]);
        assert_eq!(be.i16(), Ok(-2));
        assert_eq!(be.i8(), Ok(-128));
    }

    #[test]
    fn reads_floats_in_the_given_order() {
        // 100.0f32 = 0x42C80000.
        let be = [0x42, 0xC8, 0x00, 0x00];
        let le = [0x00, 0x00, 0xC8, 0x42];
        assert_eq!(Reader::<Be>::new(&be).f32(), Ok(100.0));
        assert_eq!(Reader::<Le>::new(&le).f32(), Ok(100.0));
        // Integers big-endian, floats little-endian (R-Type's `float_order: little`).
        assert_eq!(Reader::<Be>::new(&le).f32_in(Order::Little), Ok(100.0));
    }

    #[test]
    fn short_reads_say_what_and_where() {
        let mut r = Reader::<Le>::new(&[1, 2, 3]);
        assert_eq!(r.u16(), Ok(0x0201));
        let e = r.u32().unwrap_err();
        assert_eq!(
            e,
            WireError::Truncated {
                what: "u32",
                at: 2,
                needed: 4,
                available: 1
            }
        );
        assert_eq!(e.reason(), "truncated");
        // A failed read consumes nothing.
        assert_eq!(r.position(), 2);
        assert_eq!(r.peek_u8(), Ok(3));
        assert_eq!(r.u8(), Ok(3));
        assert!(r.peek_u8().is_err());
    }

    #[test]
    fn skip_take_rest_since_and_end() {
        let b = [9, 8, 7, 6, 5];
        let mut r = Reader::<Be>::new(&b);
        r.skip(1).unwrap();
        let start = r.position();
        assert_eq!(r.take(2), Ok(&b[1..3]));
        assert_eq!(r.since(start), &[8, 7]);
        assert_eq!(
            r.expect_end(),
            Err(WireError::TrailingBytes {
                at: 3,
                remaining: 2
            })
        );
        assert_eq!(r.array::<1>(), Ok([6]));
        assert_eq!(r.rest(), &[5]);
        assert_eq!(r.expect_end(), Ok(()));
        assert!(r.skip(1).is_err());
    }

    #[test]
    fn varints_golden() {
        for (v, bytes) in [
            (0u64, &[0x00][..]),
            (127, &[0x7F]),
            (128, &[0x80, 0x01]),
            (300, &[0xAC, 0x02]),
            (
                u64::MAX,
                &[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01],
            ),
        ] {
            let mut buf = [0u8; VARINT_MAX_LEN];
            let mut w = Writer::<Be>::new(&mut buf);
            w.varint(v).unwrap();
            let n = w.position();
            assert_eq!(&buf[..n], bytes, "encode {v}");
            let mut r = Reader::<Be>::new(bytes);
            assert_eq!(r.varint(), Ok(v), "decode {v}");
            assert!(r.is_empty());
        }
        // Non-minimal is accepted.
        assert_eq!(Reader::<Be>::new(&[0x80, 0x00]).varint(), Ok(0));
        let e = Reader::<Be>::new(&[0xFF; 9]).varint().unwrap_err();
        assert_eq!(e.reason(), "truncated");
        let e = Reader::<Be>::new(&[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02])
            .varint()
            .unwrap_err();
        assert_eq!(e, WireError::VarintOverflow { at: 0 });
        let e = Reader::<Be>::new(&[0x80; 11]).varint().unwrap_err();
        assert_eq!(e.reason(), "varint_overlong");
    }

    #[test]
    fn strings_and_length_prefixes() {
        let mut r = Reader::<Be>::new(&[0x02, b'h', b'i', 0x05, b'x']);
        assert_eq!(r.string(), Ok("hi"));
        assert_eq!(
            r.len_prefixed(),
            Err(WireError::LengthOverrun {
                what: "bytes",
                at: 3,
                len: 5,
                available: 1
            })
        );
        let e = Reader::<Be>::new(&[0x01, 0xFF]).string().unwrap_err();
        assert_eq!(e, WireError::BadUtf8 { at: 0 });
        let reason: &'static str = e.into();
        assert_eq!(reason, "bad_utf8");
    }

    #[test]
    fn writes_into_the_callers_buffer() {
        let mut buf = [0u8; 16];
        let mut w = Writer::<Le>::new(&mut buf);
        w.u16(0xCAFE).unwrap();
        w.u8(1).unwrap();
        w.i8(-1).unwrap();
        w.u32(0x0403_0201).unwrap();
        w.f32(1.0).unwrap();
        w.string("ab").unwrap();
        let n = w.position();
        assert_eq!(
            &buf[..n],
            &[0xFE, 0xCA, 1, 0xFF, 1, 2, 3, 4, 0x00, 0x00, 0x80, 0x3F, 2, b'a', b'b']
        );
        let mut buf = [0u8; 8];
        let mut w = Writer::<Be>::new(&mut buf);
        w.u16(0).unwrap();
        w.i32(-2).unwrap();
        w.f32_in(Order::Little, 100.0).unwrap_err();
        assert_eq!(w.position(), 6);
        w.patch_u16(0, 0x1234).unwrap();
        assert_eq!(&buf[..6], &[0x12, 0x34, 0xFF, 0xFF, 0xFF, 0xFE]);
    }

    #[test]
    fn overflow_is_reported_and_writes_nothing() {
        let mut buf = [0u8; 3];
        let mut w = Writer::<Be>::new(&mut buf);
        w.u16(7).unwrap();
        assert_eq!(
            w.u32(1),
            Err(WireError::Overflow {
                what: "u32",
                at: 2,
                needed: 4,
                available: 1
            })
        );
        assert_eq!(w.position(), 2);
        // A length prefix that fits but whose bytes do not is undone entirely.
        assert!(w.string("xy").is_err());
        assert_eq!(w.position(), 2);
        // Only written bytes can be patched.
        assert!(w.patch_u16(2, 1).is_err());
        w.u8(3).unwrap();
        assert_eq!(w.remaining(), 0);
        w.rewind(1);
        assert_eq!(w.position(), 1);
        assert_eq!(buf, [0, 7, 3]);
    }

    #[test]
    fn patches_a_finished_datagram() {
        let mut d = [0u8; 6];
        patch_u32_at::<Le>(&mut d, 2, 0x0403_0201);
        assert_eq!(d, [0, 0, 1, 2, 3, 4]);
        patch_u32_at::<Be>(&mut d, 4, 1); // too short: untouched
        assert_eq!(d, [0, 0, 1, 2, 3, 4]);
    }
}
