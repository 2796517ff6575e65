//! The actions of the `computer` tool: read from a call's arguments (every mistake is a sentence the
//! model can act on) and then run on the desktop. Upstream's ten (computer-use-mcp 1.2.0) keep its exact
//! texts; the rest are the model contracts' names and fields.

use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer};
use serde_json::{Number, Value};

use super::keys;

/// Longest `hold_key` and `wait`, as the model contracts bound them.
pub const MAX_ACTION_DURATION: Duration = Duration::from_secs(300);
/// Longest text one `type` action types.
pub const MAX_TYPED_CHARS: usize = 100_000;
/// Most presses of one `key` action (`repeat`), as the toolset bounds it.
pub const MAX_KEY_REPEAT: u64 = 100;

/// One action of the `computer` tool: its name as a call spells it, whether upstream
/// (computer-use-mcp 1.2.0) has it (its answers then keep upstream's exact texts), and how a call's
/// arguments are read into it. The schema's `action` enum, the parser and its "Valid actions" list are
/// all made from [`ACTIONS`].
struct ActionSpec {
    name: &'static str,
    upstream: bool,
    parse: fn(&Call) -> Result<Action, String>,
}

/// Every action: upstream's ten, then the model contracts' (`screenshot` and `cursor_position` are
/// their names for upstream's `get_screenshot` and `get_cursor_position`).
const ACTIONS: &[ActionSpec] = &[
    ActionSpec {
        name: "key",
        upstream: true,
        parse: key,
    },
    ActionSpec {
        name: "type",
        upstream: true,
        parse: type_text,
    },
    ActionSpec {
        name: "mouse_move",
        upstream: true,
        parse: |call| {
            Ok(Action::MouseMove {
                to: call.required_coordinate()?,
            })
        },
    },
    ActionSpec {
        name: "left_click",
        upstream: true,
        parse: |call| call.click(Button::Left, 1, "Left clicked"),
    },
    ActionSpec {
        name: "left_click_drag",
        upstream: true,
        parse: drag,
    },
    ActionSpec {
        name: "right_click",
        upstream: true,
        parse: |call| call.click(Button::Right, 1, "Right clicked"),
    },
    ActionSpec {
        name: "middle_click",
        upstream: true,
        parse: |call| call.click(Button::Middle, 1, "Middle clicked"),
    },
    ActionSpec {
        name: "double_click",
        upstream: true,
        parse: |call| call.click(Button::Left, 2, "Double clicked"),
    },
    ActionSpec {
        name: "get_screenshot",
        upstream: true,
        parse: screenshot,
    },
    ActionSpec {
        name: "get_cursor_position",
        upstream: true,
        parse: |_| Ok(Action::CursorPosition),
    },
    ActionSpec {
        name: "screenshot",
        upstream: false,
        parse: screenshot,
    },
    ActionSpec {
        name: "cursor_position",
        upstream: false,
        parse: |_| Ok(Action::CursorPosition),
    },
    ActionSpec {
        name: "triple_click",
        upstream: false,
        parse: |call| call.click(Button::Left, 3, "Triple clicked"),
    },
    ActionSpec {
        name: "left_mouse_down",
        upstream: false,
        parse: |call| {
            Ok(Action::MouseDown {
                at: call.coordinate.clone(),
            })
        },
    },
    ActionSpec {
        name: "left_mouse_up",
        upstream: false,
        parse: |call| {
            Ok(Action::MouseUp {
                at: call.coordinate.clone(),
            })
        },
    },
    ActionSpec {
        name: "scroll",
        upstream: false,
        parse: scroll,
    },
    ActionSpec {
        name: "hold_key",
        upstream: false,
        parse: hold_key,
    },
    ActionSpec {
        name: "wait",
        upstream: false,
        parse: |call| {
            let (duration, shown) = call.duration()?;
            Ok(Action::Wait { duration, shown })
        },
    },
    ActionSpec {
        name: "zoom",
        upstream: false,
        parse: zoom,
    },
    ActionSpec {
        name: "key_down",
        upstream: false,
        parse: |call| {
            let (text, chord) = call.chord()?;
            Ok(Action::KeyDown { text, chord })
        },
    },
    ActionSpec {
        name: "key_up",
        upstream: false,
        parse: |call| {
            let (text, chord) = call.chord()?;
            Ok(Action::KeyUp { text, chord })
        },
    },
];

