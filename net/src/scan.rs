//! Listing the cluster's keys from a client: pages of `ClientOp::Scan`,
//! read one after another as a stream of keys.
//!
//! A page says where the next begins (`WireKeys::more`), and any node can
//! serve any page, so a [`Scan`] holds nothing on the server. Pages may
//! end inside a partition, so the next may list it again: the stream
//! skips a key equal to the one it gave last, and gives each key once.

use std::collections::VecDeque;

use crate::client::{Client, ClientError};
use crate::cluster::ClusterClient;
use crate::wire::{ClientOp, ClientReply, Consistency, WireKeys, WireKind, WireScan, WireScanned};

/// Keys a page asks for by default.
pub const PAGE_KEYS: u32 = 5000;

/// Anything that reads a page of a scan.
pub trait Pages {
    /// One page of the cluster's live keys.
    fn scan_page(
        &self,
        scan: WireScan,
        cl: Consistency,
    ) -> impl Future<Output = Result<WireKeys, ClientError>> + Send;
}

impl Pages for Client {
    async fn scan_page(&self, scan: WireScan, cl: Consistency) -> Result<WireKeys, ClientError> {
        match self.call(ClientOp::Scan { scan, cl }).await? {
            ClientReply::Keys(keys) => Ok(keys),
            other => Err(ClientError::Protocol(format!("unexpected reply {other:?}"))),
        }
    }
}

impl Pages for ClusterClient {
    async fn scan_page(&self, scan: WireScan, cl: Consistency) -> Result<WireKeys, ClientError> {
        self.any()?.scan_page(scan, cl).await
    }
}

/// The live keys (of database 0) that begin with a prefix, each once, in
/// key order: [`Scan::next`] reads a page whenever the last is used up.
pub struct Scan<'a, P: Pages> {
    pages: &'a P,
    req: WireScan,
    cl: Consistency,
    ready: VecDeque<WireScanned>,
    last: Option<(Vec<u8>, WireKind)>,
    done: bool,
}

impl<'a, P: Pages> Scan<'a, P> {
    /// A scan of the partitions that begin with `prefix`, at `cl`, a page
    /// of `page` keys at a time (1 to `SCAN_KEYS_MAX`).
    pub fn new(pages: &'a P, prefix: &[u8], page: u32, cl: Consistency) -> Self {
        Scan {
            pages,
            req: WireScan {
                db: 0,
                prefix: prefix.to_vec(),
                after: None,
                limit: page,
            },
            cl,
            ready: VecDeque::new(),
            last: None,
            done: false,
        }
    }

    /// The next key, or `None` once every key was given.
    pub async fn next(&mut self) -> Result<Option<WireScanned>, ClientError> {
        loop {
            while let Some(k) = self.ready.pop_front() {
                let seen = (k.partition.clone(), k.kind);
                if self.last.as_ref() != Some(&seen) {
                    self.last = Some(seen);
                    return Ok(Some(k));
                }
            }
            if self.done {
                return Ok(None);
            }
            let page = self.pages.scan_page(self.req.clone(), self.cl).await?;
            self.ready.extend(page.keys);
            self.done = page.more.is_none();
            self.req.after = page.more;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use crate::wire::WireKey;

    /// Pages of a fixed list, `n` keys each, with a key listed again at
    /// the start of the next page.
    struct Fixed(Vec<WireScanned>, usize);

    impl Pages for Fixed {
        async fn scan_page(&self, scan: WireScan, _: Consistency) -> Result<WireKeys, ClientError> {
            let from = scan.after.map_or(0, |k| k.column()[0] as usize);
            let to = (from + self.1).min(self.0.len());
            let more = (to < self.0.len()).then(|| WireKey::new(b"", &[to as u8]));
            Ok(WireKeys {
                keys: self.0[from.saturating_sub(usize::from(from > 0))..to].to_vec(),
                more,
            })
        }
    }

    #[test]
    fn a_scan_gives_each_key_once_across_pages() {
        let keys: Vec<WireScanned> = (0..10u8)
            .map(|i| WireScanned {
                partition: vec![i],
                column: Vec::new(),
                kind: WireKind::Counter,
            })
            .collect();
        let pages = Fixed(keys.clone(), 3);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let got = rt.block_on(async {
            let mut scan = Scan::new(&pages, b"", 3, Consistency::One);
            let mut got = Vec::new();
            while let Some(k) = scan.next().await.unwrap() {
                got.push(k);
            }
            got
        });
        assert_eq!(got, keys);
    }
}
