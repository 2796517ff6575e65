//! The `adb` tool's arguments read into actions, with every check done before anything reaches the
//! device.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde_json::{Number, Value};

use super::keycodes;

/// upstream's swipe duration when none is given, in milliseconds.
pub const DEFAULT_SWIPE_MS: u64 = 300;
pub const MAX_SWIPE_MS: u64 = 60_000;
/// Coordinates above this are no screen's pixels (and keep the command line short).
const MAX_COORDINATE: i64 = 100_000;
/// Characters one `input_text` types (each is a key event on the device: long texts take seconds).
pub const MAX_TEXT_CHARS: usize = 10_000;
/// mobile-mcp's long press (tap and hold), in milliseconds.
pub const DEFAULT_LONG_PRESS_MS: u64 = 500;
/// A directional swipe's length when none is given, as a fraction of the screen's side (mobile-mcp's).
pub const DEFAULT_SWIPE_DISTANCE: f64 = 0.3;
/// A screenshot scaled smaller than this would show nothing a model can read.
pub const MIN_SCREENSHOT_SIDE: u32 = 64;
pub const MAX_SCREENSHOT_SIDE: u32 = 8192;
/// Android limits package names to 255 characters.
const MAX_PACKAGE_CHARS: usize = 255;
/// Browsers and intent filters take longer URLs, but no link a model opens needs more.
pub const MAX_URL_CHARS: usize = 4096;
/// Schemes `open_url` refuses: script, local files and providers, and `intent:` URIs that name any
/// component (a link on a web page must not pick what the device runs).
const REFUSED_SCHEMES: [&str; 4] = ["javascript", "file", "content", "intent"];

/// The `adb` tool's arguments (and the live view's input): the schema's properties. All are optional
/// here: which ones an action needs is checked in [`parse`]. Points, `duration` and `code` are any
/// JSON value to serde, as their checks' messages repeat what was sent whatever its type
/// (`duration must be ..., got "fast"`); numbers are kept as JSON wrote them for the same reason.
/// The schema is derived from it, with the `action` enum and its description made from [`ACTIONS`].
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct AdbArguments {
    #[schemars(required, schema_with = "action_schema")]
    action: Option<String>,
    #[schemars(
        with = "Option<PixelPoint>",
        description = "tap, long_press, double_tap: [x, y] in device pixels, (0, 0) at the top left (in the last screenshot's pixels after one taken with max_size). swipe_direction: where to start (default: the screen's center)."
    )]
    coordinate: Option<Value>,
    #[schemars(
        with = "Option<PixelPoint>",
        description = "swipe: where it starts, [x, y] in device pixels."
    )]
    start: Option<Value>,
    #[schemars(
        with = "Option<PixelPoint>",
        description = "swipe: where it ends, [x, y] in device pixels."
    )]
    end: Option<Value>,
    #[schemars(
        with = "Option<i64>",
        range(min = 0, max = MAX_SWIPE_MS),
        description = "swipe, swipe_direction: how long it takes, in milliseconds (default 300). long_press: how long to hold (default 500)."
    )]
    duration: Option<Value>,
    #[schemars(
        length(max = MAX_TEXT_CHARS),
        description = "input_text: the text to type into the focused field, literally (a newline presses Enter)."
    )]
    text: Option<String>,
    #[schemars(
        extend("type" = ["integer", "string"]),
        description = "key_event: an Android key code (3) or name (HOME, BACK, ENTER, DEL, APP_SWITCH, KEYCODE_VOLUME_UP, ...)."
    )]
    code: Option<Value>,
    #[schemars(
        extend("enum" = ["up", "down", "left", "right"]),
        description = "swipe_direction: where the finger moves (up scrolls the content down, to what is below)."
    )]
    direction: Option<String>,
    #[schemars(
        extend("exclusiveMinimum" = 0),
        range(max = 1),
        description = "swipe_direction: how far, as a fraction of the screen's height (up, down) or width (left, right); default 0.3."
    )]
    distance: Option<Number>,
    #[schemars(
        length(max = MAX_PACKAGE_CHARS),
        description = "launch_app, terminate_app: the app's package name, e.g. com.android.settings."
    )]
    package: Option<String>,
    #[schemars(
        length(max = MAX_URL_CHARS),
        description = "open_url: the link to open (https://..., market://..., tel:...)."
    )]
    url: Option<String>,
    #[schemars(
        with = "Option<i64>",
        range(min = MIN_SCREENSHOT_SIDE, max = MAX_SCREENSHOT_SIDE),
        description = "get_screenshot: scale the image so its longest side is at most this many pixels (e.g. 1024); the result states the scale, and coordinates sent afterwards are read in the image's pixels."
    )]
    max_size: Option<Number>,
}

