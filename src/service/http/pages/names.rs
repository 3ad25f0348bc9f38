//! How role and member names are written into the pages.
//!
//! A name is whatever a member registered: any string of up to 32,767
//! bytes. Some names look like others. Bidirectional controls reorder what
//! follows them (`\u{202E}sredro` shows as `orders`), zero-width and other
//! invisible characters show as nothing, combining marks make `cafe` +
//! U+0301 look like `café`, unusual spaces and a trailing space look like a
//! plain one or none; and by Unicode's own rules:
//! - a name not in Unicode's normal form C (UAX #15, `unicode-normalization`)
//!   looks like the one that is: `カ` + U+3099 and `ガ`, Hangul jamo and a
//!   syllable, `क़` (U+0958) and `क` + U+093C;
//! - a name that mixes scripts beyond the combinations written together
//!   (UTS #39's mixed-script detection, "highly restrictive", with
//!   `unicode-security`'s augmented script sets): `оrders` with a Cyrillic о;
//! - a name whose UTS #39 confusable skeleton is another shown name's looks
//!   like it even in one script: Cyrillic `сосо` and Latin `coco`,
//!   mathematical `𝗈𝗋𝖽𝖾𝗋𝗌` and `orders`, `proﬁt` with its ligature and
//!   `profit` ([`Names`] knows every name the service shows);
//! - a character outside ASCII that UTS #39's General Security Profile
//!   restricts in identifiers (historic and limited-use scripts such as
//!   Cherokee, compatibility forms such as `［` and Arabic presentation
//!   forms, symbols and emoji) is rarely in a reader's fonts, and two
//!   missing glyphs are drawn as the same empty box.
//!
//! A reader without a font for a script in common use (Malayalam, say)
//! still sees its letters as boxes; the pages cannot know a reader's fonts.
//!
//! The pages show each character at fault as its code point in a marked
//! box, the way code review tools flag hidden Unicode, with a ⚠ before the
//! name, and set every name apart (`<bdi>`) so it cannot reorder the text
//! around it. In a name that looks like another shown name, every character
//! but the ASCII letters that are their own skeleton is a code point, so
//! the two are written differently whatever fonts the reader has. The
//! characters of the marking itself (⚠, ⟨, ⟩) are always code points in a
//! name, so a name cannot be written to read as another's marked form.
//! Different names never look the same; the JSON, and the `data-`
//! attributes the pages carry, stay exact.

use std::collections::HashMap;
use std::fmt::Write as _;

use unicode_normalization::char::canonical_combining_class;
use unicode_normalization::{IsNormalized, is_nfc, is_nfc_quick};
use unicode_properties::{GeneralCategory, GeneralCategoryGroup, UnicodeGeneralCategory};
use unicode_script::{Script, UnicodeScript};
use unicode_security::mixed_script::AugmentedScriptSet;
use unicode_security::{GeneralSecurityProfile, skeleton};

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
    /// Part of a name that is not in normal form C.
    NotNormal,
    /// The name looks like another shown name, and this character is not
    /// an ASCII letter that is its own skeleton.
    LooksAlike,
    /// One of the characters the pages mark names with.
    Marker,
    /// A character outside ASCII that UTS #39's General Security Profile
    /// restricts (historic and limited-use scripts, compatibility forms,
    /// symbols): rarely in a font, and then drawn as the same empty box as
    /// any other missing glyph.
    Restricted,
}

