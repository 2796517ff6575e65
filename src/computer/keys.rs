//! Key names as agents write them (xdotool style: `ctrl+shift+t`, `Return`, `enter`, `KP_Enter`, `F13`,
//! `Print`, `apostrophe`, `super`), case-insensitively, to X keysyms. Every X keysym name is accepted
//! (X.Org's keysymdef.h as data in `keysymdef.rs`, indexed once in lower case), plus the short names
//! agents and upstream's nut-js use (`ctrl`, `alt`, `esc`, `pageup`, `cmd`, ...).

use std::collections::HashMap;
use std::sync::OnceLock;

use super::keysymdef;

/// Keysyms the X standard names (Latin, other scripts, function keys).
const NAMED_KEYSYM_RANGES: [std::ops::RangeInclusive<u32>; 1] = [0x0000..=0xffff];

/// Short names agents send that are not X keysym names.
const ALIASES: &[(&str, u32)] = &[
    ("ctrl", XK_CONTROL_L),
    ("control", XK_CONTROL_L),
    ("lctrl", XK_CONTROL_L),
    ("rctrl", 0xffe4),
    ("alt", XK_ALT_L),
    ("lalt", XK_ALT_L),
    ("ralt", 0xffea),
    ("option", XK_ALT_L),
    ("shift", XK_SHIFT_L),
    ("lshift", XK_SHIFT_L),
    ("rshift", 0xffe2),
    ("super", XK_SUPER_L),
    ("win", XK_SUPER_L),
    ("windows", XK_SUPER_L),
    ("cmd", XK_SUPER_L),
    ("command", XK_SUPER_L),
    ("meta", XK_SUPER_L),
    ("enter", 0xff0d),
    ("return", 0xff0d),
    ("esc", 0xff1b),
    ("escape", 0xff1b),
    ("backspace", 0xff08),
    ("del", 0xffff),
    ("delete", 0xffff),
    ("ins", 0xff63),
    ("insert", 0xff63),
    // X names the table lists only under their older names (`Prior`, `Next`).
    ("page_up", 0xff55),
    ("page_down", 0xff56),
    ("kp_page_up", 0xff9a),
    ("kp_page_down", 0xff9b),
    ("pageup", 0xff55),
    ("pgup", 0xff55),
    ("pagedown", 0xff56),
    ("pgdn", 0xff56),
    ("up", 0xff52),
    ("down", 0xff54),
    ("left", 0xff51),
    ("right", 0xff53),
    ("home", 0xff50),
    ("end", 0xff57),
    ("tab", 0xff09),
    ("space", 0x0020),
    ("capslock", 0xffe5),
    ("numlock", 0xff7f),
    ("scrolllock", 0xff14),
    ("printscreen", 0xff61),
    ("prtsc", 0xff61),
    ("menu", 0xff67),
    ("pause", 0xff13),
    // Media keys (the table has no XF86 page).
    ("xf86audiolowervolume", 0x1008_ff11),
    ("xf86audiomute", 0x1008_ff12),
    ("xf86audioraisevolume", 0x1008_ff13),
    ("xf86audioplay", 0x1008_ff14),
    ("xf86audiostop", 0x1008_ff15),
    ("xf86audioprev", 0x1008_ff16),
    ("xf86audionext", 0x1008_ff17),
];

pub const XK_SHIFT_L: u32 = 0xffe1;
pub const XK_CONTROL_L: u32 = 0xffe3;
pub const XK_ALT_L: u32 = 0xffe9;
pub const XK_SUPER_L: u32 = 0xffeb;

/// Every keysym name, lower-cased. Where two names differ only by case (`a`/`A`, `Greek_ALPHA`/
/// `Greek_alpha`), the lower-case keysym wins, as names are case-insensitive and upstream's `A` is the
/// A key, not Shift+A.
fn lowercase_names() -> &'static HashMap<String, u32> {
    static NAMES: OnceLock<HashMap<String, u32>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names = HashMap::new();
        let named_keys = keysymdef::BY_NAME.iter().map(named).filter(|(_, keysym)| {
            NAMED_KEYSYM_RANGES
                .iter()
                .any(|range| range.contains(keysym))
        });
        for (name, keysym) in named_keys {
            let lower = name.to_lowercase();
            let lower_case_name = name == lower;
            names
                .entry(lower)
                .and_modify(|existing| {
                    if lower_case_name {
                        *existing = keysym;
                    }
                })
                .or_insert(keysym);
        }
        for (alias, keysym) in ALIASES {
            names.insert((*alias).to_owned(), *keysym);
        }
        names
    })
}