/// The `action` property: one of the table's names, described by the table.
fn action_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "enum": names(), "description": description()})
}

/// A point on the device's screen as the schema says it: two pixel coordinates (the struct keeps any
/// JSON value, so that a message about a bad one repeats what was sent).
struct PixelPoint;

impl JsonSchema for PixelPoint {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PixelPoint".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2, "maxItems": 2,
        })
    }
}

#[derive(Debug, PartialEq)]
pub enum Action {
    Resolution,
    Tap {
        x: i64,
        y: i64,
    },
    Swipe {
        from: (i64, i64),
        to: (i64, i64),
        duration_ms: u64,
    },
    Text(String),
    Key {
        code: i64,
        shown: String,
    },
    Screenshot {
        /// The image's longest side at most this many pixels (None: the screen's own size).
        max_size: Option<u32>,
    },
    Elements,
    LongPress {
        x: i64,
        y: i64,
        duration_ms: u64,
    },
    DoubleTap {
        x: i64,
        y: i64,
    },
    SwipeDirection {
        direction: Direction,
        from: Option<(i64, i64)>,
        distance: f64,
        duration_ms: u64,
    },
    ListApps,
    LaunchApp(String),
    TerminateApp(String),
    OpenUrl(String),
}

/// Where the finger moves (a swipe up scrolls the content down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Up,
    Down,
    Left,
    Right,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
            Direction::Left => "left",
            Direction::Right => "right",
        }
    }
}

/// One action of the `adb` tool: its name as a call spells it, whether upstream (the mobile image's
/// `adb` tool) has it, what the schema's `action` description says of it (if anything), and how a
/// call's arguments are read into it (given the name, which its messages repeat). The schema's `action`
/// enum and description, the parser and its "Valid actions" list are all made from [`ACTIONS`].
struct ActionSpec {
    name: &'static str,
    upstream: bool,
    about: Option<&'static str>,
    parse: fn(&AdbArguments, &'static str) -> Result<Action, String>,
}

/// Every action: upstream's six, then mobile-mcp's and the toolset's.
const ACTIONS: &[ActionSpec] = &[
    ActionSpec {
        name: "get_screen_resolution",
        upstream: true,
        about: None,
        parse: |_, _| Ok(Action::Resolution),
    },
    ActionSpec {
        name: "tap",
        upstream: true,
        about: None,
        parse: |arguments, action| {
            let (x, y) = point(arguments.coordinate.as_ref(), "coordinate", action)?;
            Ok(Action::Tap { x, y })
        },
    },
    ActionSpec {
        name: "swipe",
        upstream: true,
        about: None,
        parse: |arguments, action| {
            let from = point(arguments.start.as_ref(), "start", action)?;
            let to = point(arguments.end.as_ref(), "end", action)?;
            let duration_ms = duration(arguments.duration.as_ref(), DEFAULT_SWIPE_MS)?;
            Ok(Action::Swipe {
                from,
                to,
                duration_ms,
            })
        },
    },
    ActionSpec {
        name: "input_text",
        upstream: true,
        about: None,
        parse: |arguments, _| input_text(arguments.text.as_deref()),
    },
    ActionSpec {
        name: "key_event",
        upstream: true,
        about: None,
        parse: |arguments, _| keycodes::key(arguments.code.as_ref()),
    },
    ActionSpec {
        name: "get_screenshot",
        upstream: true,
        about: None,
        parse: |arguments, _| {
            Ok(Action::Screenshot {
                max_size: max_size(arguments.max_size.as_ref())?,
            })
        },
    },
    ActionSpec {
        name: "list_elements",
        upstream: false,
        about: Some(
            "list_elements lists the screen's UI elements (text, content-desc, resource-id, class, bounds and the center to tap)",
        ),
        parse: |_, _| Ok(Action::Elements),
    },
    ActionSpec {
        name: "long_press",
        upstream: false,
        about: None,
        parse: |arguments, action| {
            let (x, y) = point(arguments.coordinate.as_ref(), "coordinate", action)?;
            let duration_ms = duration(arguments.duration.as_ref(), DEFAULT_LONG_PRESS_MS)?;
            Ok(Action::LongPress { x, y, duration_ms })
        },
    },
    ActionSpec {
        name: "double_tap",
        upstream: false,
        about: None,
        parse: |arguments, action| {
            let (x, y) = point(arguments.coordinate.as_ref(), "coordinate", action)?;
            Ok(Action::DoubleTap { x, y })
        },
    },
    ActionSpec {
        name: "swipe_direction",
        upstream: false,
        about: None,
        parse: swipe_direction,
    },
    ActionSpec {
        name: "list_apps",
        upstream: false,
        about: Some("list_apps lists installed third-party apps"),
        parse: |_, _| Ok(Action::ListApps),
    },
    ActionSpec {
        name: "launch_app",
        upstream: false,
        about: Some("launch_app / terminate_app start and stop one by package"),
        parse: |arguments, action| {
            Ok(Action::LaunchApp(package(
                arguments.package.as_deref(),
                action,
            )?))
        },
    },
    ActionSpec {
        name: "terminate_app",
        upstream: false,
        about: None,
        parse: |arguments, action| {
            Ok(Action::TerminateApp(package(
                arguments.package.as_deref(),
                action,
            )?))
        },
    },
    ActionSpec {
        name: "open_url",
        upstream: false,
        about: Some("open_url opens a web or app link"),
        parse: |arguments, _| Ok(Action::OpenUrl(url(arguments.url.as_deref())?)),
    },
];

/// The names a call may give as `action` (the schema's `enum`): upstream's first, as its schema lists
/// them, then the others, each in the table's order.
pub fn names() -> Vec<&'static str> {
    let (upstream, more): (Vec<&ActionSpec>, Vec<&ActionSpec>) =
        ACTIONS.iter().partition(|spec| spec.upstream);
    upstream.iter().chain(&more).map(|spec| spec.name).collect()
}

