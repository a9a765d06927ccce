//! Time and duration formats nats-server uses in its monitoring JSON.

use std::time::Duration;

/// Go's RFC 3339 with nanoseconds in UTC (trailing zeros trimmed), as in
/// `2026-12-02T08:17:47.555474235Z`.
pub fn rfc3339(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");
    let Ok(mut s) = t.format(&fmt) else {
        return "0001-01-01T00:00:00Z".to_string();
    };
    let nanos = t.nanosecond();
    if nanos > 0 {
        let digits = format!("{nanos:09}");
        s.push('.');
        s.push_str(digits.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// nats-server's uptime format: `52s`, `3m4s`, `2h0m1s`, `1d2h3m4s`, `1y2d...`.
pub fn uptime_string(d: Duration) -> String {
    let mut secs = d.as_secs();
    let years = secs / (365 * 86400);
    secs %= 365 * 86400;
    let days = secs / 86400;
    secs %= 86400;
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    if years > 0 {
        format!("{years}y{days}d{h}h{m}m{s}s")
    } else if days > 0 {
        format!("{days}d{h}h{m}m{s}s")
    } else if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// Go's `time.Duration.String()`: `0s`, `1.5µs`, `301.4ms`, `2.5s`, `1m30s`, `1h0m0s`.
pub fn go_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".to_string();
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", trim_fraction(ns, 1_000));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", trim_fraction(ns, 1_000_000));
    }
    let total_secs = ns / 1_000_000_000;
    let frac_ns = ns % 1_000_000_000;
    let (h, m, s) = (total_secs / 3600, (total_secs % 3600) / 60, total_secs % 60);
    let secs = trim_fraction(
        u128::from(s as u64) * 1_000_000_000 + frac_ns,
        1_000_000_000,
    );
    if h > 0 {
        format!("{h}h{m}m{secs}s")
    } else if m > 0 {
        format!("{m}m{secs}s")
    } else {
        format!("{secs}s")
    }
}

/// `value / unit` with the fractional part printed without trailing zeros.
fn trim_fraction(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let frac = value % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.to_string().len() - 1;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_match_go() {
        assert_eq!(go_duration(Duration::ZERO), "0s");
        assert_eq!(go_duration(Duration::from_nanos(500)), "500ns");
        assert_eq!(go_duration(Duration::from_nanos(1500)), "1.5µs");
        assert_eq!(go_duration(Duration::from_micros(301_400)), "301.4ms");
        assert_eq!(go_duration(Duration::from_millis(2500)), "2.5s");
        assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
    }

    #[test]
    fn uptimes_match_nats_server() {
        assert_eq!(uptime_string(Duration::from_secs(52)), "52s");
        assert_eq!(uptime_string(Duration::from_secs(184)), "3m4s");
        assert_eq!(uptime_string(Duration::from_secs(7201)), "2h0m1s");
        assert_eq!(uptime_string(Duration::from_secs(93784)), "1d2h3m4s");
    }

    #[test]
    fn rfc3339_has_nanoseconds_and_z() {
        let t = time::OffsetDateTime::from_unix_timestamp_nanos(1_000_000_000_123_456_789).unwrap();
        assert_eq!(rfc3339(t), "2001-09-09T01:46:40.123456789Z");
        let t = time::OffsetDateTime::from_unix_timestamp_nanos(1_000_000_000_120_000_000).unwrap();
        assert_eq!(rfc3339(t), "2001-09-09T01:46:40.12Z");
        let t = time::OffsetDateTime::from_unix_timestamp(1_000_000_000).unwrap();
        assert_eq!(rfc3339(t), "2001-09-09T01:46:40Z");
    }
}