/// The names a call may give as `action` (the schema's `enum`): upstream's first, as its schema lists
/// them, then the others, each in the table's order.
pub fn names() -> Vec<&'static str> {
    let (upstream, more): (Vec<&ActionSpec>, Vec<&ActionSpec>) =
        ACTIONS.iter().partition(|spec| spec.upstream);
    upstream.iter().chain(&more).map(|spec| spec.name).collect()
}

/// The `computer` tool's arguments, also each action of `computer_batch`: the schema's properties. All
/// are optional here: which ones an action needs is checked in [`parse`], with upstream's messages.
/// Numbers are kept as JSON wrote them, so a message about one repeats what was sent, and `3.0` for a
/// whole-number field fails its check (with that check's message) rather than being read as 3.
/// The schema is derived from it, with the `action` enum made from [`ACTIONS`].
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct ComputerArguments {
    #[schemars(required, schema_with = "action_schema")]
    action: Option<String>,
    /// [x, y] in screenshot pixels: where to move, click or scroll.
    #[schemars(length(equal = 2))]
    coordinate: Option<Vec<Number>>,
    #[schemars(
        description = "Text to type, or keys to press (`ctrl+shift+t`, `Return`, `KP_Enter`); on clicks and scroll, modifiers to hold."
    )]
    text: Option<String>,
    /// left_click_drag: where the drag starts (default: the pointer).
    #[schemars(length(equal = 2))]
    start_coordinate: Option<Vec<Number>>,
    #[schemars(extend("enum" = ["up", "down", "left", "right"]))]
    scroll_direction: Option<String>,
    /// Wheel clicks (default 3).
    #[schemars(with = "Option<i64>", range(min = 0, max = 100))]
    scroll_amount: Option<Number>,
    /// Seconds, for hold_key and wait.
    #[schemars(range(min = 0, max = 300))]
    duration: Option<f64>,
    /// key: how many times to press.
    #[schemars(with = "Option<i64>", range(min = 1, max = 100))]
    repeat: Option<Number>,
    /// zoom: [x0, y0, x1, y1].
    #[schemars(length(equal = 4))]
    region: Option<Vec<Number>>,
    /// Screenshot encoding (default png).
    #[schemars(extend("enum" = ["png", "jpeg"]))]
    format: Option<String>,
    /// JPEG quality (default 75).
    #[schemars(with = "Option<i64>", range(min = 1, max = 100))]
    quality: Option<Number>,
    /// Draw the pointer into the screenshot.
    cursor: Option<bool>,
}

/// The `action` property: one of the table's names.
fn action_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "enum": names(), "description": "The action to perform."})
}

/// One action of `computer_batch`: the `computer` tool's arguments, or why they cannot be read. An
/// unreadable action fails at its turn, like any action that fails: the ones before it still run.
#[derive(Debug)]
pub enum BatchAction {
    Read(Box<ComputerArguments>),
    Unreadable(String),
}

/// Declared as the `computer` tool's arguments, which it reads.
impl JsonSchema for BatchAction {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        ComputerArguments::schema_name()
    }

    /// Without the struct's doc comment, which is for Rust readers.
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut schema = ComputerArguments::json_schema(generator);
        schema.remove("description");
        schema
    }
}

impl<'de> Deserialize<'de> for BatchAction {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        if !value.is_object() {
            return Ok(BatchAction::Unreadable(
                "arguments must be an object with an action".into(),
            ));
        }
        Ok(match ComputerArguments::deserialize(value) {
            Ok(arguments) => BatchAction::Read(Box::new(arguments)),
            // The words the `computer` tool answers for the same arguments.
            Err(err) => BatchAction::Unreadable(crate::tools::invalid_arguments("computer", &err)),
        })
    }
}

