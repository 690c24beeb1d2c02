//! Wire messages, the QUIC peer transport and the client protocol: built by the cluster issue.
