//! The screen's UI as a short list a model can act on: `uiautomator dump`'s XML reduced to the elements
//! that show something or take a tap, each with the point to tap.

use serde_json::{Map, Value, json};

use super::screen::Geometry;

/// Elements listed by one `list_elements`; a screen with more is cut with a notice (a long list costs
/// the model more than it helps: scroll, then list again).
pub const MAX_ELEMENTS: usize = 150;
/// Characters kept of one text, description or id.
const MAX_FIELD_CHARS: usize = 200;

/// Dumps to a file and prints it: `uiautomator dump /dev/tty` prints nothing without a terminal (adb's
/// shell v2 gives none). The file is removed first so a failed dump cannot print an old screen.
/// `$TMPDIR` is unset on most devices; /data/local/tmp is where the shell user may write.
pub const DUMP_COMMAND: &str = "f=${TMPDIR:-/data/local/tmp}/boxd-window-dump.xml; rm -f \"$f\"; uiautomator dump \"$f\" >&2 && cat \"$f\" && rm -f \"$f\"";

#[derive(Debug, PartialEq)]
pub struct Element {
    pub text: String,
    pub description: String,
    pub id: String,
    pub class: String,
    pub package: String,
    pub clickable: bool,
    pub long_clickable: bool,
    pub scrollable: bool,
    pub checked: Option<bool>,
    pub focused: bool,
    /// left, top, right, bottom in device pixels.
    pub bounds: (i64, i64, i64, i64),
}

impl Element {
    /// Shown because it says something or takes input; layout containers are left out.
    fn worth_showing(&self) -> bool {
        let (left, top, right, bottom) = self.bounds;
        let visible = right > left && bottom > top;
        visible
            && (!self.text.is_empty()
                || !self.description.is_empty()
                || self.clickable
                || self.long_clickable
                || self.scrollable
                || self.checked.is_some()
                || self.class.ends_with("EditText"))
    }
}

/// The elements of a dump, in document order (top of the tree first), containers left out. Err when
/// the text is no dump at all.
pub fn parse(xml: &str) -> Result<Vec<Element>, String> {
    if !xml.contains("<hierarchy") {
        let start: String = xml.trim().chars().take(300).collect();
        return Err(format!("the dump is not uiautomator's XML: {start:?}"));
    }
    let mut elements = Vec::new();
    let mut rest = xml;
    while let Some(at) = rest.find("<node") {
        rest = &rest[at + "<node".len()..];
        let end = tag_end(rest);
        let attributes = attributes(&rest[..end]);
        rest = &rest[end..];
        let get = |name: &str| {
            attributes
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.as_str())
                .unwrap_or("")
        };
        let flag = |name: &str| get(name) == "true";
        let element = Element {
            text: get("text").to_owned(),
            description: get("content-desc").to_owned(),
            id: get("resource-id").to_owned(),
            class: get("class").to_owned(),
            package: get("package").to_owned(),
            clickable: flag("clickable"),
            long_clickable: flag("long-clickable"),
            scrollable: flag("scrollable"),
            checked: flag("checkable").then(|| flag("checked")),
            focused: flag("focused"),
            bounds: bounds(get("bounds")).unwrap_or_default(),
        };
        if element.worth_showing() {
            elements.push(element);
        }
    }
    Ok(elements)
}

/// Where the tag opened just before `text` ends: its `>` outside quoted values (or the text's end).
fn tag_end(text: &str) -> usize {
    let mut quoted = None;
    for (at, character) in text.char_indices() {
        match (quoted, character) {
            (None, '"' | '\'') => quoted = Some(character),
            (Some(open), _) if open == character => quoted = None,
            (None, '>') => return at,
            _ => {}
        }
    }
    text.len()
}

fn attributes(tag: &str) -> Vec<(&str, String)> {
    let mut found = Vec::new();
    let mut rest = tag;
    while let Some(equals) = rest.find('=') {
        let name = rest[..equals].trim().trim_end_matches('/').trim();
        let after = rest[equals + 1..].trim_start();
        let Some(quote) = after.chars().next().filter(|c| matches!(c, '"' | '\'')) else {
            break;
        };
        let value_and_more = &after[1..];
        let Some(close) = value_and_more.find(quote) else {
            break;
        };
        found.push((name, unescape(&value_and_more[..close])));
        rest = &value_and_more[close + 1..];
    }
    found
}

