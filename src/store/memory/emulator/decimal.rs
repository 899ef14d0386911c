//! Exact decimal numbers as DynamoDB keeps them: up to 38 significant digits, magnitudes
//! from 1E-130 to below 1E+126, sums and differences without rounding (never through `f64`).

use std::cmp::Ordering;
use std::fmt;

/// Most significant digits a DynamoDB number has.
const MAX_DIGITS: usize = 38;
/// Largest order of magnitude: a number is below `10^MAX_ORDER`.
const MAX_ORDER: i64 = 126;
/// Smallest order of magnitude of a non-zero number: it is at least `10^(MIN_ORDER - 1)`.
const MIN_ORDER: i64 = -129;
/// Cap on a parsed exponent, far outside the range, so exponent arithmetic cannot overflow.
const EXPONENT_CAP: i64 = 1_000_000_000;

/// A DynamoDB number: `digits × 10^exponent`, negated when `negative`. The digits have no
/// leading or trailing zero, so equal numbers have equal fields; zero has no digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Decimal {
    /// Whether the number is below zero (never set for zero).
    negative: bool,
    /// Significant digits, most significant first, each `0..=9`.
    digits: Vec<u8>,
    /// The power of ten the digits are scaled by.
    exponent: i64,
}

/// Why a text or a result is not a number DynamoDB can store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NumberError {
    /// The text is not a decimal number.
    NotANumber(String),
    /// More than 38 significant digits.
    Precision,
    /// A magnitude of 1E+126 or more.
    Overflow,
    /// A non-zero magnitude below 1E-130.
    Underflow,
}

impl fmt::Display for NumberError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotANumber(text) => {
                write!(
                    f,
                    "A value provided cannot be converted into a number: {text:?}"
                )
            }
            Self::Precision => f.write_str("DynamoDB only supports precision up to 38 digits"),
            Self::Overflow => f.write_str(
                "Number overflow. Attempting to store a number with magnitude larger than \
                 supported range",
            ),
            Self::Underflow => f.write_str(
                "Number underflow. Attempting to store a number with magnitude smaller than \
                 supported range",
            ),
        }
    }
}

impl std::error::Error for NumberError {}

impl Decimal {
    /// Parses DynamoDB number text: an optional sign, digits with an optional decimal point
    /// (`5.`, `.5`), an optional exponent (`1E-3`); no spaces, no `Infinity` or `NaN`.
    pub(crate) fn parse(text: &str) -> Result<Self, NumberError> {
        let not_a_number = || NumberError::NotANumber(text.to_owned());
        let mut bytes = text.bytes().peekable();
        let negative = match bytes.peek() {
            Some(b'-') => bytes.next().is_some(),
            Some(b'+') => bytes.next().is_none(),
            _ => false,
        };
        let (mut digits, mut fraction_digits, mut seen_digit, mut seen_point) =
            (Vec::new(), 0_i64, false, false);
        while let Some(&byte) = bytes.peek() {
            match byte {
                b'0'..=b'9' => {
                    seen_digit = true;
                    if !(digits.is_empty() && byte == b'0') {
                        digits.push(byte - b'0');
                    }
                    fraction_digits += i64::from(seen_point);
                }
                b'.' if !seen_point => seen_point = true,
                _ => break,
            }
            bytes.next();
        }
        if !seen_digit {
            return Err(not_a_number());
        }
        let mut exponent = 0_i64;
        if bytes.next_if(|b| matches!(b, b'e' | b'E')).is_some() {
            let exponent_negative = match bytes.peek() {
                Some(b'-') => bytes.next().is_some(),
                Some(b'+') => bytes.next().is_none(),
                _ => false,
            };
            let mut any = false;
            while let Some(digit) = bytes.next_if(u8::is_ascii_digit) {
                any = true;
                exponent = (exponent * 10 + i64::from(digit - b'0')).min(EXPONENT_CAP);
            }
            if !any {
                return Err(not_a_number());
            }
            if exponent_negative {
                exponent = -exponent;
            }
        }
        if bytes.next().is_some() {
            return Err(not_a_number());
        }
        Self::normalized(negative, digits, exponent - fraction_digits)
    }

