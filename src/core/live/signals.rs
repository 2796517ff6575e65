//! Signal names both ways: requests say `SIGINT`, `INT` or `2`; statuses report `SIGKILL`.

const SIGNALS: &[(&str, i32)] = &[
    ("SIGHUP", libc::SIGHUP),
    ("SIGINT", libc::SIGINT),
    ("SIGQUIT", libc::SIGQUIT),
    ("SIGILL", libc::SIGILL),
    ("SIGTRAP", libc::SIGTRAP),
    ("SIGABRT", libc::SIGABRT),
    ("SIGBUS", libc::SIGBUS),
    ("SIGFPE", libc::SIGFPE),
    ("SIGKILL", libc::SIGKILL),
    ("SIGUSR1", libc::SIGUSR1),
    ("SIGSEGV", libc::SIGSEGV),
    ("SIGUSR2", libc::SIGUSR2),
    ("SIGPIPE", libc::SIGPIPE),
    ("SIGALRM", libc::SIGALRM),
    ("SIGTERM", libc::SIGTERM),
    ("SIGCHLD", libc::SIGCHLD),
    ("SIGCONT", libc::SIGCONT),
    ("SIGSTOP", libc::SIGSTOP),
    ("SIGTSTP", libc::SIGTSTP),
    ("SIGTTIN", libc::SIGTTIN),
    ("SIGTTOU", libc::SIGTTOU),
    ("SIGWINCH", libc::SIGWINCH),
];

pub fn name(signal: i32) -> String {
    SIGNALS
        .iter()
        .find(|(_, number)| *number == signal)
        .map_or_else(|| format!("SIG{signal}"), |(name, _)| (*name).to_owned())
}

pub fn parse(text: &str) -> Option<i32> {
    let text = text.trim();
    if let Ok(number) = text.parse::<i32>() {
        return (1..=64).contains(&number).then_some(number);
    }
    let upper = text.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    SIGNALS
        .iter()
        .find(|(name, _)| *name == full)
        .map(|(_, number)| *number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_short_forms() {
        assert_eq!(parse("SIGINT"), Some(libc::SIGINT));
        assert_eq!(parse("term"), Some(libc::SIGTERM));
        assert_eq!(parse("9"), Some(9));
        assert_eq!(parse("99"), None);
        assert_eq!(parse("SIGNOPE"), None);
        assert_eq!(name(libc::SIGKILL), "SIGKILL");
    }
}