impl Why {
    fn says(self) -> &'static str {
        match self {
            Why::Bidi => "a bidirectional control: it reorders the text after it",
            Why::Invisible => "an invisible character",
            Why::Combining => "a combining mark: it joins the character before it",
            Why::Space => "a space that looks like another or like none",
            Why::OtherScript => "a letter of another script than the rest of the name",
            Why::NotNormal => {
                "the name is not in Unicode's normal form C: this character is written otherwise there"
            }
            Why::LooksAlike => {
                "the name looks like another name shown here (Unicode's confusable skeleton)"
            }
            Why::Marker => "a character the pages mark names with",
            Why::Restricted => {
                "a character Unicode restricts in identifiers (a historic or limited-use script, a compatibility form, a symbol)"
            }
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

/// The characters of the marking: the warning sign and the brackets of a
/// code point in plain text.
fn is_marker(c: char) -> bool {
    matches!(c, '⚠' | '⟨' | '⟩')
}

/// Why `c` (the `i`-th of `n` characters, `prev` before it) would be
/// misread whatever other names are shown, if it would.
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
    if is_marker(c) {
        return Some(Why::Marker);
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

/// In a name that is not in NFC: whether `c` is where it differs (not
/// "yes" to NFC's quick check: it composes, or decomposes; or a mark whose
/// order normalization may change).
fn not_normal(c: char) -> bool {
    is_nfc_quick(std::iter::once(c)) != IsNormalized::Yes || canonical_combining_class(c) != 0
}

/// For a name that mixes scripts beyond UTS #39's "highly restrictive"
/// (one script, or Latin with Han and Hiragana and Katakana, with Han and
/// Bopomofo, or with Han and Hangul), the script most of its letters are
/// of (Latin on a tie); `None` when it does not mix them.
fn main_script(name: &str) -> Option<Script> {
    let mut all = AugmentedScriptSet::default();
    let mut without_latin = AugmentedScriptSet::default();
    let mut counts: Vec<(Script, usize)> = Vec::new();
    for c in name.chars() {
        let set = AugmentedScriptSet::for_char(c);
        all.intersect_with(set);
        if !set.base.contains_script(Script::Latin) {
            without_latin.intersect_with(set);
        }
        if set.is_all() {
            continue;
        }
        for script in set.base.iter() {
            match counts.iter_mut().find(|(s, _)| *s == script) {
                Some((_, n)) => *n += 1,
                None => counts.push((script, 1)),
            }
        }
    }
    let highly_restrictive =
        !all.is_empty() || without_latin.jpan || without_latin.hanb || without_latin.kore;
    if highly_restrictive {
        return None;
    }
    counts
        .iter()
        .max_by_key(|(s, n)| (*n, *s == Script::Latin))
        .map(|(s, _)| *s)
}

/// True for a character shown as itself in a name that looks like another:
/// an ASCII character that is its own skeleton.
fn plain_prototype(c: char) -> bool {
    c.is_ascii() && {
        let mut buf = [0; 4];
        skeleton(c.encode_utf8(&mut buf)).eq(std::iter::once(c))
    }
}

/// A name cut into what is shown as it is and what is shown as a code
/// point, and whether it is marked (a ⚠) at all.
struct Pieces<'a> {
    pieces: Vec<Piece<'a>>,
    marked: bool,
}

enum Piece<'a> {
    Text(&'a str),
    Marked(char, Why),
}

fn pieces(name: &str, looks_alike: bool) -> Pieces<'_> {
    let main = main_script(name);
    let normal = is_nfc(name);
    let n = name.chars().count();
    let mut out = Vec::new();
    let mut start = 0;
    let mut prev = None;
    for (i, (at, c)) in name.char_indices().enumerate() {
        let reason = why(c, i, n, prev)
            .or_else(|| (!normal && not_normal(c)).then_some(Why::NotNormal))
            .or_else(|| {
                (!c.is_ascii() && !GeneralSecurityProfile::identifier_allowed(c))
                    .then_some(Why::Restricted)
            })
            .or_else(|| {
                main.filter(|m| {
                    let set = AugmentedScriptSet::for_char(c);
                    !set.is_all() && !set.base.contains_script(*m)
                })
                .map(|_| Why::OtherScript)
            })
            .or_else(|| (looks_alike && !plain_prototype(c)).then_some(Why::LooksAlike));
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
    let marked = looks_alike || out.iter().any(|p| matches!(p, Piece::Marked(..)));
    Pieces {
        pieces: out,
        marked,
    }
}

/// What the ⚠ before a marked name says.
const WARNING: &str = "This name looks like another name shown here, or holds characters that are invisible, reorder text, join the character before them, are not in Unicode's normal form, belong to another script or are restricted by Unicode; they are shown as code points.";

/// The names the pages show, and which of them look like another: those
/// whose UTS #39 confusable skeleton is shared by a different shown name.
#[derive(Debug, Default)]
pub(crate) struct Names {
    /// Each name's skeleton.
    skeletons: HashMap<String, String>,
    /// How many different names have each skeleton.
    sharing: HashMap<String, usize>,
}

impl Names {
    /// The book of `names`; skeletons already in `known` are not computed
    /// again (a page is drawn every two seconds from mostly the same names).
    pub(crate) fn of<'a>(names: impl IntoIterator<Item = &'a str>, known: &Names) -> Names {
        let mut book = Names::default();
        for name in names {
            if book.skeletons.contains_key(name) {
                continue;
            }
            let skeleton = known
                .skeletons
                .get(name)
                .cloned()
                .unwrap_or_else(|| skeleton(name).collect());
            *book.sharing.entry(skeleton.clone()).or_default() += 1;
            book.skeletons.insert(name.to_owned(), skeleton);
        }
        book
    }

    /// True when another name in the book has `name`'s skeleton.
    pub(crate) fn looks_like_another(&self, name: &str) -> bool {
        let (skeleton, own) = match self.skeletons.get(name) {
            Some(s) => (s.clone(), 1),
            None => (skeleton(name).collect::<String>(), 0),
        };
        self.sharing.get(&skeleton).copied().unwrap_or(0) > own
    }

    /// `name` as HTML page text: escaped, set apart from the text around
    /// it, every character that would be misread shown as a marked code
    /// point.
    pub(crate) fn shown(&self, name: &str) -> String {
        let Pieces { pieces, marked } = pieces(name, self.looks_like_another(name));
        let mut out = String::with_capacity(name.len() + 16);
        out.push_str("<bdi>");
        if marked {
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
    /// No name's plain text is another's: the marking's own characters
    /// are always written as code points.
    pub(crate) fn visible(&self, name: &str) -> String {
        let Pieces { pieces, marked } = pieces(name, self.looks_like_another(name));
        let mut out = String::with_capacity(name.len() + 8);
        if marked {
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
    /// title): [`Names::visible`], escaped.
    pub(crate) fn shown_plain(&self, name: &str) -> String {
        escape(&self.visible(name))
    }
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

    /// Names that look alike by Unicode's own rules (issue 45): whole-script
    /// confusables, mathematical letters, compatibility forms and
    /// ligatures, canonical equivalents outside Latin, Greek and Cyrillic,
    /// a literal name written as another's marked plain text, dot names.
    pub(crate) const UNICODE_LOOKALIKES: [&str; 20] = [
        "coco",
        "\u{0441}\u{043E}\u{0441}\u{043E}",
        "\u{1D5C8}\u{1D5CB}\u{1D5BD}\u{1D5BE}\u{1D5CB}\u{1D5CC}",
        "profit",
        "pro\u{FB01}t",
        "\u{FF50}rofit",
        "\u{30AB}\u{3099}",
        "\u{30AC}",
        "\u{1100}\u{1161}",
        "\u{AC00}",
        "\u{0915}\u{093C}",
        "\u{0958}",
        "\u{2126}",
        "\u{03A9}",
        "\u{212B}",
        "\u{00C5}",
        "⚠ ord⟨U+200B⟩ers",
        "paypal",
        "p\u{0430}yp\u{0430}l",
        "..",
    ];

    /// The book of every name both lists show.
    fn book() -> Names {
        Names::of(
            LOOKALIKES.iter().chain(&UNICODE_LOOKALIKES).copied(),
            &Names::default(),
        )
    }

    #[test]
    fn a_plain_name_is_only_escaped_and_set_apart() {
        let names = Names::of(
            ["orders", "a b<c>", "a & b", "Tokyo東京", "東京タワー"],
            &Names::default(),
        );
        assert_eq!(names.shown("orders"), "<bdi>orders</bdi>");
        assert_eq!(names.shown("a b<c>"), "<bdi>a b&lt;c&gt;</bdi>");
        assert_eq!(names.shown_plain("a & b"), "a &amp; b");
        for legit in [
            "Москва",
            "東京タワー",
            "서울市",
            "café",
            "שלום",
            "नमस्ते",
            "مرحبًا",
            "Tokyo東京",
            "\u{0915}\u{093C}",
            "ガ",
        ] {
            assert_eq!(names.shown(legit), format!("<bdi>{legit}</bdi>"));
        }
    }

    #[test]
    fn every_misleading_character_is_a_marked_code_point_and_never_itself() {
        let names = book();
        for name in LOOKALIKES
            .iter()
            .skip(1)
            .filter(|n| !n.starts_with("caf\u{e9}"))
        {
            let page = names.shown(name);
            assert!(
                page.contains("hidden-char") && page.contains('⚠'),
                "{name:?}: {page}"
            );
            let plain = names.shown_plain(name);
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
        assert!(names.shown("\u{202E}sredro").contains("U+202E"));
        assert!(names.shown("\u{043E}rders").contains("U+043E"));
        assert!(names.shown("cafe\u{0301}").contains("U+0301"));
        assert!(names.shown("orders ").contains("U+0020"));
        assert!(!names.shown("two words").contains("U+0020"));
        assert!(names.shown("two  spaces").contains("U+0020"));
    }

    #[test]
    fn names_alike_by_unicodes_rules_are_marked() {
        let names = book();
        // Whole-script confusables: one script each, the same skeleton.
        assert!(names.looks_like_another("coco"));
        let cyrillic = names.shown("\u{0441}\u{043E}\u{0441}\u{043E}");
        assert!(
            cyrillic.contains("U+0441") && cyrillic.contains("U+043E"),
            "{cyrillic}"
        );
        // The Latin one is marked too (another looks like it), as itself.
        assert_eq!(names.visible("coco"), "⚠ coco");
        // Mathematical letters, a ligature, a fullwidth letter.
        let math = names.visible("\u{1D5C8}\u{1D5CB}\u{1D5BD}\u{1D5BE}\u{1D5CB}\u{1D5CC}");
        assert!(math.contains("⟨U+1D5C8⟩"), "{math}");
        assert_eq!(names.visible("pro\u{FB01}t"), "⚠ pro⟨U+FB01⟩t");
        assert_eq!(names.visible("\u{FF50}rofit"), "⚠ ⟨U+FF50⟩rofit");
        // Canonical equivalents: the one not in NFC is marked where it
        // differs; the precomposed one, alike by skeleton, is boxed too.
        assert_eq!(names.visible("\u{30AB}\u{3099}"), "⚠ ⟨U+30AB⟩⟨U+3099⟩");
        assert!(names.visible("\u{1100}\u{1161}").contains("⟨U+1161⟩"));
        assert!(names.visible("\u{0958}").contains("⟨U+0958⟩"));
        assert!(names.visible("\u{2126}").contains("⟨U+2126⟩"));
        // Alone (no lookalike shown), a name not in NFC is still marked.
        let alone = Names::of(["\u{30AB}\u{3099}"], &Names::default());
        assert_eq!(alone.visible("\u{30AB}\u{3099}"), "⚠ カ⟨U+3099⟩");
        // Mixed scripts, by augmented script sets.
        assert!(names.visible("p\u{0430}yp\u{0430}l").contains("⟨U+0430⟩"));
        // Restricted outside ASCII: a limited-use script, a fullwidth
        // bracket, an emoji; never ASCII punctuation.
        let alone = Names::default();
        assert_eq!(alone.visible("\u{13EF}"), "⚠ ⟨U+13EF⟩");
        assert_eq!(alone.visible("a\u{FF3B}"), "⚠ a⟨U+FF3B⟩");
        assert_eq!(alone.visible("ship-\u{1F680}"), "⚠ ship-⟨U+1F680⟩");
        assert_eq!(alone.visible("orders/eu:1_a.b"), "orders/eu:1_a.b");
    }

    #[test]
    fn a_literal_name_cannot_forge_anothers_marked_form() {
        let names = book();
        let marked = names.visible("ord\u{200B}ers");
        assert_eq!(marked, "⚠ ord⟨U+200B⟩ers");
        let forged = names.visible(&marked);
        assert_ne!(forged, marked);
        assert!(
            forged.contains("⟨U+26A0⟩") && forged.contains("⟨U+27E8⟩"),
            "{forged}"
        );
    }

    #[test]
    fn different_names_never_give_the_same_text() {
        let names = book();
        let mut seen = std::collections::HashMap::new();
        for name in LOOKALIKES.iter().chain(&UNICODE_LOOKALIKES) {
            for text in [names.shown(name), names.shown_plain(name)] {
                if let Some(other) = seen.insert(text.clone(), name) {
                    panic!("{other:?} and {name:?} both give {text}");
                }
            }
        }
    }

    #[test]
    fn a_book_reuses_the_skeletons_it_knows_and_forgets_names_gone() {
        let first = Names::of(
            ["coco", "\u{0441}\u{043E}\u{0441}\u{043E}"],
            &Names::default(),
        );
        let second = Names::of(["coco"], &first);
        assert!(first.looks_like_another("coco"));
        assert!(!second.looks_like_another("coco"), "the other name is gone");
        assert_eq!(second.skeletons.len(), 1);
        // A name the book does not hold is compared with all it holds.
        assert!(second.looks_like_another("\u{0441}\u{043E}\u{0441}\u{043E}"));
        assert!(!second.looks_like_another("coco2"));
    }
}
