//! The native protocol's strings (client protocol 3): a key's string read
//! and changed through agreement, each change a rule of `base::strings`,
//! so compare-and-set and leases are linearizable through any node.

use tally_net::wire::{
    Deadline, ErrorKind, StringCondition, WireError, WireKey, WireString, WireSwapped,
};

use super::Node;
use crate::base::strings::{COLUMN, STRING_BYTES_MAX, swap_string};

impl Node {
    /// The key's string and its deadline, read linearizably, if it holds
    /// one.
    pub async fn string(&self, key: &[u8]) -> Result<Option<WireString>, WireError> {
        let registers = self.read_registers(key).await?;
        Ok(registers
            .get(COLUMN, tally_engine::now_ms())
            .map(|r| WireString {
                value: r.value.clone(),
                at_ms: r.at_ms,
            }))
    }

    /// Sets the key's string to `value` with `deadline` (`None`: deletes
    /// it) if `condition` holds of the string before, agreed. A
    /// change that could make a string is refused over a live counter (as
    /// the nearest replica holds it), as RESP's `SET` refuses it: a key
    /// holds one kind.
    pub async fn swap_string(
        &self,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        condition: StringCondition,
        deadline: Deadline,
    ) -> Result<WireSwapped, WireError> {
        if value.as_ref().is_some_and(|v| v.len() > STRING_BYTES_MAX) {
            return Err(WireError::new(
                ErrorKind::Invalid,
                format!("a string is at most {STRING_BYTES_MAX} bytes"),
            ));
        }
        let needs_string = matches!(
            condition,
            StringCondition::Present | StringCondition::Equals(_)
        );
        if value.is_some() && !needs_string {
            let counter = WireKey::new(&key, COLUMN);
            let cell = self.get_cell(&counter, tally_net::Consistency::One).await?;
            if cell.live(tally_engine::now_ms()) {
                return Err(WireError::new(
                    ErrorKind::WrongType,
                    "the key holds a counter; reset it first to store a string there",
                ));
            }
        }
        self.agree(&key, move |registers, now| {
            let ttl = deadline.at(now);
            Ok(swap_string(
                registers,
                value.as_deref(),
                &condition,
                ttl,
                now,
            ))
        })
        .await
    }
}
