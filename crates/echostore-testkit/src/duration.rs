//! Durations on the command line of every tool (the `echostore` readouts and `check`): `50ms`,
//! `1s`, `250us`, `1.5s`, `2m`.
//!
//! A number (integer or decimal) followed by a unit: `ns`, `us` (or `µs`), `ms`, `s`, `m`. The
//! unit is required, so `50` is refused rather than guessed; only `0` needs none. Used as a clap
//! `value_parser`.

use std::time::Duration;

/// Parses a duration such as `50ms` or `1.5s`.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{text:?} has no unit: write e.g. 50ms or 1s"))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a number: write e.g. 50ms or 1s"))?;
    let seconds_per_unit = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: use ns, us, ms, s or m"
            ));
        }
    };
    Duration::try_from_secs_f64(number * seconds_per_unit)
        .map_err(|e| format!("{text:?} is not a usable duration: {e}"))
}

/// Renders a duration the way [`parse`] reads it, in its most natural unit.
pub fn render(d: Duration) -> String {
    if d.is_zero() {
        "0ms".to_owned()
    } else if d.as_nanos().is_multiple_of(1_000_000_000) {
        format!("{}s", d.as_secs())
    } else if d.as_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else if d.as_nanos().is_multiple_of(1_000) {
        format!("{}us", d.as_micros())
    } else {
        format!("{}ns", d.as_nanos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The units the flags accept parse to the expected durations.
    #[test]
    fn parses_common_units() {
        assert_eq!(parse("50ms"), Ok(Duration::from_millis(50)));
        assert_eq!(parse("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
    }

    /// A bare number other than 0, an unknown unit or garbage is refused with a message.
    #[test]
    fn refuses_what_it_cannot_read() {
        assert!(parse("50").is_err());
        assert!(parse("50 parsecs").is_err());
        assert!(parse("ms").is_err());
        assert!(parse("").is_err());
    }

    /// Rendering picks the largest exact unit.
    #[test]
    fn renders_in_natural_units() {
        assert_eq!(render(Duration::from_millis(50)), "50ms");
        assert_eq!(render(Duration::from_secs(2)), "2s");
        assert_eq!(render(Duration::from_micros(1500)), "1500us");
    }
}
