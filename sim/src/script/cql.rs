//! `cql NODE [cl=LEVEL] [page=ROWS] STATEMENT...`: a CQL statement,
//! unprepared, on a connection of its own to the node's CQL port (a pipe
//! in memory). A statement's `=` and `>=` stand apart as words (`WHERE k
//! = 1`): a word `name=value` is the command's option. A result of rows
//! is read page by page, `page` rows a page (all at once if not given),
//! and printed a row a line, each cell as its column's type says (`3`,
//! `'a'`, `true`, `null`, hex for the others), then how many pages it
//! took when there were more than one; any other result prints `ok`.

use std::time::Duration;

use anyhow::{Result, anyhow};
use tally_net::cql::{CqlClient, CqlError, consistency, paging_state, typed_rows};
use tally_net::wire::Consistency;

use super::words::Words;
use crate::cluster::Cluster;

/// Most pages one statement reads: a script's partitions are small.
const PAGES_MAX: usize = 1000;

/// A statement's consistency level and page size.
struct Reading {
    /// The level it runs at.
    cl: Consistency,
    /// Rows a page; `None`: one page of every row.
    page: Option<i32>,
}

/// Runs the command `w` holds (its words after `cql`); answers what it
/// printed, or why nothing came within `wait`.
pub async fn command(cluster: &Cluster, w: &mut Words, wait: Duration) -> Result<Vec<String>> {
    let n = w.node(cluster.len())?;
    let reading = Reading {
        cl: w.level()?,
        page: w
            .option("page")
            .map(|p| {
                p.parse()
                    .map_err(|_| anyhow!("cql: page={p} is not a number of rows"))
            })
            .transpose()?,
    };
    let text = w.rest_words().join(" ");
    Ok(statement(cluster, n, &text, reading, wait).await)
}

/// Runs `statement` on node `n`: what it printed, or why nothing came
/// within `wait`.
async fn statement(
    cluster: &Cluster,
    n: usize,
    statement: &str,
    reading: Reading,
    wait: Duration,
) -> Vec<String> {
    let Some(pipe) = cluster.cql(n) else {
        return vec![format!(
            "error: n{} takes no clients (down or paused)",
            n + 1
        )];
    };
    let run = async {
        let client = CqlClient::over(pipe, None).await?;
        pages(&client, statement, reading).await
    };
    match tokio::time::timeout(wait, run).await {
        Ok(Ok(lines)) => lines,
        Ok(Err(e)) => vec![format!("error: {e}")],
        Err(_) => vec![format!("error: no answer in {wait:?}")],
    }
}

/// Reads every page of `statement`'s result; its lines.
async fn pages(
    client: &CqlClient,
    statement: &str,
    reading: Reading,
) -> Result<Vec<String>, CqlError> {
    let cl = consistency(reading.cl);
    let size = reading.page.unwrap_or(i32::MAX);
    let mut lines = Vec::new();
    let mut state: Option<Vec<u8>> = None;
    for read in 1..=PAGES_MAX {
        let body = client
            .query_page(statement, cl, (size, state.as_deref()))
            .await?;
        let rows = match (typed_rows(&body), body.get(..4)) {
            (Some(rows), _) => rows,
            (None, Some([0, 0, 0, 2])) => {
                return Ok(vec!["error: a malformed result of rows".into()]);
            }
            (None, _) => return Ok(vec!["ok".to_string()]),
        };
        lines.extend(rows.rows.iter().map(|row| print_row(&rows.types, row)));
        state = paging_state(&body);
        if state.is_none() {
            if lines.is_empty() {
                lines.push("(no rows)".to_string());
            }
            if read > 1 {
                lines.push(format!("({read} pages)"));
            }
            return Ok(lines);
        }
    }
    lines.push(format!("(stopped after {PAGES_MAX} pages)"));
    Ok(lines)
}

/// A row's cells, by their columns' types.
fn print_row(types: &[u16], row: &[Option<Vec<u8>>]) -> String {
    let cells: Vec<String> = row
        .iter()
        .enumerate()
        .map(|(i, cell)| match cell {
            None => "null".to_string(),
            Some(bytes) => print_cell(types.get(i).copied(), bytes),
        })
        .collect();
    cells.join(", ")
}

/// A cell of type `id` (CQL's type ids): numbers, text and booleans as
/// cqlsh prints them, anything else as hex.
fn print_cell(id: Option<u16>, bytes: &[u8]) -> String {
    let number = match (id, bytes.len()) {
        (Some(0x0009), 4) => bytes
            .try_into()
            .ok()
            .map(|b| i64::from(i32::from_be_bytes(b))),
        (Some(0x0002 | 0x0005), 8) => bytes.try_into().ok().map(i64::from_be_bytes),
        _ => None,
    };
    match (id, number) {
        (_, Some(n)) => n.to_string(),
        (Some(0x0001 | 0x000D), _) => format!("'{}'", String::from_utf8_lossy(bytes)),
        (Some(0x0004), _) => (bytes != [0]).to_string(),
        _ => format!(
            "0x{}",
            bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_print_as_their_types_say() {
        assert_eq!(print_cell(Some(0x0009), &(-3i32).to_be_bytes()), "-3");
        assert_eq!(print_cell(Some(0x0005), &7i64.to_be_bytes()), "7");
        assert_eq!(print_cell(Some(0x000D), b"ab"), "'ab'");
        assert_eq!(print_cell(Some(0x0004), &[1]), "true");
        assert_eq!(print_cell(Some(0x0004), &[0]), "false");
        // A malformed int, and a type printed as hex.
        assert_eq!(print_cell(Some(0x0009), &[1, 2]), "0x0102");
        assert_eq!(print_cell(Some(0x000C), &[0xab]), "0xab");
        assert_eq!(
            print_row(&[0x0009, 0x0009], &[Some(vec![0, 0, 0, 1]), None]),
            "1, null"
        );
    }
}
