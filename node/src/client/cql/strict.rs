//! What `[cluster.cql] strict = true` refuses: the statements on counter
//! tables Cassandra refuses and Tally serves, with Cassandra's words.
//! Without I/O.

use super::ast::{Assignment, Literal, Statement};
use super::response::CqlError;

/// Cassandra's refusal of `statement`, if it is one Tally serves beyond
/// Cassandra.
pub(crate) fn refusal(statement: &Statement) -> Option<CqlError> {
    let refuse = |m: String| Some(CqlError::Invalid(m));
    match statement {
        Statement::Update(u) if u.ttl.is_some() => {
            refuse("Cannot provide custom TTL for counter updates".into())
        }
        Statement::Update(u) => u.assignments.iter().find_map(|a| match a {
            Assignment::Set(c, _) => refuse(format!(
                "Cannot set the value of counter column {c} (counters can only be \
                 incremented/decremented, not set)"
            )),
            _ => None,
        }),
        Statement::CreateTable(t) if !super::schema::makes_regular_table(statement) => t
            .options
            .iter()
            .find_map(|(name, value)| match (name.as_str(), value) {
                ("default_time_to_live", Literal::Int(s)) if *s > 0 => {
                    refuse("Cannot set default_time_to_live on a table with counters".into())
                }
                _ => None,
            }),
        Statement::Batch(_, statements) => statements.iter().find_map(refusal),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse;
    use super::*;

    fn refused(q: &str) -> Option<String> {
        refusal(&parse(q).unwrap().0).map(|e| e.message().to_string())
    }

    #[test]
    fn what_cassandra_refuses_of_counters_is_refused() {
        assert_eq!(
            refused("UPDATE t SET c = 5 WHERE k = 1").as_deref(),
            Some(
                "Cannot set the value of counter column c (counters can only be \
                 incremented/decremented, not set)"
            )
        );
        assert!(refused("UPDATE t USING TTL 5 SET c = c + 1 WHERE k = 1").is_some());
        assert!(
            refused("CREATE TABLE t (k int PRIMARY KEY, c counter) WITH default_time_to_live = 9")
                .is_some()
        );
        assert!(
            refused(
                "BEGIN COUNTER BATCH UPDATE t SET c = c + 1 WHERE k = 1; \
                 UPDATE t SET c = 2 WHERE k = 2; APPLY BATCH"
            )
            .is_some()
        );
        for ok in [
            "UPDATE t SET c = c + 1 WHERE k = 1",
            "DELETE FROM t WHERE k = 1",
            "CREATE TABLE t (k int PRIMARY KEY, c counter)",
            "SELECT * FROM t",
        ] {
            assert_eq!(refused(ok), None, "{ok}");
        }
    }
}
