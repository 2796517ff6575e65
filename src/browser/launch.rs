//! Starting Chromium: a fresh profile in a temporary directory, the flags that keep it quiet in a
//! sandbox, the protocol on two pipes (fd 3 in, fd 4 out), supervised as a child group like every other
//! child of boxd, and cleaned up (group and profile) when it is closed.
//!
//! Headed, Chromium never gets the desktop's X display (root's: the window manager, terminals, boxd's
//! own input). It draws on a nested X server of its own (Xephyr, a window on the desktop, started
//! here beside it), with a cookie that opens that server only: whatever it does there (XTEST, reading
//! windows, grabbing the keyboard) reaches its own windows and nothing else, while its window shows
//! on the desktop and takes the desktop's clicks and keys. Without Xephyr it gets an *untrusted*
//! cookie for the desktop's display instead (X SECURITY extension: no XTEST, no reading of other
//! clients' windows), which holds as well but leaves Chromium's keyboard through X unusable (its
//! keymap code without XKB, hidden from untrusted clients, reads every key 8 keycodes off: measured
//! with Chromium 156, `a` arrives as `l`, space as F7).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;

use super::cdp::Cdp;
use super::events::DownloadLimits;
use crate::core::child::{self, ChildGroup, Grouping, Identity, StderrTail};

/// How long a starting browser may take to answer its first request.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a closing browser may take to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// How long `xauth` may take to make the browser's X cookie (it takes ~6 ms).
const XAUTH_TIMEOUT: Duration = Duration::from_secs(5);
/// The browser's X cookie's name, in a directory of boxd's (see [`nested_display`]).
const COOKIE_NAME: &str = "xauthority";
/// The nested X server headed Chromium draws on, when installed (Debian's `xserver-xephyr`).
const NESTED_SERVER: &str = "Xephyr";
/// How long the nested X server may take to accept connections (it takes ~30 ms).
const NESTED_START_TIMEOUT: Duration = Duration::from_secs(5);

static PROFILES: AtomicU64 = AtomicU64::new(0);
static STAGED_UPLOADS: AtomicU64 = AtomicU64::new(0);

/// The bytes of the files one `browser_file_upload` copies for a browser under its own user.
pub const MAX_STAGED_UPLOAD_BYTES: u64 = 1024 * 1024 * 1024;

pub struct Options {
    pub executable: String,
    pub headless: bool,
    pub viewport: (u32, u32),
    /// The bounds of the browser's downloads (they land in the workspace; see `tools::files`).
    pub download_limits: DownloadLimits,
    /// Who Chromium runs as, and whether with its own sandbox.
    pub isolation: Isolation,
    /// How an interactive snapshot finds its candidates.
    pub finder: Finder,
}

/// How an interactive snapshot finds the elements it asks of the accessibility tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Finder {
    /// The page walks its own elements in an isolated world of boxd's (about a third of the
    /// renderer's time of a DOM snapshot); it declines to the DOM snapshot where the page holds
    /// what its scripts cannot see (a closed shadow root, a dialog open).
    #[default]
    Page,
    /// Chromium's DOM snapshot, always.
    Dom,
}

/// Who Chromium runs as and whether its own sandbox is on: decided once, when the family starts, and
/// said in `/readyz` and the log. A renderer exploit from a page is then code of an unprivileged user in
/// Chromium's namespace and seccomp sandbox, not root in the container.
#[derive(Debug, Clone)]
pub struct Isolation {
    /// The user Chromium runs as; `None`: boxd's own.
    pub user: Option<Identity>,
    /// Why Chromium runs with `--no-sandbox`; `None`: it runs with its sandbox.
    pub no_sandbox: Option<String>,
}

impl Isolation {
    /// Before the family has started (no browser is launched then).
    pub fn undecided() -> Isolation {
        Isolation {
            user: None,
            no_sandbox: Some("the browser family has not started yet".into()),
        }
    }