/// A point as the caller gave it (for the answer's text) and where it is on the screen.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub shown: (String, String),
    pub x: i32,
    pub y: i32,
}

impl Point {
    pub fn text(&self) -> String {
        format!("({}, {})", self.shown.0, self.shown.1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Button {
    Left = 1,
    Middle = 2,
    Right = 3,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ShotOptions {
    pub jpeg_quality: Option<u8>,
    pub cursor: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Key {
        text: String,
        chord: Vec<u32>,
        repeat: u64,
    },
    KeyDown {
        text: String,
        chord: Vec<u32>,
    },
    KeyUp {
        text: String,
        chord: Vec<u32>,
    },
    Type {
        text: String,
    },
    MouseMove {
        to: Point,
    },
    Click {
        button: Button,
        count: u8,
        at: Option<Point>,
        modifiers: Vec<u32>,
        done: &'static str,
    },
    Drag {
        from: Option<Point>,
        to: Point,
    },
    MouseDown {
        at: Option<Point>,
    },
    MouseUp {
        at: Option<Point>,
    },
    Scroll {
        direction: String,
        button: u8,
        amount: u64,
        at: Option<Point>,
        modifiers: Vec<u32>,
    },
    HoldKey {
        text: String,
        chord: Vec<u32>,
        duration: Duration,
        shown: String,
    },
    Wait {
        duration: Duration,
        shown: String,
    },
    Screenshot(ShotOptions),
    CursorPosition,
    Zoom {
        region: (Point, Point),
        options: ShotOptions,
    },
}

/// How caller coordinates relate to the screen: screenshots may be scaled down to fit a maximum size, and
/// then every coordinate a caller sends or reads is in the screenshot's pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Geometry {
    pub screen: (u32, u32),
    pub image: (u32, u32),
}

impl Geometry {
    pub fn scaled(&self) -> bool {
        self.screen != self.image
    }

    /// Caller space to screen pixels.
    fn screen_point(self, x: f64, y: f64) -> (i32, i32) {
        let scale_x = f64::from(self.screen.0) / f64::from(self.image.0.max(1));
        let scale_y = f64::from(self.screen.1) / f64::from(self.image.1.max(1));
        ((x * scale_x).round() as i32, (y * scale_y).round() as i32)
    }

    /// Screen pixels to caller space.
    pub fn caller_point(self, x: i32, y: i32) -> (i64, i64) {
        let scale_x = f64::from(self.image.0) / f64::from(self.screen.0.max(1));
        let scale_y = f64::from(self.image.1) / f64::from(self.screen.1.max(1));
        (
            (f64::from(x) * scale_x).round() as i64,
            (f64::from(y) * scale_y).round() as i64,
        )
    }
}

/// A number as JavaScript prints it (upstream's texts come from JS): `100`, `1.5`.
pub fn js_number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e21 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

fn point(numbers: &[Number], field: &str, geometry: &Geometry) -> Result<Point, String> {
    let (x, y) = match numbers {
        [x, y] => x.as_f64().zip(y.as_f64()),
        _ => None,
    }
    .ok_or_else(|| {
        format!(
            "{field} must be [x, y], two numbers; got {}",
            Value::from(numbers.to_vec())
        )
    })?;
    let (width, height) = geometry.image;
    if !(x >= 0.0 && y >= 0.0 && x < f64::from(width) && y < f64::from(height)) {
        return Err(format!(
            "Coordinates ({}, {}) are outside display bounds of {width}x{height}",
            js_number(x),
            js_number(y)
        ));
    }
    let (screen_x, screen_y) = geometry.screen_point(x, y);
    Ok(Point {
        shown: (js_number(x), js_number(y)),
        x: screen_x,
        y: screen_y,
    })
}

/// A call being read: its arguments, the screen they are about, and its coordinate, already checked
/// (whatever the action, as upstream checks it first).
struct Call<'a> {
    action: &'static str,
    arguments: &'a ComputerArguments,
    geometry: &'a Geometry,
    coordinate: Option<Point>,
}

impl Call<'_> {
    fn required_coordinate(&self) -> Result<Point, String> {
        self.coordinate
            .clone()
            .ok_or_else(|| format!("Coordinate required for {}", self.action))
    }

    fn text(&self) -> Result<&str, String> {
        match self.arguments.text.as_deref() {
            Some(text) if !text.is_empty() => Ok(text),
            _ => Err(format!("Text required for {}", self.action)),
        }
    }

    /// The keys `text` names, and `text` as given (for the answer).
    fn chord(&self) -> Result<(String, Vec<u32>), String> {
        let text = self.text()?;
        Ok((text.to_owned(), keys::parse_chord(text)?))
    }

    fn duration(&self) -> Result<(Duration, String), String> {
        let seconds = self
            .arguments
            .duration
            .ok_or_else(|| format!("duration (seconds) required for {}", self.action))?;
        if !(0.0..=MAX_ACTION_DURATION.as_secs_f64()).contains(&seconds) {
            return Err(format!(
                "duration must be between 0 and {} seconds, got {}",
                MAX_ACTION_DURATION.as_secs(),
                js_number(seconds)
            ));
        }
        Ok((Duration::from_secs_f64(seconds), js_number(seconds)))
    }

    /// Modifiers held during a click or scroll (`text`: `ctrl`, `shift+alt`); none when absent or empty.
    fn modifiers(&self) -> Result<Vec<u32>, String> {
        match self.arguments.text.as_deref() {
            Some(text) if !text.trim().is_empty() => keys::parse_chord(text),
            _ => Ok(Vec::new()),
        }
    }

    fn click(&self, button: Button, count: u8, done: &'static str) -> Result<Action, String> {
        Ok(Action::Click {
            button,
            count,
            at: self.coordinate.clone(),
            modifiers: self.modifiers()?,
            done,
        })
    }

    fn shot_options(&self) -> Result<ShotOptions, String> {
        let format = self.arguments.format.as_deref().unwrap_or("png");
        let jpeg_quality = match format.to_ascii_lowercase().as_str() {
            "png" => None,
            "jpeg" | "jpg" => {
                let quality = self
                    .arguments
                    .quality
                    .as_ref()
                    .and_then(Number::as_u64)
                    .unwrap_or(75);
                let Some(quality) = u8::try_from(quality).ok().filter(|q| (1..=100).contains(q))
                else {
                    return Err(format!("quality must be 1 to 100, got {quality}"));
                };
                Some(quality)
            }
            other => return Err(format!("format must be png or jpeg, got {other:?}")),
        };
        Ok(ShotOptions {
            jpeg_quality,
            cursor: self.arguments.cursor.unwrap_or(false),
        })
    }
}

fn key(call: &Call) -> Result<Action, String> {
    // The text's presence, then `repeat`, then the keys: the order in which a call with several
    // mistakes hears of them.
    let text = call.text()?;
    let repeat = match &call.arguments.repeat {
        None => 1,
        Some(number) => number
            .as_u64()
            .filter(|count| (1..=MAX_KEY_REPEAT).contains(count))
            .ok_or_else(|| format!("repeat must be a whole number from 1 to {MAX_KEY_REPEAT}"))?,
    };
    Ok(Action::Key {
        chord: keys::parse_chord(text)?,
        text: text.to_owned(),
        repeat,
    })
}

fn type_text(call: &Call) -> Result<Action, String> {
    let text = call.text()?;
    if text.chars().count() > MAX_TYPED_CHARS {
        return Err(format!(
            "text is too long to type at once: at most {MAX_TYPED_CHARS} characters"
        ));
    }
    Ok(Action::Type {
        text: text.to_owned(),
    })
}

fn drag(call: &Call) -> Result<Action, String> {
    let from = match call.arguments.start_coordinate.as_deref() {
        None => None,
        Some(numbers) => Some(point(numbers, "start_coordinate", call.geometry)?),
    };
    Ok(Action::Drag {
        from,
        to: call.required_coordinate()?,
    })
}

fn scroll(call: &Call) -> Result<Action, String> {
    let direction = call
        .arguments
        .scroll_direction
        .as_deref()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let button = match direction.as_str() {
        "up" => 4,
        "down" => 5,
        "left" => 6,
        "right" => 7,
        _ => return Err("scroll_direction must be one of up, down, left, right".to_owned()),
    };
    let amount = match &call.arguments.scroll_amount {
        None => 3,
        Some(number) => number
            .as_u64()
            .filter(|amount| *amount <= 100)
            .ok_or_else(|| "scroll_amount must be a whole number from 0 to 100".to_owned())?,
    };
    Ok(Action::Scroll {
        direction,
        button,
        amount,
        at: call.coordinate.clone(),
        modifiers: call.modifiers()?,
    })
}

fn hold_key(call: &Call) -> Result<Action, String> {
    // The text's presence, then the duration, then the keys: the order in which a call with several
    // mistakes hears of them.
    let text = call.text()?;
    let (duration, shown) = call.duration()?;
    Ok(Action::HoldKey {
        chord: keys::parse_chord(text)?,
        text: text.to_owned(),
        duration,
        shown,
    })
}

fn screenshot(call: &Call) -> Result<Action, String> {
    Ok(Action::Screenshot(call.shot_options()?))
}

fn zoom(call: &Call) -> Result<Action, String> {
    let Some([x0, y0, x1, y1]) = call.arguments.region.as_deref() else {
        return Err("region must be [x0, y0, x1, y1]".to_owned());
    };
    let first = point(&[x0.clone(), y0.clone()], "region", call.geometry)?;
    let second = point(&[x1.clone(), y1.clone()], "region", call.geometry)?;
    if second.x <= first.x || second.y <= first.y {
        return Err("region must be [x0, y0, x1, y1] with x1 > x0 and y1 > y0".into());
    }
    Ok(Action::Zoom {
        region: (first, second),
        options: call.shot_options()?,
    })
}

/// Reads one action from a call's arguments. The coordinate is checked first, whatever the action, as
/// upstream does.
pub fn parse(arguments: &ComputerArguments, geometry: &Geometry) -> Result<Action, String> {
    let Some(action) = arguments.action.as_deref() else {
        return Err(format!("action is required: one of {}", names().join(", ")));
    };
    let coordinate = match arguments.coordinate.as_deref() {
        None => None,
        Some(numbers) => Some(point(numbers, "coordinate", geometry)?),
    };
    let Some(spec) = ACTIONS.iter().find(|spec| spec.name == action) else {
        return Err(format!(
            "Unknown action: {action}. Valid actions: {}",
            names().join(", ")
        ));
    };
    (spec.parse)(&Call {
        action: spec.name,
        arguments,
        geometry,
        coordinate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SCREEN: Geometry = Geometry {
        screen: (1280, 800),
        image: (1280, 800),
    };

    fn read(arguments: Value) -> ComputerArguments {
        serde_json::from_value(arguments).unwrap_or_else(|err| panic!("arguments: {err}"))
    }

    fn parsed(arguments: Value) -> Result<Action, String> {
        parse(&read(arguments), &SCREEN)
    }

    #[test]
    fn upstream_errors_keep_their_exact_texts() {
        assert_eq!(
            parsed(json!({"action": "left_click", "coordinate": [1280, 5]})),
            Err("Coordinates (1280, 5) are outside display bounds of 1280x800".into())
        );
        assert_eq!(
            parsed(json!({"action": "key", "coordinate": [-1, 0], "text": "x"})),
            Err("Coordinates (-1, 0) are outside display bounds of 1280x800".into())
        );
        assert_eq!(
            parsed(json!({"action": "mouse_move"})),
            Err("Coordinate required for mouse_move".into())
        );
        assert_eq!(
            parsed(json!({"action": "left_click_drag"})),
            Err("Coordinate required for left_click_drag".into())
        );
        assert_eq!(
            parsed(json!({"action": "key"})),
            Err("Text required for key".into())
        );
        assert_eq!(
            parsed(json!({"action": "type", "text": ""})),
            Err("Text required for type".into())
        );
        assert_eq!(
            parsed(json!({"action": "key", "text": "ctrl+Hyperdrive"})),
            Err("Invalid key: hyperdrive".into())
        );
        assert!(
            parsed(json!({"action": "fly"}))
                .unwrap_err()
                .starts_with("Unknown action: fly. Valid actions: key, type")
        );
    }

    #[test]
    fn a_check_repeats_the_numbers_sent() {
        assert_eq!(
            parsed(json!({"action": "mouse_move", "coordinate": [1, 2.5, 3]})),
            Err("coordinate must be [x, y], two numbers; got [1,2.5,3]".into())
        );
        assert_eq!(
            parsed(json!({"action": "scroll", "scroll_direction": "up", "scroll_amount": 3.0})),
            Err("scroll_amount must be a whole number from 0 to 100".into())
        );
        assert_eq!(
            parsed(json!({"action": "zoom", "region": [0, 0, 10]})),
            Err("region must be [x0, y0, x1, y1]".into())
        );
    }

    #[test]
    fn a_batch_action_that_cannot_be_read_fails_at_its_turn() {
        let actions: Vec<BatchAction> = serde_json::from_value(json!([
            {"action": "left_click", "coordinate": [1, 2]},
            {"action": "left_click", "coordinate": "here"},
            "left_click",
        ]))
        .unwrap_or_default();
        assert!(matches!(actions[0], BatchAction::Read(_)), "{actions:?}");
        assert!(
            matches!(&actions[1], BatchAction::Unreadable(reason) if reason.starts_with("Invalid arguments for computer: invalid type: string \"here\"")),
            "{actions:?}"
        );
        assert!(
            matches!(&actions[2], BatchAction::Unreadable(reason) if reason == "arguments must be an object with an action"),
            "{actions:?}"
        );
    }

    #[test]
    fn coordinates_map_from_a_scaled_screenshot_to_the_screen() {
        let half = Geometry {
            screen: (2560, 1600),
            image: (1280, 800),
        };
        let Ok(Action::MouseMove { to }) = parse(
            &read(json!({"action": "mouse_move", "coordinate": [100, 50.5]})),
            &half,
        ) else {
            panic!("a move");
        };
        assert_eq!((to.x, to.y, to.text()), (200, 101, "(100, 50.5)".into()));
        assert_eq!(half.caller_point(200, 101), (100, 51));
    }

    #[test]
    fn the_model_contracts_actions_are_read() {
        assert!(matches!(
            parsed(json!({"action": "scroll", "scroll_direction": "down", "scroll_amount": 5, "text": "ctrl"})),
            Ok(Action::Scroll { button: 5, amount: 5, ref modifiers, .. }) if modifiers == &[keys::XK_CONTROL_L]
        ));
        assert!(matches!(
            parsed(json!({"action": "hold_key", "text": "shift", "duration": 0.5})),
            Ok(Action::HoldKey { .. })
        ));
        assert_eq!(
            parsed(json!({"action": "wait", "duration": 301})),
            Err("duration must be between 0 and 300 seconds, got 301".into())
        );
        assert!(matches!(
            parsed(json!({"action": "zoom", "region": [10, 10, 110, 60]})),
            Ok(Action::Zoom { .. })
        ));
        assert!(matches!(
            parsed(json!({"action": "key", "text": "a", "repeat": 3})),
            Ok(Action::Key { repeat: 3, .. })
        ));
    }

    /// The least a call of each action needs; `{}` for those that need nothing.
    fn minimal_call(name: &str) -> Value {
        let mut call = match name {
            "key" | "type" | "key_down" | "key_up" => json!({"text": "a"}),
            "mouse_move" | "left_click_drag" => json!({"coordinate": [1, 1]}),
            "scroll" => json!({"scroll_direction": "up"}),
            "hold_key" => json!({"text": "a", "duration": 0}),
            "wait" => json!({"duration": 0}),
            "zoom" => json!({"region": [0, 0, 10, 10]}),
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
        crate::tools::assert_actions_listed::<ComputerArguments>(&table);
    }
}
