//! The reach file's own tests: publishing, withdrawal and its waits, the keeper, the arena.

use super::*;
use crate::engine::{RemoteOp, Request};
use std::sync::Arc;
use std::time::Instant;

/// A private directory, removed when dropped.
struct Dir(std::path::PathBuf);
impl Dir {
    fn path(&self) -> &Path {
        &self.0
    }
}
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
fn dir(tag: &str) -> Dir {
    let p = std::env::temp_dir().join(format!("sv-reach-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir(&p).expect("a test directory");
    Dir(p)
}

fn facts(qpn: u32) -> QpFacts {
    QpFacts {
        qpn,
        live: true,
        access: 0b1110,
        pd: 3,
        dest_qpn: 0x77,
        dest_ip: [10, 0, 0, 2],
        max_dest_rd_atomic: 4,
        epsn: 0x100,
        mtu: 1024,
    }
}

fn ask(rkey: u32, va: u64, len: u64) -> ReachAsk {
    ReachAsk {
        src_qpn: 0x77,
        src_ip: [10, 0, 0, 2],
        dest_qpn: 0x12,
        request: Request { op: RemoteOp::Write, rkey, va, len },
        psn: 0x100,
        mtu: 1024,
        traffic: Traffic::default(),
    }
}

#[test]
fn a_peer_reaches_a_published_mr_and_nothing_else() {
    let d = dir("pub");
    let arena = Arc::new(ReachArena::create(d.path(), 5).expect("create"));
    assert!(is_reach_file(arena.path()) && !owner_gone(arena.path()));
    let block = arena.allocate(1000).expect("room");
    assert!(arena.publish_qp(&facts(0x12)));
    assert!(arena.publish_mr(0x101, 3, 0b1111, 0x9000, block.ptr(), 1000));
    let view = ReachView::open(d.path(), 5).expect("the peer maps it");
    {
        let r = view.resolve(&ask(0x101, 0x9000 + 8, 16)).expect("reached");
        // SAFETY: 16 bytes at +8 of the 1000-byte block, checked by resolve.
        unsafe { std::ptr::copy_nonoverlapping(b"0123456789abcdef".as_ptr(), r.ptr, 16) };
    }
    // SAFETY: the block is 1000 bytes.
    let got = unsafe { std::slice::from_raw_parts(block.ptr().add(8), 16) };
    assert_eq!(got, b"0123456789abcdef", "the owner sees the peer's bytes");
    assert!(view.resolve(&ask(0x101, 0x9000 + 990, 16)).is_none(), "past the end");
    assert!(view.resolve(&ask(0x201, 0x9000, 16)).is_none(), "another key");
    assert!(view.resolve(&ask(0x101, 0x8ff8, 16)).is_none(), "before the start");
    assert!(view.resolve(&ReachAsk { src_qpn: 0x78, ..ask(0x101, 0x9000, 8) }).is_none());
    assert!(view.resolve(&ReachAsk { dest_qpn: 0x13, ..ask(0x101, 0x9000, 8) }).is_none());
    arena.publish_qp(&QpFacts { access: 0b0100, ..facts(0x12) });
    assert!(view.resolve(&ask(0x101, 0x9000, 8)).is_none(), "the QP lost REMOTE_WRITE");
    arena.withdraw_qp(0x12);
    arena.publish_qp(&facts(0x12));
    assert!(view.resolve(&ask(0x101, 0x9000, 8)).is_some());
    arena.withdraw_mr(0x101);
    assert!(view.resolve(&ask(0x101, 0x9000, 8)).is_none(), "withdrawn");
    // A heap pointer is not in the arena: nothing is published.
    let heap = [0u8; 64];
    assert!(!arena.publish_mr(0x301, 3, 0b1111, 0, heap.as_ptr(), 64));
}

#[test]
fn withdrawing_an_mr_waits_for_the_peer_using_it() {
    let d = dir("wait");
    let arena = Arc::new(ReachArena::create(d.path(), 6).expect("create"));
    let block = arena.allocate(64).expect("room");
    arena.publish_qp(&facts(0x12));
    arena.publish_mr(0x101, 3, 0b1111, 0, block.ptr(), 64);
    let view = ReachView::open(d.path(), 6).expect("mapped");
    let r = view.resolve(&ask(0x101, 0, 8)).expect("reached");
    let a2 = arena.clone();
    let started = Instant::now();
    let t = std::thread::spawn(move || {
        a2.withdraw_mr(0x101);
        started.elapsed()
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(!t.is_finished(), "ibv_dereg_mr waits while a peer copies");
    drop(r);
    let waited = t.join().expect("withdraw");
    assert!(waited >= Duration::from_millis(100) && waited < DRAIN_LIMIT, "{waited:?}");
}

#[test]
fn freed_memory_comes_back_zeroed_and_whole() {
    let d = dir("free");
    let arena = Arc::new(ReachArena::create(d.path(), 7).expect("create"));
    let a = arena.allocate(3 * 4096 + 100).expect("room");
    let first = a.ptr();
    // SAFETY: within the block.
    unsafe { std::ptr::write_bytes(first, 0xee, 3 * 4096 + 100) };
    let b = arena.allocate(64).expect("room");
    drop(a);
    drop(b);
    assert_eq!(arena.free.lock().unwrap().as_slice(), [(0, ARENA_LEN)], "coalesced");
    let c = arena.allocate(3 * 4096 + 100).expect("room");
    assert_eq!(c.ptr(), first, "the same place again");
    // SAFETY: within the block.
    let bytes = unsafe { std::slice::from_raw_parts(c.ptr(), 3 * 4096 + 100) };
    assert!(bytes.iter().all(|&x| x == 0), "zeroed for its next MR");
}

#[test]
fn a_closed_owner_is_gone_for_its_peers_and_its_file_with_it() {
    let d = dir("closed");
    let arena = Arc::new(ReachArena::create(d.path(), 8).expect("create"));
    let mut view = ReachView::open(d.path(), 8).expect("mapped");
    assert_eq!(view.blocked(), Some(false), "no keeper yet: packets");
    let keeper = arena.keep().expect("a keeper");
    assert_eq!(view.blocked(), None);
    arena.set_observed(true);
    assert_eq!(view.blocked(), Some(false), "observed: packets, but the file stays");
    arena.set_observed(false);
    let path = arena.path().to_path_buf();
    drop(keeper);
    drop(arena);
    assert_eq!(view.blocked(), Some(true), "closed");
    assert!(!path.exists(), "removed with its owner");
    assert!(ReachView::open(d.path(), 8).is_none());
    // A stranger's file by the name is no reach file of a live owner.
    std::fs::write(reach_path(d.path(), 9), b"not a reach file").unwrap();
    assert!(owner_gone(&reach_path(d.path(), 9)));
    assert!(ReachView::open(d.path(), 9).is_none());
    assert!(!is_reach_file(&d.path().join("port-9.inbox")));
}

/// A thread that dies holding the keeper (as every thread of a SIGKILLed process does):
/// the kernel marks the keeper's word, and the very next reach sees the owner gone.
#[test]
fn a_keeper_that_dies_is_seen_at_the_next_reach() {
    let d = dir("keeper");
    let arena = Arc::new(ReachArena::create(d.path(), 10).expect("create"));
    let a2 = arena.clone();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (kept_tx, kept_rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        let keeper = a2.keep().expect("a keeper");
        kept_tx.send(()).unwrap();
        rx.recv().unwrap();
        // Dies holding it: no unlock, as when the process is killed.
        std::mem::forget(keeper);
    });
    kept_rx.recv().unwrap();
    let mut view = ReachView::open(d.path(), 10).expect("mapped");
    for _ in 0..1000 {
        assert_eq!(view.blocked(), None, "alive while its keeper lives");
    }
    tx.send(()).unwrap();
    t.join().unwrap();
    assert_eq!(view.blocked(), Some(true), "gone at the first reach after the death");
}

/// A peer still inside an MR when its deregistration gives up waiting: the count is never
/// forced (its late uncount leaves 0, not a wrapped count), and the MR's memory and slot
/// are held back until it leaves, so its late bytes land in memory nobody was given.
#[test]
fn an_mr_a_stopped_peer_is_inside_is_held_back_not_freed() {
    let d = dir("held");
    let arena = Arc::new(ReachArena::create(d.path(), 11).expect("create"));
    let block = arena.allocate(4096).expect("room");
    let first = block.ptr();
    arena.publish_qp(&facts(0x12));
    assert!(arena.publish_mr(0x101, 3, 0b1111, 0, first, 4096));
    let view = ReachView::open(d.path(), 11).expect("mapped");
    let r = view.resolve(&ask(0x101, 0, 64)).expect("reached");
    let started = Instant::now();
    assert!(!arena.withdraw_mr(0x101), "a peer is still inside");
    assert!(started.elapsed() >= DRAIN_LIMIT, "waited its bound");
    assert!(view.resolve(&ask(0x101, 0, 64)).is_none(), "withdrawn for new accesses");
    drop(block); // the MR is gone: its memory would go back to the arena
    let again = arena.allocate(4096).expect("room");
    assert_ne!(again.ptr(), first, "memory a peer is inside is not handed out again");
    let slot = arena.allocate(64).expect("room");
    assert!(!arena.publish_mr(0x101, 3, 0b1111, 0, slot.ptr(), 64), "nor is its slot");
    // The stopped peer goes on: its bytes land in the held memory, nobody's.
    // SAFETY: 64 bytes of the reached range.
    unsafe { std::ptr::write_bytes(r.ptr, 0xab, 64) };
    drop(r);
    let m = &arena.mapping;
    assert_eq!(m.qp(0x12, Q_USERS).load(Ordering::SeqCst), 0, "no wrap");
    drop(again);
    drop(slot);
    let back = arena.allocate(4096).expect("room");
    assert_eq!(back.ptr(), first, "given back once the peer left");
    // SAFETY: the block is 4096 bytes.
    let bytes = unsafe { std::slice::from_raw_parts(back.ptr(), 4096) };
    assert!(bytes.iter().all(|&x| x == 0), "zeroed for its next MR");
    assert!(arena.publish_mr(0x101, 3, 0b1111, 0, back.ptr(), 4096), "the slot is free");
}

/// Taking a QP out of service waits for the peer inside an operation on it: no byte lands
/// through it once `ibv_modify_qp(ERR)` or `ibv_destroy_qp` returned.
#[test]
fn withdrawing_a_qp_waits_for_the_peer_inside() {
    let d = dir("qpwait");
    let arena = Arc::new(ReachArena::create(d.path(), 12).expect("create"));
    let block = arena.allocate(64).expect("room");
    arena.publish_qp(&facts(0x12));
    arena.publish_mr(0x101, 3, 0b1111, 0, block.ptr(), 64);
    let view = ReachView::open(d.path(), 12).expect("mapped");
    let r = view.resolve(&ask(0x101, 0, 8)).expect("reached");
    let a2 = arena.clone();
    let started = Instant::now();
    let t = std::thread::spawn(move || {
        a2.withdraw_qp(0x12);
        started.elapsed()
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(!t.is_finished(), "the QP's withdrawal waits while a peer is inside");
    drop(r);
    let waited = t.join().expect("withdraw");
    assert!(waited >= Duration::from_millis(100) && waited < DRAIN_LIMIT, "{waited:?}");
    assert!(view.resolve(&ask(0x101, 0, 8)).is_none(), "no new operation on it");
}
