//! `resp NODE WORDS...`: a command over RESP, on a connection of its own
//! to the node's RESP port (a pipe in memory), its reply printed on one
//! line: `3`, `"a"`, `(nil)`, `OK`, `(error) ERR ...`, `["a", "b"]`.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, DuplexStream};

use crate::cluster::Cluster;

/// Most elements of an array a reply may hold, and most bytes of a bulk
/// string: a script's replies are small.
const REPLY_MAX: usize = 1 << 20;

/// Runs `words` on node `n`: its reply as printed, or why there is none
/// within `wait`.
pub async fn command(cluster: &Cluster, n: usize, words: &[String], wait: Duration) -> String {
    let Some(pipe) = cluster.resp(n) else {
        return format!("error: n{} takes no clients (down or paused)", n + 1);
    };
    let mut c = BufReader::new(pipe);
    let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
    let bytes = tally_tests::resp_command(&words);
    let reply = async {
        c.get_mut().write_all(&bytes).await.ok()?;
        read(&mut c).await
    };
    match tokio::time::timeout(wait, reply).await {
        Ok(Some(reply)) => reply,
        Ok(None) => "error: the connection closed without a reply".to_string(),
        Err(_) => format!("error: no reply in {wait:?}"),
    }
}

type Reading<'a> = Pin<Box<dyn Future<Output = Option<String>> + Send + 'a>>;

/// One whole reply, printed; `None` if the connection ended or the reply
/// is malformed.
fn read(c: &mut BufReader<DuplexStream>) -> Reading<'_> {
    Box::pin(async move {
        let mut line = String::new();
        c.read_line(&mut line).await.ok().filter(|&n| n > 0)?;
        let line = line.strip_suffix("\r\n")?;
        let (tag, rest) = line.split_at_checked(1)?;
        Some(match tag {
            "+" => rest.to_string(),
            "-" => format!("(error) {rest}"),
            ":" => rest.to_string(),
            "$" | "*" if rest == "-1" => "(nil)".to_string(),
            "_" => "(nil)".to_string(),
            "$" => {
                let len: usize = rest.parse().ok().filter(|&n| n <= REPLY_MAX)?;
                let mut bulk = vec![0; len + 2];
                c.read_exact(&mut bulk).await.ok()?;
                format!("{:?}", String::from_utf8_lossy(&bulk[..len]))
            }
            "*" => {
                let len: usize = rest.parse().ok().filter(|&n| n <= REPLY_MAX)?;
                let mut items = Vec::with_capacity(len);
                for _ in 0..len {
                    items.push(read(c).await?);
                }
                format!("[{}]", items.join(", "))
            }
            _ => return None,
        })
    })
}
