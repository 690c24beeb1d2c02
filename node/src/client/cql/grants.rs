//! Who may run what through CQL, by Tally's roles: reads need `Read`,
//! statements that change counters `Write`, schema changes `Admin`; and
//! the refusal, in Cassandra's words.

use super::ast::Statement;
use super::response::CqlError;
use super::work::RowWork;
use crate::security::auth::access::{Need, Role};

/// What statements on rows need: a write if any of them changes a counter.
pub(crate) fn rows_need(work: &RowWork) -> Need {
    match work
        .parts
        .iter()
        .all(|p| matches!(p.statement, Statement::Select(_)))
    {
        true => Need::Read,
        false => Need::Write,
    }
}

/// Checks that `role` (none: the login ended) allows `need`; `user` and
/// `on` (`<table ks.cf>`, `<all keyspaces>`) name the refusal.
pub(crate) fn check(
    role: Option<Role>,
    need: Need,
    user: Option<&str>,
    on: &str,
) -> Result<(), CqlError> {
    if role.is_some_and(|r| r.allows(need)) {
        return Ok(());
    }
    let permission = match need {
        Need::Nothing | Need::Read => "SELECT",
        Need::Write => "MODIFY",
        Need::Admin => "CREATE",
    };
    Err(CqlError::Unauthorized(format!(
        "User {} has no {permission} permission on {on} or any of its parents",
        user.unwrap_or("anonymous")
    )))
}

/// What Cassandra calls the resource a statement on rows touches.
pub(crate) fn resource(work: &RowWork) -> String {
    match work.parts.as_slice() {
        [one] => format!("<table {}.{}>", one.keyspace, one.table.name),
        _ => "<all keyspaces>".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_allow_what_their_level_allows() {
        assert!(check(Some(Role::ReadOnly), Need::Read, Some("r"), "x").is_ok());
        let e = check(
            Some(Role::ReadOnly),
            Need::Write,
            Some("r"),
            "<table ks.cf>",
        )
        .unwrap_err();
        assert_eq!(
            e,
            CqlError::Unauthorized(
                "User r has no MODIFY permission on <table ks.cf> or any of its parents".into()
            )
        );
        assert!(check(Some(Role::ReadWrite), Need::Write, None, "x").is_ok());
        assert!(check(Some(Role::ReadWrite), Need::Admin, None, "x").is_err());
        assert!(check(Some(Role::Admin), Need::Admin, None, "x").is_ok());
        assert!(
            check(None, Need::Read, None, "x").is_err(),
            "a login that ended"
        );
    }
}
