//! No input reaches the device while Android asks whether to trust an ADB host. A host that offers a key
//! the device does not know (`AUTH RSAPUBLICKEY`) makes adbd ask SystemUI for its "Allow USB debugging?"
//! dialog; tenant code can raise it with an `adb connect` of its own, and a tap on "Allow" (or Tab and
//! Enter, or a space on the focused button) would let its adb in, `adb root` included on userdebug
//! builds. So every device command that injects input (`input ...`, the IME's `am broadcast`) runs behind
//! a check, in the same shell command: the window manager is asked which window and app have focus, and
//! the command stops with [`DIALOG_HAS_FOCUS`] before the injection when one of the dialogs does. No extra
//! round trip, and the gap between check and injection is only the device's own (`input` starting).

use super::wire::Output;

/// The window manager's focus, as `dumpsys window` prints it: the focused window (`mCurrentFocus=Window{…
/// com.android.systemui/com.android.systemui.usb.UsbDebuggingActivity}`) and the focused activity
/// (`mFocusedApp=ActivityRecord{… com.android.systemui/.usb.UsbDebuggingActivity t12}`, which also holds
/// while the window itself has no focus yet). Only these lines are kept (`grep`), so the shell reads a few
/// lines, not the dump.
pub const FOCUS_LINES: [&str; 2] = ["mCurrentFocus=", "mFocusedApp="];

/// Which `dumpsys window` section prints [`FOCUS_LINES`]: `windows` up to Android 9 (API 28); from
/// Android 10 on focus is per display and only `displays` prints it. Either is a fraction of the whole
/// dump. An SDK level that does not read as 1 to 28 (none, a preview's letter) counts as new.
pub const FOCUS_SECTION_OLD: &str = "windows";
pub const FOCUS_SECTION: &str = "displays";
const OLD_SDK_LEVELS: &str = "[1-9]|1[0-9]|2[0-8]";

/// The activities that ask whether to trust a host: AOSP SystemUI's USB and wireless debugging prompts
/// (`config_customAdbPublicKeyConfirmationComponent` and its wireless and secondary-user siblings; older
/// releases name them without the `usb.`/`wifi.` package, newer ones through `UsbDebuggingActivityAlias`).
/// Matched by class name anywhere in a focus line, so the short and long forms, the alias and an OEM
/// that moved the class to another package are all seen.
pub const AUTHORIZATION_DIALOGS: [&str; 4] = [
    "UsbDebuggingActivity",
    "UsbDebuggingSecondaryUserActivity",
    "WifiDebuggingActivity",
    "WifiDebuggingSecondaryUserActivity",
];

/// The check's exit statuses: the dialog has focus, or the focus could not be read (no `dumpsys`, no
/// `grep`, no focus line: then nothing is injected either, as the check cannot vouch for it). Outside
/// what `input` and `am` end with (0, 1), the shell's own (2, 126, 127) and signals (128 and up); and
/// each comes with its own words on stderr (the focus lines, [`UNREADABLE`]), so that a step that
/// happened to end with the same status is not taken for the check.
pub const DIALOG_HAS_FOCUS: u8 = 86;
pub const FOCUS_UNREADABLE: u8 = 87;
const UNREADABLE: &str = "no focus line in dumpsys window";

/// The shell function that checks (named so that no device command shadows it).
const CHECK: &str = "boxd_check_focus";

/// One device command that runs `steps` one after the other, each only if the one before succeeded and
/// each right after a check of the focus; a step may be a compound command (it runs in braces). The
/// section is chosen once, by `getprop ro.build.version.sdk` (a property read, no service call).
pub fn command(steps: &[String]) -> String {
    let dialogs = AUTHORIZATION_DIALOGS
        .iter()
        .map(|name| format!("*{name}*"))
        .collect::<Vec<_>>()
        .join("|");
    let lines = FOCUS_LINES
        .iter()
        .map(|line| format!("-e {line}"))
        .collect::<Vec<_>>()
        .join(" ");
    let mut command = format!(
        "case $(getprop ro.build.version.sdk) in {OLD_SDK_LEVELS}) boxd_section={FOCUS_SECTION_OLD};; *) boxd_section={FOCUS_SECTION};; esac; \
         {CHECK}() {{ boxd_focus=$(dumpsys window $boxd_section | grep {lines}) || {{ echo \"{UNREADABLE} $boxd_section\" >&2; exit {FOCUS_UNREADABLE}; }}; \
         case $boxd_focus in {dialogs}) echo \"$boxd_focus\" >&2; exit {DIALOG_HAS_FOCUS};; esac; }}; "
    );
    let guarded = steps
        .iter()
        .map(|step| format!("{CHECK} && {{ {step}; }}"))
        .collect::<Vec<_>>()
        .join(" && ");
    command.push_str(&guarded);
    command
}