    /// The number with `digits` (most significant first, possibly zero-padded) scaled by
    /// `10^exponent`, or why DynamoDB cannot store it.
    fn normalized(negative: bool, digits: Vec<u8>, exponent: i64) -> Result<Self, NumberError> {
        let start = digits.iter().position(|&d| d != 0).unwrap_or(digits.len());
        let end = digits
            .iter()
            .rposition(|&d| d != 0)
            .map_or(start, |last| last + 1);
        let significant = digits.get(start..end).unwrap_or_default().to_vec();
        if significant.is_empty() {
            return Ok(Self::zero());
        }
        let exponent = exponent + (digits.len() - end) as i64;
        let number = Self {
            negative,
            digits: significant,
            exponent,
        };
        if number.digits.len() > MAX_DIGITS {
            Err(NumberError::Precision)
        } else if number.order() > MAX_ORDER {
            Err(NumberError::Overflow)
        } else if number.order() < MIN_ORDER {
            Err(NumberError::Underflow)
        } else {
            Ok(number)
        }
    }

    /// Zero.
    fn zero() -> Self {
        Self {
            negative: false,
            digits: Vec::new(),
            exponent: 0,
        }
    }

    /// The order of magnitude: the number's absolute value is in `[10^(order-1), 10^order)`.
    fn order(&self) -> i64 {
        self.digits.len() as i64 + self.exponent
    }

    /// The exact sum, or why DynamoDB cannot store it.
    pub(crate) fn add(&self, other: &Self) -> Result<Self, NumberError> {
        if self.digits.is_empty() || other.digits.is_empty() {
            return Ok(if self.digits.is_empty() { other } else { self }.clone());
        }
        let exponent = self.exponent.min(other.exponent);
        let (a, b) = (self.little_endian(exponent), other.little_endian(exponent));
        let (negative, mut sum) = if self.negative == other.negative {
            (self.negative, add_magnitudes(&a, &b))
        } else {
            match compare_magnitudes(&a, &b) {
                Ordering::Equal => return Ok(Self::zero()),
                Ordering::Greater => (self.negative, subtract_magnitudes(&a, &b)),
                Ordering::Less => (other.negative, subtract_magnitudes(&b, &a)),
            }
        };
        sum.reverse();
        Self::normalized(negative, sum, exponent)
    }

    /// The exact difference `self - other`, or why DynamoDB cannot store it.
    pub(crate) fn subtract(&self, other: &Self) -> Result<Self, NumberError> {
        let negated = Self {
            negative: !other.negative && !other.digits.is_empty(),
            ..other.clone()
        };
        self.add(&negated)
    }

    /// The digits least significant first, scaled to `10^exponent` (at most this number's).
    fn little_endian(&self, exponent: i64) -> Vec<u8> {
        let shift = usize::try_from(self.exponent - exponent).unwrap_or(0);
        let mut digits = vec![0; shift];
        digits.extend(self.digits.iter().rev());
        digits
    }
}

/// Compares magnitudes given least significant digit first, without leading zeros.
fn compare_magnitudes(a: &[u8], b: &[u8]) -> Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.iter().rev().cmp(b.iter().rev()))
}

/// Adds magnitudes given least significant digit first.
fn add_magnitudes(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut sum = Vec::with_capacity(a.len().max(b.len()) + 1);
    let mut carry = 0;
    for i in 0..a.len().max(b.len()) {
        let total = a.get(i).unwrap_or(&0) + b.get(i).unwrap_or(&0) + carry;
        sum.push(total % 10);
        carry = total / 10;
    }
    sum.push(carry);
    sum
}

