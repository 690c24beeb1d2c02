//! The users: from `cluster.toml` and the users file, validated.
//!
//! The users file is TOML, written by `tallyd passwd` (mode 0600):
//!
//! ```toml
//! [[user]]
//! name = "app"
//! password_hash = "$argon2id$v=19$m=19456,t=2,p=1$..."
//! role = "readwrite"          # readonly | readwrite | admin
//! ```
//!
//! A name is 1 to 64 of `[A-Za-z0-9_.@-]` and appears once over both
//! places; a hash must be an argon2 PHC string (a password in the clear is
//! refused, as is any unknown key).
//!
//! Authentication fails closed: a running node whose users file had users
//! keeps them when the file turns up empty, missing or unreadable (an
//! editor's truncation, a volume not mounted), and says so in its log
//! ([`keep_previous`]). Only a file that says it is empty on purpose
//! (`no_users = true`, which `tallyd passwd --delete --force` of the last
//! user writes) takes its users away.

use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::{AuthConfig, password};
pub use crate::config::auth::{UserEntry, check_entry, check_name};

/// The users file as written.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsersFile {
    /// The file has no users on purpose: nodes take that up (an empty
    /// file without it is taken for an accident and ignored).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_users: bool,
    /// Its users.
    #[serde(default)]
    pub user: Vec<UserEntry>,
}

/// What loading the users found in the users file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileUsers {
    /// No users file is configured.
    Unused,
    /// The file does not exist.
    Missing,
    /// The file holds `count` users (`no_users`: none, on purpose).
    Read {
        /// How many users it holds.
        count: usize,
        /// It says it is empty on purpose.
        no_users: bool,
    },
}

impl FileUsers {
    /// How many users came from the file.
    pub fn count(self) -> usize {
        match self {
            FileUsers::Read { count, .. } => count,
            FileUsers::Unused | FileUsers::Missing => 0,
        }
    }
}

/// The users of a node, as loaded.
#[derive(Debug)]
pub struct Loaded {
    /// Every user, from the config and the file.
    pub users: Users,
    /// The users file's modification time when it was read.
    pub stamp: Option<Stamp>,
    /// What the users file held.
    pub file: FileUsers,
}

/// Why a node keeps its users rather than take up the users file as read
/// again (`Err` when it does not load), if it does: the rule that keeps
/// authentication from turning itself off. `file_users` is how many users
/// the node has from the file now.
pub fn keep_previous(file_users: usize, read: Result<FileUsers, &str>) -> Option<String> {
    match read {
        Err(e) => Some(format!("does not load ({e})")),
        Ok(_) if file_users == 0 => None,
        Ok(FileUsers::Missing) => Some("is missing".into()),
        Ok(FileUsers::Read {
            count: 0,
            no_users: false,
        }) => Some("has no users (it takes `no_users = true` to mean it)".into()),
        Ok(_) => None,
    }
}

/// Every user of a node, by name.
///
/// # Invariants
/// - Each entry passed [`check_entry`]; names are unique.
#[derive(Debug, Default)]
pub struct Users(HashMap<String, UserEntry>);

impl Users {
    /// The users of `config` and of its users file, with what the file
    /// held and its modification time.
    pub fn load(config: &AuthConfig) -> Result<Loaded, String> {
        let mut all: Vec<(String, UserEntry)> = config
            .user
            .iter()
            .enumerate()
            .map(|(i, u)| (format!("cluster.auth.user[{i}]"), u.clone()))
            .collect();
        let mut stamp = None;
        let mut found = FileUsers::Unused;
        if let Some(path) = &config.users_file {
            stamp = self::stamp(path);
            let file = match read_existing(path)? {
                Some(file) => file,
                None => {
                    found = FileUsers::Missing;
                    UsersFile::default()
                }
            };
            if found != FileUsers::Missing {
                found = FileUsers::Read {
                    count: file.user.len(),
                    no_users: file.no_users,
                };
            }
            let place = |i| format!("{} user[{i}]", path.display());
            all.extend(
                file.user
                    .into_iter()
                    .enumerate()
                    .map(|(i, u)| (place(i), u)),
            );
        }
        let mut users = HashMap::new();
        for (place, u) in all {
            check_entry(&u).map_err(|e| format!("{place}: {e}"))?;
            if users.contains_key(&u.name) {
                return Err(format!("{place}: user {:?} is defined twice", u.name));
            }
            users.insert(u.name.clone(), u);
        }
        Ok(Loaded {
            users: Users(users),
            stamp,
            file: found,
        })
    }