/// Why the check stopped a command before its input.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "Refused: the device shows Android's debugging-authorization dialog (\"Allow USB debugging?\" or \"Allow wireless debugging?\"; focused: {focus}), raised by an ADB host offering a key the device does not trust. boxd sends no tap, swipe, key or text while it has focus, so that no one can answer it through boxd: whoever administers the device must allow or deny that host on the device itself. Nothing was sent; screenshots and list_elements still work."
    )]
    DialogHasFocus { focus: String },
    #[error(
        "Refused: boxd could not read which window has focus on the device ({said}; it looks for {lines}), and sends no input it cannot check against Android's debugging-authorization dialog. Nothing was sent.",
        lines = FOCUS_LINES.join(" and ")
    )]
    FocusUnreadable { said: String },
}

/// The check's verdict on a finished command: a refusal when it stopped the command (its exit status
/// and its words), else None (the command ran, or failed by itself).
pub fn refusal(output: &Output) -> Option<Refusal> {
    let said = String::from_utf8_lossy(&output.stderr)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(500)
        .collect::<String>();
    match output.exit? {
        DIALOG_HAS_FOCUS if AUTHORIZATION_DIALOGS.iter().any(|name| said.contains(name)) => {
            Some(Refusal::DialogHasFocus { focus: said })
        }
        FOCUS_UNREADABLE if said.contains(UNREADABLE) => Some(Refusal::FocusUnreadable { said }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::{Command, Stdio};

    fn output(exit: u8, stderr: &str) -> Output {
        Output {
            stdout: Vec::new(),
            stderr: stderr.as_bytes().to_vec(),
            exit: Some(exit),
        }
    }

    #[test]
    fn each_step_runs_in_braces_right_after_the_check() {
        let command = command(&[
            "input text 'it'\\''s'".to_owned(),
            "input keyevent 66".to_owned(),
        ]);
        assert!(
            command.ends_with(
                "boxd_check_focus && { input text 'it'\\''s'; } && boxd_check_focus && { input keyevent 66; }"
            ),
            "{command}"
        );
        assert!(command.starts_with(
            "case $(getprop ro.build.version.sdk) in [1-9]|1[0-9]|2[0-8]) boxd_section=windows;; *) boxd_section=displays;; esac; "
        ));
        assert!(command.contains(
            "boxd_focus=$(dumpsys window $boxd_section | grep -e mCurrentFocus= -e mFocusedApp=) || { echo \"no focus line in dumpsys window $boxd_section\" >&2; exit 87; };"
        ));
        assert!(command.contains(
            "case $boxd_focus in *UsbDebuggingActivity*|*UsbDebuggingSecondaryUserActivity*|*WifiDebuggingActivity*|*WifiDebuggingSecondaryUserActivity*) echo \"$boxd_focus\" >&2; exit 86;; esac;"
        ));
    }

    #[test]
    fn exit_statuses_map_to_refusals_and_the_rest_is_the_commands_own() {
        let shown = refusal(&output(
            86,
            "  mCurrentFocus=Window{1 u0 com.android.systemui/com.android.systemui.usb.UsbDebuggingActivity}\n  mFocusedApp=x\n",
        ))
        .unwrap();
        assert_eq!(
            shown,
            Refusal::DialogHasFocus {
                focus: "mCurrentFocus=Window{1 u0 com.android.systemui/com.android.systemui.usb.UsbDebuggingActivity} mFocusedApp=x".into()
            }
        );
        let text = shown.to_string();
        assert!(
            text.contains("Allow USB debugging?")
                && text.contains("whoever administers the device")
                && text.contains("Nothing was sent"),
            "{text}"
        );
        let unreadable = refusal(&output(
            87,
            "sh: dumpsys: not found\nno focus line in dumpsys window displays\n",
        ))
        .unwrap()
        .to_string();
        assert!(
            unreadable.contains("could not read which window has focus on the device (sh: dumpsys: not found no focus line in dumpsys window displays; it looks for mCurrentFocus= and mFocusedApp=), and"),
            "{unreadable}"
        );
        // A step of its own that ends 86 or 87 is its own failure, not the check's.
        for (exit, said) in [
            (86, "x"),
            (87, "x"),
            (0, ""),
            (1, "x"),
            (2, "x"),
            (127, "x"),
        ] {
            assert_eq!(refusal(&output(exit, said)), None, "{exit}");
        }
        assert_eq!(
            refusal(&Output {
                exit: None,
                ..Output::default()
            }),
            None
        );
    }

    /// The command under the host's `sh`, with `getprop`, `dumpsys` and `input` stand-ins that print
    /// what they were asked: what the device shell would do with it.
    fn run(sdk: &str, focus: &str, steps: &[&str]) -> (Option<i32>, String, String) {
        let directory = tempfile::tempdir().unwrap();
        let bin = directory.path();
        let script = |name: &str, body: &str| {
            let path = bin.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            make_executable(&path);
        };
        script("getprop", &format!("echo '{sdk}'"));
        script(
            "dumpsys",
            &format!(
                "echo \"dumpsys $*\" >&2\n[ \"$2\" = \"$EXPECTED\" ] || exit 0\necho 'WINDOW MANAGER'\nprintf '%s\\n' '{focus}'"
            ),
        );
        script("input", "echo \"input $*\"");
        let steps: Vec<String> = steps.iter().map(|s| (*s).to_owned()).collect();
        let expected = if matches!(sdk, "21" | "28") {
            "windows"
        } else {
            "displays"
        };
        let done = Command::new("sh")
            .arg("-c")
            .arg(command(&steps))
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .env("EXPECTED", expected)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            done.status.code(),
            String::from_utf8_lossy(&done.stdout).into_owned(),
            String::from_utf8_lossy(&done.stderr).into_owned(),
        )
    }

    fn make_executable(path: &Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn under_a_shell_the_check_stops_the_input_and_picks_the_section_by_sdk() {
        let launcher =
            "  mCurrentFocus=Window{9 u0 com.android.launcher3/com.android.launcher3.Launcher}";
        for sdk in ["21", "28", "29", "34", "", "VanillaIceCream"] {
            let (exit, stdout, stderr) =
                run(sdk, launcher, &["input tap 1 2", "input keyevent 66"]);
            assert_eq!(exit, Some(0), "{sdk}: {stderr}");
            assert_eq!(stdout, "input tap 1 2\ninput keyevent 66\n", "{sdk}");
            // One check before each step, of the section this release prints the focus in.
            assert_eq!(
                stderr.matches("dumpsys window").count(),
                2,
                "{sdk}: {stderr}"
            );
        }
        for focus in [
            "  mCurrentFocus=Window{5 u0 com.android.systemui/com.android.systemui.usb.UsbDebuggingActivity}",
            "  mFocusedApp=ActivityRecord{7 u0 com.android.systemui/.UsbDebuggingActivityAlias t3}",
            "  mCurrentFocus=Window{5 u0 com.android.systemui/com.android.systemui.wifi.WifiDebuggingActivity}",
            "  mCurrentFocus=Window{5 u10 com.android.systemui/com.android.systemui.usb.UsbDebuggingSecondaryUserActivity}",
        ] {
            let (exit, stdout, stderr) = run("34", focus, &["input tap 1 2"]);
            assert_eq!(exit, Some(i32::from(DIALOG_HAS_FOCUS)), "{focus}: {stderr}");
            assert_eq!(stdout, "", "{focus}");
            let verdict = refusal(&output(DIALOG_HAS_FOCUS, &stderr));
            assert!(
                matches!(&verdict, Some(Refusal::DialogHasFocus { focus: shown }) if shown.contains(focus.trim())),
                "{verdict:?}"
            );
        }
        // A dump without focus lines (or no dumpsys at all) injects nothing either.
        let (exit, stdout, stderr) = run("34", "  mLastFocus=null", &["input tap 1 2"]);
        assert_eq!(
            (exit, stdout.as_str()),
            (Some(i32::from(FOCUS_UNREADABLE)), "")
        );
        assert!(matches!(
            refusal(&output(FOCUS_UNREADABLE, &stderr)),
            Some(Refusal::FocusUnreadable { .. })
        ));
        // A compound step runs whole behind one check; a failing step ends the command with its status.
        let (exit, stdout, _) = run(
            "34",
            launcher,
            &["input tap 3 4 & sleep 0.1; input tap 3 4 && wait $!"],
        );
        assert_eq!(exit, Some(0));
        assert_eq!(stdout, "input tap 3 4\ninput tap 3 4\n");
        let (exit, stdout, _) = run("34", launcher, &["false", "input tap 5 6"]);
        assert_eq!((exit, stdout.as_str()), (Some(1), ""));
    }
}
