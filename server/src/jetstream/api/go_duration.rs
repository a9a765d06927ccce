//! Go's `time.Duration` text forms: [`format`] is `Duration.String()` (used in status texts such
//! as `409 Exceeded MaxRequestExpires of 1.5s`) and [`parse`] is `time.ParseDuration` (used by
//! `-NAK 5s`).
//!
//! Pure and total: no input panics. Both follow the Go standard library's algorithm, so the
//! texts are byte-identical (including the `µ` micro sign, U+00B5).

const NANOSECOND: u64 = 1;
const MICROSECOND: u64 = 1_000 * NANOSECOND;
const MILLISECOND: u64 = 1_000 * MICROSECOND;
const SECOND: u64 = 1_000 * MILLISECOND;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;

/// Formats `ns` nanoseconds as Go's `time.Duration.String()`: `0s`, `1ns`, `1.5µs`, `100ms`,
/// `1.5s`, `2m0s`, `1h0m0s`, `-3s`.
pub fn format(ns: i64) -> String {
    let neg = ns < 0;
    let mut u = ns.unsigned_abs();
    // Built back to front, as Go does, then reversed.
    let mut out = String::new();
    if u < SECOND {
        if u == 0 {
            return "0s".to_string();
        }
        let (unit, prec) = if u < MICROSECOND {
            ("ns", 0)
        } else if u < MILLISECOND {
            ("µs", 3)
        } else {
            ("ms", 6)
        };
        let (frac, rest) = fraction(u, prec);
        out.push_str(&rest.to_string());
        out.push_str(&frac);
        out.push_str(unit);
    } else {
        let (frac, secs) = fraction(u, 9);
        u = secs;
        let s = u % 60;
        u /= 60;
        if u > 0 {
            let m = u % 60;
            u /= 60;
            if u > 0 {
                out.push_str(&format!("{u}h"));
            }
            out.push_str(&format!("{m}m"));
        }
        out.push_str(&format!("{s}{frac}s"));
    }
    if neg {
        out.insert(0, '-');
    }
    out
}

/// Splits `v` into the fraction `v % 10^prec` as `.ddd` without trailing zeros (empty when
/// zero) and the integer part `v / 10^prec`.
fn fraction(v: u64, prec: u32) -> (String, u64) {
    let scale = 10u64.pow(prec);
    let frac = v % scale;
    if frac == 0 {
        return (String::new(), v / scale);
    }
    let digits = format!("{frac:0width$}", width = prec as usize);
    (format!(".{}", digits.trim_end_matches('0')), v / scale)
}