    /// Users made of `entries`, unchecked.
    #[cfg(test)]
    pub fn from_entries(entries: Vec<UserEntry>) -> Users {
        Users(entries.into_iter().map(|u| (u.name.clone(), u)).collect())
    }

    /// The user called `name`.
    pub fn get(&self, name: &str) -> Option<&UserEntry> {
        self.0.get(name)
    }

    /// How many users there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The users file at `path`; a missing file has no users.
pub fn read_file(path: &Path) -> Result<UsersFile, String> {
    Ok(read_existing(path)?.unwrap_or_default())
}

/// The users file at `path`, `None` if there is none.
fn read_existing(path: &Path) -> Result<Option<UsersFile>, String> {
    let text = match tally_world::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("read the users file {}: {e}", path.display())),
    };
    toml::from_str(&text)
        .map(Some)
        .map_err(|e| format!("{}: {}", path.display(), e.message().trim()))
}

/// The users file's text.
pub fn file_text(file: &UsersFile) -> String {
    let body = toml::to_string(file).unwrap_or_default();
    format!("# Tally users: written by `tallyd passwd`; passwords are argon2id hashes.\n{body}")
}

/// Puts `entry` in the users file at `path` (replacing a user of its
/// name), or takes the user `name` out with `entry` `None` (the last one
/// only with `force`: see [`change`]); writes the file whole, mode 0600.
/// Answers whether the user was there before.
pub fn update_file(
    path: &Path,
    name: &str,
    entry: Option<UserEntry>,
    force: bool,
) -> Result<bool, String> {
    let mut file = read_file(path)?;
    let was_there =
        change(&mut file, name, entry, force).map_err(|e| format!("{}: {e}", path.display()))?;
    crate::security::certs::write_private(path, &file_text(&file)).map_err(|e| format!("{e:#}"))?;
    Ok(was_there)
}

/// Puts `entry` in `file` (replacing a user of its name), or takes the
/// user `name` out with `entry` `None`. Taking out the last user needs
/// `force`, and marks the file empty on purpose (`no_users`), since nodes
/// ignore an empty file otherwise; adding a user clears the mark. Answers
/// whether the user was there before.
pub fn change(
    file: &mut UsersFile,
    name: &str,
    entry: Option<UserEntry>,
    force: bool,
) -> Result<bool, String> {
    if let Some(e) = &entry {
        check_entry(e)?;
    }
    let was_there = file.user.iter().any(|u| u.name == name);
    let last = was_there && file.user.len() == 1;
    if last && entry.is_none() && !force {
        return Err(format!(
            "{name} is the last user: without users a node lets every client on loopback \
             do anything (and any client at all, with protected_mode = false); pass --force \
             to delete it"
        ));
    }
    file.user.retain(|u| u.name != name);
    file.user.extend(entry);
    if was_there || !file.user.is_empty() {
        file.no_users = file.user.is_empty();
    }
    Ok(was_there)
}

/// What tells that a users file changed: its modification time, which a
/// quick rewrite in place may leave as it was, with its length and inode
/// (which `tallyd passwd`'s write-and-rename changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    modified: SystemTime,
    len: u64,
    inode: u64,
}

/// `path`'s [`Stamp`], if it exists.
pub fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = tally_world::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: m.modified().ok()?,
        len: m.len(),
        inode: m.ino(),
    })
}

