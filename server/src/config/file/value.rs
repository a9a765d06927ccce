//! Typed reads of parsed values: strings, integers, booleans, sizes and durations, with errors
//! that name the key and show what was found. Pure functions of the text; no config knowledge.

use std::time::Duration;

use super::error::ConfigError;
use super::syntax::{Entry, Node, Value};

impl Node {
    /// What the value is, for "got ..." in messages.
    fn found(&self) -> String {
        match &self.value {
            Value::Bare(s) => format!("{s:?}"),
            Value::Quoted(s) => format!("the quoted string {s:?}"),
            Value::Array(_) => "an array".to_string(),
            Value::Map(_) => "a block".to_string(),
        }
    }

    /// `expected <what> for "<key>", got <found>`, at this value.
    pub(super) fn expected(&self, what: &str, key: &str) -> ConfigError {
        self.invalid(format!("expected {what} for {key:?}, got {}", self.found()))
    }

    /// An error at this value.
    pub(super) fn invalid(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::invalid(&self.at, message)
    }

    /// A quoted string or a bare word, as text.
    pub(super) fn string(&self, key: &str) -> Result<String, ConfigError> {
        match &self.value {
            Value::Quoted(s) | Value::Bare(s) => Ok(s.clone()),
            _ => Err(self.expected("a string", key)),
        }
    }

    /// A bare decimal integer, optionally negative (a quoted number is a string, as in
    /// nats-server).
    pub(super) fn integer(&self, key: &str) -> Result<i64, ConfigError> {
        match &self.value {
            Value::Bare(s) => parse_integer(s).map_err(|why| match why {
                NumberError::Malformed => self.expected("a number", key),
                NumberError::TooBig => self.invalid(format!("number {s} for {key:?} is too big")),
            }),
            _ => Err(self.expected("a number", key)),
        }
    }

    /// `true`, `yes`, `on`, `false`, `no` or `off`, unquoted, in any case.
    pub(super) fn boolean(&self, key: &str) -> Result<bool, ConfigError> {
        match &self.value {
            Value::Bare(s) => parse_bool(s).ok_or_else(|| self.expected("true or false", key)),
            _ => Err(self.expected("true or false", key)),
        }
    }

    /// A size in bytes (see [`parse_size`]); may be negative (some keys use -1 for "unset").
    pub(super) fn size(&self, key: &str) -> Result<i64, ConfigError> {
        let parsed = match &self.value {
            Value::Bare(s) => parse_size(s, false),
            Value::Quoted(s) => parse_size(s, true),
            _ => Err(NumberError::Malformed),
        };
        parsed.map_err(|why| match why {
            NumberError::Malformed => self.expected("a size such as 1024, 64KB, 1MB or 2GB", key),
            NumberError::TooBig => {
                self.invalid(format!("size {} for {key:?} is too big", self.found()))
            }
        })
    }

    /// A duration: a Go duration string (`"2m"`, `"1h30m"`, `"500ms"`), or a bare number of
    /// seconds (`10`, `0.5`). Bare Go durations (`2m`) are durations too, which is what the
    /// user meant; nats-server reads a bare `2m` as 2,000,000 seconds.
    pub(super) fn duration(&self, key: &str) -> Result<Duration, ConfigError> {
        let parsed = match &self.value {
            Value::Bare(s) => parse_seconds(s).unwrap_or_else(|| parse_go_duration(s)),
            Value::Quoted(s) => parse_go_duration(s),
            _ => return Err(self.expected("a duration such as \"10s\" or \"2m\"", key)),
        };
        parsed.map_err(|why| {
            self.invalid(format!(
                "expected a duration such as \"10s\" or \"2m\" for {key:?}, got {}: {why}",
                self.found()
            ))
        })
    }

    /// The entries of a `{ }` block.
    pub(super) fn entries(&self, key: &str) -> Result<&[Entry], ConfigError> {
        match &self.value {
            Value::Map(entries) => Ok(entries),
            _ => Err(self.expected("a block { ... }", key)),
        }
    }

    /// The items of a `[ ]` array.
    pub(super) fn items(&self, key: &str) -> Result<&[Node], ConfigError> {
        match &self.value {
            Value::Array(items) => Ok(items),
            _ => Err(self.expected("an array [ ... ]", key)),
        }
    }
}

/// Why text is not a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NumberError {
    /// Not a number at all.
    Malformed,
    /// A number that does not fit in an `i64`.
    TooBig,
}

/// A decimal integer with an optional `-`.
pub(super) fn parse_integer(s: &str) -> Result<i64, NumberError> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NumberError::Malformed);
    }
    s.parse::<i64>().map_err(|_| NumberError::TooBig)
}

/// nats-server's boolean words.
pub(super) fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" => Some(true),
        "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// A size: an integer with an optional, case-insensitive suffix, as nats-server reads them.
///
/// Unquoted (nats-server's lexer): `k`, `m`, `g`, `t`, `p`, `e` are powers of 1000 and `kb`,
/// `ki`, `kib`, `mb`, ... are powers of 1024, so `1K` is 1000 and `1KB` is 1024.
/// Quoted (nats-server's rule for JetStream limits): `"1K"`, `"1G"` are powers of 1024, and so
/// are the two- and three-letter forms.
pub(super) fn parse_size(s: &str, quoted: bool) -> Result<i64, NumberError> {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let number = parse_integer(number)?;
    let suffix = suffix.to_ascii_lowercase();
    // The first character, not byte: a suffix may start with a multi-byte one.
    let mut chars = suffix.chars();
    let letter = chars.next();
    let rest = chars.as_str();
    let power = match letter {
        None => return Ok(number),
        Some('k') => 1,
        Some('m') => 2,
        Some('g') => 3,
        Some('t') => 4,
        Some('p') => 5,
        Some('e') => 6,
        Some(_) => return Err(NumberError::Malformed),
    };
    let base: i64 = match rest {
        "" if quoted => 1024,
        "" => 1000,
        "b" | "i" | "ib" => 1024,
        _ => return Err(NumberError::Malformed),
    };
    base.checked_pow(power)
        .and_then(|m| number.checked_mul(m))
        .ok_or(NumberError::TooBig)
}

