//! One connection to the X server and what boxd does with it: synthetic input through XTest, the pointer
//! position, the keyboard mapping (with spare keycodes bound on demand, so any character can be typed
//! whatever the layout), and screen capture with `GetImage`.
//!
//! Blocking: every call waits on the X server. It runs on the desktop's own thread (see `desktop`).

use std::collections::HashMap;

use image::RgbImage;
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{
    self, ConnectionExt as _, ImageFormat, ImageOrder, KEY_PRESS_EVENT, KEY_RELEASE_EVENT,
};
use x11rb::protocol::xtest::ConnectionExt as _;
use x11rb::rust_connection::RustConnection;

use super::keys::XK_SHIFT_L;

const BUTTON_PRESS: u8 = xproto::BUTTON_PRESS_EVENT;
const BUTTON_RELEASE: u8 = xproto::BUTTON_RELEASE_EVENT;
const MOTION: u8 = xproto::MOTION_NOTIFY_EVENT;

#[derive(Debug, thiserror::Error)]
pub enum XError {
    /// The connection is gone or never came up: the display is unreachable.
    #[error("{0}")]
    Connection(String),
    /// The server refused one request; the connection is still good.
    #[error("the X server refused the request: {0}")]
    Request(String),
}

impl From<x11rb::errors::ConnectionError> for XError {
    fn from(err: x11rb::errors::ConnectionError) -> Self {
        XError::Connection(format!("the X connection failed: {err}"))
    }
}

impl From<x11rb::errors::ReplyError> for XError {
    fn from(err: x11rb::errors::ReplyError) -> Self {
        match err {
            x11rb::errors::ReplyError::ConnectionError(err) => err.into(),
            x11rb::errors::ReplyError::X11Error(err) => XError::Request(format!("{err:?}")),
        }
    }
}

pub struct Session {
    connection: RustConnection,
    root: xproto::Window,
    pub width: u16,
    pub height: u16,
    /// Bytes per pixel in a `GetImage` reply and which of them hold red, green and blue.
    pixel: PixelLayout,
    keyboard: Keyboard,
}

#[derive(Debug, Clone, Copy)]
struct PixelLayout {
    bytes: usize,
    red: usize,
    green: usize,
    blue: usize,
}

struct Keyboard {
    min_keycode: u8,
    per_keycode: usize,
    /// keysyms[(keycode - min) * per_keycode + column]
    keysyms: Vec<u32>,
    /// Keycodes no key uses: bound to characters the layout lacks, least recently used first.
    spare: Vec<u8>,
    bound: HashMap<u32, u8>,
}

impl Session {
    pub fn connect(display: &str) -> Result<Session, XError> {
        let (connection, screen) = RustConnection::connect(Some(display))
            .map_err(|err| XError::Connection(format!("cannot open display {display}: {err}")))?;
        connection
            .xtest_get_version(2, 2)
            .map_err(XError::from)?
            .reply()
            .map_err(|_| {
                XError::Connection(format!(
                    "display {display} has no XTEST extension (Xvfb has it by default)"
                ))
            })?;
        let setup = connection.setup();
        let screen = setup.roots.get(screen).ok_or_else(|| {
            XError::Connection(format!("display {display} has no screen {screen}"))
        })?;
        let (root, width, height, depth) = (
            screen.root,
            screen.width_in_pixels,
            screen.height_in_pixels,
            screen.root_depth,
        );
        let pixel = pixel_layout(setup, depth).ok_or_else(|| {
            XError::Connection(format!(
                "display {display}: depth {depth} is not a 24- or 32-bit true-colour screen"
            ))
        })?;
        let (min_keycode, max_keycode) = (setup.min_keycode, setup.max_keycode);
        let count = max_keycode.saturating_sub(min_keycode).saturating_add(1);
        let mapping = connection
            .get_keyboard_mapping(min_keycode, count)?
            .reply()?;
        let per_keycode = usize::from(mapping.keysyms_per_keycode.max(1));
        let spare = mapping
            .keysyms
            .chunks(per_keycode)
            .enumerate()
            .filter(|(_, syms)| syms.iter().all(|sym| *sym == 0))
            .filter_map(|(index, _)| u8::try_from(index).ok()?.checked_add(min_keycode))
            .collect();
        Ok(Session {
            connection,
            root,
            width,
            height,
            pixel,
            keyboard: Keyboard {
                min_keycode,
                per_keycode,
                keysyms: mapping.keysyms,
                spare,
                bound: HashMap::new(),
            },
        })
    }

    /// Waits until the server has processed every request sent so far (one round trip), so that what
    /// follows (a capture, the answer) sees the input's effect on the server.
    pub fn sync(&self) -> Result<(), XError> {
        self.connection.get_input_focus()?.reply()?;
        Ok(())
    }

    pub fn pointer(&self) -> Result<(i32, i32), XError> {
        let reply = self.connection.query_pointer(self.root)?.reply()?;
        Ok((i32::from(reply.root_x), i32::from(reply.root_y)))
    }

    pub fn move_to(&self, x: i32, y: i32) -> Result<(), XError> {
        let (x, y) = (clamp_i16(x), clamp_i16(y));
        self.connection
            .xtest_fake_input(MOTION, 0, x11rb::CURRENT_TIME, self.root, x, y, 0)?;
        Ok(())
    }

    pub fn button(&self, button: u8, pressed: bool) -> Result<(), XError> {
        let kind = if pressed {
            BUTTON_PRESS
        } else {
            BUTTON_RELEASE
        };
        self.connection.xtest_fake_input(
            kind,
            button,
            x11rb::CURRENT_TIME,
            x11rb::NONE,
            0,
            0,
            0,
        )?;
        Ok(())
    }

