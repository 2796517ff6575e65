//! Android key codes: what `key_event` accepts, a code or a `KeyEvent` name, read into the code the
//! device's `input keyevent` takes.

use serde_json::Value;

use super::actions::{Action, integer};

/// Android's KEYCODE_ range today is below 320; this leaves room for new ones.
const MAX_KEY_CODE: i64 = 1_000;

pub(super) fn key(value: Option<&Value>) -> Result<Action, String> {
    let Some(value) = value else {
        return Err(
            "code is required for key_event: a key code (3) or name (HOME, BACK, ENTER, KEYCODE_VOLUME_UP)"
                .into(),
        );
    };
    let in_range = |code: i64| (0..=MAX_KEY_CODE).contains(&code);
    if let Some(code) = integer(value) {
        return if in_range(code) {
            Ok(Action::Key {
                code,
                shown: code.to_string(),
            })
        } else {
            Err(format!(
                "Invalid key code: {code} (key codes are 0 to {MAX_KEY_CODE})"
            ))
        };
    }
    let Some(name) = value.as_str() else {
        return Err(format!(
            "code must be a key code or a key name, got {value}"
        ));
    };
    let trimmed = name.trim();
    if let Ok(code) = trimmed.parse::<i64>() {
        return if in_range(code) {
            Ok(Action::Key {
                code,
                shown: trimmed.to_owned(),
            })
        } else {
            Err(format!(
                "Invalid key code: {code} (key codes are 0 to {MAX_KEY_CODE})"
            ))
        };
    }
    match key_code(trimmed) {
        Some(code) => Ok(Action::Key {
            code,
            shown: trimmed.to_owned(),
        }),
        None => Err(format!(
            "Invalid key: {name}. Use a key code or an Android key name such as HOME, BACK, ENTER, DEL, TAB, APP_SWITCH, VOLUME_UP, POWER or KEYCODE_*"
        )),
    }
}

/// Android `KeyEvent` names (with or without `KEYCODE_`, any case) and a few common aliases.
fn key_code(name: &str) -> Option<i64> {
    let upper = name.to_ascii_uppercase().replace([' ', '-'], "_");
    let bare = upper.strip_prefix("KEYCODE_").unwrap_or(&upper);
    if let [letter @ b'A'..=b'Z'] = bare.as_bytes() {
        return Some(29 + i64::from(letter - b'A'));
    }
    if let [digit @ b'0'..=b'9'] = bare.as_bytes() {
        return Some(7 + i64::from(digit - b'0'));
    }
    if let Some(number) = bare.strip_prefix('F').and_then(|n| n.parse::<i64>().ok())
        && (1..=12).contains(&number)
    {
        return Some(130 + number);
    }
    let code = match bare {
        "SOFT_LEFT" => 1,
        "SOFT_RIGHT" => 2,
        "HOME" => 3,
        "BACK" => 4,
        "CALL" => 5,
        "ENDCALL" => 6,
        "STAR" => 17,
        "POUND" => 18,
        "DPAD_UP" | "UP" => 19,
        "DPAD_DOWN" | "DOWN" => 20,
        "DPAD_LEFT" | "LEFT" => 21,
        "DPAD_RIGHT" | "RIGHT" => 22,
        "DPAD_CENTER" | "CENTER" => 23,
        "VOLUME_UP" => 24,
        "VOLUME_DOWN" => 25,
        "POWER" => 26,
        "CAMERA" => 27,
        "CLEAR" => 28,
        "COMMA" => 55,
        "PERIOD" => 56,
        "ALT_LEFT" | "ALT" => 57,
        "ALT_RIGHT" => 58,
        "SHIFT_LEFT" | "SHIFT" => 59,
        "SHIFT_RIGHT" => 60,
        "TAB" => 61,
        "SPACE" => 62,
        "SYM" => 63,
        "EXPLORER" => 64,
        "ENVELOPE" => 65,
        "ENTER" | "RETURN" => 66,
        "DEL" | "BACKSPACE" | "DELETE" => 67,
        "GRAVE" => 68,
        "MINUS" => 69,
        "EQUALS" => 70,
        "LEFT_BRACKET" => 71,
        "RIGHT_BRACKET" => 72,
        "BACKSLASH" => 73,
        "SEMICOLON" => 74,
        "APOSTROPHE" => 75,
        "SLASH" => 76,
        "AT" => 77,
        "NUM" => 78,
        "HEADSETHOOK" => 79,
        "FOCUS" => 80,
        "PLUS" => 81,
        "MENU" => 82,
        "NOTIFICATION" => 83,
        "SEARCH" => 84,
        "MEDIA_PLAY_PAUSE" => 85,
        "MEDIA_STOP" => 86,
        "MEDIA_NEXT" => 87,
        "MEDIA_PREVIOUS" => 88,
        "MEDIA_REWIND" => 89,
        "MEDIA_FAST_FORWARD" => 90,
        "MUTE" => 91,
        "PAGE_UP" => 92,
        "PAGE_DOWN" => 93,
        "ESCAPE" | "ESC" => 111,
        "FORWARD_DEL" => 112,
        "CTRL_LEFT" | "CTRL" => 113,
        "CTRL_RIGHT" => 114,
        "CAPS_LOCK" => 115,
        "SCROLL_LOCK" => 116,
        "META_LEFT" => 117,
        "META_RIGHT" => 118,
        "SYSRQ" => 120,
        "BREAK" => 121,
        "MOVE_HOME" => 122,
        "MOVE_END" => 123,
        "INSERT" => 124,
        "FORWARD" => 125,
        "MEDIA_PLAY" => 126,
        "MEDIA_PAUSE" => 127,
        "VOLUME_MUTE" => 164,
        "SETTINGS" => 176,
        "APP_SWITCH" | "RECENTS" | "RECENT_APPS" => 187,
        "BRIGHTNESS_DOWN" => 220,
        "BRIGHTNESS_UP" => 221,
        "SLEEP" => 223,
        "WAKEUP" => 224,
        "ASSIST" => 219,
        "VOICE_ASSIST" => 231,
        "CUT" => 277,
        "COPY" => 278,
        "PASTE" => 279,
        "ALL_APPS" => 284,
        _ => return None,
    };
    Some(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_as_the_sdk_documents_them() {
        for (name, code) in [
            ("HOME", 3),
            ("back", 4),
            ("ENTER", 66),
            ("KEYCODE_VOLUME_UP", 24),
            ("keycode_a", 29),
            ("KEYCODE_0", 7),
            ("F12", 142),
            ("APP_SWITCH", 187),
        ] {
            assert_eq!(key_code(name), Some(code), "{name}");
        }
    }
}
