//! Password hashes: argon2id in the PHC string format
//! (`$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`), the OWASP-recommended
//! parameters (19 MiB, two passes). Only hashes are ever stored; a
//! verification costs tens of milliseconds of CPU, which is why the node
//! runs them off its async threads, a few at a time, and remembers the
//! last good password of each user (see [`super::Auth`]).

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};

pub use crate::config::auth::check_hash as check;

/// The longest password hashed or checked: beyond it only costs CPU.
pub const PASSWORD_BYTES_MAX: usize = tally_net::wire::CREDENTIAL_BYTES_MAX;

/// A new hash of `password` with a fresh random salt.
pub fn hash(password: &str) -> Result<String, String> {
    if password.is_empty() || password.len() > PASSWORD_BYTES_MAX {
        return Err(format!(
            "a password is 1 to {PASSWORD_BYTES_MAX} bytes, not {}",
            password.len()
        ));
    }
    let mut salt = [0u8; 16];
    // A salt: the OS's random bytes, never a simulation's seeded ones.
    #[allow(clippy::disallowed_methods, reason = "a password's salt")]
    let rng = ring::rand::SystemRandom::new();
    ring::rand::SecureRandom::fill(&rng, &mut salt)
        .map_err(|_| "no randomness for a salt".to_string())?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| e.to_string())?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

/// Whether `password` matches `phc` (slow by design; false for a hash
/// that does not parse).
pub fn verify(phc: &str, password: &str) -> bool {
    match PasswordHash::new(phc) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn a_hash_verifies_its_password_only() {
        let h = hash("s3cret").unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(!h.contains("s3cret"));
        check(&h).unwrap();
        assert!(verify(&h, "s3cret"));
        assert!(!verify(&h, "s3creT"));
        assert!(!verify(&h, ""));
        // Salted: the same password hashes differently each time.
        assert_ne!(h, hash("s3cret").unwrap());
    }

    #[test]
    fn bad_hashes_and_passwords_are_refused() {
        assert!(hash("").is_err());
        assert!(hash(&"x".repeat(PASSWORD_BYTES_MAX + 1)).is_err());
        assert!(check("s3cret").is_err(), "a password in the clear");
        assert!(check("$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ").is_err());
        let pbkdf = "$pbkdf2-sha256$i=1000$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA";
        assert!(check(pbkdf).is_err());
        assert!(!verify("garbage", "x"));
    }
}
