#![allow(clippy::unwrap_used, reason = "tests")]

use super::*;
use tally_net::wire::NodeState;

fn ring() -> Topology {
    Topology::seed(&[false, false, false])
}

#[test]
fn a_snapshot_restores_under_flushes_since_but_not_under_other_members() {
    let taken = ring();
    assert_eq!(check_rings(&taken, None), Ok(()), "a node with no ring yet");
    assert_eq!(check_rings(&taken, Some(&taken)), Ok(()));
    let flushed = taken.flush(&[0, 3]).unwrap().flush(&[3]).unwrap();
    assert_eq!(check_rings(&taken, Some(&flushed)), Ok(()), "flushed since");
    let mut other_members = flushed.clone();
    other_members.version += 1;
    other_members.states.push(NodeState::Normal);
    let why = check_rings(&taken, Some(&other_members)).unwrap_err();
    assert!(why.contains("members changed"), "{why}");
    let mut joining = taken.clone();
    joining.states[2] = NodeState::Joining;
    let why = check_rings(&joining, Some(&taken)).unwrap_err();
    assert!(why.contains("during a ring change"), "{why}");
    let why = check_rings(&joining, None).unwrap_err();
    assert!(why.contains("during a ring change"), "{why}");
}

/// A node's data directory: an engine with `engine_files`, a ring file
/// holding `old ring`, a hint; and a snapshot `t` of two files and a ring.
fn node_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    fs::create_dir_all(data.join("engine")).unwrap();
    fs::write(data.join("engine/000007.sst"), b"later table").unwrap();
    fs::write(data.join("engine/IDENTITY"), b"id").unwrap();
    fs::write(data.join("ring"), b"old ring").unwrap();
    fs::create_dir_all(data.join("hints")).unwrap();
    fs::write(data.join("hints/n2.hints"), b"later writes").unwrap();
    let snap = snapshot::dir(data).join("t");
    fs::create_dir_all(&snap).unwrap();
    fs::write(snap.join("000003.sst"), b"table").unwrap();
    fs::write(snap.join("ids.000001"), b"ids").unwrap();
    fs::write(snap.join(RING), b"snapshot ring").unwrap();
    dir
}

fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

fn assert_restored(data: &Path) {
    assert_eq!(names(&data.join("engine")), ["000003.sst", "ids.000001"]);
    assert_eq!(fs::read(data.join("engine/000003.sst")).unwrap(), b"table");
    assert_eq!(fs::read(data.join("ring")).unwrap(), b"snapshot ring");
    assert!(!data.join("hints").exists(), "hints of after the snapshot");
    assert_eq!(names(data), ["engine", "ring", "snapshots"]);
    assert_eq!(
        names(&snapshot::dir(data).join("t")).len(),
        3,
        "the snapshot stays"
    );
}

#[test]
fn a_staged_restore_replaces_the_engine_and_the_ring_and_drops_the_hints() {
    let dir = node_dir();
    let data = dir.path();
    let from = snapshot::dir(data).join("t");
    assert_eq!(stage(&from, data, b"snapshot ring").unwrap(), (2, 8));
    assert_eq!(
        fs::read(data.join("engine/000007.sst")).unwrap(),
        b"later table",
        "nothing changes before the restore is applied"
    );
    assert!(finish(data).unwrap());
    assert_restored(data);
    assert!(!finish(data).unwrap(), "nothing staged any more");
}

#[test]
fn a_restore_cut_short_is_finished_or_left_out_whole() {
    // Cut after the old engine directory went, before the new one came.
    let dir = node_dir();
    let data = dir.path();
    stage(&snapshot::dir(data).join("t"), data, b"snapshot ring").unwrap();
    fs::remove_dir_all(data.join("engine")).unwrap();
    assert!(finish(data).unwrap());
    assert_restored(data);

    // Cut after the engine directory was renamed, before the ring was.
    let dir = node_dir();
    let data = dir.path();
    stage(&snapshot::dir(data).join("t"), data, b"snapshot ring").unwrap();
    fs::remove_dir_all(data.join("engine")).unwrap();
    fs::rename(data.join(STAGED).join("engine"), data.join("engine")).unwrap();
    assert!(finish(data).unwrap());
    assert_restored(data);

    // Cut while staging: nothing happened, and the next stage starts over.
    let dir = node_dir();
    let data = dir.path();
    fs::create_dir_all(data.join(STAGING).join("engine")).unwrap();
    fs::write(data.join(STAGING).join("engine/000009.sst"), b"half").unwrap();
    assert!(!finish(data).unwrap());
    assert_eq!(fs::read(data.join("ring")).unwrap(), b"old ring");
    stage(&snapshot::dir(data).join("t"), data, b"snapshot ring").unwrap();
    assert!(finish(data).unwrap());
    assert_restored(data);
}