    /// Chromium's sandbox needs a user other than root and user namespaces that user may create (Debian
    /// ships no setuid sandbox helper): both are checked here (blocking: a fork that never execs).
    pub fn decide(user: Option<Identity>) -> Isolation {
        if user.is_none() && child::boxd_is_root() {
            return Isolation {
                user,
                no_sandbox: Some(
                    "boxd runs as root and no --browser-user is set (Chromium refuses its sandbox to \
                     root)"
                        .into(),
                ),
            };
        }
        let no_sandbox = child::probe_user_namespaces(user.as_ref())
            .err()
            .map(|err| {
                format!(
                    "{} may not create user namespaces here ({err}), which Chromium's sandbox needs \
                     (a kernel or seccomp profile that refuses them)",
                    who(user.as_ref())
                )
            });
        Isolation { user, no_sandbox }
    }

    /// What `/readyz` and the log say of it.
    pub fn describe(&self) -> String {
        match &self.no_sandbox {
            None => format!(
                "Chromium runs as {} with its own sandbox",
                who(self.user.as_ref())
            ),
            Some(reason) => format!(
                "Chromium runs as {} with --no-sandbox: {reason}",
                who(self.user.as_ref())
            ),
        }
    }
}

fn who(user: Option<&Identity>) -> String {
    match user {
        Some(user) => user.describe(),
        // SAFETY: geteuid only reads the caller's credentials.
        None => format!("boxd's own user (uid {})", unsafe { libc::geteuid() }),
    }
}

/// Why a launch failed; `sandbox_refused` when Chromium said its sandbox could not start (the caller
/// then starts it again without).
#[derive(Debug)]
pub struct LaunchError {
    pub message: String,
    pub sandbox_refused: bool,
}

impl From<String> for LaunchError {
    fn from(message: String) -> LaunchError {
        LaunchError {
            message,
            sandbox_refused: false,
        }
    }
}

pub struct Process {
    pub cdp: Cdp,
    /// Started so that boxd paces its frames (the headless shell; see `frames`): new tabs are created
    /// under boxd's control too.
    pub frame_control: bool,
    /// Where the browser writes downloads, each under its guid, until boxd moves it into the
    /// workspace under its name: in the profile, so the workspace never holds a partial file.
    pub downloads: PathBuf,
    /// The user the browser runs as when it is not boxd's (it gets copies of the files it uploads).
    pub user: Option<Identity>,
    /// How an interactive snapshot finds its candidates (`--browser-interactive-finder`).
    pub finder: Finder,
    group: Option<ChildGroup>,
    /// The nested X server the headed browser draws on (see [`nested_display`]).
    display: Option<ChildGroup>,
    stderr: StderrTail,
    profile: PathBuf,
    /// Where a browser under its own user gets copies of the files it uploads, and its X cookie: beside
    /// its profile, boxd's (a directory inside the profile would be the browser's to swap for a link).
    uploads: Option<PathBuf>,
}

/// A pipe whose both ends are above the descriptors the child is given (3 and 4), so moving one end
/// into place in the child cannot overwrite the other.
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((raise(read)?, raise(write)?))
}

fn raise(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own returns a new one we then own.
    let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
    if high == -1 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `high` was just created.
    Ok(unsafe { OwnedFd::from_raw_fd(high) })
}

/// The executable named by default (`--browser-executable`'s default).
const DEFAULT_EXECUTABLE: &str = "chromium";
/// Debian's build of Chromium's headless-only shell (package `chromium-headless-shell`, same
/// version as `chromium`): the same Blink and DevTools protocol without the desktop browser around
/// them, so it starts in about half the time and navigates faster. Used when headless unless another
/// executable was asked for.
const HEADLESS_SHELL: &str = "chromium-headless-shell";

/// Whether `program` is a headless shell, which can leave the pacing of its frames to boxd.
fn is_headless_shell(program: &str) -> bool {
    Path::new(program)
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.contains("headless") && name.contains("shell"))
}