/// Parses a Go duration string (`300ms`, `-1.5h`, `2h45m`, `1µs`, `0`) into nanoseconds, as
/// `time.ParseDuration` does; `None` where Go returns an error (empty, missing unit, unknown
/// unit, overflow).
pub fn parse(s: &str) -> Option<i64> {
    const LIMIT: u64 = 1 << 63;
    let mut rest = s;
    let mut neg = false;
    if let Some(r) = rest.strip_prefix('-') {
        neg = true;
        rest = r;
    } else if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    }
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        // Integer part (Go's leadingInt: an error past 1<<63).
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let mut value: u64 = 0;
        for b in rest[..int_len].bytes() {
            if value > LIMIT / 10 {
                return None;
            }
            value = value * 10 + u64::from(b - b'0');
            if value > LIMIT {
                return None;
            }
        }
        rest = &rest[int_len..];
        // Fraction (Go's leadingFraction: digits past 63 bits are dropped; the scale is a
        // float64, and so is the arithmetic below, so rounding matches Go's).
        let mut frac: u64 = 0;
        let mut scale: f64 = 1.0;
        let mut frac_len = 0;
        if let Some(r) = rest.strip_prefix('.') {
            frac_len = r.bytes().take_while(u8::is_ascii_digit).count();
            let mut overflow = false;
            for b in r[..frac_len].bytes() {
                if overflow {
                    continue;
                }
                if frac > (LIMIT - 1) / 10 {
                    overflow = true;
                    continue;
                }
                let y = frac * 10 + u64::from(b - b'0');
                if y > LIMIT {
                    overflow = true;
                    continue;
                }
                frac = y;
                scale *= 10.0;
            }
            rest = &r[frac_len..];
        }
        if int_len == 0 && frac_len == 0 {
            return None;
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(rest.len(), |(i, _)| i);
        let unit = match &rest[..unit_len] {
            "ns" => NANOSECOND,
            "us" | "µs" | "μs" => MICROSECOND,
            "ms" => MILLISECOND,
            "s" => SECOND,
            "m" => MINUTE,
            "h" => HOUR,
            _ => return None,
        };
        rest = &rest[unit_len..];
        if value > LIMIT / unit {
            return None;
        }
        let mut v = value * unit;
        if frac > 0 {
            // `as` saturates; the bound check below catches anything that large.
            v = v.checked_add((frac as f64 * (unit as f64 / scale)) as u64)?;
            if v > LIMIT {
                return None;
            }
        }
        total = total.checked_add(v)?;
        if total > LIMIT {
            return None;
        }
    }
    if neg {
        // total <= 1<<63, so the negation fits (i64::MIN at the bound).
        Some((-(i128::from(total))) as i64)
    } else {
        i64::try_from(total).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_matches_go_duration_string() {
        // Expected texts are Go's `time.Duration(n).String()` (time/time_test.go durationTests,
        // plus the 1.5s nats-server 2.15.1 printed for max_expires 1500000000).
        let cases: &[(i64, &str)] = &[
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1µs"),
            (2_200_000, "2.2ms"),
            (3_300_000_000, "3.3s"),
            (1_500_000_000, "1.5s"),
            (1_000_000_000, "1s"),
            (100_000_000, "100ms"),
            (1_000, "1µs"),
            (4 * 60 * 1_000_000_000 + 5_000_000_000, "4m5s"),
            (4 * 60 * 1_000_000_000 + 5_001_000_000, "4m5.001s"),
            (120_000_000_000, "2m0s"),
            (3_600_000_000_000, "1h0m0s"),
            (
                5 * 3_600_000_000_000 + 6 * 60_000_000_000 + 7_001_000_000,
                "5h6m7.001s",
            ),
            (8 * 60_000_000_000 + 1, "8m0.000000001s"),
            (-1, "-1ns"),
            (-3_000_000_000, "-3s"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ];
        for &(ns, want) in cases {
            assert_eq!(format(ns), want, "{ns}");
        }
    }

    #[test]
    fn parse_matches_go_parse_duration() {
        let ok: &[(&str, i64)] = &[
            ("0", 0),
            ("5s", 5_000_000_000),
            ("30s", 30_000_000_000),
            ("1478s", 1_478_000_000_000),
            ("-5s", -5_000_000_000),
            ("+5s", 5_000_000_000),
            ("-0", 0),
            ("+0", 0),
            ("5.0s", 5_000_000_000),
            ("5.6s", 5_600_000_000),
            ("5.s", 5_000_000_000),
            (".5s", 500_000_000),
            ("1.004s", 1_004_000_000),
            ("100.00100s", 100_001_000_000),
            ("10ns", 10),
            ("11us", 11_000),
            ("12µs", 12_000),
            ("12μs", 12_000),
            ("13ms", 13_000_000),
            ("14s", 14_000_000_000),
            ("15m", 900_000_000_000),
            ("16h", 57_600_000_000_000),
            ("3h30m", 12_600_000_000_000),
            ("10.5s4m", 250_500_000_000),
            ("-2m3.4s", -123_400_000_000),
            ("1h2m3s4ms5us6ns", 3_723_004_005_006),
            ("39h9m14.425s", 140_954_425_000_000),
            ("52763797000ns", 52_763_797_000),
            ("0.3333333333333333333h", 1_200_000_000_000),
            ("9223372036854775807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("0.100000000000000000000h", 360_000_000_000),
        ];
        for &(s, want) in ok {
            assert_eq!(parse(s), Some(want), "{s}");
        }
        for bad in [
            "",
            "3",
            "-",
            "s",
            ".",
            "-.",
            ".s",
            "+.s",
            "1d",
            "\u{85}\u{85}",
            "5 s",
            "3000000h",
            "9223372036854775808ns",
            "9223372036854775.808us",
            "-9223372036854775809ns",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn format_then_parse_round_trips() {
        for ns in [1, 999, 1_000, 1_500_000_000, 123_456_789_012, -42_000_000] {
            assert_eq!(parse(&format(ns)), Some(ns));
        }
    }
}