/// Subtracts `b` from the larger magnitude `a`, both least significant digit first.
fn subtract_magnitudes(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut difference = Vec::with_capacity(a.len());
    let mut borrow = 0;
    for (i, &digit) in a.iter().enumerate() {
        let taken = b.get(i).unwrap_or(&0) + borrow;
        borrow = u8::from(digit < taken);
        difference.push(digit + 10 * borrow - taken);
    }
    difference
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        let sign = |n: &Self| match (n.digits.is_empty(), n.negative) {
            (true, _) => 0,
            (false, true) => -1,
            (false, false) => 1,
        };
        let magnitude = || {
            let by_magnitude = self
                .order()
                .cmp(&other.order())
                .then_with(|| self.digits.cmp(&other.digits));
            if self.negative {
                by_magnitude.reverse()
            } else {
                by_magnitude
            }
        };
        sign(self).cmp(&sign(other)).then_with(magnitude)
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Plain decimal text, as DynamoDB returns numbers: `0`, `-2.5`, `1000`, `0.001`.
impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.digits.is_empty() {
            return f.write_str("0");
        }
        let text: String = self.digits.iter().map(|&d| char::from(b'0' + d)).collect();
        let sign = if self.negative { "-" } else { "" };
        let point = self.order();
        if self.exponent >= 0 {
            write!(f, "{sign}{text}{}", "0".repeat(self.exponent as usize))
        } else if point > 0 {
            let (whole, fraction) = text.split_at(point as usize);
            write!(f, "{sign}{whole}.{fraction}")
        } else {
            write!(
                f,
                "{sign}0.{}{text}",
                "0".repeat(point.unsigned_abs() as usize)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A number that must parse.
    fn number(text: &str) -> Decimal {
        Decimal::parse(text).unwrap()
    }

    #[test]
    fn parses_dynamodb_number_text_and_prints_it_canonically() {
        for (text, canonical) in [
            ("0", "0"),
            ("-0", "0"),
            ("+5", "5"),
            ("0005.500", "5.5"),
            (".5", "0.5"),
            ("5.", "5"),
            ("1E3", "1000"),
            ("+1e+3", "1000"),
            ("123.456e3", "123456"),
            ("-2.50", "-2.5"),
            ("1e-10", "0.0000000001"),
            ("0.00", "0"),
            ("-0.05", "-0.05"),
        ] {
            assert_eq!(number(text).to_string(), canonical, "{text}");
        }
        for text in [
            "", "-", ".", "abc", " 5", "5 ", "1e", "1e+", "--1", "1.2.3", "Infinity", "NaN",
            "0x10", "١",
        ] {
            assert!(
                matches!(Decimal::parse(text), Err(NumberError::NotANumber(_))),
                "{text:?}"
            );
        }
    }

    #[test]
    fn enforces_dynamodb_limits() {
        assert_eq!(Decimal::parse(&"9".repeat(39)), Err(NumberError::Precision));
        assert!(Decimal::parse(&format!("{}00", "9".repeat(38))).is_ok());
        assert!(Decimal::parse("9.9999999999999999999999999999999999999E+125").is_ok());
        assert_eq!(Decimal::parse("1E126"), Err(NumberError::Overflow));
        assert!(Decimal::parse("1E-130").is_ok());
        assert_eq!(Decimal::parse("0.9E-130"), Err(NumberError::Underflow));
        assert_eq!(
            Decimal::parse("1e99999999999999999999"),
            Err(NumberError::Overflow)
        );
        assert_eq!(
            Decimal::parse("0e99999999999999999999").map(|n| n.to_string()),
            Ok("0".into())
        );
    }

    #[test]
    fn adds_and_subtracts_exactly() {
        let sum = |a: &str, b: &str| number(a).add(&number(b)).map(|n| n.to_string());
        let difference = |a: &str, b: &str| number(a).subtract(&number(b)).map(|n| n.to_string());
        assert_eq!(sum("0.1", "0.2"), Ok("0.3".into()));
        assert_eq!(difference("0.1", "0.2"), Ok("-0.1".into()));
        assert_eq!(sum("2.50", "-0.50"), Ok("2".into()));
        assert_eq!(sum("-5", "5"), Ok("0".into()));
        assert_eq!(difference("-0", "0"), Ok("0".into()));
        assert_eq!(
            sum("12345678901234567890123456789012345678", "1"),
            Ok("12345678901234567890123456789012345679".into())
        );
        assert_eq!(
            sum(&"9".repeat(38), "1"),
            Ok(format!("1{}", "0".repeat(38)))
        );
        assert_eq!(sum("1E30", "1E-30"), Err(NumberError::Precision));
        assert_eq!(difference("-9.9E125", "1E125"), Err(NumberError::Overflow));
        assert_eq!(
            difference("2E-130", "1.5E-130"),
            Err(NumberError::Underflow)
        );
        assert_eq!(sum("999.999", "0.001"), Ok("1000".into()));
        assert_eq!(difference("1000", "0.001"), Ok("999.999".into()));
    }

    #[test]
    fn orders_by_value() {
        let ordered = [
            "-1E125", "-10", "-9.99", "-0.001", "0", "1E-130", "0.5", "1", "1.0001", "10", "9E125",
        ];
        for pair in ordered.windows(2) {
            assert!(number(pair[0]) < number(pair[1]), "{pair:?}");
        }
        assert_eq!(number("1.50"), number("1.5"));
        assert_eq!(number("-0").cmp(&number("0")), Ordering::Equal);
    }
}
