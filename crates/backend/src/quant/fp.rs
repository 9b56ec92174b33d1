//! The two small float formats: FP8 E4M3 (OCP "FN" variant: bias 7, no infinities,
//! 0x7F/0xFF are NaN, largest finite ±448) and FP4 E2M1 (bias 1, values
//! 0, 0.5, 1, 1.5, 2, 3, 4, 6). Encoding rounds to nearest, ties to even, and
//! saturates to the largest finite value (what quantisers and Hopper's `satfinite`
//! conversions do).

/// Largest finite E4M3 value.
pub const E4M3_MAX: f32 = 448.0;
/// Largest E2M1 value.
pub const E2M1_MAX: f32 = 6.0;

/// Value of an E4M3 byte.
#[inline]
pub fn e4m3_to_f32(b: u8) -> f32 {
    E4M3_TABLE[b as usize]
}

const fn e4m3_decode(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((b >> 3) & 0xF) as i32;
    let m = (b & 7) as f32;
    if e == 15 && b & 7 == 7 {
        return f32::NAN;
    }
    let v = if e == 0 {
        m / 8.0 / 64.0
    } else {
        let mut p = 1.0f32;
        let mut k = e - 7;
        while k > 0 {
            p *= 2.0;
            k -= 1;
        }
        while k < 0 {
            p /= 2.0;
            k += 1;
        }
        (1.0 + m / 8.0) * p
    };
    sign * v
}

/// All 256 E4M3 values (index = byte).
pub static E4M3_TABLE: [f32; 256] = {
    let mut t = [0.0f32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = e4m3_decode(i as u8);
        i += 1;
    }
    t
};

/// Value of an E4M3 byte by bit arithmetic (vectorises; same value as [`e4m3_to_f32`]
/// for every byte but the NaN codes 0x7F/0xFF, which stored weights never hold): the
/// exponent and mantissa bits placed in an f32 give the value times 2^-120 (subnormals
/// included), and the power-of-two product is exact.
#[inline(always)]
pub fn e4m3_to_f32_fast(b: u8) -> f32 {
    let b = b as u32;
    f32::from_bits(((b & 0x7F) << 20) | ((b & 0x80) << 24)) * f32::from_bits((127 + 120) << 23)
}

/// Both E2M1 values of a packed byte (low nibble first).
pub static E2M1_PAIRS: [[f32; 2]; 256] = {
    let mut t = [[0.0f32; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [E2M1_TABLE[i & 0xF], E2M1_TABLE[i >> 4]];
        i += 1;
    }
    t
};

/// Value of an E2M1 code (low 4 bits: sign bit 3, exponent bits 2-1, mantissa bit 0).
#[inline]
pub fn e2m1_to_f32(c: u8) -> f32 {
    E2M1_TABLE[(c & 0xF) as usize]
}

pub static E2M1_TABLE: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// Nearest code among the ascending non-negative values `pos` (code = index), ties to
/// the even code, saturating past the end.
fn nearest(pos: &[f32], a: f32) -> u8 {
    let n = pos.len();
    if a >= pos[n - 1] {
        return (n - 1) as u8;
    }
    // First index with pos[i] >= a (a < max, so i < n).
    let i = pos.partition_point(|&v| v < a);
    if i == 0 || pos[i] == a {
        return i as u8;
    }
    let (lo, hi) = (pos[i - 1] as f64, pos[i] as f64);
    let mid = (lo + hi) / 2.0;
    let a = a as f64;
    if a < mid {
        (i - 1) as u8
    } else if a > mid {
        i as u8
    } else if (i - 1) % 2 == 0 {
        (i - 1) as u8
    } else {
        i as u8
    }
}

/// E4M3 byte nearest to `x` (NaN encodes as 0x7F).
pub fn f32_to_e4m3(x: f32) -> u8 {
    if x.is_nan() {
        return 0x7F;
    }
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    // Codes 0x00..=0x7E are the non-negative finite values in ascending order.
    sign | nearest(&E4M3_TABLE[..0x7F], x.abs())
}

/// E2M1 code nearest to `x` (NaN encodes as 0).
pub fn f32_to_e2m1(x: f32) -> u8 {
    if x.is_nan() {
        return 0;
    }
    let sign = if x.is_sign_negative() { 8 } else { 0 };
    sign | nearest(&E2M1_TABLE[..8], x.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_table_check() {
        // (byte, value) pairs from the OCP FP8 specification.
        for (b, v) in [
            (0x00u8, 0.0f32),
            (0x01, 2f32.powi(-9)), // smallest subnormal
            (0x07, 7.0 / 8.0 * 2f32.powi(-6)),
            (0x08, 2f32.powi(-6)), // smallest normal
            (0x38, 1.0),
            (0x39, 1.125),
            (0x40, 2.0),
            (0x7E, 448.0),
            (0xB8, -1.0),
            (0xFE, -448.0),
        ] {
            assert_eq!(e4m3_to_f32(b), v, "byte {b:#x}");
            assert_eq!(f32_to_e4m3(v), b, "value {v}");
        }
        assert!(e4m3_to_f32(0x7F).is_nan() && e4m3_to_f32(0xFF).is_nan());
        for b in 0..=255u8 {
            if b & 0x7F != 0x7F {
                assert_eq!(
                    e4m3_to_f32_fast(b).to_bits(),
                    e4m3_to_f32(b).to_bits(),
                    "byte {b:#x}"
                );
            }
        }
        // Every finite byte round-trips.
        for b in 0..=255u8 {
            let v = e4m3_to_f32(b);
            if v.is_finite() && !(v == 0.0 && b == 0x80) {
                assert_eq!(f32_to_e4m3(v), b, "byte {b:#x}");
            }
        }
        // Rounding: ties to even, saturation.
        assert_eq!(f32_to_e4m3(1.0625), 0x38); // halfway 1 and 1.125 -> even mantissa (1.0)
        assert_eq!(f32_to_e4m3(1.1875), 0x3A); // halfway 1.125 and 1.25 -> 1.25
        assert_eq!(f32_to_e4m3(1.07), 0x39);
        assert_eq!(f32_to_e4m3(1e6), 0x7E);
        assert_eq!(f32_to_e4m3(-1e6), 0xFE);
        assert_eq!(f32_to_e4m3(2f32.powi(-11)), 0x00); // below half the smallest subnormal
    }

    #[test]
    fn e2m1_table_check() {
        let want = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
        for (c, &v) in want.iter().enumerate() {
            assert_eq!(e2m1_to_f32(c as u8), v);
            assert_eq!(e2m1_to_f32(c as u8 | 8), -v);
            assert_eq!(f32_to_e2m1(v), c as u8);
            if v != 0.0 {
                assert_eq!(f32_to_e2m1(-v), c as u8 | 8);
            }
        }
        assert_eq!(f32_to_e2m1(0.25), 0); // tie 0/0.5 -> even code 0
        assert_eq!(f32_to_e2m1(0.75), 2); // tie 0.5/1 -> code 2 (1.0)
        assert_eq!(f32_to_e2m1(2.5), 4); // tie 2/3 -> code 4 (2.0)
        assert_eq!(f32_to_e2m1(5.0), 6); // tie 4/6 -> code 6 (4.0)
        assert_eq!(f32_to_e2m1(5.1), 7);
        assert_eq!(f32_to_e2m1(100.0), 7);
        assert_eq!(f32_to_e2m1(-2.9), 13);
    }
}
