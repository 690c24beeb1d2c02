//! `tallyd passwd`: users in the users file; and the security of
//! `tallyd up`'s smoke check.

use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use tally_net::client::Security;
use tally_node::config::Config;
use tally_node::security::auth::{Role, UserEntry, password, users};
use tally_node::security::client_security::{self, Flags};

/// What `tallyd passwd` was asked.
#[derive(clap::Args)]
pub struct Args {
    /// The user.
    user: String,
    /// What it may do: readonly, readwrite or admin.
    #[arg(long, default_value = "readwrite")]
    role: String,
    /// The cluster's configuration (its `[cluster.auth] users_file`).
    #[arg(long, default_value = "cluster.toml")]
    config: PathBuf,
    /// The users file, instead of the config's.
    #[arg(long)]
    users_file: Option<PathBuf>,
    /// Only print the hash, for a `[[cluster.auth.user]]` table.
    #[arg(long)]
    hash_only: bool,
    /// Remove the user instead.
    #[arg(long, conflicts_with = "hash_only")]
    delete: bool,
    /// With --delete, remove the last user too (nodes then take the file's
    /// users away; without users they serve loopback clients as admin).
    #[arg(long, requires = "delete")]
    force: bool,
}

pub fn run(a: &Args) -> Result<()> {
    users::check_name(&a.user).map_err(anyhow::Error::msg)?;
    let role = parse_role(&a.role)?;
    if a.delete {
        let path = users_file(a)?;
        let was = users::update_file(&path, &a.user, None, a.force).map_err(anyhow::Error::msg)?;
        match was {
            true => println!("removed user {} from {}", a.user, path.display()),
            false => println!("no user {} in {}", a.user, path.display()),
        }
        return Ok(());
    }
    let password = read_password()?;
    if a.hash_only {
        let password_hash = password::hash(&password).map_err(anyhow::Error::msg)?;
        println!("{password_hash}");
        return Ok(());
    }
    let path = users_file(a)?;
    // The same password keeps its hash: nodes then take a new role for a
    // new role, and leave the user's open connections open.
    let password_hash = match same_password_hash(&path, &a.user, &password)? {
        Some(kept) => kept,
        None => password::hash(&password).map_err(anyhow::Error::msg)?,
    };
    let entry = UserEntry {
        name: a.user.clone(),
        password_hash,
        role,
    };
    let was = users::update_file(&path, &a.user, Some(entry), false).map_err(anyhow::Error::msg)?;
    let verb = if was { "changed" } else { "added" };
    println!(
        "{verb} user {} ({}) in {}",
        a.user,
        role.name(),
        path.display()
    );
    Ok(())
}

fn parse_role(role: &str) -> Result<Role> {
    Ok(match role {
        "readonly" => Role::ReadOnly,
        "readwrite" => Role::ReadWrite,
        "admin" => Role::Admin,
        other => bail!("role {other:?}: readonly, readwrite or admin"),
    })
}

/// The hash `user` has in the users file at `path`, if `password` is its
/// password already.
fn same_password_hash(
    path: &std::path::Path,
    user: &str,
    password: &str,
) -> Result<Option<String>> {
    let file = users::read_file(path).map_err(anyhow::Error::msg)?;
    Ok(file
        .user
        .into_iter()
        .find(|u| u.name == user && password::verify(&u.password_hash, password))
        .map(|u| u.password_hash))
}

fn users_file(a: &Args) -> Result<PathBuf> {
    if let Some(path) = &a.users_file {
        return Ok(path.clone());
    }
    let config = Config::load(&a.config)?;
    config.cluster.auth.users_file.context(
        "the config names no users file: set `users_file` under [cluster.auth], or give --users-file",
    )
}

/// The password: the first line of stdin, without its line ending.
fn read_password() -> Result<String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("read the password from stdin")?;
    let password = line.trim_end_matches(['\n', '\r']).to_string();
    if password.is_empty() {
        bail!("no password on stdin: `echo 'the password' | tallyd passwd USER`");
    }
    Ok(password)
}

/// How the smoke check of `tallyd up` connects: TLS as the config says,
/// logged in from `TALLY_USER`/`TALLY_PASSWORD`; `None` when the cluster
/// has users and the environment gives none, or wants client certificates.
pub fn smoke_security(config: &Config) -> Result<Option<Security>> {
    let c = &config.cluster;
    if c.client_tls
        .as_ref()
        .is_some_and(|t| t.native && t.verify_clients)
    {
        return Ok(None);
    }
    let security = client_security::security(&Flags::from_env(), Some(config))?;
    let has_users =
        !c.auth.user.is_empty() || c.auth.users_file.as_ref().is_some_and(|f| f.exists());
    Ok((!has_users || security.login.is_some()).then_some(security))
}