    fn keycode_event(&self, keycode: u8, pressed: bool) -> Result<(), XError> {
        let kind = if pressed {
            KEY_PRESS_EVENT
        } else {
            KEY_RELEASE_EVENT
        };
        self.connection.xtest_fake_input(
            kind,
            keycode,
            x11rb::CURRENT_TIME,
            x11rb::NONE,
            0,
            0,
            0,
        )?;
        Ok(())
    }

    /// Presses (or releases) the key that produces `keysym`, with Shift when the keysym sits in the
    /// shifted column of its key.
    pub fn key(&mut self, keysym: u32, pressed: bool) -> Result<(), XError> {
        let (keycode, shifted) = self.keycode_for(keysym)?;
        let shift = if shifted {
            Some(self.keycode_for(XK_SHIFT_L)?.0)
        } else {
            None
        };
        if pressed {
            if let Some(shift) = shift {
                self.keycode_event(shift, true)?;
            }
            self.keycode_event(keycode, true)
        } else {
            self.keycode_event(keycode, false)?;
            if let Some(shift) = shift {
                self.keycode_event(shift, false)?;
            }
            Ok(())
        }
    }

    /// Types one character: press and release of its key, Shift as needed.
    pub fn type_char(&mut self, character: char) -> Result<(), XError> {
        let keysym = super::keys::keysym_of_char(character);
        self.key(keysym, true)?;
        self.key(keysym, false)
    }

    /// The key (and whether Shift is needed) for `keysym`: the layout's own key where it has one, else
    /// a spare keycode bound to it. Spares stay bound (no key uses them), so a client never reads a
    /// binding that was undone before it handled the key event; the least recently bound is reused
    /// when every spare is taken.
    fn keycode_for(&mut self, keysym: u32) -> Result<(u8, bool), XError> {
        let keyboard = &mut self.keyboard;
        for (index, syms) in keyboard.keysyms.chunks(keyboard.per_keycode).enumerate() {
            let column = syms.iter().take(2).position(|sym| *sym == keysym);
            if let (Some(column), Some(keycode)) = (
                column,
                u8::try_from(index)
                    .ok()
                    .and_then(|index| index.checked_add(keyboard.min_keycode)),
            ) {
                return Ok((keycode, column == 1));
            }
        }
        if let Some(keycode) = keyboard.bound.get(&keysym) {
            return Ok((*keycode, false));
        }
        if keyboard.spare.is_empty() {
            return Err(XError::Request(format!(
                "no free keycode to type keysym {keysym:#x}"
            )));
        }
        let keycode = keyboard.spare.remove(0);
        keyboard.spare.push(keycode);
        keyboard.bound.retain(|_, bound| *bound != keycode);
        let mut syms = vec![0u32; keyboard.per_keycode];
        for sym in syms.iter_mut().take(2) {
            *sym = keysym;
        }
        let per_keycode = u8::try_from(keyboard.per_keycode).unwrap_or(u8::MAX);
        self.connection
            .change_keyboard_mapping(1, keycode, per_keycode, &syms)?;
        let offset =
            usize::from(keycode.saturating_sub(keyboard.min_keycode)) * keyboard.per_keycode;
        if let Some(slot) = keyboard
            .keysyms
            .get_mut(offset..offset + keyboard.per_keycode)
        {
            slot.copy_from_slice(&syms);
        }
        keyboard.bound.insert(keysym, keycode);
        // The server sends MappingNotify to every client before it processes the key events that follow.
        self.sync()?;
        Ok((keycode, false))
    }

    /// The screen's pixels in `region` (x, y, width, height), as RGB; the X server's undefined fourth
    /// byte is ignored, so what core X requests draw keeps its colour.
    pub fn capture(&self, region: (i16, i16, u16, u16)) -> Result<RgbImage, XError> {
        let (x, y, width, height) = region;
        let reply = self
            .connection
            .get_image(ImageFormat::Z_PIXMAP, self.root, x, y, width, height, !0)?
            .reply()?;
        let layout = self.pixel;
        let pixels = usize::from(width) * usize::from(height);
        if reply.data.len() < pixels * layout.bytes {
            return Err(XError::Request(format!(
                "the X server sent {} bytes for {width}x{height} pixels",
                reply.data.len()
            )));
        }
        let mut rgb = Vec::with_capacity(pixels * 3);
        for pixel in reply.data.chunks_exact(layout.bytes).take(pixels) {
            rgb.extend_from_slice(&[pixel[layout.red], pixel[layout.green], pixel[layout.blue]]);
        }
        RgbImage::from_raw(u32::from(width), u32::from(height), rgb)
            .ok_or_else(|| XError::Request("the captured image has the wrong size".into()))
    }
}

fn clamp_i16(value: i32) -> i16 {
    i16::try_from(value.clamp(i32::from(i16::MIN), i32::from(i16::MAX))).unwrap_or(0)
}

/// Where red, green and blue sit in a Z-pixmap pixel of a true-colour screen of `depth`: 32 bits per
/// pixel, either byte order (what Xvfb and every current server use; 24-bit pixels pad rows).
fn pixel_layout(setup: &xproto::Setup, depth: u8) -> Option<PixelLayout> {
    let format = setup
        .pixmap_formats
        .iter()
        .find(|format| format.depth == depth)?;
    if !(depth == 24 || depth == 32) {
        return None;
    }
    let lsb = setup.image_byte_order == ImageOrder::LSB_FIRST;
    match (format.bits_per_pixel, lsb) {
        (32, true) => Some(PixelLayout {
            bytes: 4,
            red: 2,
            green: 1,
            blue: 0,
        }),
        (32, false) => Some(PixelLayout {
            bytes: 4,
            red: 1,
            green: 2,
            blue: 3,
        }),
        _ => None,
    }
}
