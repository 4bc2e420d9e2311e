//! Quantization (§2.5): positions in 1/64 m, unit vectors and the yaw quaternion in 1/127.

/// `QuantizedVec3` scale: 1/64 m per step (§2.5: "Actual = x / 64.0").
pub const POS_SCALE: f32 = 64.0;
/// `QuantizedQuat` scale: a component of 1.0 is 127.
pub const UNIT_SCALE: f32 = 127.0;
/// Largest magnitude a position or velocity component can carry: 32767 / 64 ≈ 511.98.
pub const POS_MAX: f32 = 32767.0 / POS_SCALE;

/// Metres to the wire's 1/64 m steps: `round(v × 64)`, rounding half away from zero (so
/// ±0.5/64 go outward symmetrically), clamped to `-32768..=32767`; NaN is 0. Multiplying by
/// a power of two is exact in `f32`, so the only rounding is the documented one.
#[inline]
pub fn quantize_pos(v: f32) -> i16 {
    if v.is_nan() {
        return 0;
    }
    (v * POS_SCALE).round().clamp(-32768.0, 32767.0) as i16
}

/// The wire's 1/64 m steps back to metres (exact: every `i16 / 64` is an `f32`).
#[inline]
pub fn dequantize_pos(q: i16) -> f32 {
    f32::from(q) / POS_SCALE
}

/// A quaternion component (-1..=1) to `int8`: `round(c × 127)`, half away from zero, clamped
/// to `-127..=127` (the spec's range; -128 is never sent, so the code stays symmetric); NaN is 0.
#[inline]
pub fn quantize_unit(c: f32) -> i8 {
    if c.is_nan() {
        return 0;
    }
    (c * UNIT_SCALE).round().clamp(-127.0, 127.0) as i8
}

/// `int8` back to a component: `q / 127`, with a received -128 read as -1.0.
#[inline]
pub fn dequantize_unit(q: i8) -> f32 {
    (f32::from(q) / UNIT_SCALE).max(-1.0)
}

/// The rotation of a body facing `yaw` radians about the vertical (y) axis, quantized:
/// `(0, sin(yaw/2), 0, cos(yaw/2))`.
pub fn yaw_quat(yaw: f32) -> [i8; 4] {
    let h = yaw * 0.5;
    [0, quantize_unit(h.sin()), 0, quantize_unit(h.cos())]
}

/// A position or velocity (metres, metres per second) quantized per component.
#[inline]
pub fn quantize_vec3(v: [f32; 3]) -> [i16; 3] {
    [quantize_pos(v[0]), quantize_pos(v[1]), quantize_pos(v[2])]
}