/// The schema's description of `action`: what the table says of the actions a name does not explain.
pub fn description() -> String {
    let about: Vec<&str> = ACTIONS.iter().filter_map(|spec| spec.about).collect();
    format!("The action to perform. {}.", about.join("; "))
}

pub fn parse(arguments: &AdbArguments) -> Result<Action, String> {
    let Some(action) = arguments.action.as_deref() else {
        return Err(format!("action is required: one of {}", names().join(", ")));
    };
    match ACTIONS.iter().find(|spec| spec.name == action) {
        Some(spec) => (spec.parse)(arguments, spec.name),
        None => Err(format!(
            "Unknown action: {action}. Valid actions: {}",
            names().join(", ")
        )),
    }
}

fn swipe_direction(arguments: &AdbArguments, action: &'static str) -> Result<Action, String> {
    let direction = match arguments.direction.as_deref() {
        Some(name) => match name.trim().to_ascii_lowercase().as_str() {
            "up" => Direction::Up,
            "down" => Direction::Down,
            "left" => Direction::Left,
            "right" => Direction::Right,
            _ => {
                return Err(format!(
                    "direction must be up, down, left or right, got {name:?}"
                ));
            }
        },
        None => {
            return Err(
                "direction is required for swipe_direction: up, down, left or right".into(),
            );
        }
    };
    let from = match arguments.coordinate.as_ref() {
        None => None,
        value => Some(point(value, "coordinate", action)?),
    };
    let distance = match &arguments.distance {
        None => DEFAULT_SWIPE_DISTANCE,
        Some(value) => value
            .as_f64()
            .filter(|d| *d > 0.0 && *d <= 1.0)
            .ok_or_else(|| {
                format!(
                    "distance must be a fraction of the screen above 0 and at most 1 (0.3 is 30%), got {value}"
                )
            })?,
    };
    let duration_ms = duration(arguments.duration.as_ref(), DEFAULT_SWIPE_MS)?;
    Ok(Action::SwipeDirection {
        direction,
        from,
        distance,
        duration_ms,
    })
}

