//! One connection to the X server and what boxd does with it: synthetic input through XTest, the pointer
//! position, the keyboard mapping (with spare keycodes bound to the characters a text needs before its
//! first key, so any character can be typed whatever the layout), and screen capture with `GetImage`.
//!
//! Blocking: every call waits on the X server. It runs on the desktop's own thread (see `desktop`). No
//! wait is unbounded: the connection's stream gives up on any one wait for the server (a reply, room to
//! write) after [`X_REPLY_TIMEOUT`], so a client holding a server grab or a stopped server costs a call
//! that long, not the thread forever.

use std::collections::{HashMap, HashSet};
use std::io::{ErrorKind, IoSlice};
use std::os::unix::io::AsRawFd;
use std::time::{Duration, Instant};

use image::RgbImage;
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{
    self, ConnectionExt as _, ImageFormat, ImageOrder, KEY_PRESS_EVENT, KEY_RELEASE_EVENT,
};
use x11rb::protocol::xtest::ConnectionExt as _;
use x11rb::reexports::x11rb_protocol::parse_display::parse_display;
use x11rb::reexports::x11rb_protocol::xauth::get_auth;
use x11rb::rust_connection::{DefaultStream, PollMode, RustConnection, Stream};
use x11rb::utils::RawFdContainer;

use super::keys::XK_SHIFT_L;

const BUTTON_PRESS: u8 = xproto::BUTTON_PRESS_EVENT;
const BUTTON_RELEASE: u8 = xproto::BUTTON_RELEASE_EVENT;
const MOTION: u8 = xproto::MOTION_NOTIFY_EVENT;

/// The longest boxd waits on the X server for any one thing (a reply, the setup, room to write). A
/// local Xvfb answers in microseconds and sends a full-screen image in milliseconds; silence this long
/// means a client holds a server grab or the server is stopped.
pub const X_REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// After binding characters to spare keycodes, how long clients get to handle the `MappingNotify`
/// before the first key that needs a binding: the server orders the notification before the key, but
/// a client may fetch the new mapping only when it reads the key, and must have it by then.
const MAPPING_SETTLE: Duration = Duration::from_millis(30);

#[derive(Debug, thiserror::Error)]
pub enum XError {
    /// The connection is gone or never came up: the display is unreachable.
    #[error("{0}")]
    Connection(String),
    /// The server did not answer within [`X_REPLY_TIMEOUT`]: it is stopped, or a client holds a grab.
    #[error(
        "the X server did not answer within {} s (a client may hold a server grab, or the server is stopped)",
        X_REPLY_TIMEOUT.as_secs()
    )]
    Stalled,
    /// The server refused one request; the connection is still good.
    #[error("the X server refused the request: {0}")]
    Request(String),
}

