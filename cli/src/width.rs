//! How many terminal columns a table cell takes, for the tables of `state`
//! and `pending`: two for the wide characters of East Asian scripts
//! (CJK ideographs, kana, Hangul, full-width forms) and most emoji, none for
//! combining marks, one for the rest. A short table, not all of Unicode's
//! width data: enough that a sandbox named in CJK lines up.

/// Ranges of characters two columns wide.
const WIDE: [(char, char); 13] = [
    ('\u{1100}', '\u{115F}'),
    ('\u{2E80}', '\u{303E}'),
    ('\u{3041}', '\u{33FF}'),
    ('\u{3400}', '\u{4DBF}'),
    ('\u{4E00}', '\u{9FFF}'),
    ('\u{A000}', '\u{A4CF}'),
    ('\u{AC00}', '\u{D7A3}'),
    ('\u{F900}', '\u{FAFF}'),
    ('\u{FE30}', '\u{FE4F}'),
    ('\u{FF00}', '\u{FF60}'),
    ('\u{FFE0}', '\u{FFE6}'),
    ('\u{1F300}', '\u{1F64F}'),
    ('\u{20000}', '\u{3FFFD}'),
];

/// Ranges of combining marks, which take no column of their own.
const ZERO: [(char, char); 3] = [
    ('\u{0300}', '\u{036F}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{FE00}', '\u{FE0F}'),
];

/// The columns `text` takes on a terminal.
pub fn columns(text: &str) -> usize {
    let within = |ranges: &[(char, char)], c: char| ranges.iter().any(|(low, high)| (*low..=*high).contains(&c));
    text.chars()
        .map(|c| match c {
            _ if within(&ZERO, c) => 0,
            _ if within(&WIDE, c) => 2,
            _ => 1,
        })
        .sum()
}

/// `text` followed by spaces up to `width` columns.
pub fn padded(text: &str, width: usize) -> String {
    format!("{text}{}", " ".repeat(width.saturating_sub(columns(text))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_characters_take_two_columns_and_marks_none() {
        let cases = [
            ("agent", 5),
            ("", 0),
            ("エージェント", 12),
            ("代理-7", 6),
            ("한국", 4),
            ("ＡＢ", 4),
            ("e\u{301}", 1),
            ("é", 1),
        ];
        for (text, want) in cases {
            assert_eq!(columns(text), want, "{text}");
        }
        assert_eq!(padded("代理", 6), "代理  ");
        assert_eq!(padded("toolong", 3), "toolong");
    }
}
