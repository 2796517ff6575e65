//! Key names as Playwright's `keyboard.press` takes them (`Enter`, `ArrowLeft`, `a`, `Control+a`) turned
//! into the fields of CDP's `Input.dispatchKeyEvent`.

use serde_json::{Value, json};

#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    pub key: String,
    pub code: String,
    pub key_code: i64,
    /// What the key types (None for keys that type nothing, and while Control/Alt/Meta are held).
    pub text: Option<String>,
}

const ALT: i64 = 1;
const CONTROL: i64 = 2;
const META: i64 = 4;
const SHIFT: i64 = 8;

/// (name, code, keyCode, text)
const NAMED: &[(&str, &str, i64, Option<&str>)] = &[
    ("Enter", "Enter", 13, Some("\r")),
    ("Tab", "Tab", 9, Some("\t")),
    ("Backspace", "Backspace", 8, None),
    ("Delete", "Delete", 46, None),
    ("Escape", "Escape", 27, None),
    ("Space", "Space", 32, Some(" ")),
    (" ", "Space", 32, Some(" ")),
    ("ArrowLeft", "ArrowLeft", 37, None),
    ("ArrowUp", "ArrowUp", 38, None),
    ("ArrowRight", "ArrowRight", 39, None),
    ("ArrowDown", "ArrowDown", 40, None),
    ("Home", "Home", 36, None),
    ("End", "End", 35, None),
    ("PageUp", "PageUp", 33, None),
    ("PageDown", "PageDown", 34, None),
    ("Insert", "Insert", 45, None),
    ("Shift", "ShiftLeft", 16, None),
    ("Control", "ControlLeft", 17, None),
    ("Alt", "AltLeft", 18, None),
    ("Meta", "MetaLeft", 91, None),
    ("CapsLock", "CapsLock", 20, None),
    ("ContextMenu", "ContextMenu", 93, None),
];

/// One key (no modifiers) by name, or an error naming what is accepted.
pub fn key(name: &str) -> Result<Key, String> {
    if let Some((key, code, key_code, text)) = NAMED
        .iter()
        .find(|(known, ..)| known.eq_ignore_ascii_case(name))
    {
        return Ok(Key {
            key: if *key == " " {
                " ".into()
            } else {
                (*key).into()
            },
            code: (*code).into(),
            key_code: *key_code,
            text: text.map(str::to_owned),
        });
    }
    if let Some(number) = name.strip_prefix(['F', 'f'])
        && let Ok(number @ 1..=24) = number.parse::<i64>()
    {
        return Ok(Key {
            key: format!("F{number}"),
            code: format!("F{number}"),
            key_code: 111 + number,
            text: None,
        });
    }
    let mut characters = name.chars();
    match (characters.next(), characters.next()) {
        (Some(character), None) => {
            let upper = character.to_ascii_uppercase();
            let (code, key_code) = if character.is_ascii_alphabetic() {
                (format!("Key{upper}"), i64::from(u32::from(upper)))
            } else if character.is_ascii_digit() {
                (format!("Digit{character}"), i64::from(u32::from(character)))
            } else {
                (String::new(), 0)
            };
            Ok(Key {
                key: character.to_string(),
                code,
                key_code,
                text: Some(character.to_string()),
            })
        }
        _ => Err(format!(
            "Unknown key: {name:?}. Use a key name such as Enter, Tab, Escape, Backspace, ArrowLeft, \
             PageDown, F5, or a single character, optionally with modifiers (Control+a, Shift+Tab)"
        )),
    }
}

/// The key-down and key-up events of a press of `combo` (`Control+Shift+a`), modifiers held around it.
pub fn press(combo: &str) -> Result<Vec<Value>, String> {
    let parts: Vec<&str> = if combo == "+" {
        vec!["+"]
    } else {
        combo.split('+').collect()
    };
    let Some((main, modifiers)) = parts.split_last() else {
        return Err("key must not be empty".into());
    };
    let mut held = Vec::new();
    let mut mask = 0;
    for modifier in modifiers {
        let bit = match modifier.to_ascii_lowercase().as_str() {
            "alt" => ALT,
            "control" | "ctrl" => CONTROL,
            "meta" | "controlormeta" => META,
            "shift" => SHIFT,
            _ => return Err(format!("Unknown modifier {modifier:?} in {combo:?}")),
        };
        if mask & bit == 0 {
            held.push((key(modifier_name(bit))?, bit));
        }
        mask |= bit;
    }
    let mut main = key(main)?;
    if mask & (CONTROL | ALT | META) != 0 {
        main.text = None;
    } else if mask & SHIFT != 0
        && let Some(text) = main.text.as_ref().map(|text| text.to_uppercase())
    {
        main.key = text.clone();
        main.text = Some(text);
    }
    let mut events = Vec::new();
    let mut down_mask = 0;
    for (modifier, bit) in &held {
        down_mask |= bit;
        events.push(event("rawKeyDown", modifier, down_mask));
    }
    events.push(event(
        if main.text.is_some() {
            "keyDown"
        } else {
            "rawKeyDown"
        },
        &main,
        mask,
    ));
    events.push(event("keyUp", &main, mask));
    for (modifier, bit) in held.iter().rev() {
        down_mask &= !bit;
        events.push(event("keyUp", modifier, down_mask));
    }
    Ok(events)
}

fn modifier_name(bit: i64) -> &'static str {
    match bit {
        ALT => "Alt",
        CONTROL => "Control",
        META => "Meta",
        _ => "Shift",
    }
}

fn event(kind: &str, key: &Key, modifiers: i64) -> Value {
    let mut event = json!({
        "type": kind,
        "key": key.key,
        "code": key.code,
        "windowsVirtualKeyCode": key.key_code,
        "nativeVirtualKeyCode": key.key_code,
        "modifiers": modifiers,
    });
    if kind == "keyDown"
        && let Some(text) = &key.text
    {
        event["text"] = json!(text);
        event["unmodifiedText"] = json!(text);
    }
    event
}

/// The events that type one character (for `slowly`): a key press where a key exists, else the
/// character inserted as text.
pub fn type_char(character: char) -> Vec<Value> {
    let name = character.to_string();
    match key(&name) {
        Ok(key) => vec![event("keyDown", &key, 0), event("keyUp", &key, 0)],
        Err(_) => vec![json!({"type": "char", "text": name})],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_combos() {
        let enter = press("Enter").unwrap();
        assert_eq!(enter.len(), 2);
        assert_eq!(enter[0]["type"], "keyDown");
        assert_eq!(enter[0]["text"], "\r");
        let select_all = press("Control+a").unwrap();
        assert_eq!(select_all.len(), 4);
        assert_eq!(select_all[1]["type"], "rawKeyDown");
        assert_eq!(select_all[1]["modifiers"], CONTROL);
        assert_eq!(select_all[3]["modifiers"], 0);
        assert_eq!(press("Shift+a").unwrap()[1]["text"], "A");
        assert_eq!(key("F5").unwrap().key_code, 116);
        assert!(press("Hyper+a").is_err());
        assert!(key("NoSuchKey").unwrap_err().starts_with("Unknown key"));
    }
}
