//! Numbers as `top` prints them, on screen and in `--once --format text`: short, unit-bearing,
//! and "-" for a value the daemon did not send.

/// Seconds with a readable unit: `12µs`, `2.4ms`, `154ms`, `3.20s`, `4m05s`.
pub fn secs(v: Option<f64>) -> String {
    let Some(s) = v.filter(|s| s.is_finite() && *s >= 0.0) else { return "-".into() };
    if s == 0.0 {
        "0".into()
    } else if s < 1e-3 {
        format!("{:.0}µs", s * 1e6)
    } else if s < 1e-2 {
        format!("{:.1}ms", s * 1e3)
    } else if s < 1.0 {
        format!("{:.0}ms", s * 1e3)
    } else if s < 60.0 {
        format!("{s:.2}s")
    } else {
        let whole = s as u64;
        format!("{}m{:02}s", whole / 60, whole % 60)
    }
}

/// A rate: `0.5`, `771.6`, `12.3k`.
pub fn rate(v: Option<f64>) -> String {
    match v.filter(|v| v.is_finite()) {
        None => "-".into(),
        Some(v) if v >= 1e6 => format!("{:.1}M", v / 1e6),
        Some(v) if v >= 1e4 => format!("{:.1}k", v / 1e3),
        Some(v) => format!("{v:.1}"),
    }
}

/// A 0..1 share as a percentage.
pub fn pct(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite()).map_or_else(|| "-".into(), |v| format!("{:.0}%", v * 100.0))
}

pub fn count(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// A horizontal bar of `width` cells for a 0..1 share, in eighths.
pub fn bar(share: f64, width: usize) -> String {
    const PARTS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let share = if share.is_finite() { share.clamp(0.0, 1.0) } else { 0.0 };
    let eighths = (share * width as f64 * 8.0).round() as usize;
    let mut s = String::with_capacity(width * 3);
    s.extend(std::iter::repeat_n('█', eighths / 8));
    if eighths / 8 < width {
        s.push(if eighths.is_multiple_of(8) { '░' } else { PARTS[eighths % 8] });
        s.extend(std::iter::repeat_n('░', width - eighths / 8 - 1));
    }
    s
}

/// The last `width` values as a text sparkline scaled to their maximum.
pub fn spark<'a>(values: impl DoubleEndedIterator<Item = &'a f64> + ExactSizeIterator, width: usize) -> String {
    const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let skip = values.len().saturating_sub(width);
    let tail: Vec<f64> = values.skip(skip).copied().collect();
    let max = tail.iter().copied().fold(0.0_f64, f64::max);
    tail.iter()
        .map(|v| {
            if max > 0.0 && v.is_finite() {
                LEVELS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize]
            } else {
                LEVELS[0]
            }
        })
        .collect()
}

/// `HH:MM:SS` of an RFC 3339 time (UTC, as the daemon writes it), or the text as is.
pub fn clock(t: Option<&str>) -> String {
    match t {
        None => "-".into(),
        Some(t) => t.get(11..19).filter(|_| t.as_bytes().get(10) == Some(&b'T')).unwrap_or(t).to_owned(),
    }
}

/// Cuts `s` to at most `width` characters, marking the cut with `…`.
pub fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_owned()
    } else if width == 0 {
        String::new()
    } else {
        let mut out: String = s.chars().take(width - 1).collect();
        out.push('…');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let cases = [
            (None, "-"),
            (Some(f64::NAN), "-"),
            (Some(0.0), "0"),
            (Some(0.000_012), "12µs"),
            (Some(0.0024), "2.4ms"),
            (Some(0.154), "154ms"),
            (Some(3.2), "3.20s"),
            (Some(245.0), "4m05s"),
        ];
        for (v, want) in cases {
            assert_eq!(secs(v), want, "{v:?}");
        }
    }

    #[test]
    fn rates_and_shares() {
        assert_eq!(rate(Some(771.64)), "771.6");
        assert_eq!(rate(Some(31877.0)), "31.9k");
        assert_eq!(rate(None), "-");
        assert_eq!(pct(Some(0.956)), "96%");
        assert_eq!(count(None), "-");
    }

    #[test]
    fn bars_have_their_width() {
        for share in [0.0, 0.01, 0.5, 0.99, 1.0, 7.0, -1.0, f64::NAN] {
            assert_eq!(bar(share, 10).chars().count(), 10, "{share}");
        }
        assert_eq!(bar(0.5, 4), "██░░");
        assert_eq!(bar(1.0, 3), "███");
    }

    #[test]
    fn sparklines_scale_to_the_max() {
        let v = [0.0, 1.0, 2.0, 4.0];
        assert_eq!(spark(v.iter(), 10), "▁▃▅█");
        assert_eq!(spark(v.iter(), 2), "▅█", "the newest values, scaled among themselves");
        assert_eq!(spark([0.0, 0.0].iter(), 5), "▁▁");
    }

    #[test]
    fn clocks_and_cuts() {
        assert_eq!(clock(Some("2026-12-02T19:19:13.507Z")), "19:19:13");
        assert_eq!(clock(Some("yesterday")), "yesterday");
        assert_eq!(fit("/api/items/long", 6), "/api/…");
        assert_eq!(fit("short", 6), "short");
    }
}
