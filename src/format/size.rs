//! Counting sizes in the configured unit, and formatting them the way the
//! preview shows them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How sizes are counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SizeUnit {
    /// Unicode scalar values.
    #[default]
    Chars,
    /// UTF-16 code units, as JavaScript's `length`.
    Utf16,
    /// UTF-8 bytes.
    Bytes,
}

impl SizeUnit {
    /// Length of `text` in this unit.
    pub fn len(self, text: &str) -> u64 {
        match self {
            SizeUnit::Chars => char_count(text),
            SizeUnit::Utf16 => text.encode_utf16().count() as u64,
            SizeUnit::Bytes => text.len() as u64,
        }
    }

    /// Length of one character in this unit.
    pub fn char_len(self, ch: char) -> u64 {
        match self {
            SizeUnit::Chars => 1,
            SizeUnit::Utf16 => ch.len_utf16() as u64,
            SizeUnit::Bytes => ch.len_utf8() as u64,
        }
    }
}

/// The Unicode scalar values of `text`: what `text.chars().count()` gives,
/// counted many bytes at a time (the bytes that do not continue a
/// character).
pub fn char_count(text: &str) -> u64 {
    bytecount::num_chars(text.as_bytes()) as u64
}

/// `512 bytes`, `83.6KB`, `2KB`, `1.5MB`: 1024-based, one decimal rounded
/// half up, a trailing `.0` dropped. Integer arithmetic only, so the result is
/// identical to the JavaScript `toFixed(1)` formatting models already meet.
pub fn format_size(size: u64) -> String {
    const KB: u128 = 1024;
    let size128 = size as u128;
    let (unit, divisor) = if size128 < KB {
        return format!("{size} bytes");
    } else if size128 < KB * KB {
        ("KB", KB)
    } else if size128 < KB * KB * KB {
        ("MB", KB * KB)
    } else {
        ("GB", KB * KB * KB)
    };
    // tenths = round_half_up(size * 10 / divisor)
    let tenths = (size128 * 20 + divisor) / (2 * divisor);
    let (whole, frac) = (tenths / 10, tenths % 10);
    if frac == 0 {
        format!("{whole}{unit}")
    } else {
        format!("{whole}.{frac}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_format_like_the_reference_agent() {
        assert_eq!(format_size(0), "0 bytes");
        assert_eq!(format_size(512), "512 bytes");
        assert_eq!(format_size(1023), "1023 bytes");
        assert_eq!(format_size(1024), "1KB");
        assert_eq!(format_size(2000), "2KB");
        assert_eq!(format_size(85_606), "83.6KB");
        assert_eq!(format_size(1280), "1.3KB"); // 1.25 rounds half up
        assert_eq!(format_size(1_572_864), "1.5MB");
        assert_eq!(format_size(1_048_575), "1024KB");
        assert_eq!(format_size(3 * 1024 * 1024 * 1024), "3GB");
    }

    #[test]
    fn units_count_differently() {
        let s = "a\u{e9}\u{1F600}";
        assert_eq!(SizeUnit::Chars.len(s), 3);
        assert_eq!(SizeUnit::Utf16.len(s), 4);
        assert_eq!(SizeUnit::Bytes.len(s), 7);
    }

    #[test]
    fn chars_are_counted_as_chars_count_does() {
        let long = "a\u{e9}\u{1F600}\u{800}".repeat(37) + "tail\u{10FFFF}";
        for text in [
            "",
            "a",
            "\u{e9}",
            long.as_str(),
            &long[1..],
            &long[..long.len() - 4],
        ] {
            assert_eq!(char_count(text), text.chars().count() as u64, "{text:?}");
        }
    }
}
