//! How role and member names are written into the pages.
//!
//! A name is whatever a member registered: any string of up to 32,767
//! bytes. Some characters make one name look like another: bidirectional
//! controls reorder what follows them (`\u{202E}sredro` shows as
//! `orders`), zero-width and other invisible characters show as nothing,
//! combining marks make `cafe` + U+0301 look like `café` (in the
//! alphabets with precomposed letters; the marks of Indic, Arabic or
//! Hebrew words are shown as they are), unusual spaces
//! and a trailing space look like a plain one or none, and a letter of
//! another script makes `оrders` (a Cyrillic о) look like `orders`.
//! The pages show each such character as its code point in a marked box,
//! the way code review tools flag hidden Unicode, with a ⚠ before the name,
//! and set every name apart (`<bdi>`) so it cannot reorder the text around
//! it. Different names never look the same; the JSON, and the `data-`
//! attributes the pages carry, stay exact.

use std::fmt::Write as _;

use unicode_properties::{GeneralCategory, GeneralCategoryGroup, UnicodeGeneralCategory};
use unicode_script::{Script, UnicodeScript};

/// Escapes text for HTML element content and attribute values, exactly.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Why a character is shown as its code point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    /// Reorders the text around it (U+202A–U+202E, U+2066–U+2069, marks).
    Bidi,
    /// Shows as nothing (zero-width, format, control, unassigned, private).
    Invisible,
    /// Joins the character before it.
    Combining,
    /// A space other than one plain space between other characters.
    Space,
    /// A letter of another script than the rest of the name.
    OtherScript,
}

impl Why {
    fn says(self) -> &'static str {
        match self {
            Why::Bidi => "a bidirectional control: it reorders the text after it",
            Why::Invisible => "an invisible character",
            Why::Combining => "a combining mark: it joins the character before it",
            Why::Space => "a space that looks like another or like none",
            Why::OtherScript => "a letter of another script than the rest of the name",
        }
    }
}

/// The bidirectional controls, embedding and isolate both, and the marks.
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// Letters that render blank (Hangul fillers, the braille blank).
fn is_blank_letter(c: char) -> bool {
    matches!(
        c,
        '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}' | '\u{2800}'
    )
}

/// Why `c` (the `i`-th of `n` characters, `prev` before it) would be
/// misread, if it would.
fn why(c: char, i: usize, n: usize, prev: Option<char>) -> Option<Why> {
    if is_bidi(c) {
        return Some(Why::Bidi);
    }
    if c == ' ' {
        let odd = i == 0 || i + 1 == n || prev == Some(' ');
        return odd.then_some(Why::Space);
    }
    if is_blank_letter(c) {
        return Some(Why::Invisible);
    }
    match c.general_category_group() {
        // Marks are how Indic, Arabic, Hebrew or Thai words are written; in
        // the alphabets with precomposed letters (and after a symbol, or at
        // the start) one makes a letter look like another (e + U+0301 = é).
        GeneralCategoryGroup::Mark
            if prev.is_none_or(|p| {
                matches!(
                    p.script(),
                    Script::Latin
                        | Script::Greek
                        | Script::Cyrillic
                        | Script::Common
                        | Script::Inherited
                        | Script::Unknown
                )
            }) =>
        {
            Some(Why::Combining)
        }
        GeneralCategoryGroup::Mark => None,
        GeneralCategoryGroup::Separator => Some(Why::Space),
        GeneralCategoryGroup::Other => Some(Why::Invisible),
        _ if c.general_category() == GeneralCategory::Unassigned => Some(Why::Invisible),
        _ => None,
    }
}

/// Scripts that are written together (UTS #39, "highly restrictive"):
/// a name within one of these sets, or within one script, is not mixed.
const TOGETHER: [&[Script]; 3] = [
    &[
        Script::Latin,
        Script::Han,
        Script::Hiragana,
        Script::Katakana,
    ],
    &[Script::Latin, Script::Han, Script::Bopomofo],
    &[Script::Latin, Script::Han, Script::Hangul],
];

