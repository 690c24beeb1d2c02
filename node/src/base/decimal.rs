//! `INCRBYFLOAT`'s arithmetic, exact: a string's number and the increment
//! are read as decimals (what Redis' `strtold` accepts: a sign, digits, a
//! point, an exponent), added without rounding, and the sum kept to
//! [`PLACES`] decimal places (rounded half to even), written as Redis
//! writes it (`%.17Lf` with the trailing zeros cut, never an exponent,
//! never `-0`). Where Redis' long double is off in the last digit
//! (`0.1 + 0.2`), the decimal is not; a number past 38 significant digits
//! is refused rather than rounded.

/// Decimal places a sum keeps, as Redis' `%.17Lf`.
pub(crate) const PLACES: u32 = 17;
/// The most decimal places kept while adding, before the sum is rounded.
const SCALE_MAX: u32 = 36;

/// Redis' error for a value or an increment that is not a number.
pub(crate) const NOT_A_FLOAT: &str = "ERR value is not a valid float";
/// Redis' error for an infinite increment.
pub(crate) const NOT_FINITE: &str = "ERR increment would produce NaN or Infinity";
/// A number Tally cannot hold exactly.
pub(crate) const OUT_OF_RANGE: &str =
    "ERR increment or value out of range: at most 38 significant digits";

/// A decimal number: `mantissa × 10^-scale`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decimal {
    mantissa: i128,
    scale: u32,
}

impl Decimal {
    /// An integer.
    pub(crate) fn of(n: i64) -> Decimal {
        Decimal {
            mantissa: n.into(),
            scale: 0,
        }
    }

    /// `text` as a number, as Redis' `string2ld` reads it: no spaces, no
    /// NaN; an infinity is read (and refused with [`NOT_FINITE`]).
    pub(crate) fn parse(text: &[u8]) -> Result<Decimal, &'static str> {
        let s = std::str::from_utf8(text).map_err(|_| NOT_A_FLOAT)?;
        let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
        if ["inf", "infinity"].contains(&unsigned.to_ascii_lowercase().as_str()) {
            return Err(NOT_FINITE);
        }
        let negative = s.starts_with('-');
        let (number, exponent) = match unsigned.split_once(['e', 'E']) {
            Some((n, e)) => (n, parse_exponent(e)?),
            None => (unsigned, 0),
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(NOT_A_FLOAT);
        }
        let mut mantissa: i128 = 0;
        for c in whole.bytes().chain(fraction.bytes()) {
            if !c.is_ascii_digit() {
                return Err(NOT_A_FLOAT);
            }
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(i128::from(c - b'0')))
                .ok_or(OUT_OF_RANGE)?;
        }
        let mantissa = if negative { -mantissa } else { mantissa };
        // The value is mantissa × 10^(exponent - fraction digits).
        let shift = exponent - i64::try_from(fraction.len()).map_err(|_| OUT_OF_RANGE)?;
        Decimal::scaled(mantissa, shift)
    }

    /// `mantissa × 10^shift`, as a decimal of at most [`SCALE_MAX`] places
    /// (more are rounded, half to even).
    fn scaled(mantissa: i128, shift: i64) -> Result<Decimal, &'static str> {
        if shift >= 0 {
            let factor = pow10(u32::try_from(shift).map_err(|_| OUT_OF_RANGE)?)?;
            let mantissa = mantissa.checked_mul(factor).ok_or(OUT_OF_RANGE)?;
            return Ok(Decimal { mantissa, scale: 0 });
        }
        let scale = u32::try_from(-shift).map_err(|_| OUT_OF_RANGE)?;
        let exact = Decimal { mantissa, scale };
        Ok(match scale > SCALE_MAX {
            true => exact.rounded(SCALE_MAX),
            false => exact,
        })
    }

    /// The sum, exact, then kept to [`PLACES`] places.
    pub(crate) fn add(self, other: Decimal) -> Result<Decimal, &'static str> {
        let scale = self.scale.max(other.scale);
        let widen = |d: Decimal| {
            pow10(scale - d.scale).and_then(|f| d.mantissa.checked_mul(f).ok_or(OUT_OF_RANGE))
        };
        let mantissa = widen(self)?
            .checked_add(widen(other)?)
            .ok_or(OUT_OF_RANGE)?;
        Ok(Decimal { mantissa, scale }.rounded(PLACES))
    }

    /// Kept to `places` decimal places, rounded half to even.
    fn rounded(self, places: u32) -> Decimal {
        if self.scale <= places {
            return self;
        }
        let drop = self.scale - places;
        // 10^drop for drop up to 38 fits; a larger drop leaves zero.
        let Ok(factor) = pow10(drop) else {
            return Decimal {
                mantissa: 0,
                scale: places,
            };
        };
        let (q, r) = (self.mantissa / factor, self.mantissa % factor);
        let twice = r.abs() * 2;
        let up = twice > factor || (twice == factor && q % 2 != 0);
        let mantissa = match (up, self.mantissa < 0) {
            (false, _) => q,
            (true, false) => q + 1,
            (true, true) => q - 1,
        };
        Decimal {
            mantissa,
            scale: places,
        }
    }

    /// The integer this is, if it is one that fits 64 bits.
    pub(crate) fn as_integer(self) -> Option<i64> {
        let factor = pow10(self.scale).ok()?;
        (self.mantissa % factor == 0)
            .then(|| i64::try_from(self.mantissa / factor).ok())
            .flatten()
    }
}

