//! Lists on the wire: the changes a list's leader makes and what they
//! answer, `tally-model`'s types sent as they are. A list itself travels
//! in its cell ([`crate::wire::WireCell::list`]).

use crate::limits::{BATCH_MESSAGES_MAX, MESSAGE_BYTES_MAX};

pub use tally_model::list::{End, LIST_BYTES_MAX, ListChange, ListReply};

/// A peer batch of replicated list cells, each with a key of the largest
/// size, fits one message.
const _: () = assert!(BATCH_MESSAGES_MAX * (LIST_BYTES_MAX + 2 * 1024) <= MESSAGE_BYTES_MAX);
