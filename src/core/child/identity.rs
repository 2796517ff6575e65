//! Another user for a child: a family whose child runs code boxd does not trust (Chromium's renderers,
//! a training environment's policy code) names an unprivileged user, and when boxd runs as root the
//! child drops to it between fork and exec (`setgroups`, `setgid`, `setuid` in [`command_as`]'s
//! `pre_exec`). When boxd itself is unprivileged (tests, `make run`) the child keeps boxd's user: boxd
//! could not switch, and there is no root to leave.
//!
//! Users are read from `/etc/passwd` and `/etc/group` directly rather than through `getpwnam`: the images
//! ship a static glibc binary, whose NSS lookups need the shared libraries of the glibc it was built
//! with at run time.
//!
//! [`command_as`]: super::command_as

use std::path::Path;

/// Supplementary groups taken from `/etc/group`, at most (the kernel's own bound is 65536).
const MAX_GROUPS: usize = 64;
/// What is read of `/etc/passwd` or `/etc/group`, at most.
const MAX_DATABASE_BYTES: u64 = 4 * 1024 * 1024;

/// A user a child runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The name as given (a number when given as one).
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups: the primary group and every group that lists the user.
    pub groups: Vec<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("no user {name:?} in /etc/passwd (give a user name, or UID[:GID])")]
    UnknownUser { name: String },
    #[error("cannot read {path}: {source}")]
    Unreadable {
        path: &'static str,
        source: std::io::Error,
    },
    #[error(
        "the user {name:?} is root (uid 0): a child is moved to another user to leave root, give an \
         unprivileged one"
    )]
    Root { name: String },
    #[error(
        "the user {name:?} is in group 0 (root's): a child is moved to another user to leave root, give \
         one outside that group"
    )]
    RootGroup { name: String },
}

impl Identity {
    /// Resolves `spec`: a user name from `/etc/passwd` (its primary group and the groups listing it),
    /// or `UID` / `UID:GID` (a user without an entry; its group is the UID unless given).
    pub fn resolve(spec: &str) -> Result<Identity, IdentityError> {
        Identity::resolve_in(spec, Path::new("/etc/passwd"), Path::new("/etc/group"))
    }

    fn resolve_in(spec: &str, passwd: &Path, group: &Path) -> Result<Identity, IdentityError> {
        let spec = spec.trim();
        let identity = match numeric(spec) {
            Some((uid, gid)) => Identity {
                name: spec.to_owned(),
                uid,
                gid,
                groups: vec![gid],
            },
            None => {
                let passwd = read_database(passwd, "/etc/passwd")?;
                let (uid, gid) = passwd
                    .lines()
                    .find_map(|line| passwd_entry(line, spec))
                    .ok_or_else(|| IdentityError::UnknownUser {
                        name: spec.to_owned(),
                    })?;
                // A missing group file leaves the primary group alone.
                let groups = read_database(group, "/etc/group").unwrap_or_default();
                let mut all = vec![gid];
                for member_of in groups.lines().filter_map(|line| group_of(line, spec)) {
                    if all.len() >= MAX_GROUPS {
                        break;
                    }
                    if !all.contains(&member_of) {
                        all.push(member_of);
                    }
                }
                Identity {
                    name: spec.to_owned(),
                    uid,
                    gid,
                    groups: all,
                }
            }
        };
        if identity.uid == 0 {
            return Err(IdentityError::Root {
                name: identity.name,
            });
        }
        // Group 0 owns what root means to share with no one else (e.g. /etc/shadow is root:shadow, but
        // many files are root:root 0640/0660): a confined user must not be in it.
        if identity.groups.contains(&0) || identity.gid == 0 {
            return Err(IdentityError::RootGroup {
                name: identity.name,
            });
        }
        Ok(identity)
    }

    /// The user a family's child runs as given the family's flag: `None` (boxd's own user) when the
    /// flag is unset, or when boxd is not root and so cannot switch (logged once, here).
    pub fn for_child(
        family: &str,
        flag: &str,
        spec: Option<&str>,
    ) -> Result<Option<Identity>, IdentityError> {
        let Some(spec) = spec.map(str::trim).filter(|spec| !spec.is_empty()) else {
            return Ok(None);
        };
        if !boxd_is_root() {
            tracing::info!(
                family,
                user = spec,
                "boxd is not root, so its {flag} is not taken: the child runs as boxd's own user"
            );
            return Ok(None);
        }
        Identity::resolve(spec).map(Some)
    }

    /// `name (uid N)`, for logs and `/readyz`.
    pub fn describe(&self) -> String {
        if self.name == self.uid.to_string() || self.name.starts_with(&format!("{}:", self.uid)) {
            format!("uid {}", self.uid)
        } else {
            format!("{} (uid {})", self.name, self.uid)
        }
    }

    /// Gives `path` (a directory or file boxd just created for the child) to this user, without
    /// following a symlink.
    pub fn give(&self, path: &Path) -> std::io::Result<()> {
        std::os::unix::fs::lchown(path, Some(self.uid), Some(self.gid))
    }
}

/// Whether boxd runs as root, and so can start a child as another user.
pub fn boxd_is_root() -> bool {
    // SAFETY: geteuid only reads the caller's credentials.
    unsafe { libc::geteuid() == 0 }
}