/// The keysym of one key name, or `None` when no key has that name.
pub fn keysym_of_name(name: &str) -> Option<u32> {
    let lower = name.to_lowercase();
    let mut chars = lower.chars();
    if let (Some(only), None) = (chars.next(), chars.next()) {
        // A single character names the key that types it (`a`, `1`, `!`, `é`).
        return Some(keysym_of_char(only));
    }
    if let Some(keysym) = keysym_named_exactly(name) {
        return Some(keysym);
    }
    if let Some(keysym) = lowercase_names().get(&lower) {
        return Some(*keysym);
    }
    // Names the table lists only under another name of the same keysym (`Page_Up` is also `Prior`):
    // try the usual spellings of X names.
    let capitalized = |segment: &str| {
        let mut chars = segment.chars();
        chars
            .next()
            .map(|first| first.to_uppercase().chain(chars).collect::<String>())
            .unwrap_or_default()
    };
    let segments: Vec<&str> = lower.split('_').collect();
    let each_capitalized = segments
        .iter()
        .map(|segment| capitalized(segment))
        .collect::<Vec<_>>()
        .join("_");
    let prefix_upper = match segments.split_first() {
        Some((first, rest)) if !rest.is_empty() => std::iter::once(first.to_uppercase())
            .chain(rest.iter().map(|segment| capitalized(segment)))
            .collect::<Vec<_>>()
            .join("_"),
        _ => lower.to_uppercase(),
    };
    [each_capitalized, prefix_upper]
        .iter()
        .find_map(|candidate| keysym_named_exactly(candidate))
}

/// The keysym X names `name`, spelled exactly as keysymdef.h spells it.
fn keysym_named_exactly(name: &str) -> Option<u32> {
    let table = keysymdef::BY_NAME;
    let index = table.binary_search_by(|entry| named(entry).0.as_bytes().cmp(name.as_bytes()));
    index
        .ok()
        .and_then(|index| table.get(index))
        .map(|&(_, _, keysym)| keysym)
}

/// One entry of [`keysymdef::BY_NAME`] as `(name, keysym)`.
fn named(&(start, end, keysym): &(u32, u32, u32)) -> (&'static str, u32) {
    // u32 to usize is lossless on every target boxd builds for (64-bit Linux).
    let name = keysymdef::NAMES
        .get(start as usize..end as usize)
        .unwrap_or_default();
    (name, keysym)
}

/// The keysym that types `character`: its named keysym where X has one, else the Unicode keysym
/// (`0x01000000 + code point`) every X server understands.
pub fn keysym_of_char(character: char) -> u32 {
    match character {
        '\n' | '\r' => 0xff0d,
        '\t' => 0xff09,
        '\u{8}' => 0xff08,
        ' '..='~' | '\u{a0}'..='\u{ff}' => u32::from(character),
        _ => {
            let codepoint = u32::from(character);
            let table = keysymdef::BY_CODEPOINT;
            table
                .binary_search_by_key(&codepoint, |&(entry, _)| entry)
                .ok()
                .and_then(|index| table.get(index))
                .map_or(0x0100_0000 + codepoint, |&(_, keysym)| keysym)
        }
    }
}

/// Most keys one chord (`key`, `hold_key`, `key_down`, a click's modifiers) names: more than any
/// keyboard shortcut, and each is a key held down at once.
pub const MAX_CHORD_KEYS: usize = 16;

