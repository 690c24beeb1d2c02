//! What `tally status` shows of builds: each node's build and the cluster
//! features it has enabled, as the node itself says.

use tally_net::{Client, ClientError};

/// One node's build, as it says.
pub(crate) struct NodeBuild {
    /// Its build's version; "before versions" for a build that cannot tell.
    pub(crate) version: String,
    /// The cluster features it has enabled.
    pub(crate) enabled: Vec<String>,
}

/// What node `id`, through its own connection `c`, says of its build.
pub(crate) async fn of(c: &Client, id: &str) -> Option<NodeBuild> {
    match c.versions().await {
        Ok(v) => {
            let own = v.nodes.iter().find(|n| n.id == id)?.build.as_ref()?;
            Some(NodeBuild {
                version: own.version.clone(),
                enabled: v.enabled,
            })
        }
        // Client protocol 1: a build from before versions were negotiated.
        Err(ClientError::Protocol(_)) if c.protocol() < 2 => Some(NodeBuild {
            version: "before versions".into(),
            enabled: Vec::new(),
        }),
        Err(_) => None,
    }
}

/// The line that sums up the cluster's features: one list when every node
/// that answered has the same, else each node's.
pub(crate) fn features_line<'a>(builds: impl Iterator<Item = (&'a str, &'a NodeBuild)>) -> String {
    let builds: Vec<_> = builds.collect();
    let list = |f: &[String]| match f.is_empty() {
        true => "none".to_string(),
        false => f.join(", "),
    };
    match builds.split_first() {
        None => "cluster features: no node answered".into(),
        Some(((_, first), rest)) if rest.iter().all(|(_, b)| b.enabled == first.enabled) => {
            format!("cluster features enabled: {}", list(&first.enabled))
        }
        Some(_) => {
            let each: Vec<String> = builds
                .iter()
                .map(|(id, b)| format!("{id} {}", list(&b.enabled)))
                .collect();
            format!(
                "cluster features enabled (not yet on every node): {}",
                each.join("; ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(enabled: &[&str]) -> NodeBuild {
        NodeBuild {
            version: "v".into(),
            enabled: enabled.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn features_are_one_list_when_every_node_agrees() {
        let (x, y) = (b(&["leaving-notice"]), b(&[]));
        assert_eq!(
            features_line([("n1", &x), ("n2", &x)].into_iter()),
            "cluster features enabled: leaving-notice"
        );
        assert_eq!(
            features_line([("n1", &x), ("n2", &y)].into_iter()),
            "cluster features enabled (not yet on every node): n1 leaving-notice; n2 none"
        );
        assert_eq!(
            features_line([("n1", &y)].into_iter()),
            "cluster features enabled: none"
        );
    }
}
