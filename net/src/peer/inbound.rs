//! Answering a batch from a peer, however it came (QUIC, or the
//! simulator's network): heartbeats here, everything else by the node's
//! [`Handler`], the answers in request order.

use std::sync::Arc;

use super::Handler;
use crate::wire::{
    self, BATCH_MESSAGES_MAX, ErrorKind, PeerRequest, PeerResponse, WireBuild, WireError,
};

/// What answers this node's peers.
pub struct Inbound {
    /// The node's part.
    pub(crate) handler: Arc<dyn Handler>,
    /// The cluster's name: heartbeats from another cluster are refused.
    pub(crate) cluster: String,
}

/// A batch that is not one: the connection it came on is closed.
#[derive(Debug)]
pub struct BadBatch {
    /// What was wrong, for the log.
    pub why: &'static str,
    /// The detail, for the log.
    pub detail: String,
    /// What the peer is told as the connection closes.
    pub reason: &'static [u8],
}

impl Inbound {
    /// The oldest peer protocol this node speaks now.
    pub fn oldest_peer(&self) -> u16 {
        self.handler.oldest_peer()
    }

    /// Answers a batch from node `from` (as its certificate, or the
    /// simulator, says): the encoded answers, one per request, in order.
    pub async fn answer(&self, from: usize, batch: &[u8]) -> Result<Vec<u8>, BadBatch> {
        let reqs = match wire::decode::<Vec<PeerRequest>>(batch) {
            Ok(r) if r.len() <= BATCH_MESSAGES_MAX => r,
            Ok(r) => {
                return Err(BadBatch {
                    why: "batch too long",
                    detail: format!("{} requests", r.len()),
                    reason: b"batch too long",
                });
            }
            Err(e) => {
                return Err(BadBatch {
                    why: "malformed batch",
                    detail: e.to_string(),
                    reason: b"malformed batch",
                });
            }
        };
        Ok(wire::encode(&self.answers(from, reqs).await))
    }

    async fn answers(&self, from: usize, reqs: Vec<PeerRequest>) -> Vec<PeerResponse> {
        let n = reqs.len();
        let mut answers: Vec<Option<PeerResponse>> = vec![None; n];
        let mut passed = Vec::with_capacity(n);
        let mut slots = Vec::with_capacity(n);
        for (i, req) in reqs.into_iter().enumerate() {
            match req {
                PeerRequest::Ping { cluster: theirs } => {
                    answers[i] = Some(self.answer_ping(&theirs, None));
                }
                PeerRequest::Hello {
                    cluster: theirs,
                    build,
                } => {
                    answers[i] = Some(self.answer_ping(&theirs, Some(&build)));
                }
                req => {
                    passed.push(req);
                    slots.push(i);
                }
            }
        }
        if !passed.is_empty() {
            let handled = self.handler.handle(from, passed).await;
            if handled.len() != slots.len() {
                let e = WireError::new(
                    ErrorKind::Internal,
                    "handler answered the wrong number of requests",
                );
                for &i in &slots {
                    answers[i] = Some(PeerResponse::Error(e.clone()));
                }
            } else {
                for (i, a) in slots.into_iter().zip(handled) {
                    answers[i] = Some(a);
                }
            }
        }
        answers
            .into_iter()
            .map(|a| a.expect("every request got an answer above"))
            .collect()
    }

    /// The answer to a heartbeat from cluster `theirs`: `Ping` (no
    /// `build`), or `Hello` with the sender's build.
    fn answer_ping(&self, theirs: &str, build: Option<&WireBuild>) -> PeerResponse {
        let handler = &*self.handler;
        let refused = |why: String| PeerResponse::Error(WireError::new(ErrorKind::Invalid, why));
        if theirs != self.cluster {
            return refused(format!("cluster {theirs:?} is not {:?}", self.cluster));
        }
        let ring = handler.ring_version();
        let why = handler.not_writable().map(|w| wire::bounded_reason(&w));
        let Some(build) = build else {
            return match why {
                None => PeerResponse::Pong { ring },
                Some(why) => PeerResponse::PongNotWritable { why, ring },
            };
        };
        if let Err(why) = build.check().and_then(|()| handler.admits(build)) {
            return refused(why);
        }
        PeerResponse::Hello {
            ring,
            not_writable: why,
            build: handler.build(),
        }
    }
}