/// A `+`-separated chord (`ctrl+shift+t`), each name trimmed; the first unknown name is the error,
/// lower-cased as upstream reports it. A chord of more than [`MAX_CHORD_KEYS`] names is refused before
/// any name is read.
pub fn parse_chord(text: &str) -> Result<Vec<u32>, String> {
    // `ctrl++` and a bare `+` name the plus key.
    let trimmed = text.trim();
    let spelled = if trimmed == "+" {
        "plus".to_owned()
    } else if let Some(head) = trimmed.strip_suffix("++") {
        format!("{head}+plus")
    } else {
        trimmed.to_owned()
    };
    let names = spelled.split('+').count();
    if names > MAX_CHORD_KEYS {
        return Err(format!(
            "A key chord names at most {MAX_CHORD_KEYS} keys; this one names {names}"
        ));
    }
    spelled
        .split('+')
        .map(str::trim)
        .map(|name| {
            keysym_of_name(name).ok_or_else(|| format!("Invalid key: {}", name.to_lowercase()))
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|keys| {
            if keys.is_empty() {
                Err("Text required for key".to_owned())
            } else {
                Ok(keys)
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keysym_tables_are_sorted_for_binary_search() {
        let names: Vec<(&str, u32)> = keysymdef::BY_NAME.iter().map(named).collect();
        assert!(names.len() > 2000, "{}", names.len());
        assert!(names.iter().all(|(name, _)| !name.is_empty()));
        assert!(names.windows(2).all(|pair| pair[0].0 < pair[1].0));
        assert_eq!(
            names.iter().map(|(name, _)| name.len()).sum::<usize>(),
            keysymdef::NAMES.len(),
            "every name of NAMES is in the table, once"
        );
        let codepoints = keysymdef::BY_CODEPOINT;
        assert!(codepoints.windows(2).all(|pair| pair[0].0 < pair[1].0));
        assert_eq!(keysym_named_exactly("Greek_alpha"), Some(0x7e1));
        assert_eq!(keysym_named_exactly("greek_alpha"), None);
        assert_eq!(keysym_of_char('é'), 0xe9);
        assert_eq!(keysym_of_char('Ω'), 0x7d9);
        assert_eq!(keysym_of_char('€'), 0x20ac);
        assert_eq!(keysym_of_char('中'), 0x0100_4e2d);
    }

    #[test]
    fn agent_and_x_names_are_accepted_in_any_case() {
        for (name, keysym) in [
            ("Return", 0xff0d),
            ("enter", 0xff0d),
            ("KP_Enter", 0xff8d),
            ("kp_enter", 0xff8d),
            ("Print", 0xff61),
            ("apostrophe", 0x27),
            ("Page_Up", 0xff55),
            ("page_up", 0xff55),
            ("BackSpace", 0xff08),
            ("F1", 0xffbe),
            ("f24", 0xffd5),
            ("super", XK_SUPER_L),
            ("ctrl", XK_CONTROL_L),
            ("A", 0x61),
            ("a", 0x61),
            ("!", 0x21),
            ("XF86AudioPlay", 0x1008_ff14),
        ] {
            assert_eq!(keysym_of_name(name), Some(keysym), "{name}");
        }
        assert_eq!(keysym_of_name("nosuchkey"), None);
    }

    #[test]
    fn chords_split_on_plus_and_name_the_bad_key_lower_cased() {
        assert_eq!(
            parse_chord("ctrl+shift+t"),
            Ok(vec![XK_CONTROL_L, XK_SHIFT_L, 0x74])
        );
        assert_eq!(parse_chord(" Ctrl + A "), Ok(vec![XK_CONTROL_L, 0x61]));
        assert_eq!(parse_chord("ctrl++"), Ok(vec![XK_CONTROL_L, 0x2b]));
        assert_eq!(parse_chord("ctrl+Bogus"), Err("Invalid key: bogus".into()));
        let long = vec!["a"; MAX_CHORD_KEYS + 1].join("+");
        assert_eq!(
            parse_chord(&long),
            Err(format!(
                "A key chord names at most {MAX_CHORD_KEYS} keys; this one names {}",
                MAX_CHORD_KEYS + 1
            ))
        );
        assert!(parse_chord(&vec!["shift"; MAX_CHORD_KEYS].join("+")).is_ok());
    }

    #[test]
    fn characters_beyond_latin1_use_their_keysyms() {
        assert_eq!(keysym_of_char('é'), 0xe9);
        assert_eq!(keysym_of_char('€'), 0x20ac);
        assert_eq!(keysym_of_char('😀'), 0x0100_0000 + 0x1f600);
        assert_eq!(keysym_of_char('\n'), 0xff0d);
    }
}