/// The program to start: the headless shell when headless, the default executable was left, and the
/// shell is installed; otherwise the executable as given.
pub(super) fn program(options: &Options) -> String {
    if options.headless
        && options.executable == DEFAULT_EXECUTABLE
        && let Some(path) = std::env::var_os("PATH")
    {
        for directory in std::env::split_paths(&path) {
            let candidate = directory.join(HEADLESS_SHELL);
            if candidate.is_file() {
                return candidate.display().to_string();
            }
        }
    }
    options.executable.clone()
}

/// Profiles are named `boxd-browser-PID-N` in the temporary directory (their upload copies
/// `boxd-browser-PID-N-uploads`, swept alike).
const PROFILE_PREFIX: &str = "boxd-browser-";
const UPLOADS_SUFFIX: &str = "-uploads";
/// Entries of the temporary directory looked at for stale profiles, at most.
const MAX_SWEPT_ENTRIES: usize = 10_000;

/// Removes the profiles a boxd that is gone left behind (killed before it could remove them): those
/// whose PID names no live process. A PID reused since is taken as alive and its profile kept.
fn sweep_stale_profiles(temp: &Path) {
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    for entry in entries.flatten().take(MAX_SWEPT_ENTRIES) {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(PROFILE_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            tracing::info!(profile = %entry.path().display(), "removing a stale browser profile");
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

pub async fn launch(options: &Options) -> Result<Process, LaunchError> {
    let temp = std::env::temp_dir();
    let sweep = temp.clone();
    // Not waited for: nothing of this launch depends on it.
    tokio::task::spawn_blocking(move || sweep_stale_profiles(&sweep));
    let profile = temp.join(format!(
        "{PROFILE_PREFIX}{}-{}",
        std::process::id(),
        PROFILES.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&profile);
    let user = options.isolation.user.clone();
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&profile)
        .and_then(|()| user.as_ref().map_or(Ok(()), |user| user.give(&profile)))
        .map_err(|err| {
            let _ = std::fs::remove_dir_all(&profile);
            format!("cannot create the browser profile {profile:?}: {err}")
        })?;
    let uploads = match &user {
        None => None,
        Some(_) => {
            let uploads = PathBuf::from(format!("{}{UPLOADS_SUFFIX}", profile.display()));
            let _ = std::fs::remove_dir_all(&uploads);
            // mkdir never follows a link planted at that name: it fails instead.
            if let Err(err) = std::fs::DirBuilder::new().mode(0o711).create(&uploads) {
                let _ = std::fs::remove_dir_all(&profile);
                return Err(format!("cannot create the browser's upload directory: {err}").into());
            }
            Some(uploads)
        }
    };
    let pipes = pipe().and_then(|to_browser| Ok((to_browser, pipe()?)));
    let ((browser_reads, we_write), (we_read, browser_writes)) =
        pipes.map_err(|err| format!("cannot create the browser's pipes: {err}"))?;

    let executable = program(options);
    tracing::debug!(%executable, "starting the browser");
    let mut command = child::command_as(&executable, Grouping::OwnGroup, user.as_ref());
    if user.is_some() {
        // Its own home, caches and settings in the profile: the user's home (if any) is not its to
        // write, and nothing of it outlives the browser.
        command
            .env("HOME", &profile)
            .env("XDG_CONFIG_HOME", profile.join(".config"))
            .env("XDG_CACHE_HOME", profile.join(".cache"));
    }
    if let Some(reason) = &options.isolation.no_sandbox {
        tracing::debug!(reason, "the browser starts with --no-sandbox");
        command.arg("--no-sandbox");
    }
    let (width, height) = options.viewport;
    command
        .args([
            "--remote-debugging-pipe",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--mute-audio",
            // A page restored from the back/forward cache fires no load: history navigation would
            // wait out the settle cap.
            "--disable-back-forward-cache",
            // A new renderer frame for every navigation (Chromium's RenderDocument) costs about 6 ms
            // of each one here (commit, load, the first evaluation and the accessibility tree).
            "--disable-features=RenderDocument",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={width},{height}"));
    if options.headless {
        command.args(["--headless", "--disable-gpu"]);
    }
    let frame_control = options.headless && is_headless_shell(&executable);
    if frame_control {
        // The frame drawn for a screenshot must hold everything the page has changed: every stage
        // runs before it is drawn.
        command.args([
            "--enable-begin-frame-control",
            "--run-all-compositor-stages-before-draw",
        ]);
    }
    let mut display = None;
    if !options.headless {
        // Boxd's own directory for it: the profile when the browser is boxd's user, else the one beside
        // the profile that only boxd writes (boxd and xauth write there as root, and must not follow the
        // browser user's links).
        let directory = uploads.as_deref().unwrap_or(&profile);
        let cookie = directory.join(COOKIE_NAME);
        let host = display_of(&command);
        match nested_display(host.as_deref(), &cookie, user.as_ref(), options.viewport).await {
            Ok(Some((name, group))) => {
                tracing::debug!(display = %name, "the browser draws on a nested X server of its own");
                command
                    .env("DISPLAY", &name)
                    .env("XAUTHORITY", &cookie)
                    .arg("--window-position=0,0");
                display = group;
            }
            outcome => {
                if let Err(err) = outcome {
                    tracing::warn!("no nested X server for the browser: {err}");
                }
                let _ = std::fs::remove_file(&cookie);
                match untrusted_cookie(host.as_deref(), &cookie, user.as_ref()).await {
                    Ok(()) => {
                        tracing::debug!(cookie = %cookie.display(), "the browser connects to the display as an untrusted X client");
                        command.env("XAUTHORITY", &cookie);
                    }
                    Err(err) => {
                        tracing::warn!("the browser gets no X cookie of its own: {err}");
                        // Never boxd's own cookie for another user: a display that asks for one then
                        // refuses the browser (its launch fails and says why), an open display still
                        // takes it.
                        if user.is_some() {
                            command.env("XAUTHORITY", &cookie);
                        }
                    }
                }
            }
        }
    }
    command
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    let (input, output) = (browser_reads.as_raw_fd(), browser_writes.as_raw_fd());
    // SAFETY: dup2 is async-signal-safe; both descriptors stay open in the parent until after spawn.
    unsafe {
        command.pre_exec(move || {
            if libc::dup2(input, 3) == -1 || libc::dup2(output, 4) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut spawned = command.spawn().map_err(|err| {
        drop(display.take());
        let _ = std::fs::remove_dir_all(&profile);
        if let Some(uploads) = &uploads {
            let _ = std::fs::remove_dir_all(uploads);
        }
        format!("cannot start the browser {executable:?}: {err}")
    })?;
    let group = ChildGroup::of(spawned.id(), Grouping::OwnGroup);
    drop((browser_reads, browser_writes));
    let stderr = match spawned.stderr.take() {
        Some(stderr) => StderrTail::forward(stderr, "chromium".into()),
        None => StderrTail::forward(tokio::io::empty(), "chromium".into()),
    };
    // Reaped by its own task; the group is what boxd signals.
    tokio::spawn(async move {
        let status = spawned.wait().await;
        tracing::info!(?status, "the browser exited");
    });
    let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(we_read)
        .map_err(|err| format!("cannot read the browser's pipe: {err}"))?;
    let writer = tokio::net::unix::pipe::Sender::from_owned_fd(we_write)
        .map_err(|err| format!("cannot write the browser's pipe: {err}"))?;
    let downloads = profile.join("downloads");
    let mut process = Process {
        cdp: Cdp::start(reader, writer),
        frame_control,
        downloads,
        user,
        group,
        display,
        stderr,
        profile,
        uploads,
        finder: options.finder,
    };
    process
        .cdp
        .events
        .set_download_limits(options.download_limits);
    if let Err(err) = process
        .cdp
        .call(None, "Target.getTargets", json!({}), START_TIMEOUT)
        .await
    {
        let words = process.stderr.last_words(Duration::from_millis(500)).await;
        process.close().await;
        // Chromium's words when its sandbox cannot start ("No usable sandbox!", "Failed to move to
        // new namespace", ...) all name it.
        let sandbox_refused = options.isolation.no_sandbox.is_none()
            && words.to_ascii_lowercase().contains("sandbox");
        return Err(LaunchError {
            message: format!("the browser {executable:?} did not start: {err}{words}"),
            sandbox_refused,
        });
    }
    // Saved under their guid, moved into the workspace by boxd once complete: the name is then
    // boxd's choice, never the page's, and a half-written file never carries the final name.
    let behavior = json!({"behavior": "allowAndName", "downloadPath": process.downloads,
                          "eventsEnabled": true});
    if let Err(err) = process
        .cdp
        .call(None, "Browser.setDownloadBehavior", behavior, START_TIMEOUT)
        .await
    {
        tracing::warn!("the browser does not take the download directory: {err}");
    }
    Ok(process)
}

/// Bytes of a program's first line read for its `#!` line.
const MAX_SHEBANG: usize = 256;

/// How the kernel starts `program` when it is a script (Debian's `chromium` and
/// `chromium-headless-shell` are `#!/bin/sh -e` wrappers that run the real binary as their child):
/// its interpreter and the arguments before the script's own (the `#!` line's argument, then the
/// script's path). `None` for a binary or a program not found. Reads at most [`MAX_SHEBANG`] bytes.
pub fn interpreted_as(program: &str) -> Option<(String, Vec<String>)> {
    use std::io::Read;
    let path = if program.contains('/') {
        PathBuf::from(program)
    } else {
        find_program(program)?
    };
    let mut head = [0u8; MAX_SHEBANG];
    let read = std::fs::File::open(&path).ok()?.read(&mut head).ok()?;
    let line = head.get(..read)?.strip_prefix(b"#!")?;
    let line = line.split(|byte| *byte == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim();
    // The kernel passes the rest of the line after the interpreter as one argument.
    let (interpreter, argument) = match line.split_once([' ', '\t']) {
        Some((interpreter, argument)) => (interpreter, Some(argument.trim())),
        None => (line, None),
    };
    let mut arguments: Vec<String> = argument
        .filter(|argument| !argument.is_empty())
        .map(str::to_owned)
        .into_iter()
        .collect();
    arguments.push(path.display().to_string());
    Some((interpreter.to_owned(), arguments))
}

/// `name` found on `PATH`.
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|directory| directory.join(name))
        .find(|candidate| candidate.is_file())
}

/// Writes `cookie`, a new Xauthority file with one random MIT-MAGIC-COOKIE-1 for any local display
/// (family Wild, no number: the nested server's number is known only once it runs), readable by `user`
/// only. Created, never opened through a link or over an existing file.
fn write_nested_cookie(cookie: &Path, user: Option<&Identity>) -> Result<(), String> {
    use std::io::Write;
    const FAMILY_WILD: u16 = 0xffff;
    const NAME: &[u8] = b"MIT-MAGIC-COOKIE-1";
    let mut secret = [0u8; 16];
    getrandom::fill(&mut secret).map_err(|err| format!("no random bytes for the cookie: {err}"))?;
    let mut entry = Vec::with_capacity(64);
    entry.extend_from_slice(&FAMILY_WILD.to_be_bytes());
    for field in [&b""[..], &b""[..], NAME, &secret[..]] {
        let length = u16::try_from(field.len()).unwrap_or(u16::MAX);
        entry.extend_from_slice(&length.to_be_bytes());
        entry.extend_from_slice(field);
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o400)
        .open(cookie)
        .map_err(|err| format!("cannot create {}: {err}", cookie.display()))?;
    file.write_all(&entry)
        .and_then(|()| match user {
            Some(user) => std::os::unix::fs::fchown(&file, Some(user.uid), Some(user.gid)),
            None => Ok(()),
        })
        .map_err(|err| format!("cannot write the cookie {}: {err}", cookie.display()))
}

/// Starts the nested X server headed Chromium draws on: Xephyr, as boxd's user (a client of the
/// desktop's display with boxd's own cookie), `size` large, admitting only `cookie` (made here, for
/// `user`), its number chosen by itself (`-displayfd`) and said once it accepts connections. Answers
/// its display name and group; `None` when Xephyr is not installed.
async fn nested_display(
    host: Option<&std::ffi::OsStr>,
    cookie: &Path,
    user: Option<&Identity>,
    size: (u32, u32),
) -> Result<Option<(String, Option<ChildGroup>)>, String> {
    let Some(server) = find_program(NESTED_SERVER) else {
        return Ok(None);
    };
    let host = host.ok_or("no DISPLAY is set")?;
    write_nested_cookie(cookie, user)?;
    let (number_read, number_write) =
        pipe().map_err(|err| format!("cannot create the display number's pipe: {err}"))?;
    let mut command = child::command(&server, Grouping::OwnGroup);
    command
        .env("DISPLAY", host)
        .args(["-displayfd", "3", "-auth"])
        .arg(cookie)
        .arg("-screen")
        .arg(format!("{}x{}", size.0, size.1))
        // No TCP listener; no Ctrl+Shift grab of the desktop's keyboard; the window's title.
        .args([
            "-nolisten",
            "tcp",
            "-no-host-grab",
            "-noreset",
            "-title",
            "Browser",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    let number_fd = number_write.as_raw_fd();
    // SAFETY: dup2 is async-signal-safe; the descriptor stays open in the parent until after spawn.
    unsafe {
        command.pre_exec(move || {
            if libc::dup2(number_fd, 3) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut spawned = command
        .spawn()
        .map_err(|err| format!("cannot start {}: {err}", server.display()))?;
    let group = ChildGroup::of(spawned.id(), Grouping::OwnGroup);
    drop(number_write);
    let mut stderr = match spawned.stderr.take() {
        Some(stderr) => StderrTail::forward(stderr, "xephyr".into()),
        None => StderrTail::forward(tokio::io::empty(), "xephyr".into()),
    };
    tokio::spawn(async move {
        let status = spawned.wait().await;
        tracing::debug!(?status, "the browser's nested X server exited");
    });
    let number = async {
        use tokio::io::AsyncReadExt;
        let mut reader = tokio::net::unix::pipe::Receiver::from_owned_fd(number_read)?;
        let mut said = Vec::new();
        let mut chunk = [0u8; 16];
        // A number and a newline; the server closes its end only when it exits.
        while !said.contains(&b'\n') && said.len() < 16 {
            let read = reader.read(&mut chunk).await?;
            if read == 0 {
                break;
            }
            said.extend_from_slice(chunk.get(..read).unwrap_or_default());
        }
        Ok::<Vec<u8>, std::io::Error>(said)
    };
    let said = match tokio::time::timeout(NESTED_START_TIMEOUT, number).await {
        Ok(Ok(said)) => said,
        Ok(Err(err)) => return Err(format!("cannot read its display number: {err}")),
        Err(_) => {
            return Err(format!(
                "it did not accept connections within {} s",
                NESTED_START_TIMEOUT.as_secs()
            ));
        }
    };
    match std::str::from_utf8(&said)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
    {
        Some(number) => Ok(Some((format!(":{number}"), group))),
        None => {
            let words = stderr.last_words(Duration::from_millis(200)).await;
            Err(format!("it exited before it accepted connections{words}"))
        }
    }
}

/// The display a child started by `command` draws on: its own `DISPLAY` (the families' layer) or boxd's.
fn display_of(command: &tokio::process::Command) -> Option<std::ffi::OsString> {
    let own = command
        .as_std()
        .get_envs()
        .find(|(name, _)| *name == "DISPLAY")
        .map(|(_, value)| value.map(std::ffi::OsStr::to_os_string));
    match own {
        Some(value) => value,
        None => std::env::var_os("DISPLAY"),
    }
}

/// Makes `cookie`, an *untrusted* X authorization for `display` (`xauth generate DISPLAY . untrusted
/// timeout 0`, connecting with boxd's own `XAUTHORITY`), readable by `user` only. Under the X SECURITY
/// extension an untrusted client does not see XTEST (no fake input into root's windows), and may neither
/// read other clients' windows (`GetImage` of the root window is refused) nor send them events; it still
/// draws its own windows, which show on the desktop and in its screenshots, and receives the input the
/// server sends them (the `computer` family's clicks and keys). Chromium needs nothing more: measured
/// with Debian's Chromium 156 on Xvfb, pages render, CDP screenshots and input work, and XTEST typing
/// from root reaches its page. Made at every launch: a restarted X server (which forgets it) takes a
/// restarted browser. Never expires (timeout 0): the browser may open more connections later (its GPU
/// process).
async fn untrusted_cookie(
    display: Option<&std::ffi::OsStr>,
    cookie: &Path,
    user: Option<&Identity>,
) -> Result<(), String> {
    let display = display.ok_or("no DISPLAY is set")?;
    let mut command = child::command("xauth", Grouping::OwnGroup);
    command
        .arg("-q")
        .arg("-f")
        .arg(cookie)
        .arg("generate")
        .arg(display)
        .args([".", "untrusted", "timeout", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = match tokio::time::timeout(XAUTH_TIMEOUT, command.output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(err)) => return Err(format!("cannot run xauth: {err}")),
        Err(_) => {
            return Err(format!(
                "xauth did not answer within {} s",
                XAUTH_TIMEOUT.as_secs()
            ));
        }
    };
    if !output.status.success() {
        let words = String::from_utf8_lossy(&output.stderr);
        return Err(format!(
            "xauth generate {} failed ({}): {}",
            display.to_string_lossy(),
            output.status,
            words.trim()
        ));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(cookie)
        .map_err(|err| format!("xauth left no cookie at {}: {err}", cookie.display()))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o400))
        .and_then(|()| match user {
            Some(user) => std::os::unix::fs::fchown(&file, Some(user.uid), Some(user.gid)),
            None => Ok(()),
        })
        .map_err(|err| format!("cannot give the cookie to the browser's user: {err}"))
}

impl Process {
    /// Where uploads are copied for a browser under its own user (see [`stage_uploads`]), with that user;
    /// `None` when the browser runs as boxd and reads the files where they are.
    pub fn upload_staging(&self) -> Option<(PathBuf, Identity)> {
        Some((self.uploads.clone()?, self.user.clone()?))
    }

    /// Where the browser writes the downloads of session `name` (see `session::contexts`): beside the
    /// default session's, in the profile.
    pub fn session_downloads(&self, name: &str) -> PathBuf {
        self.profile.join(format!("downloads-{name}"))
    }

    /// Why the browser went away, from its last stderr lines ("" when it said nothing).
    pub async fn last_words(&mut self) -> String {
        self.stderr.last_words(Duration::from_millis(200)).await
    }

    /// Stops the browser (TERM, then KILL after a grace) and removes its profile.
    pub async fn close(&mut self) {
        if let Some(group) = self.group.take() {
            group.terminate(STOP_GRACE).await;
        }
        if let Some(display) = self.display.take() {
            display.terminate(STOP_GRACE).await;
        }
        let profile = self.profile.clone();
        let uploads = self.uploads.take();
        let _ = tokio::task::spawn_blocking(move || {
            let _ = std::fs::remove_dir_all(profile);
            uploads.map(std::fs::remove_dir_all)
        })
        .await;
    }
}

/// Copies `files` (each opened by the caller, through the confinement) into a new directory under `staging` (boxd's, see [`Process::upload_staging`]),
/// keeping their names (a page sees the names it was given), each readable by `user` only: the
/// workspace may be closed to the browser's user, and a copy leaves it nothing of the workspace to
/// write. The directories stay boxd's, so that user cannot move anything boxd writes. At most
/// [`MAX_STAGED_UPLOAD_BYTES`] together; a refused or failed staging leaves nothing behind. Blocking.
pub fn stage_uploads(
    staging: &Path,
    user: &Identity,
    files: Vec<(PathBuf, std::fs::File)>,
) -> std::io::Result<Vec<PathBuf>> {
    let total = files.iter().try_fold(0u64, |total, (_, file)| {
        Ok::<u64, std::io::Error>(total.saturating_add(file.metadata()?.len()))
    })?;
    if total > MAX_STAGED_UPLOAD_BYTES {
        return Err(std::io::Error::other(format!(
            "the files come to {total} bytes; a browser under its own user is given copies, at most \
             {MAX_STAGED_UPLOAD_BYTES} bytes at once"
        )));
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.mode(0o711);
    let batch = staging.join(STAGED_UPLOADS.fetch_add(1, Ordering::Relaxed).to_string());
    builder.create(&batch)?;
    let staged = files
        .into_iter()
        .enumerate()
        .map(|(index, (path, mut from))| {
            let name = path
                .file_name()
                .ok_or_else(|| std::io::Error::other(format!("{path:?} names no file")))?;
            // Two files of one name (from two directories) each keep it, in a directory of their own.
            let directory = batch.join(index.to_string());
            builder.create(&directory)?;
            let target = directory.join(name);
            let mut to = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .mode(0o400)
                .open(&target)?;
            std::io::copy(&mut from, &mut to)?;
            to.set_permissions(std::fs::Permissions::from_mode(0o400))?;
            std::os::unix::fs::fchown(&to, Some(user.uid), Some(user.gid))?;
            Ok(target)
        })
        .collect::<std::io::Result<Vec<PathBuf>>>();
    if staged.is_err() {
        let _ = std::fs::remove_dir_all(&batch);
    }
    staged
}

impl Drop for Process {
    fn drop(&mut self) {
        // The group is killed by its own drop; the profile must not outlive it.
        if self.group.take().is_some() {
            let _ = std::fs::remove_dir_all(&self.profile);
            if let Some(uploads) = &self.uploads {
                let _ = std::fs::remove_dir_all(uploads);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nested_cookie_is_one_wild_entry_made_anew() {
        let directory = tempfile::tempdir().unwrap_or_else(|err| panic!("tempdir: {err}"));
        let cookie = directory.path().join(COOKIE_NAME);
        assert_eq!(write_nested_cookie(&cookie, None), Ok(()));
        let bytes = std::fs::read(&cookie).unwrap_or_default();
        // Family Wild, no address, no display number (any display), the name, 16 random bytes.
        let mut expected = vec![0xff, 0xff, 0, 0, 0, 0, 0, 18];
        expected.extend_from_slice(b"MIT-MAGIC-COOKIE-1");
        expected.extend_from_slice(&[0, 16]);
        assert_eq!(bytes.get(..expected.len()), Some(&expected[..]));
        assert_eq!(bytes.len(), expected.len() + 16);
        let mode = std::fs::metadata(&cookie).map(|meta| meta.permissions().mode() & 0o777);
        assert_eq!(mode.ok(), Some(0o400));
        assert!(
            write_nested_cookie(&cookie, None).is_err(),
            "never over an existing file (or a link planted there)"
        );
    }
}