/// A bare, non-negative number of seconds (`10` or `0.5`); `None` when `s` is not a plain number.
fn parse_seconds(s: &str) -> Option<Result<Duration, String>> {
    if s.is_empty()
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-')
    {
        return None;
    }
    let seconds: f64 = s.parse().ok()?;
    Some(
        Duration::try_from_secs_f64(seconds)
            .map_err(|_| "a duration can not be negative".to_string()),
    )
}

/// Go's `time.ParseDuration`, for non-negative durations: one or more `<number><unit>` with
/// units `ns`, `us` (`µs`), `ms`, `s`, `m`, `h`, and decimal fractions (`1.5h`); `0` alone is
/// zero.
pub(super) fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.starts_with('-') {
        return Err("a duration can not be negative".to_string());
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err("empty duration".to_string());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err("expected a number before the unit".to_string());
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let nanos_per_unit: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err("missing unit (ns, us, ms, s, m or h)".to_string()),
            other => return Err(format!("unknown unit {other:?}")),
        };
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| "number too big")?
        };
        let fraction = &fraction[..fraction.len().min(18)];
        let fraction_value: u128 = if fraction.is_empty() {
            0
        } else {
            fraction.parse().map_err(|_| "bad fraction")?
        };
        let scale = 10u128.pow(u32::try_from(fraction.len()).unwrap_or(18));
        total = whole
            .checked_mul(nanos_per_unit)
            .and_then(|w| w.checked_add(fraction_value * nanos_per_unit / scale))
            .and_then(|v| total.checked_add(v))
            .ok_or("duration too long")?;
        rest = after;
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| "duration too long")?;
    let nanos = u32::try_from(total % 1_000_000_000).unwrap_or(0);
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_nats_server_suffixes() {
        assert_eq!(parse_size("1024", false), Ok(1024));
        assert_eq!(parse_size("1K", false), Ok(1000));
        assert_eq!(parse_size("1k", false), Ok(1000));
        assert_eq!(parse_size("1KB", false), Ok(1024));
        assert_eq!(parse_size("1kib", false), Ok(1024));
        assert_eq!(parse_size("64MB", false), Ok(64 * 1024 * 1024));
        assert_eq!(parse_size("2G", false), Ok(2_000_000_000));
        assert_eq!(parse_size("1GB", false), Ok(1 << 30));
        assert_eq!(parse_size("1Gi", false), Ok(1 << 30));
        assert_eq!(parse_size("3TB", false), Ok(3 << 40));
        assert_eq!(parse_size("-1", false), Ok(-1));
    }

    #[test]
    fn quoted_sizes_are_binary_like_nats_server_strings() {
        assert_eq!(parse_size("1K", true), Ok(1024));
        assert_eq!(parse_size("2G", true), Ok(2 << 30));
        assert_eq!(parse_size("1gb", true), Ok(1 << 30));
        assert_eq!(parse_size("512", true), Ok(512));
    }

    #[test]
    fn malformed_and_overflowing_sizes_are_rejected() {
        assert_eq!(parse_size("", false), Err(NumberError::Malformed));
        assert_eq!(parse_size("MB", false), Err(NumberError::Malformed));
        // Found by the fuzz target: a multi-byte character right after the digits.
        assert_eq!(
            parse_size("1\u{fffd}MB", false),
            Err(NumberError::Malformed)
        );
        assert_eq!(parse_size("5é", true), Err(NumberError::Malformed));
        assert_eq!(parse_size("1XB", false), Err(NumberError::Malformed));
        assert_eq!(parse_size("1KBB", false), Err(NumberError::Malformed));
        assert_eq!(parse_size("1.5GB", false), Err(NumberError::Malformed));
        assert_eq!(parse_size("9000PB", false), Err(NumberError::TooBig));
        assert_eq!(
            parse_size("99999999999999999999", false),
            Err(NumberError::TooBig)
        );
    }

    #[test]
    fn go_durations_parse_like_time_parse_duration() {
        assert_eq!(parse_go_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_go_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_go_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert!(
            parse_go_duration("10")
                .unwrap_err()
                .contains("missing unit")
        );
        assert!(
            parse_go_duration("3d")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse_go_duration("-1s").unwrap_err().contains("negative"));
        assert!(parse_go_duration("").is_err());
        assert!(parse_go_duration("s").is_err());
    }

    #[test]
    fn bare_seconds_may_be_fractional() {
        assert_eq!(parse_seconds("10"), Some(Ok(Duration::from_secs(10))));
        assert_eq!(parse_seconds("0.5"), Some(Ok(Duration::from_millis(500))));
        assert!(matches!(parse_seconds("-3"), Some(Err(_))));
        assert_eq!(parse_seconds("2m"), None);
    }

    #[test]
    fn booleans_accept_nats_server_words_in_any_case() {
        for word in ["true", "YES", "On"] {
            assert_eq!(parse_bool(word), Some(true), "{word}");
        }
        for word in ["false", "No", "OFF"] {
            assert_eq!(parse_bool(word), Some(false), "{word}");
        }
        assert_eq!(parse_bool("enabled"), None);
    }
}