/// For a name mixing scripts that are not written together, the script
/// its letters are mostly of (Latin on a tie); `None` when not mixed.
fn main_script(name: &str) -> Option<Script> {
    let mut counts: Vec<(Script, usize)> = Vec::new();
    for c in name.chars() {
        let script = c.script();
        if matches!(script, Script::Common | Script::Inherited | Script::Unknown) {
            continue;
        }
        match counts.iter_mut().find(|(s, _)| *s == script) {
            Some((_, n)) => *n += 1,
            None => counts.push((script, 1)),
        }
    }
    let together = counts.len() <= 1
        || TOGETHER
            .iter()
            .any(|set| counts.iter().all(|(s, _)| set.contains(s)));
    if together {
        return None;
    }
    counts
        .iter()
        .max_by_key(|(s, n)| (*n, *s == Script::Latin))
        .map(|(s, _)| *s)
}

/// A name cut into what is shown as it is and what is shown as a code
/// point.
enum Piece<'a> {
    Text(&'a str),
    Marked(char, Why),
}

fn pieces(name: &str) -> Vec<Piece<'_>> {
    let main = main_script(name);
    let n = name.chars().count();
    let mut out = Vec::new();
    let mut start = 0;
    let mut prev = None;
    for (i, (at, c)) in name.char_indices().enumerate() {
        let reason = why(c, i, n, prev).or_else(|| {
            main.filter(|m| {
                !matches!(c.script(), Script::Common | Script::Inherited) && c.script() != *m
            })
            .map(|_| Why::OtherScript)
        });
        if let Some(reason) = reason {
            if start < at {
                out.push(Piece::Text(&name[start..at]));
            }
            out.push(Piece::Marked(c, reason));
            start = at + c.len_utf8();
        }
        prev = Some(c);
    }
    if start < name.len() {
        out.push(Piece::Text(&name[start..]));
    }
    out
}

/// What the ⚠ before a name with marked characters says.
const WARNING: &str = "This name holds characters that are invisible, reorder text, join the character before them or belong to another script; they are shown as code points.";

/// `name` as HTML page text: escaped, set apart from the text around it,
/// every character that would be misread shown as a marked code point.
pub(crate) fn shown(name: &str) -> String {
    let pieces = pieces(name);
    let mut out = String::with_capacity(name.len() + 16);
    out.push_str("<bdi>");
    if pieces.iter().any(|p| matches!(p, Piece::Marked(..))) {
        let _ = write!(
            out,
            "<span class=\"hidden-warning\" title=\"{WARNING}\">⚠</span>"
        );
    }
    for piece in pieces {
        match piece {
            Piece::Text(text) => out.push_str(&escape(text)),
            Piece::Marked(c, why) => {
                let _ = write!(
                    out,
                    "<span class=\"hidden-char\" title=\"{}\">U+{:04X}</span>",
                    why.says(),
                    u32::from(c)
                );
            }
        }
    }
    out.push_str("</bdi>");
    out
}

/// `name` as plain text, before escaping: each character that would be
/// misread written as `⟨U+XXXX⟩`, after a ⚠ (a plain name is itself).
pub(crate) fn visible(name: &str) -> String {
    let pieces = pieces(name);
    let mut out = String::with_capacity(name.len() + 8);
    if pieces.iter().any(|p| matches!(p, Piece::Marked(..))) {
        out.push_str("⚠ ");
    }
    for piece in pieces {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Marked(c, _) => {
                let _ = write!(out, "⟨U+{:04X}⟩", u32::from(c));
            }
        }
    }
    out
}

/// `name` where only text may go (a document's or an SVG element's
/// title): [`visible`], escaped.
pub(crate) fn shown_plain(name: &str) -> String {
    escape(&visible(name))
}

/// The style of marked characters (part of the pages' style sheet).
pub(super) const STYLE: &str = ".hidden-char{font:600 .72em ui-monospace,monospace;background:#fff0b3;color:#7a4b00;\
border:1px solid #d9a400;border-radius:3px;padding:0 .2em;margin:0 .05em}\
.hidden-warning{color:#b3261e;margin-right:.2em}";

