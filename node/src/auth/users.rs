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

use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::access::Role;
use super::{AuthConfig, password};

/// One user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    /// The name it logs in with.
    pub name: String,
    /// Its password's argon2 hash, as a PHC string.
    pub password_hash: String,
    /// What it may do.
    pub role: Role,
}

/// The users file as written.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsersFile {
    /// Its users.
    #[serde(default)]
    pub user: Vec<UserEntry>,
}

/// Every user of a node, by name.
///
/// # Invariants
/// - Each entry passed [`check_entry`]; names are unique.
#[derive(Debug, Default)]
pub struct Users(HashMap<String, UserEntry>);

impl Users {
    /// The users of `config` and of its users file, with the file's
    /// modification time.
    pub fn load(config: &AuthConfig) -> Result<(Users, Option<SystemTime>), String> {
        let mut all: Vec<(String, UserEntry)> = config
            .user
            .iter()
            .enumerate()
            .map(|(i, u)| (format!("cluster.auth.user[{i}]"), u.clone()))
            .collect();
        let mut stamp = None;
        if let Some(path) = &config.users_file {
            stamp = self::stamp(path);
            let file = read_file(path)?;
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
        Ok((Users(users), stamp))
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

/// Why `u` is not a valid user, if it is not.
pub fn check_entry(u: &UserEntry) -> Result<(), String> {
    check_name(&u.name)?;
    password::check(&u.password_hash).map_err(|e| format!("password_hash: {e}"))
}

/// A user name: 1 to 64 of `[A-Za-z0-9_.@-]`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.@-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "user name {name:?}: use 1 to 64 of A-Z, a-z, 0-9 and _ . @ -"
        ))
    }
}

/// The users file at `path`; a missing file has no users.
pub fn read_file(path: &Path) -> Result<UsersFile, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(UsersFile::default()),
        Err(e) => return Err(format!("read the users file {}: {e}", path.display())),
    };
    toml::from_str(&text).map_err(|e| format!("{}: {}", path.display(), e.message().trim()))
}

/// The users file's text.
pub fn file_text(file: &UsersFile) -> String {
    let body = toml::to_string(file).unwrap_or_default();
    format!("# Tally users: written by `tallyd passwd`; passwords are argon2id hashes.\n{body}")
}

/// Puts `entry` in the users file at `path` (replacing a user of its
/// name), or takes the user `name` out with `entry` `None`; writes the
/// file whole, mode 0600. Answers whether the user was there before.
pub fn update_file(path: &Path, name: &str, entry: Option<UserEntry>) -> Result<bool, String> {
    let mut file = read_file(path)?;
    let before = file.user.len();
    file.user.retain(|u| u.name != name);
    let was_there = file.user.len() != before;
    if let Some(e) = entry {
        check_entry(&e)?;
        file.user.push(e);
    }
    crate::certs::write_private(path, &file_text(&file)).map_err(|e| format!("{e:#}"))?;
    Ok(was_there)
}

/// When `path` was last modified, if it exists.
pub fn stamp(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// A hash of no one's password, checked for unknown users so that they
/// take as long to refuse as known ones.
pub fn decoy_hash() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| password::hash("tally: no such user").unwrap_or_default())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

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
        assert_eq!(Users::load(&config).unwrap().0.len(), 1);
        let file = UsersFile {
            user: vec![entry("b")],
        };
        std::fs::write(&path, file_text(&file)).unwrap();
        let (users, stamp) = Users::load(&config).unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(users.get("b").unwrap().role, Role::ReadOnly);
        assert!(stamp.is_some());
        // Twice over both places.
        std::fs::write(
            &path,
            file_text(&UsersFile {
                user: vec![entry("a")],
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
        assert!(!update_file(&path, "a", Some(entry("a"))).unwrap());
        assert!(!update_file(&path, "b", Some(entry("b"))).unwrap());
        let mut changed = entry("a");
        changed.role = Role::Admin;
        assert!(update_file(&path, "a", Some(changed)).unwrap());
        let file = read_file(&path).unwrap();
        let roles: Vec<_> = file
            .user
            .iter()
            .map(|u| (u.name.as_str(), u.role))
            .collect();
        assert_eq!(roles, [("b", Role::ReadOnly), ("a", Role::Admin)]);
        assert!(update_file(&path, "b", None).unwrap());
        assert_eq!(read_file(&path).unwrap().user.len(), 1);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(update_file(&path, "bad name", Some(entry("bad name"))).is_err());
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
            std::fs::write(&path, format!("[[user]]\nname = \"a\"\n{fields}\n")).unwrap();
            let e = Users::load(&config).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        for bad in ["", "a b", "a/b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name("app.eu-1@team").is_ok());
    }
}
