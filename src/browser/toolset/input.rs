//! The members' inputs, field for field as the SDK's `BetaBrowser*Input` types define them (a key
//! no type declares is ignored, as the SDK's parsing keeps it aside), and the refusal of one that
//! does not fit, worded as the SDK's `InvalidMemberInputError`.

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// `BetaBrowserClickTarget`: a viewport point, or an element by its ref.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Target {
    Coordinate {
        x: i64,
        y: i64,
    },
    Ref {
        #[serde(rename = "ref")]
        reference: String,
    },
}

/// `BetaBrowserCoordinateTarget`.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Point {
    #[serde(rename = "type")]
    _kind: CoordinateKind,
    pub x: i64,
    pub y: i64,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum CoordinateKind {
    Coordinate,
}

/// `BetaBrowserRefTarget`.
#[derive(Debug, Clone, Deserialize)]
pub struct RefTarget {
    #[serde(rename = "type")]
    _kind: RefKind,
    #[serde(rename = "ref")]
    pub reference: String,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum RefKind {
    Ref,
}

#[derive(Debug, Deserialize)]
pub struct Navigate {
    pub url: String,
}

#[derive(Debug, Deserialize)]
pub struct Zoom {
    pub region: Vec<i64>,
}

/// The five clicks' input.
#[derive(Debug, Deserialize)]
pub struct Click {
    pub target: Target,
    pub modifiers: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct Hover {
    pub target: Target,
}

#[derive(Debug, Deserialize)]
pub struct Drag {
    #[serde(rename = "from")]
    pub start: Point,
    pub target: Point,
}

/// `left_mouse_down`, `left_mouse_up` and `mouse_move`.
#[derive(Debug, Deserialize)]
pub struct AtPoint {
    pub target: Point,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Up,
    Down,
    Left,
    Right,
}

#[derive(Debug, Deserialize)]
pub struct Scroll {
    pub scroll_direction: Direction,
    pub target: Point,
    pub scroll_amount: Option<i64>,
}

/// `scroll_to`.
#[derive(Debug, Deserialize)]
pub struct OnRef {
    pub target: RefTarget,
}

#[derive(Debug, Deserialize)]
pub struct Type {
    pub text: String,
}

#[derive(Debug, Deserialize)]
pub struct Key {
    pub text: String,
    pub repeat: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub struct HoldKey {
    pub duration: f64,
    pub text: String,
}

/// `BetaBrowserFormInputValue`: `str | float | bool`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum FormValue {
    Flag(bool),
    Number(f64),
    Text(String),
}

#[derive(Debug, Deserialize)]
pub struct FormInput {
    pub target: RefTarget,
    pub value: FormValue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PageFilter {
    All,
    Interactive,
}

#[derive(Debug, Deserialize)]
pub struct ReadPage {
    pub depth: Option<i64>,
    pub filter: Option<PageFilter>,
    #[serde(rename = "ref")]
    pub reference: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct Find {
    pub query: String,
}

#[derive(Debug, Deserialize)]
pub struct Wait {
    pub duration: f64,
}

#[derive(Debug, Deserialize)]
pub struct FileUpload {
    pub target: RefTarget,
    pub document_ids: Option<Vec<String>>,
    pub paths: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
pub struct JavascriptExec {
    pub text: String,
}

/// `switch_tab` and `close_tab`: the tab they act on (required).
#[derive(Debug, Deserialize)]
pub struct NamedTab {
    pub tab_id: String,
}

/// A member whose input has no field of its own (`tab_id` aside).
#[derive(Debug, Deserialize)]
pub struct Nothing {}

/// A member's input, parsed by its name.
#[derive(Debug, Deserialize)]
#[serde(tag = "member", content = "input", rename_all = "snake_case")]
pub enum Input {
    Navigate(Navigate),
    Screenshot(Nothing),
    Zoom(Zoom),
    LeftClick(Click),
    RightClick(Click),
    MiddleClick(Click),
    DoubleClick(Click),
    TripleClick(Click),
    Hover(Hover),
    LeftClickDrag(Drag),
    LeftMouseDown(AtPoint),
    LeftMouseUp(AtPoint),
    MouseMove(AtPoint),
    Scroll(Scroll),
    ScrollTo(OnRef),
    Type(Type),
    Key(Key),
    HoldKey(HoldKey),
    FormInput(FormInput),
    ReadPage(ReadPage),
    Find(Find),
    GetPageText(Nothing),
    Wait(Wait),
    FileUpload(FileUpload),
    ReadConsole(Nothing),
    ReadNetwork(Nothing),
    JavascriptExec(JavascriptExec),
    NewTab(Nothing),
    ListTabs(Nothing),
    SwitchTab(NamedTab),
    CloseTab(NamedTab),
}

/// The tab a call addresses: its `tab_id` when its member's input declares one as the tab to act on
/// (an empty one, as an absent one, means the active tab), read after the input parsed.
#[derive(Debug, Deserialize)]
struct Addressed {
    tab_id: Option<String>,
}

/// Parses `member`'s input; the problem (the field and what is wrong with it) otherwise.
pub fn parse(
    member: &str,
    input: Map<String, Value>,
    addresses_tab: bool,
) -> Result<(Input, Option<String>), String> {
    let addressed = if addresses_tab {
        serde_json::from_value::<Addressed>(Value::Object(input.clone()))
            .map_err(|err| problem(&err))?
            .tab_id
            .filter(|tab| !tab.is_empty())
    } else {
        None
    };
    let parsed = serde_json::from_value::<Input>(json!({"member": member, "input": input}))
        .map_err(|err| problem(&err))?;
    Ok((parsed, addressed))
}

/// serde's message as pydantic's `loc: message` would put it, where the two say the same thing.
fn problem(err: &serde_json::Error) -> String {
    let message = err.to_string();
    // serde_json appends where in the document it was: meaningless for a value read from a map.
    let message = match message.rsplit_once(" at line ") {
        Some((message, _)) => message.to_owned(),
        None => message,
    };
    if let Some(field) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'))
    {
        return format!("{field}: Field required");
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn inputs_parse_as_the_sdk_defines_them() {
        let (parsed, tab) = parse(
            "left_click",
            input(
                json!({"target": {"type": "ref", "ref": "ref_3"}, "tab_id": "tab_2", "extra": 1}),
            ),
            true,
        )
        .unwrap();
        assert!(matches!(
            parsed,
            Input::LeftClick(Click {
                target: Target::Ref { .. },
                ..
            })
        ));
        assert_eq!(tab.as_deref(), Some("tab_2"));
        let (parsed, _) = parse(
            "left_click_drag",
            input(json!({"from": {"type": "coordinate", "x": 1, "y": 2},
                         "target": {"type": "coordinate", "x": 3, "y": 4}})),
            true,
        )
        .unwrap();
        assert!(matches!(
            parsed,
            Input::LeftClickDrag(Drag {
                start: Point { x: 1, y: 2, .. },
                ..
            })
        ));
        let (parsed, _) = parse(
            "form_input",
            input(json!({"target": {"type": "ref", "ref": "ref_1"}, "value": true})),
            true,
        )
        .unwrap();
        assert!(matches!(
            parsed,
            Input::FormInput(FormInput {
                value: FormValue::Flag(true),
                ..
            })
        ));
        assert!(parse("list_tabs", Map::new(), false).is_ok());
    }

    #[test]
    fn a_bad_input_names_its_field() {
        assert_eq!(
            parse("navigate", Map::new(), true).unwrap_err(),
            "url: Field required"
        );
        let wrong = parse(
            "scroll",
            input(json!({"scroll_direction": "sideways", "target": {"type": "coordinate", "x": 1, "y": 1}})),
            true,
        )
        .unwrap_err();
        assert!(wrong.contains("sideways"), "{wrong}");
        // A drag takes coordinates only.
        assert!(
            parse(
                "left_click_drag",
                input(json!({"from": {"type": "ref", "ref": "ref_1"},
                             "target": {"type": "coordinate", "x": 3, "y": 4}})),
                true,
            )
            .is_err()
        );
        assert!(parse("navigate", input(json!({"url": "x", "tab_id": 3})), true).is_err());
    }
}