/// XML's five entities and numeric references; anything else is kept as it reads.
fn unescape(value: &str) -> String {
    if !value.contains('&') {
        return value.to_owned();
    }
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(semicolon) = rest.find(';').filter(|s| *s <= 10) else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let entity = &rest[1..semicolon];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .map(|hex| u32::from_str_radix(hex, 16))
                .or_else(|| entity.strip_prefix('#').map(str::parse::<u32>))
                .and_then(Result::ok)
                .and_then(char::from_u32),
        };
        match decoded {
            Some(character) => {
                out.push(character);
                rest = &rest[semicolon + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `[left,top][right,bottom]`.
fn bounds(text: &str) -> Option<(i64, i64, i64, i64)> {
    let numbers: Vec<i64> = text
        .split(|c: char| !(c.is_ascii_digit() || c == '-'))
        .filter(|part| !part.is_empty())
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    match numbers.as_slice() {
        [left, top, right, bottom] => Some((*left, *top, *right, *bottom)),
        _ => None,
    }
}

fn clipped(text: &str) -> String {
    let mut characters = text.chars();
    let mut kept: String = characters.by_ref().take(MAX_FIELD_CHARS).collect();
    if characters.next().is_some() {
        kept.push('…');
    }
    kept
}

/// One line of JSON per element, after a line that says what the list is. With a scaled screenshot in
/// force, bounds and centers are in its pixels, as taps are.
pub fn render(elements: &[Element], geometry: Option<Geometry>) -> String {
    let mut packages: Vec<&str> = Vec::new();
    for element in elements {
        if !element.package.is_empty() && !packages.contains(&element.package.as_str()) {
            packages.push(&element.package);
        }
    }
    let place = |x: i64, y: i64| geometry.map_or((x, y), |g| g.to_image((x, y)));
    let mut lines = vec![format!(
        "{} elements on screen{}{}. Tap an element at its center{}.",
        elements.len(),
        if packages.is_empty() {
            String::new()
        } else {
            format!(" (app: {})", packages.join(", "))
        },
        if elements.len() > MAX_ELEMENTS {
            format!("; the first {MAX_ELEMENTS} are listed")
        } else {
            String::new()
        },
        match geometry {
            Some(g) => format!(
                "; coordinates are in the last screenshot's pixels ({}x{})",
                g.image.0, g.image.1
            ),
            None => String::new(),
        }
    )];
    for element in elements.iter().take(MAX_ELEMENTS) {
        let mut line = Map::new();
        let mut put = |key: &str, value: Value| {
            line.insert(key.to_owned(), value);
        };
        for (key, value) in [
            ("text", &element.text),
            ("content-desc", &element.description),
            ("resource-id", &element.id),
            ("class", &element.class),
        ] {
            if !value.is_empty() {
                put(key, json!(clipped(value)));
            }
        }
        for (key, value) in [
            ("clickable", element.clickable),
            ("long-clickable", element.long_clickable),
            ("scrollable", element.scrollable),
            ("focused", element.focused),
        ] {
            if value {
                put(key, json!(true));
            }
        }
        if let Some(checked) = element.checked {
            put("checked", json!(checked));
        }
        let (left, top, right, bottom) = element.bounds;
        let (l, t) = place(left, top);
        let (r, b) = place(right, bottom);
        put("bounds", json!([l, t, r, b]));
        let center = place(
            left.saturating_add(right) / 2,
            top.saturating_add(bottom) / 2,
        );
        put("center", json!([center.0, center.1]));
        lines.push(Value::Object(line).to_string());
    }
    if elements.len() > MAX_ELEMENTS {
        lines.push(format!(
            "… {} more elements not listed (at most {MAX_ELEMENTS}); scroll and list again.",
            elements.len() - MAX_ELEMENTS
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = r#"<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation="0"><node index="0" text="" resource-id="" class="android.widget.FrameLayout" package="com.example.shop" content-desc="" checkable="false" checked="false" clickable="false" enabled="true" focusable="false" focused="false" scrollable="false" long-clickable="false" password="false" selected="false" bounds="[0,0][1080,1920]"><node index="0" text="Fish &amp; &quot;Chips&quot; &#169;" resource-id="com.example.shop:id/title" class="android.widget.TextView" package="com.example.shop" content-desc="" checkable="false" checked="false" clickable="false" enabled="true" focusable="false" focused="false" scrollable="false" long-clickable="false" password="false" selected="false" bounds="[40,100][1040,200]" /><node index="1" text="" resource-id="com.example.shop:id/cart" class="android.widget.ImageButton" package="com.example.shop" content-desc="Cart" checkable="false" checked="false" clickable="true" enabled="true" focusable="true" focused="false" scrollable="false" long-clickable="false" password="false" selected="false" bounds="[900,20][1060,90]" /><node index="2" text="" resource-id="" class="android.widget.CheckBox" package="com.example.shop" content-desc="" checkable="true" checked="true" clickable="true" enabled="true" focusable="true" focused="false" scrollable="false" long-clickable="false" password="false" selected="false" bounds="[0,0][0,0]" /></node></hierarchy>"#;

    #[test]
    fn containers_and_invisible_nodes_are_left_out_and_entities_decoded() {
        let elements = parse(DUMP).unwrap();
        assert_eq!(elements.len(), 2, "{elements:?}");
        assert_eq!(elements[0].text, "Fish & \"Chips\" ©");
        assert_eq!(elements[0].bounds, (40, 100, 1040, 200));
        assert_eq!(elements[1].description, "Cart");
        assert!(elements[1].clickable);
        let shown = render(&elements, None);
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(
            lines[0],
            "2 elements on screen (app: com.example.shop). Tap an element at its center."
        );
        assert_eq!(
            lines[2],
            r#"{"content-desc":"Cart","resource-id":"com.example.shop:id/cart","class":"android.widget.ImageButton","clickable":true,"bounds":[900,20,1060,90],"center":[980,55]}"#
        );
    }

    #[test]
    fn a_scaled_screenshot_scales_the_list() {
        let elements = parse(DUMP).unwrap();
        let half = Geometry {
            screen: (1080, 1920),
            image: (540, 960),
        };
        let shown = render(&elements, Some(half));
        assert!(
            shown.contains(r#""bounds":[450,10,530,45],"center":[490,28]"#),
            "{shown}"
        );
        assert!(shown.contains("last screenshot's pixels (540x960)"));
    }

    #[test]
    fn long_screens_are_cut_with_a_notice() {
        let node = r#"<node text="x" class="c" bounds="[0,0][10,10]" />"#;
        let xml = format!("<hierarchy>{}</hierarchy>", node.repeat(MAX_ELEMENTS + 7));
        let shown = render(&parse(&xml).unwrap(), None);
        assert_eq!(shown.lines().count(), MAX_ELEMENTS + 2);
        assert!(
            shown.ends_with("… 7 more elements not listed (at most 150); scroll and list again.")
        );
        assert!(parse("ERROR: null root node returned by UiTestAutomationBridge.").is_err());
    }
}