/// The text of a page outside the `data-` attributes (which carry names
/// exactly) holds none of `name`'s misleading characters.
#[cfg(test)]
pub(crate) fn assert_shown_visibly(page: &str, name: &str) {
    let mut outside = String::with_capacity(page.len());
    for (i, part) in page.split(" data-").enumerate() {
        match (
            i,
            part.split_once("=\"")
                .and_then(|(_, rest)| rest.split_once('"')),
        ) {
            (0, _) | (_, None) => outside.push_str(part),
            (_, Some((_, after))) => outside.push_str(after),
        }
    }
    let n = name.chars().count();
    let mut prev = None;
    for (i, c) in name.chars().enumerate() {
        if c != ' ' && why(c, i, n, prev).is_some() {
            assert!(
                !outside.contains(c),
                "{name:?}: U+{:04X} is on the page as itself",
                u32::from(c)
            );
            assert!(
                outside.contains(&format!("U+{:04X}", u32::from(c))),
                "{name:?}"
            );
        }
        prev = Some(c);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Names that look like `orders` (or like each other) in a plain page.
    pub(crate) const LOOKALIKES: [&str; 16] = [
        "orders",
        "orders\u{202E}",
        "\u{202E}sredro",
        "\u{2067}sredro\u{2069}",
        "\u{200F}orders",
        "ord\u{200B}ers",
        "ord\u{200D}ers",
        "orders\u{FEFF}",
        "orders\u{2060}",
        "orders ",
        "orders\u{00A0}",
        "o\u{0336}rders",
        "\u{043E}rders",
        "orders\u{3164}",
        "caf\u{00E9}",
        "cafe\u{0301}",
    ];

    #[test]
    fn a_plain_name_is_only_escaped_and_set_apart() {
        assert_eq!(shown("orders"), "<bdi>orders</bdi>");
        assert_eq!(shown("a b<c>"), "<bdi>a b&lt;c&gt;</bdi>");
        assert_eq!(shown_plain("a & b"), "a &amp; b");
        for legit in [
            "Москва",
            "東京タワー",
            "서울市",
            "café",
            "שלום",
            "नमस्ते",
            "مرحبًا",
        ] {
            assert_eq!(shown(legit), format!("<bdi>{legit}</bdi>"));
        }
    }

    #[test]
    fn every_misleading_character_is_a_marked_code_point_and_never_itself() {
        for name in LOOKALIKES
            .iter()
            .skip(1)
            .filter(|n| !n.starts_with("caf\u{e9}"))
        {
            let page = shown(name);
            assert!(
                page.contains("hidden-char") && page.contains('⚠'),
                "{name:?}: {page}"
            );
            let plain = shown_plain(name);
            assert!(
                plain.starts_with("⚠ ") && plain.contains("⟨U+"),
                "{name:?}: {plain}"
            );
            for c in name.chars() {
                if why(c, 1, 3, Some('x')).is_some() || !c.is_ascii() {
                    assert!(!page.contains(c), "{name:?}: {c:?} left in {page}");
                    assert!(!plain.contains(c), "{name:?}: {c:?} left in {plain}");
                }
            }
        }
        assert!(shown("\u{202E}sredro").contains("U+202E"));
        assert!(shown("\u{043E}rders").contains("U+043E"));
        assert!(shown("cafe\u{0301}").contains("U+0301"));
        assert!(shown("orders ").contains("U+0020"));
        assert!(!shown("two words").contains("U+0020"));
        assert!(shown("two  spaces").contains("U+0020"));
    }

    #[test]
    fn different_names_never_give_the_same_text() {
        let mut seen = std::collections::HashMap::new();
        for name in LOOKALIKES {
            for text in [shown(name), shown_plain(name)] {
                if let Some(other) = seen.insert(text.clone(), name) {
                    panic!("{other:?} and {name:?} both give {text}");
                }
            }
        }
    }
}
