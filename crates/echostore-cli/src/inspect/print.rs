//! `inspect`'s human readout: each key, then its fields one per line, times as unix ms with
//! "fresh for 12.3 s more" / "stale for 4.1 s" beside them.

use super::{EnvelopeReport, InspectReport, LockReport, ValueReport};
use crate::output::grouped;

/// Prints the report for a person.
pub(super) fn human(r: &InspectReport) {
    let ns = r
        .namespace
        .as_deref()
        .map_or_else(String::new, |ns| format!(" · namespace {ns}"));
    println!("inspect {} {}{ns} · Valkey at {}", r.table, r.id, r.valkey);
    println!();
    value(&r.value);
    println!();
    lock(&r.lock);
}

fn value(v: &ValueReport) {
    println!("  value        {}", v.key);
    if !v.exists {
        println!("    (no value: a read of this id misses Valkey and contends for the lock)");
        return;
    }
    if let Some(size) = v.size_bytes {
        let split = v.envelope.as_ref().map_or_else(String::new, |e| {
            format!(
                " (header {} + payload {})",
                e.header_bytes,
                grouped(e.payload_bytes)
            )
        });
        println!("    size       {} bytes{split}", grouped(size));
    }
    println!("    PTTL       {}", pttl(v.pttl_ms, v.persistent));
    if let Some(why) = &v.undecodable {
        println!("    UNDECODABLE {why}");
        if let Some(hex) = &v.first_bytes_hex {
            println!("    first bytes {hex}");
        }
        println!("    (a fill reads this as a miss, counted in decode_errors, and overwrites it)");
    }
    if let Some(e) = &v.envelope {
        envelope(e);
    }
}

fn envelope(e: &EnvelopeReport) {
    println!("    format     {}", e.format);
    let life = match (e.fresh_for_ms, e.stale_for_ms) {
        (Some(left), _) => format!("fresh for {} more", span(left)),
        (_, Some(past)) => format!("stale for {}", span(past)),
        _ => String::new(),
    };
    println!("    fresh_until {}  {life}", e.fresh_until_ms);
    let age = if e.age_ms >= 0 {
        format!("{} ago", span(e.age_ms as u64))
    } else {
        format!("{} in this clock's future", span(e.age_ms.unsigned_abs()))
    };
    println!("    written_at {}  {age}", e.written_at_ms);
    match e.delta_ms {
        Some(delta) if delta < 1000.0 => println!("    load time  {delta:.1} ms (delta)"),
        Some(delta) => println!("    load time  {} (delta)", span(delta as u64)),
        None => println!("    load time  not recorded (format {})", e.format),
    }
    if let Some(version) = e.version {
        println!("    version    {version} (from the source: .version_by)");
    }
    for note in &e.notes {
        println!("    note       {note}");
    }
}

fn lock(l: &LockReport) {
    println!("  lock         {}", l.key);
    if !l.held {
        println!("    held       no");
        return;
    }
    let token = match (&l.token, &l.valkey_type) {
        (Some(token), _) => token.clone(),
        (None, Some(kind)) => format!("(a {kind}, not a token: it blocks every fill of this id)"),
        (None, None) => String::new(),
    };
    println!("    held       yes, token {token}");
    println!("    PTTL       {}", pttl(l.pttl_ms, l.persistent));
}

fn pttl(ms: Option<u64>, persistent: bool) -> String {
    match ms {
        Some(ms) => format!("{} ms ({} left)", grouped(ms), span(ms)),
        None if persistent => "none: the key never expires (EchoStore always sets one)".to_owned(),
        None => "gone".to_owned(),
    }
}

/// A span of time for a person: `850 ms`, `12.3 s`, `4 min 12 s`, `2 h 3 min`, `3 d 4 h`.
pub(super) fn span(ms: u64) -> String {
    const S: u64 = 1000;
    const MIN: u64 = 60 * S;
    const H: u64 = 60 * MIN;
    const D: u64 = 24 * H;
    match ms {
        0..S => format!("{ms} ms"),
        S..MIN => format!("{:.1} s", ms as f64 / S as f64),
        MIN..H => format!("{} min {} s", ms / MIN, ms % MIN / S),
        H..D => format!("{} h {} min", ms / H, ms % H / MIN),
        _ => format!("{} d {} h", ms / D, ms % D / H),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spans read at the scale they have.
    #[test]
    fn spans_read_at_their_scale() {
        assert_eq!(span(850), "850 ms");
        assert_eq!(span(12_300), "12.3 s");
        assert_eq!(span(4_100), "4.1 s");
        assert_eq!(span(252_000), "4 min 12 s");
        assert_eq!(span(2 * 3_600_000 + 180_000), "2 h 3 min");
        assert_eq!(span(3 * 86_400_000 + 4 * 3_600_000), "3 d 4 h");
    }
}