impl std::fmt::Display for Decimal {
    /// As Redis writes a float: fixed point, the trailing zeros (and a
    /// bare point) cut, zero without a sign.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let digits = self.mantissa.unsigned_abs().to_string();
        let scale = self.scale as usize;
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (whole, fraction) = padded.split_at(padded.len() - scale);
        let fraction = fraction.trim_end_matches('0');
        let sign = match self.mantissa < 0 && (whole != "0" || !fraction.is_empty()) {
            true => "-",
            false => "",
        };
        match fraction.is_empty() {
            true => write!(f, "{sign}{whole}"),
            false => write!(f, "{sign}{whole}.{fraction}"),
        }
    }
}

/// `INCRBYFLOAT`'s rule: `current` (a string's bytes, or none) read as a
/// number plus `by`, as the string to store.
pub(crate) fn incr_by_float(current: Option<&[u8]>, by: Decimal) -> Result<Vec<u8>, &'static str> {
    let before = match current {
        Some(v) => Decimal::parse(v)?,
        None => Decimal::of(0),
    };
    Ok(before.add(by)?.to_string().into_bytes())
}

fn parse_exponent(e: &str) -> Result<i64, &'static str> {
    let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err(NOT_A_FLOAT);
    }
    // Held at a million: far past any exponent a decimal here can take.
    let n = digits
        .bytes()
        .fold(0i64, |n, c| (n * 10 + i64::from(c - b'0')).min(1_000_000));
    Ok(if e.starts_with('-') { -n } else { n })
}

fn pow10(n: u32) -> Result<i128, &'static str> {
    10i128.checked_pow(n).ok_or(OUT_OF_RANGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(a: &str, b: &str) -> Result<String, &'static str> {
        let by = Decimal::parse(b.as_bytes())?;
        incr_by_float(Some(a.as_bytes()), by).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn adds_as_redis_writes_it() {
        assert_eq!(sum("10.50", "0.1"), Ok("10.6".into()));
        assert_eq!(sum("10.6", "-5"), Ok("5.6".into()));
        assert_eq!(sum("5.0e3", "2.0e2"), Ok("5200".into()));
        assert_eq!(sum("1.5", "1.5"), Ok("3".into()));
        assert_eq!(sum("17179869184", "1.5"), Ok("17179869185.5".into()));
        assert_eq!(sum("1", "-1.1"), Ok("-0.1".into()));
        assert_eq!(sum("0.1", "0.2"), Ok("0.3".into()));
        assert_eq!(sum(".5", "1."), Ok("1.5".into()));
        assert_eq!(sum("-0.5", "+0.25"), Ok("-0.25".into()));
        assert_eq!(sum("1E-2", "0"), Ok("0.01".into()));
    }

    #[test]
    fn keeps_seventeen_places_rounded_half_to_even_and_no_negative_zero() {
        let third = "0.024390243902439025";
        assert_eq!(sum("0", third), Ok("0.02439024390243902".into()));
        assert_eq!(
            sum("0.02439024390243902", &format!("-{third}")),
            Ok("0".into())
        );
        assert_eq!(
            sum("0", "0.000000000000000015"),
            Ok("0.00000000000000002".into())
        );
        assert_eq!(sum("0", "-0.000000000000000005"), Ok("0".into()));
        assert_eq!(sum("-1", "1"), Ok("0".into()));
    }

    #[test]
    fn refuses_what_redis_refuses() {
        for bad in [
            "", " 11", "11 ", "1 1", "abc", "1.2.3", "1e", "e5", ".", "nan", "1\u{0}2", "0x10",
        ] {
            assert_eq!(sum(bad, "1"), Err(NOT_A_FLOAT), "{bad:?}");
            assert_eq!(sum("1", bad), Err(NOT_A_FLOAT), "{bad:?}");
        }
        for inf in ["inf", "+inf", "-Infinity"] {
            assert_eq!(sum("0", inf), Err(NOT_FINITE));
            assert_eq!(sum(inf, "1"), Err(NOT_FINITE));
        }
    }

    #[test]
    fn refuses_what_it_cannot_hold_exactly() {
        assert_eq!(sum("1e40", "1"), Err(OUT_OF_RANGE));
        assert_eq!(sum("1", "1e99999999"), Err(OUT_OF_RANGE));
        assert_eq!(
            sum("170141183460469231731687303715884105727", "1"),
            Err(OUT_OF_RANGE)
        );
        assert_eq!(sum("1e-99999999", "1"), Ok("1".into()));
    }

    #[test]
    fn tells_an_integer() {
        assert_eq!(Decimal::parse(b"5.0e3").unwrap().as_integer(), Some(5000));
        assert_eq!(Decimal::parse(b"-2.000").unwrap().as_integer(), Some(-2));
        assert_eq!(Decimal::parse(b"1.5").unwrap().as_integer(), None);
        assert_eq!(Decimal::parse(b"1e30").unwrap().as_integer(), None);
    }
}