fn input_text(text: Option<&str>) -> Result<Action, String> {
    match text {
        Some(text) if !text.is_empty() => {
            let count = text.chars().count();
            if count > MAX_TEXT_CHARS {
                return Err(format!(
                    "text is {count} characters; input_text types at most {MAX_TEXT_CHARS} per call"
                ));
            }
            if let Some(bad) = text
                .chars()
                .find(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
            {
                return Err(format!(
                    "text holds the control character U+{:04X}, which no key types",
                    u32::from(bad)
                ));
            }
            Ok(Action::Text(text.to_owned()))
        }
        Some(_) => Err("text must not be empty for input_text".into()),
        None => Err("text is required for input_text".into()),
    }
}

/// An integer, also when JSON spells it `3.0`; not `3.5`, not a string.
pub(super) fn integer(value: &Value) -> Option<i64> {
    value.as_number().and_then(whole)
}

/// An integer, also when JSON spells it `3.0`; not `3.5`.
fn whole(number: &Number) -> Option<i64> {
    if let Some(integer) = number.as_i64() {
        return Some(integer);
    }
    let float = number.as_f64()?;
    (float.fract() == 0.0 && float.abs() <= 1e15).then_some(float as i64)
}

fn duration(value: Option<&Value>, default: u64) -> Result<u64, String> {
    match value {
        None => Ok(default),
        Some(value) => integer(value)
            .and_then(|ms| u64::try_from(ms).ok())
            .filter(|ms| *ms <= MAX_SWIPE_MS)
            .ok_or_else(|| {
                format!(
                    "duration must be an integer number of milliseconds from 0 to {MAX_SWIPE_MS}, got {value}"
                )
            }),
    }
}

fn max_size(value: Option<&Number>) -> Result<Option<u32>, String> {
    match value {
        None => Ok(None),
        Some(value) => whole(value)
            .and_then(|side| u32::try_from(side).ok())
            .filter(|side| (MIN_SCREENSHOT_SIDE..=MAX_SCREENSHOT_SIDE).contains(side))
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "max_size must be the image's longest side in pixels, an integer from {MIN_SCREENSHOT_SIDE} to {MAX_SCREENSHOT_SIDE} (e.g. 1024), got {value}"
                )
            }),
    }
}