/// A hash of no one's password, checked for unknown users so that they
/// take as long to refuse as known ones.
pub fn decoy_hash() -> &'static str {
    // Process-wide on purpose: a pure cache (no one's password).
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| password::hash("tally: no such user").unwrap_or_default())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use crate::config::auth::Role;

    fn entry(name: &str) -> UserEntry {
        UserEntry {
            name: name.into(),
            password_hash: password::hash("pw").unwrap(),
            role: Role::ReadOnly,
        }
    }

    #[test]
    fn users_come_from_the_config_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.toml");
        let config = AuthConfig {
            user: vec![entry("a")],
            users_file: Some(path.clone()),
            protected_mode: true,
        };
        // A missing file is no users.
        assert_eq!(Users::load(&config).unwrap().users.len(), 1);
        let file = UsersFile {
            user: vec![entry("b")],
            ..UsersFile::default()
        };
        tally_world::fs::write(&path, file_text(&file)).unwrap();
        let Loaded { users, stamp, file } = Users::load(&config).unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(users.get("b").unwrap().role, Role::ReadOnly);
        assert!(stamp.is_some());
        assert_eq!(
            file,
            FileUsers::Read {
                count: 1,
                no_users: false
            }
        );
        // Twice over both places.
        tally_world::fs::write(
            &path,
            file_text(&UsersFile {
                user: vec![entry("a")],
                ..UsersFile::default()
            }),
        )
        .unwrap();
        assert!(Users::load(&config).unwrap_err().contains("defined twice"));
    }

    #[test]
    fn the_users_file_is_updated_whole_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.toml");
        assert!(!update_file(&path, "a", Some(entry("a")), false).unwrap());
        assert!(!update_file(&path, "b", Some(entry("b")), false).unwrap());
        let mut changed = entry("a");
        changed.role = Role::Admin;
        assert!(update_file(&path, "a", Some(changed), false).unwrap());
        let file = read_file(&path).unwrap();
        let roles: Vec<_> = file
            .user
            .iter()
            .map(|u| (u.name.as_str(), u.role))
            .collect();
        assert_eq!(roles, [("b", Role::ReadOnly), ("a", Role::Admin)]);
        assert!(update_file(&path, "b", None, false).unwrap());
        assert_eq!(read_file(&path).unwrap().user.len(), 1);
        let mode = tally_world::fs::metadata(&path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        assert!(update_file(&path, "bad name", Some(entry("bad name")), false).is_err());
    }

    #[test]
    fn a_clear_password_or_a_bad_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.toml");
        let config = AuthConfig {
            users_file: Some(path.clone()),
            ..AuthConfig::default()
        };
        let cases = [
            (
                "password = \"x\"\nrole = \"admin\"",
                "unknown field `password`",
            ),
            (
                "password_hash = \"x\"\nrole = \"admin\"",
                "user[0]: password_hash",
            ),
            (
                "password_hash = \"x\"\nrole = \"root\"",
                "unknown variant `root`",
            ),
        ];
        for (fields, want) in cases {
            tally_world::fs::write(&path, format!("[[user]]\nname = \"a\"\n{fields}\n")).unwrap();
            let e = Users::load(&config).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        for bad in ["", "a b", "a/b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name("app.eu-1@team").is_ok());
    }

    #[test]
    fn deleting_the_last_user_needs_force_and_marks_the_file() {
        let mut file = UsersFile::default();
        assert!(
            !change(&mut file, "a", None, false).unwrap(),
            "none to delete"
        );
        assert!(!file.no_users);
        change(&mut file, "a", Some(entry("a")), false).unwrap();
        let e = change(&mut file, "a", None, false).unwrap_err();
        assert!(e.contains("last user") && e.contains("--force"), "{e}");
        assert_eq!(file.user.len(), 1);
        assert!(change(&mut file, "a", None, true).unwrap());
        assert!(file.user.is_empty() && file.no_users);
        assert!(file_text(&file).contains("no_users = true"));
        change(&mut file, "b", Some(entry("b")), false).unwrap();
        assert!(!file.no_users);
        assert!(!file_text(&file).contains("no_users"));
    }

    #[test]
    fn a_node_keeps_its_users_when_the_file_loses_them_by_accident() {
        let read = |count, no_users| Ok(FileUsers::Read { count, no_users });
        let keeps = |before, r| keep_previous(before, r).is_some();
        // A node with users from the file.
        assert!(keeps(2, Err("bad toml")));
        assert!(keeps(2, Ok(FileUsers::Missing)));
        assert!(keeps(2, read(0, false)));
        assert!(!keeps(2, read(0, true)), "empty on purpose");
        assert!(!keeps(2, read(1, false)), "one user deleted");
        assert!(!keeps(2, Ok(FileUsers::Unused)));
        // A node without: nothing to lose, but a broken file is still kept out.
        assert!(keeps(0, Err("bad toml")));
        assert!(!keeps(0, Ok(FileUsers::Missing)));
        assert!(!keeps(0, read(0, false)));
        assert!(!keeps(0, read(3, false)));
    }
}