/// Whether a child started as `identity` (boxd's own user when `None`) can make a user namespace and,
/// inside it, PID and network namespaces: what Chromium's namespace sandbox does first. Refused by a
/// kernel that disallows unprivileged user namespaces, by Docker's default seccomp profile for a process
/// without `CAP_SYS_ADMIN`, or by an AppArmor policy that strips the new namespace of its capabilities
/// (the second step then fails). The probe is a fork that never execs
/// ([`run_forked`](super::run_forked)): it switches user as [`command_as`](super::command_as) does,
/// tries, and exits. Blocking (~1 ms).
pub fn probe_user_namespaces(identity: Option<&Identity>) -> std::io::Result<()> {
    let switch = identity.map(Switch::of);
    // SAFETY: the body makes only async-signal-safe system calls (setgroups, setgid, setuid, unshare)
    // on data prepared before the fork.
    let status = unsafe {
        super::run_forked(move || {
            if let Some(switch) = &switch {
                switch.apply()?;
            }
            if libc::unshare(libc::CLONE_NEWUSER) == -1
                || libc::unshare(libc::CLONE_NEWPID | libc::CLONE_NEWNET) == -1
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(0)
        })
    }?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "the namespace probe ended with {status}"
        )))
    }
}

/// The system calls that move a forked child to another user, prepared before the fork.
#[derive(Debug, Clone)]
pub(super) struct Switch {
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
}

impl Switch {
    pub(super) fn of(identity: &Identity) -> Switch {
        Switch {
            uid: identity.uid,
            gid: identity.gid,
            groups: identity.groups.clone(),
        }
    }

    /// Groups first, then the group, then the user (the other order would have given up the right to
    /// change groups). Async-signal-safe: call it between fork and exec.
    pub(super) fn apply(&self) -> std::io::Result<()> {
        // SAFETY: setgroups reads `groups.len()` ids from a buffer we own; setgid and setuid take values.
        unsafe {
            if libc::setgroups(self.groups.len(), self.groups.as_ptr()) == -1
                || libc::setgid(self.gid) == -1
                || libc::setuid(self.uid) == -1
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

fn numeric(spec: &str) -> Option<(u32, u32)> {
    match spec.split_once(':') {
        Some((uid, gid)) => Some((uid.parse().ok()?, gid.parse().ok()?)),
        None => {
            let uid = spec.parse().ok()?;
            Some((uid, uid))
        }
    }
}

fn read_database(path: &Path, name: &'static str) -> Result<String, IdentityError> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_DATABASE_BYTES).read_to_string(&mut text))
        .map_err(|source| IdentityError::Unreadable { path: name, source })?;
    Ok(text)
}

/// `name:password:uid:gid:...` → (uid, gid) when the line is `name`'s.
fn passwd_entry(line: &str, name: &str) -> Option<(u32, u32)> {
    let mut fields = line.split(':');
    if fields.next()? != name {
        return None;
    }
    let _password = fields.next()?;
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

/// `group:password:gid:member,member` → gid when `name` is a member.
fn group_of(line: &str, name: &str) -> Option<u32> {
    let mut fields = line.split(':');
    let _group = fields.next()?;
    let _password = fields.next()?;
    let gid = fields.next()?.parse().ok()?;
    fields
        .next()?
        .split(',')
        .any(|member| member.trim() == name)
        .then_some(gid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn databases() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(
            dir.path().join("passwd"),
            "root:x:0:0:root:/root:/bin/bash\n\
             boxd-browser:x:997:997::/nonexistent:/usr/sbin/nologin\n\
             broken:x:notanumber:1::/:/bin/sh\n\
             wheel-member:x:1700:1700::/:/bin/sh\n",
        )
        .expect("passwd written");
        std::fs::write(
            dir.path().join("group"),
            "root:x:0:wheel-member\nboxd-browser:x:997:\nworkspace:x:1500:alice,boxd-browser\nother:x:1600:alice\n",
        )
        .expect("group written");
        dir
    }

    fn resolve(spec: &str, dir: &tempfile::TempDir) -> Result<Identity, IdentityError> {
        Identity::resolve_in(spec, &dir.path().join("passwd"), &dir.path().join("group"))
    }

    #[test]
    fn a_name_gets_its_ids_and_groups_and_numbers_need_no_entry() {
        let dir = databases();
        let user = resolve("boxd-browser", &dir).expect("known");
        assert_eq!((user.uid, user.gid), (997, 997));
        assert_eq!(user.groups, [997, 1500]);
        assert_eq!(user.describe(), "boxd-browser (uid 997)");
        let numbered = resolve("1234:99", &dir).expect("numeric");
        assert_eq!((numbered.uid, numbered.gid), (1234, 99));
        assert_eq!(numbered.groups, [99]);
        assert_eq!(numbered.describe(), "uid 1234");
        assert_eq!(resolve("4321", &dir).expect("numeric").gid, 4321);
    }

    #[test]
    fn root_unknown_and_malformed_users_are_refused() {
        let dir = databases();
        assert!(matches!(
            resolve("root", &dir),
            Err(IdentityError::Root { .. })
        ));
        assert!(matches!(
            resolve("0", &dir),
            Err(IdentityError::Root { .. })
        ));
        assert!(matches!(
            resolve("nobody-here", &dir),
            Err(IdentityError::UnknownUser { .. })
        ));
        assert!(matches!(
            resolve("broken", &dir),
            Err(IdentityError::UnknownUser { .. })
        ));
        assert!(resolve("1:x", &dir).is_err());
        assert!(matches!(
            resolve("1234:0", &dir),
            Err(IdentityError::RootGroup { .. })
        ));
        assert!(matches!(
            resolve("wheel-member", &dir),
            Err(IdentityError::RootGroup { .. })
        ));
    }

    #[test]
    fn the_probe_agrees_with_unshare_and_never_execs() {
        // What the util-linux tool says of boxd's own user on this machine, the probe says too.
        let unshare = std::process::Command::new("unshare")
            .args(["--user", "--pid", "--net", "--fork", "true"])
            .status();
        let Ok(unshare) = unshare else {
            eprintln!("skipped: no unshare here");
            return;
        };
        assert_eq!(probe_user_namespaces(None).is_ok(), unshare.success());
    }
}
