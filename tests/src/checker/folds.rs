//! What a fold must leave: no member holding shards of an incarnation it
//! folded (no cell of the chaos runs comes near an overflowing base).

use tally_net::wire::WireFolded;

/// The violations `folded` (what `tally fold` answered) shows.
pub fn check_fold(folded: &WireFolded) -> Vec<String> {
    folded
        .nodes
        .iter()
        .filter(|n| n.retired_held > 0)
        .map(|n| {
            format!(
                "{} holds shards of {} retired incarnations after a fold",
                n.node, n.retired_held
            )
        })
        .collect()
}
