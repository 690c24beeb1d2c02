//! The `[cluster.auth]` table and the users it lists: names, roles and
//! password hashes as written, and the checks a config or a users file
//! must pass (`security::auth` logs them in).

use std::path::PathBuf;

use argon2::Algorithm;
use argon2::password_hash::PasswordHash;
use serde::{Deserialize, Serialize};

/// The `[cluster.auth]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Users listed in the config itself (`[[cluster.auth.user]]`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub user: Vec<UserEntry>,
    /// A file of more users (resolved against the config's directory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub users_file: Option<PathBuf>,
    /// Without users, serve only loopback clients.
    pub protected_mode: bool,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            user: Vec::new(),
            users_file: None,
            protected_mode: true,
        }
    }
}

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

/// What a user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads only.
    ReadOnly,
    /// Reads and writes of counters.
    ReadWrite,
    /// Everything, the cluster's operations too.
    Admin,
}

impl Role {
    /// Its name in configs and messages.
    pub fn name(self) -> &'static str {
        match self {
            Role::ReadOnly => "readonly",
            Role::ReadWrite => "readwrite",
            Role::Admin => "admin",
        }
    }
}

/// Why `u` is not a valid user, if it is not.
pub fn check_entry(u: &UserEntry) -> Result<(), String> {
    check_name(&u.name)?;
    check_hash(&u.password_hash).map_err(|e| format!("password_hash: {e}"))
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

/// Whether `phc` is an argon2 hash this node can check passwords against.
pub fn check_hash(phc: &str) -> Result<(), String> {
    let parsed = PasswordHash::new(phc).map_err(|e| format!("not a PHC hash string: {e}"))?;
    Algorithm::try_from(parsed.algorithm)
        .map(|_| ())
        .map_err(|_| {
            format!(
                "{} is not argon2 (argon2id, argon2i, argon2d)",
                parsed.algorithm
            )
        })?;
    if parsed.hash.is_none() {
        return Err("the hash string holds no hash".into());
    }
    Ok(())
}