/// A Java package name (`com.example.app`): dot-separated identifiers of ASCII letters, digits and `_`,
/// each starting with a letter. Nothing else can reach the device shell, so it needs no quoting.
fn package(value: Option<&str>, action: &str) -> Result<String, String> {
    let Some(name) = value.map(str::trim) else {
        return Err(format!(
            "package is required for {action}: the app's package name, e.g. com.android.settings"
        ));
    };
    let valid_segment = |segment: &str| {
        segment
            .as_bytes()
            .first()
            .is_some_and(u8::is_ascii_alphabetic)
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    if name.is_empty() || name.len() > MAX_PACKAGE_CHARS || !name.split('.').all(valid_segment) {
        let shown: String = name.chars().take(100).collect();
        return Err(format!(
            "package must be an Android package name such as com.android.settings (letters, digits and _ in dot-separated parts, each starting with a letter, at most {MAX_PACKAGE_CHARS} characters), got {shown:?}"
        ));
    }
    Ok(name.to_owned())
}

fn url(value: Option<&str>) -> Result<String, String> {
    let Some(url) = value.map(str::trim) else {
        return Err(
            "url is required for open_url: a web or app link, e.g. https://example.com".into(),
        );
    };
    let count = url.chars().count();
    if count > MAX_URL_CHARS {
        return Err(format!(
            "url is {count} characters; open_url takes at most {MAX_URL_CHARS}"
        ));
    }
    if let Some(bad) = url.chars().find(|c| c.is_control()) {
        return Err(format!(
            "url holds the control character U+{:04X}; encode it (%XX)",
            u32::from(bad)
        ));
    }
    let scheme = url
        .split_once(':')
        .map(|(scheme, _)| scheme)
        .filter(|scheme| {
            scheme
                .as_bytes()
                .first()
                .is_some_and(u8::is_ascii_alphabetic)
                && scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        });
    let Some(scheme) = scheme else {
        return Err(format!(
            "url must start with a scheme (https://..., market://..., tel:...), got {:?}",
            url.chars().take(100).collect::<String>()
        ));
    };
    let scheme = scheme.to_ascii_lowercase();
    if REFUSED_SCHEMES.contains(&scheme.as_str()) {
        return Err(format!(
            "open_url does not open {scheme}: URLs ({} are refused); use a web or app link",
            REFUSED_SCHEMES
                .iter()
                .map(|s| format!("{s}:"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(url.to_owned())
}

fn point(value: Option<&Value>, name: &str, action: &str) -> Result<(i64, i64), String> {
    let Some(value) = value else {
        return Err(format!("{name} is required for {action}: [x, y] in pixels"));
    };
    let bad = || {
        format!(
            "{name} must be [x, y], two integers from 0 to {MAX_COORDINATE} (pixels), got {value}"
        )
    };
    let Some([x, y]) = value.as_array().map(Vec::as_slice) else {
        return Err(bad());
    };
    let coordinate = |v: &Value| integer(v).filter(|n| (0..=MAX_COORDINATE).contains(n));
    match (coordinate(x), coordinate(y)) {
        (Some(x), Some(y)) => Ok((x, y)),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(arguments: Value) -> Result<Action, String> {
        let arguments: AdbArguments =
            serde_json::from_value(arguments).map_err(|err| format!("unreadable: {err}"))?;
        parse(&arguments)
    }

    #[test]
    fn upstream_arguments_parse() {
        assert_eq!(
            parsed(json!({"action": "tap", "coordinate": [10, 20]})).unwrap(),
            Action::Tap { x: 10, y: 20 }
        );
        assert_eq!(
            parsed(json!({"action": "swipe", "start": [1, 2], "end": [3, 4]})).unwrap(),
            Action::Swipe {
                from: (1, 2),
                to: (3, 4),
                duration_ms: 300
            }
        );
        assert_eq!(
            parsed(json!({"action": "key_event", "code": 3})).unwrap(),
            Action::Key {
                code: 3,
                shown: "3".into()
            }
        );
        assert_eq!(
            parsed(json!({"action": "key_event", "code": "4"})).unwrap(),
            Action::Key {
                code: 4,
                shown: "4".into()
            }
        );
    }

    #[test]
    fn bad_key_codes_are_refused() {
        assert!(parsed(json!({"action": "key_event", "code": "HOMEY"})).is_err());
        assert!(parsed(json!({"action": "key_event", "code": -1})).is_err());
        assert!(parsed(json!({"action": "key_event", "code": 2.5})).is_err());
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        for (arguments, needle) in [
            (json!({"action": "tap"}), "coordinate is required"),
            (
                json!({"action": "tap", "coordinate": [1]}),
                "coordinate must be [x, y]",
            ),
            (
                json!({"action": "tap", "coordinate": [-1, 5]}),
                "coordinate must be",
            ),
            (
                json!({"action": "tap", "coordinate": [1.5, 5]}),
                "coordinate must be",
            ),
            (
                json!({"action": "tap", "coordinate": ["1", 5]}),
                "coordinate must be",
            ),
            (
                json!({"action": "tap", "coordinate": "here"}),
                "coordinate must be [x, y], two integers from 0 to 100000 (pixels), got \"here\"",
            ),
            (
                json!({"action": "swipe", "start": [1, 1], "end": [2, 2], "duration": "fast"}),
                "got \"fast\"",
            ),
            (
                json!({"action": "key_event", "code": true}),
                "code must be a key code or a key name, got true",
            ),
            (
                json!({"action": "swipe", "start": [1, 1]}),
                "end is required",
            ),
            (
                json!({"action": "swipe", "start": [1, 1], "end": [2, 2], "duration": -5}),
                "duration",
            ),
            (json!({"action": "input_text"}), "text is required"),
            (
                json!({"action": "input_text", "text": ""}),
                "must not be empty",
            ),
            (json!({"action": "input_text", "text": "a\u{7}"}), "U+0007"),
            (json!({"action": "key_event"}), "code is required"),
            (json!({"action": "fly"}), "Unknown action: fly"),
            (json!({}), "action is required"),
        ] {
            let err = parsed(arguments.clone()).unwrap_err();
            assert!(err.contains(needle), "{arguments}: {err}");
        }
    }

    #[test]
    fn new_actions_parse_with_their_defaults() {
        assert_eq!(
            parsed(json!({"action": "long_press", "coordinate": [5, 6]})).unwrap(),
            Action::LongPress {
                x: 5,
                y: 6,
                duration_ms: 500
            }
        );
        assert_eq!(
            parsed(json!({"action": "swipe_direction", "direction": "Up"})).unwrap(),
            Action::SwipeDirection {
                direction: Direction::Up,
                from: None,
                distance: 0.3,
                duration_ms: 300
            }
        );
        assert_eq!(
            parsed(json!({"action": "launch_app", "package": " com.example.app_2 "})).unwrap(),
            Action::LaunchApp("com.example.app_2".into())
        );
        assert_eq!(
            parsed(json!({"action": "get_screenshot", "max_size": 1024})).unwrap(),
            Action::Screenshot {
                max_size: Some(1024)
            }
        );
        assert_eq!(
            parsed(json!({"action": "open_url", "url": "market://details?id=x"})).unwrap(),
            Action::OpenUrl("market://details?id=x".into())
        );
    }

    #[test]
    fn hostile_packages_and_urls_are_refused() {
        for package in [
            "com.x; reboot",
            "com.x$(id)",
            "com..x",
            ".com.x",
            "1com.x",
            "com.x'",
            "com.x\nreboot",
            "",
        ] {
            let err = parsed(json!({"action": "terminate_app", "package": package})).unwrap_err();
            assert!(err.contains("package"), "{package}: {err}");
        }
        for (url, needle) in [
            ("javascript:alert(1)", "javascript:"),
            ("FILE:///data/x", "file:"),
            ("intent://x#Intent;component=a/.B;end", "intent:"),
            ("no scheme here", "must start with a scheme"),
            ("https://x.com/\nreboot", "U+000A"),
            ("", "must start with a scheme"),
        ] {
            let err = parsed(json!({"action": "open_url", "url": url})).unwrap_err();
            assert!(err.contains(needle), "{url}: {err}");
        }
        for arguments in [
            json!({"action": "swipe_direction", "direction": "sideways"}),
            json!({"action": "swipe_direction", "direction": "up", "distance": 0}),
            json!({"action": "swipe_direction", "direction": "up", "distance": 1.5}),
            json!({"action": "get_screenshot", "max_size": 10}),
            json!({"action": "long_press", "coordinate": [1, 1], "duration": 60_001}),
        ] {
            assert!(parsed(arguments.clone()).is_err(), "{arguments}");
        }
    }

    /// The least a call of each action needs; `{}` for those that need nothing.
    fn minimal_call(name: &str) -> Value {
        let mut call = match name {
            "tap" | "long_press" | "double_tap" => json!({"coordinate": [1, 1]}),
            "swipe" => json!({"start": [1, 1], "end": [2, 2]}),
            "input_text" => json!({"text": "a"}),
            "key_event" => json!({"code": 3}),
            "swipe_direction" => json!({"direction": "up"}),
            "launch_app" | "terminate_app" => json!({"package": "com.example"}),
            "open_url" => json!({"url": "https://example.com"}),
            _ => json!({}),
        };
        call["action"] = json!(name);
        call
    }

    #[test]
    fn every_action_of_the_table_parses_from_a_minimal_call() {
        for spec in ACTIONS {
            let call = minimal_call(spec.name);
            assert!(
                parsed(call.clone()).is_ok(),
                "{call}: {:?}",
                parsed(call.clone())
            );
        }
    }

    #[test]
    fn the_schema_lists_the_table_s_names_once_each_upstream_s_first() {
        let table: Vec<(&str, bool)> = ACTIONS
            .iter()
            .map(|spec| (spec.name, spec.upstream))
            .collect();
        let schema = crate::tools::assert_actions_listed::<AdbArguments>(&table);
        let described = schema["properties"]["action"]["description"].as_str();
        for spec in ACTIONS {
            if let Some(about) = spec.about {
                assert!(about.starts_with(spec.name), "{about}");
                assert!(described.is_some_and(|text| text.contains(about)));
            }
        }
    }
}