impl From<x11rb::errors::ConnectionError> for XError {
    fn from(err: x11rb::errors::ConnectionError) -> Self {
        match err {
            x11rb::errors::ConnectionError::IoError(io) if io.kind() == ErrorKind::TimedOut => {
                XError::Stalled
            }
            err => XError::Connection(format!("the X connection failed: {err}")),
        }
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

/// x11rb's own stream, with every wait for the server bounded by [`X_REPLY_TIMEOUT`]: x11rb polls its
/// stream without a timeout before each read and blocked write, so the bound goes here, and a wait
/// that runs out is an `io::ErrorKind::TimedOut` error out of the call that waited.
struct TimedStream {
    inner: DefaultStream,
    timeout: Duration,
}

impl Stream for TimedStream {
    fn poll(&self, mode: PollMode) -> std::io::Result<()> {
        let mut events = 0;
        if mode.readable() {
            events |= libc::POLLIN;
        }
        if mode.writable() {
            events |= libc::POLLOUT;
        }
        let started = Instant::now();
        loop {
            let left = self.timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(std::io::Error::new(
                    ErrorKind::TimedOut,
                    "the X server did not answer in time",
                ));
            }
            let mut target = libc::pollfd {
                fd: self.inner.as_raw_fd(),
                events,
                revents: 0,
            };
            // Rounded up, so a sub-millisecond rest is still a wait and not a spin.
            let millis = i32::try_from(left.as_millis().saturating_add(1)).unwrap_or(i32::MAX);
            // SAFETY: one valid pollfd for the length of the call; the fd is owned by `inner`.
            let ready = unsafe { libc::poll(&mut target, 1, millis) };
            if ready > 0 {
                // Errors (POLLERR, POLLHUP) surface from the read or write that follows.
                return Ok(());
            }
            if ready < 0 {
                let err = std::io::Error::last_os_error();
                if err.kind() != ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
    }

    fn read(&self, buf: &mut [u8], fd_storage: &mut Vec<RawFdContainer>) -> std::io::Result<usize> {
        self.inner.read(buf, fd_storage)
    }

    fn write(&self, buf: &[u8], fds: &mut Vec<RawFdContainer>) -> std::io::Result<usize> {
        self.inner.write(buf, fds)
    }

    fn write_vectored(
        &self,
        bufs: &[IoSlice<'_>],
        fds: &mut Vec<RawFdContainer>,
    ) -> std::io::Result<usize> {
        self.inner.write_vectored(bufs, fds)
    }
}

type XConnection = RustConnection<TimedStream>;

/// `RustConnection::connect`, with the setup exchange bounded like every later wait (a server that
/// accepts connections during a grab answers the setup only after it).
fn connect_bounded(display: &str) -> Result<(XConnection, usize), XError> {
    let unreachable =
        |reason: String| XError::Connection(format!("cannot open display {display}: {reason}"));
    let parsed = parse_display(Some(display)).map_err(|err| unreachable(err.to_string()))?;
    let screen = usize::from(parsed.screen);
    let mut last = None;
    for address in parsed.connect_instruction() {
        let (stream, (family, peer)) = match DefaultStream::connect(&address) {
            Ok(connected) => connected,
            Err(err) => {
                last = Some(err.to_string());
                continue;
            }
        };
        // Like x11rb: no usable Xauthority entry means trying without authorization.
        let (name, data) = get_auth(family, &peer, parsed.display)
            .ok()
            .flatten()
            .unwrap_or_default();
        let stream = TimedStream {
            inner: stream,
            timeout: X_REPLY_TIMEOUT,
        };
        return match RustConnection::connect_to_stream_with_auth_info(stream, screen, name, data) {
            Ok(connection) => Ok((connection, screen)),
            Err(x11rb::errors::ConnectError::IoError(err)) if err.kind() == ErrorKind::TimedOut => {
                Err(XError::Stalled)
            }
            Err(err) => Err(unreachable(err.to_string())),
        };
    }
    Err(unreachable(last.unwrap_or_else(|| {
        "the display name gives no address to connect to".to_owned()
    })))
}

pub struct Session {
    connection: XConnection,
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
    /// The layout's own keys (not the spares): keysym to keycode and whether it is the shifted column.
    layout: HashMap<u32, (u8, bool)>,
}

impl Keyboard {
    fn new(min_keycode: u8, per_keycode: usize, keysyms: Vec<u32>) -> Keyboard {
        let mut spare = Vec::new();
        let mut layout = HashMap::new();
        for (index, syms) in keysyms.chunks(per_keycode).enumerate() {
            let Some(keycode) = u8::try_from(index)
                .ok()
                .and_then(|index| index.checked_add(min_keycode))
            else {
                break;
            };
            if syms.iter().all(|sym| *sym == 0) {
                spare.push(keycode);
                continue;
            }
            // The first key with the keysym in its plain or shifted column, as typing looks it up.
            for (column, sym) in syms.iter().take(2).enumerate() {
                if *sym != 0 {
                    layout.entry(*sym).or_insert((keycode, column == 1));
                }
            }
        }
        Keyboard {
            min_keycode,
            per_keycode,
            keysyms,
            spare,
            bound: HashMap::new(),
            layout,
        }
    }

    fn layout_key(&self, keysym: u32) -> Option<(u8, bool)> {
        self.layout.get(&keysym).copied()
    }

    /// The least recently bound spare whose keysym is not one of `keep`.
    fn free_spare(&self, keep: &HashSet<u32>) -> Option<u8> {
        self.spare.iter().copied().find(|keycode| {
            !self
                .bound
                .iter()
                .any(|(keysym, bound)| bound == keycode && keep.contains(keysym))
        })
    }
}

impl Session {
    pub fn connect(display: &str) -> Result<Session, XError> {
        let (connection, screen) = connect_bounded(display)?;
        let missing = |err: &x11rb::errors::ConnectionError| {
            matches!(err, x11rb::errors::ConnectionError::UnsupportedExtension)
        };
        match connection
            .xtest_get_version(2, 2)
            .map(|cookie| cookie.reply())
        {
            Ok(Ok(_)) => {}
            Err(err) | Ok(Err(x11rb::errors::ReplyError::ConnectionError(err)))
                if !missing(&err) =>
            {
                return Err(err.into());
            }
            _ => {
                return Err(XError::Connection(format!(
                    "display {display} has no XTEST extension (Xvfb has it by default)"
                )));
            }
        }
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
        Ok(Session {
            connection,
            root,
            width,
            height,
            pixel,
            keyboard: Keyboard::new(min_keycode, per_keycode, mapping.keysyms),
        })
    }

    /// Waits until the server has processed every request sent so far (one round trip), so that what
    /// follows (a capture, the answer) sees the input's effect on the server.
    pub fn sync(&self) -> Result<(), XError> {
        self.connection.get_input_focus()?.reply()?;
        self.discard_events()
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

    /// Types `text`: each character's key pressed and released, Shift as needed. The characters the
    /// layout lacks are bound to spare keycodes before the first key (as many as the spares hold at
    /// once; a longer variety of characters is typed in runs), so that every client has the new
    /// mapping before a key that needs it arrives.
    pub fn type_text(&mut self, text: &str) -> Result<(), XError> {
        let keysyms: Vec<u32> = text.chars().map(super::keys::keysym_of_char).collect();
        let mut start = 0;
        while let Some(rest) = keysyms.get(start..).filter(|rest| !rest.is_empty()) {
            let run = self.bind_ahead(rest)?;
            let Some(keys) = rest.get(..run).filter(|keys| !keys.is_empty()) else {
                return Err(XError::Request(format!(
                    "no free keycode to type keysym {:#x}",
                    rest.first().copied().unwrap_or_default()
                )));
            };
            for keysym in keys {
                self.key(*keysym, true)?;
                self.key(*keysym, false)?;
            }
            start = start.saturating_add(run);
        }
        Ok(())
    }

    /// Makes sure every keysym of `keysyms` has a key before any is pressed (a chord, or the keys of
    /// `type`): binds those the layout lacks, then waits until clients can have seen the change.
    /// Returns how many of `keysyms`, from the first, have a key now (fewer than all only when the
    /// spare keycodes run out).
    pub fn bind_ahead(&mut self, keysyms: &[u32]) -> Result<usize, XError> {
        let mut needed: HashSet<u32> = HashSet::new();
        let mut bound_now = false;
        let mut ready = 0;
        for keysym in keysyms {
            if self.keyboard.layout_key(*keysym).is_none() {
                if !self.keyboard.bound.contains_key(keysym) {
                    // A spare whose keysym this run still needs is not taken back.
                    let Some(keycode) = self.keyboard.free_spare(&needed) else {
                        break;
                    };
                    self.bind(keycode, *keysym)?;
                    bound_now = true;
                }
                needed.insert(*keysym);
            }
            ready += 1;
        }
        if bound_now {
            self.mapping_visible()?;
        }
        Ok(ready)
    }

    /// Waits until the server has applied the bindings and told every client: a `GetKeyboardMapping`
    /// reply follows the `MappingNotify` the server sent everyone, which is in each client's stream
    /// before any key sent after it. Clients that fetch the new mapping only when they read that
    /// notification are given a moment to (a key that arrives before their fetch was answered would
    /// be read with the old mapping: the character is lost).
    fn mapping_visible(&mut self) -> Result<(), XError> {
        let count = u8::try_from(self.keyboard.keysyms.len() / self.keyboard.per_keycode.max(1))
            .unwrap_or(u8::MAX);
        self.connection
            .get_keyboard_mapping(self.keyboard.min_keycode, count)?
            .reply()?;
        self.discard_events()?;
        std::thread::sleep(MAPPING_SETTLE);
        Ok(())
    }

    /// Events sent to boxd's own connection (`MappingNotify` after each binding) are of no use to it:
    /// dropped, so they do not pile up in x11rb's queue over a long session.
    fn discard_events(&self) -> Result<(), XError> {
        // Bounded: the queue holds what was read so far; a server that floods it ends here anyway.
        for _ in 0..10_000 {
            match self.connection.poll_for_event()? {
                Some(_) => {}
                None => break,
            }
        }
        Ok(())
    }

    /// The key (and whether Shift is needed) for `keysym`: the layout's own key where it has one, else
    /// a spare keycode bound to it. Spares stay bound (no key uses them), so a client never reads a
    /// binding that was undone before it handled the key event; the least recently bound is reused
    /// when every spare is taken.
    fn keycode_for(&mut self, keysym: u32) -> Result<(u8, bool), XError> {
        if let Some(found) = self.keyboard.layout_key(keysym) {
            return Ok(found);
        }
        if let Some(keycode) = self.keyboard.bound.get(&keysym) {
            return Ok((*keycode, false));
        }
        // A key pressed without `bind_ahead` (a chord's own names are bound ahead by its caller).
        let Some(keycode) = self.keyboard.free_spare(&HashSet::new()) else {
            return Err(XError::Request(format!(
                "no free keycode to type keysym {keysym:#x}"
            )));
        };
        self.bind(keycode, keysym)?;
        self.mapping_visible()?;
        Ok((keycode, false))
    }

    /// Binds the spare `keycode` to `keysym` (both columns, so Shift does not change it).
    fn bind(&mut self, keycode: u8, keysym: u32) -> Result<(), XError> {
        let keyboard = &mut self.keyboard;
        keyboard.spare.retain(|spare| *spare != keycode);
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
            .get_mut(offset..offset.saturating_add(keyboard.per_keycode))
        {
            slot.copy_from_slice(&syms);
        }
        keyboard.bound.insert(keysym, keycode);
        Ok(())
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
