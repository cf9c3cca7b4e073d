//! Tests of the wire as its users see it: a fabric in a private temporary directory, inboxes,
//! senders, and segment files damaged on purpose.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::layout::{self, lap_seq, Geometry, Header, OFF_STATE, OFF_VERSION, STATE_READY};
use super::*;

/// A fabric in a fresh directory under the temporary directory, removed on drop (also when
/// the test fails).
struct TempFabric {
    fabric: Fabric,
}

impl TempFabric {
    fn new(tag: &str) -> TempFabric {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir()
            .join(format!("softverbs-wire-test-{}-{tag}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let fabric = Fabric::open(Some(&dir)).expect("open a fabric in a fresh temp dir");
        TempFabric { fabric }
    }
}

impl std::ops::Deref for TempFabric {
    type Target = Fabric;
    fn deref(&self) -> &Fabric {
        &self.fabric
    }
}

impl Drop for TempFabric {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(self.fabric.dir());
    }
}

fn small(slots: u32) -> InboxConfig {
    InboxConfig { slots, slot_size: 64, gid: [0xfe; 16] }
}

/// The pid of a child that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().expect("spawn `true`");
    let pid = child.id();
    child.wait().expect("wait for `true`");
    pid
}

/// Writes a segment file by hand (no `Inbox` keeps it alive), after `edit` had its way with
/// the header bytes; returns its path.
fn write_segment(fabric: &Fabric, lid: u16, pid: u32, edit: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let geometry = Geometry::new(4, 64).expect("valid geometry");
    let mut header = Header::new(geometry, pid, 0, lid, [7; 16]);
    header.state = STATE_READY;
    let mut bytes = vec![0u8; geometry.total_size() as usize];
    bytes[..layout::HEADER_READ_LEN].copy_from_slice(&header.encode());
    edit(&mut bytes);
    let path = fabric.inbox_path(lid);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .expect("create segment file");
    file.write_all_at(&bytes, 0).expect("write segment file");
    path
}

fn packet(len: usize, tag: u8) -> Vec<u8> {
    (0..len).map(|i| tag.wrapping_add(i as u8)).collect()
}

#[test]
fn wire_types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Inbox>();
    check::<Sender>();
    check::<Fabric>();
}

#[test]
fn round_trip_keeps_bytes_and_order() {
    let fabric = TempFabric::new("roundtrip");
    let inbox = fabric.create_inbox(small(8)).expect("create inbox");
    let tx = fabric.connect(inbox.lid()).expect("connect");
    assert_eq!(tx.lid(), inbox.lid());
    assert_eq!(tx.gid(), [0xfe; 16]);
    assert_eq!(tx.path(), inbox.path());
    assert_eq!(tx.slot_size(), 64);

    let mut buf = [0u8; 64];
    assert!(inbox.is_empty());
    assert_eq!(inbox.recv(&mut buf), None);
    for round in 0..3u8 {
        let sizes = [0usize, 1, 17, 63, 64];
        for (i, &len) in sizes.iter().enumerate() {
            tx.send(&packet(len, round * 10 + i as u8)).expect("send");
        }
        assert!(!inbox.is_empty());
        for (i, &len) in sizes.iter().enumerate() {
            let n = inbox.recv(&mut buf).expect("a packet is ready");
            assert_eq!(&buf[..n], &packet(len, round * 10 + i as u8)[..]);
        }
        assert_eq!(inbox.recv(&mut buf), None);
    }
    assert_eq!(inbox.stats().received, 15);
}

#[test]
fn full_ring_pushes_back_and_oversized_packets_are_refused() {
    let fabric = TempFabric::new("full");
    let inbox = fabric.create_inbox(small(4)).expect("create inbox");
    let tx = fabric.connect(inbox.lid()).expect("connect");
    for i in 0..4 {
        tx.send(&[i; 8]).expect("room for four");
    }
    assert!(matches!(tx.send(&[9; 8]), Err(WireError::Full)));
    assert!(matches!(tx.send(&[0; 65]), Err(WireError::TooLarge { len: 65, max: 64 })));
    // One out, one more in; order survives the wrap-around.
    assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(vec![0; 8]));
    tx.send(&[4; 8]).expect("a slot was freed");
    for i in 1..=4 {
        assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(vec![i; 8]));
    }
    assert!(inbox.is_empty());
}

#[test]
fn the_unset_icrc_mark_reaches_the_receiver_with_each_packet_and_not_its_length() {
    let fabric = TempFabric::new("mark");
    let inbox = fabric.create_inbox(small(4)).expect("create inbox");
    let tx = fabric.connect(inbox.lid()).expect("connect");
    // Full-size packets too: the mark is a bit above any length a slot holds.
    let sent = [(vec![1; 8], true), (vec![2; 64], false), (vec![3; 64], true), (vec![], false)];
    for (pkt, unset) in &sent {
        tx.send_marked(pkt, *unset).expect("send");
    }
    let mut got = Vec::new();
    assert_eq!(
        inbox.recv_while_marked(usize::MAX, |b, unset| {
            got.push((b.to_vec(), unset));
            true
        }),
        4
    );
    assert_eq!(got, sent, "each packet, its length and its own mark, in order");
    // A plain send is unmarked, and a receiver that does not ask gets the bytes alone.
    tx.send(&[4; 8]).expect("send");
    tx.send_marked(&[5; 8], true).expect("send");
    let mut marks = Vec::new();
    inbox.recv_while_marked(1, |_, unset| {
        marks.push(unset);
        true
    });
    assert_eq!(marks, [false]);
    assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(vec![5; 8]));
    assert_eq!(inbox.stats().corrupt, 0);
}

#[test]
fn a_burst_takes_at_most_its_count_in_ring_order() {
    let fabric = TempFabric::new("burst");
    let inbox = fabric.create_inbox(small(8)).expect("create inbox");
    let tx = fabric.connect(inbox.lid()).expect("connect");
    let mut got = Vec::new();
    assert_eq!(inbox.recv_burst(4, |b| got.push(b.to_vec())), 0, "nothing is ready");
    // Two laps of the ring, so the burst crosses the wrap-around.
    for round in 0..2u8 {
        for i in 0..7u8 {
            tx.send(&packet(usize::from(i) * 9, round * 10 + i)).expect("send");
        }
        got.clear();
        assert_eq!(inbox.recv_burst(3, |b| got.push(b.to_vec())), 3, "at most the count");
        assert_eq!(inbox.recv_burst(usize::MAX, |b| got.push(b.to_vec())), 4, "then the rest");
        let sent: Vec<Vec<u8>> =
            (0..7u8).map(|i| packet(usize::from(i) * 9, round * 10 + i)).collect();
        assert_eq!(got, sent, "every packet once, in the order sent");
        assert!(inbox.is_empty());
    }
    assert_eq!(inbox.stats().received, 14);
    // A burst frees each slot as it goes: the sender has the whole ring again.
    for i in 0..8 {
        tx.send(&[i; 8]).expect("room for eight");
    }
    assert!(matches!(tx.send(&[9; 8]), Err(WireError::Full)));
}

#[test]
fn recv_into_a_short_buffer_truncates_and_counts() {
    let fabric = TempFabric::new("trunc");
    let inbox = fabric.create_inbox(small(4)).expect("create inbox");
    let tx = fabric.connect(inbox.lid()).expect("connect");
    tx.send(&packet(40, 1)).expect("send");
    let mut short = [0u8; 10];
    assert_eq!(inbox.recv(&mut short), Some(10));
    assert_eq!(&short[..], &packet(40, 1)[..10]);
    assert_eq!(inbox.stats().truncated, 1);
}

#[test]
fn a_panicking_receiver_still_consumes_its_packet() {
    let fabric = TempFabric::new("panic");
    let inbox = fabric.create_inbox(small(4)).expect("create inbox");
    let tx = fabric.connect(inbox.lid()).expect("connect");
    tx.send(b"first").expect("send");
    tx.send(b"second").expect("send");
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        inbox.recv_with(|_| panic!("receiver bug"))
    }));
    assert!(caught.is_err());
    assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(b"second".to_vec()));
}

/// LIDs go round the space: each new port gets the next free LID after the last one given,
/// not the lowest free one, so a freed LID (a process that died) is not handed to the next
/// process at once, where a survivor's packets for the old port would reach it. Another
/// process, with its own `Fabric`, goes on from where the last allocation left off.
#[test]
fn lids_are_allocated_round_robin_and_a_freed_one_is_not_reused_at_once() {
    let fabric = TempFabric::new("lids");
    let a = fabric.create_inbox(small(2)).expect("first inbox");
    let b = fabric.create_inbox(small(2)).expect("second inbox");
    assert_eq!((a.lid(), b.lid()), (1, 2));
    assert!(a.path().ends_with("port-1.inbox"));
    let path_a = a.path().to_path_buf();
    drop(a);
    assert!(!path_a.exists(), "dropping an inbox removes its file");
    let c = fabric.create_inbox(small(2)).expect("third inbox");
    assert_eq!(c.lid(), 3, "the LID freed a moment ago was handed out again");
    drop((b, c));
    let other = Fabric::open(Some(fabric.dir())).expect("the same fabric, opened again");
    let d = other.create_inbox(small(2)).expect("fourth inbox");
    assert_eq!(d.lid(), 4);

    // At the top of the space it wraps to the lowest LID, stepping over those in use (d's).
    // The lock file holds the last LID given (big-endian): put it just below the top.
    fs::write(fabric.dir().join(".lock"), (MAX_LID - 1).to_be_bytes()).expect("write the lock");
    let lids: Vec<u16> =
        (0..5).map(|_| fabric.create_inbox(small(2)).expect("an inbox")).map(|i| i.lid()).collect();
    assert_eq!(lids, [MAX_LID, 1, 2, 3, 5]);
}

#[test]
fn segments_of_dead_owners_are_listed_reclaimed_and_cleaned() {
    let fabric = TempFabric::new("dead");
    let dead = dead_pid();
    let p1 = write_segment(&fabric, 1, dead, |_| {});
    let p2 = write_segment(&fabric, 2, dead, |_| {});
    fs::write(fabric.dir().join("notes.txt"), b"not a segment").expect("write stray file");

    let list = fabric.list().expect("list");
    assert_eq!(list.len(), 3, "{list:?}");
    let by_path: HashMap<_, _> = list.iter().map(|i| (i.path.clone(), i)).collect();
    let one = by_path[&p1];
    assert_eq!(one.lid, Some(1));
    assert_eq!(one.owner_pid, Some(dead));
    assert!(!one.alive);
    assert_eq!(one.slots, Some(4));
    assert_eq!(one.slot_size, Some(64));
    assert_eq!(one.gid, Some([7; 16]));
    assert_eq!(one.problem, None);
    let stray = by_path[&fabric.dir().join("notes.txt")];
    assert_eq!(stray.lid, None);
    assert!(stray.problem.as_deref().unwrap_or("").contains("not a port segment"));

    // Connecting to a dead owner's inbox says so.
    match fabric.connect(2) {
        Err(WireError::OwnerDead { path, pid }) => {
            assert_eq!(path, p2);
            assert_eq!(pid, dead);
        }
        other => panic!("expected OwnerDead, got {other:?}"),
    }

    // LID 1 is free again: its dead owner's file is replaced.
    let inbox = fabric.create_inbox(small(2)).expect("create over a dead segment");
    assert_eq!(inbox.lid(), 1);
    let listed = fabric.list().expect("list");
    let live = listed.iter().find(|i| i.path == p1).expect("LID 1 listed");
    assert!(live.alive);
    assert_eq!(live.owner_pid, Some(std::process::id()));

    // clean removes LID 2 (dead) and leaves the live inbox and the stray file alone.
    let removed = fabric.clean().expect("clean");
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(removed[0].path, p2);
    assert!(!p2.exists());
    assert!(p1.exists());
    assert!(fabric.dir().join("notes.txt").exists());
    assert!(fabric.clean().expect("clean again").is_empty());
}

#[test]
fn truncated_leftovers_of_a_dead_creator_are_cleaned() {
    let fabric = TempFabric::new("junk");
    let empty = fabric.inbox_path(1);
    fs::write(&empty, b"").expect("write empty port file");
    let list = fabric.list().expect("list");
    assert_eq!(list.len(), 1);
    assert!(list[0].problem.as_deref().unwrap_or("").contains("truncated"));
    let inbox = fabric.create_inbox(small(2)).expect("create over leftover");
    assert_eq!(inbox.lid(), 1);
}

fn expect_bad_segment(result: Result<Sender, WireError>, path: &Path, needle: &str) {
    match result {
        Err(err @ WireError::BadSegment { .. }) => {
            let msg = err.to_string();
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(msg.contains(needle), "{msg} should mention {needle:?}");
        }
        other => panic!("expected BadSegment mentioning {needle:?}, got {other:?}"),
    }
}

#[test]
fn corrupted_segments_are_refused_with_the_file_named() {
    let fabric = TempFabric::new("corrupt");
    let me = std::process::id();
    let p = write_segment(&fabric, 1, me, |b| b[..8].copy_from_slice(b"GARBAGE!"));
    expect_bad_segment(fabric.connect(1), &p, "bad magic");

    let p = write_segment(&fabric, 2, me, |b| {
        b[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&2u32.to_ne_bytes())
    });
    expect_bad_segment(fabric.connect(2), &p, "layout version 2, expected 4");

    let p = write_segment(&fabric, 3, me, |b| b.truncate(100));
    expect_bad_segment(fabric.connect(3), &p, "truncated");

    let p = write_segment(&fabric, 4, me, |b| b.truncate(b.len() - 64));
    expect_bad_segment(fabric.connect(4), &p, "size");

    let p = write_segment(&fabric, 5, me, |b| {
        b[OFF_STATE..OFF_STATE + 4].copy_from_slice(&0u32.to_ne_bytes())
    });
    expect_bad_segment(fabric.connect(5), &p, "not ready");

    let p = write_segment(&fabric, 6, me, |b| {
        b[layout::OFF_SLOTS..layout::OFF_SLOTS + 4].copy_from_slice(&3u32.to_ne_bytes())
    });
    expect_bad_segment(fabric.connect(6), &p, "power of two");

    let p = write_segment(&fabric, 7, me, |b| {
        b[layout::OFF_LID..layout::OFF_LID + 2].copy_from_slice(&9u16.to_ne_bytes())
    });
    expect_bad_segment(fabric.connect(7), &p, "LID 9");

    // list names every problem, and neither list nor clean touches files of a live owner.
    let list = fabric.list().expect("list");
    assert_eq!(list.len(), 7);
    assert!(list.iter().all(|i| i.problem.is_some()), "{list:?}");
    assert!(fabric.clean().expect("clean").is_empty());
}

#[test]
fn missing_port_and_bad_config_are_reported() {
    let fabric = TempFabric::new("missing");
    match fabric.connect(42) {
        Err(err @ WireError::NoSuchPort { lid: 42, .. }) => {
            assert!(err.to_string().contains("port-42.inbox"), "{err}");
        }
        other => panic!("expected NoSuchPort, got {other:?}"),
    }
    for cfg in [
        small(3),
        small(1),
        small(1 << 17),
        InboxConfig { slot_size: 100, ..small(4) },
        InboxConfig { slot_size: 32, ..small(4) },
    ] {
        assert!(matches!(fabric.create_inbox(cfg), Err(WireError::BadConfig(_))), "{cfg:?}");
    }
    assert_eq!(InboxConfig::default().slots, 1024);
    assert_eq!(InboxConfig::default().slot_size, 4352);
}

#[test]
fn closing_an_inbox_tells_its_senders() {
    let fabric = TempFabric::new("closed");
    let inbox = fabric.create_inbox(small(4)).expect("create inbox");
    let tx = fabric.connect(inbox.lid()).expect("connect");
    assert!(tx.owner_alive());
    assert_eq!(tx.owner_pid(), std::process::id());
    drop(inbox);
    assert!(!tx.owner_alive());
    match tx.send(b"anyone?") {
        Err(err @ WireError::Closed { .. }) => {
            assert!(err.to_string().contains("port-1.inbox"), "{err}")
        }
        other => panic!("expected Closed, got {other:?}"),
    }
}

#[test]
fn fabric_files_are_private() {
    let fabric = TempFabric::new("modes");
    let dir_mode = fs::metadata(fabric.dir()).expect("stat dir").permissions().mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    let inbox = fabric.create_inbox(small(2)).expect("create inbox");
    let file_mode = fs::metadata(inbox.path()).expect("stat file").permissions().mode();
    assert_eq!(file_mode & 0o777, 0o600);
    // Reopening the same fabric is fine.
    let again = Fabric::open(Some(fabric.dir())).expect("reopen");
    assert_eq!(again.dir(), fabric.dir());
}

#[test]
fn a_directory_of_another_user_is_refused() {
    let fabric = TempFabric::new("foreign");
    let dir = fabric.dir().join("theirs");
    fs::create_dir(&dir).expect("create dir");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).expect("chmod 0700");
    // Needs the privilege to give a directory away (CI runs as root); say so when it is not.
    if let Err(e) = std::os::unix::fs::chown(&dir, Some(65534), Some(65534)) {
        println!("SKIPPED a_directory_of_another_user_is_refused: cannot chown to uid 65534 ({e})");
        return;
    }
    match Fabric::open(Some(&dir)) {
        Err(err @ WireError::ForeignDir { uid: 65534, .. }) => {
            assert!(err.to_string().contains(&dir.display().to_string()), "{err}");
        }
        other => panic!("expected ForeignDir, got {other:?}"),
    }
    let meta = fs::metadata(&dir).expect("stat");
    assert_eq!(meta.uid(), 65534);
}

#[test]
fn many_producers_deliver_every_packet_once_in_order() {
    const PRODUCERS: u32 = 4;
    const PER_PRODUCER: u32 = 10_000;
    let fabric = TempFabric::new("mpsc");
    let inbox = fabric.create_inbox(small(256)).expect("create inbox");
    let tx = fabric.connect(inbox.lid()).expect("connect");
    let deadline = Instant::now() + Duration::from_secs(120);

    let next = std::thread::scope(|s| {
        for producer in 0..PRODUCERS {
            let tx = tx.clone();
            s.spawn(move || {
                for seq in 0..PER_PRODUCER {
                    let mut pkt = vec![0u8; 8 + (seq % 57) as usize];
                    pkt[..4].copy_from_slice(&producer.to_le_bytes());
                    pkt[4..8].copy_from_slice(&seq.to_le_bytes());
                    loop {
                        match tx.send(&pkt) {
                            Ok(()) => break,
                            Err(WireError::Full) => {
                                assert!(Instant::now() < deadline, "producer starved");
                                std::thread::yield_now();
                            }
                            Err(e) => panic!("send failed: {e}"),
                        }
                    }
                }
            });
        }
        let consumer = s.spawn(|| {
            let mut next = vec![0u32; PRODUCERS as usize];
            let mut total = 0;
            let mut buf = [0u8; 64];
            while total < PRODUCERS * PER_PRODUCER {
                assert!(Instant::now() < deadline, "consumer starved at {total}");
                let Some(n) = inbox.recv(&mut buf) else {
                    inbox.park(Duration::from_millis(1));
                    continue;
                };
                let producer = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes"));
                let seq = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
                assert_eq!(n, 8 + (seq % 57) as usize);
                let expected = &mut next[producer as usize];
                assert_eq!(seq, *expected, "producer {producer} out of order");
                *expected += 1;
                total += 1;
            }
            next
        });
        consumer.join().expect("consumer")
    });
    assert_eq!(next, vec![PER_PRODUCER; PRODUCERS as usize]);
    assert!(inbox.is_empty());
    assert_eq!(inbox.stats().received, u64::from(PRODUCERS * PER_PRODUCER));
}

#[test]
fn a_parked_receiver_wakes_when_a_packet_arrives() {
    let fabric = TempFabric::new("park");
    let inbox = fabric.create_inbox(small(4)).expect("create inbox");
    let tx = fabric.connect(inbox.lid()).expect("connect");
    let start = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            tx.send(b"wake up").expect("send");
        });
        inbox.park(Duration::from_secs(5));
    });
    let elapsed = start.elapsed();
    assert!(elapsed < Duration::from_secs(2), "woke after {elapsed:?}");
    assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(b"wake up".to_vec()));
    let stats = inbox.stats();
    assert_eq!((stats.parks, stats.wakeups, stats.park_timeouts), (1, 1, 0));
}

#[test]
fn park_times_out_on_an_empty_ring_and_skips_a_full_one() {
    let fabric = TempFabric::new("timeout");
    let inbox = fabric.create_inbox(small(4)).expect("create inbox");
    let start = Instant::now();
    inbox.park(Duration::from_millis(20));
    let elapsed = start.elapsed();
    assert!(elapsed >= Duration::from_millis(15), "returned after {elapsed:?}");
    assert_eq!(inbox.stats().park_timeouts, 1);

    let tx = fabric.connect(inbox.lid()).expect("connect");
    tx.send(b"ready").expect("send");
    let start = Instant::now();
    inbox.park(Duration::from_secs(5));
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(inbox.stats().parks, 1, "no sleep with a packet ready");
}

#[test]
fn unpark_wakes_a_parked_receiver_or_the_next_park() {
    let fabric = TempFabric::new("unpark");
    let inbox = fabric.create_inbox(small(4)).expect("create inbox");
    let start = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            inbox.unpark();
        });
        inbox.park(Duration::from_secs(5));
    });
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_eq!(inbox.stats().wakeups, 1);

    inbox.unpark();
    let start = Instant::now();
    inbox.park(Duration::from_secs(5));
    assert!(start.elapsed() < Duration::from_secs(1), "pending unpark served");
    // The token is consumed: the next park sleeps until its timeout.
    let start = Instant::now();
    inbox.park(Duration::from_millis(20));
    assert!(start.elapsed() >= Duration::from_millis(15));
}

/// Claims the next slot the way a sender does, stamps `writer`, and never publishes it.
fn claim_without_publishing(inbox: &Inbox, writer: u32) -> u64 {
    let seg = inbox.segment();
    let pos = seg.tail().fetch_add(1, Ordering::Relaxed);
    seg.slot(pos).writer.store(writer, Ordering::Relaxed);
    pos
}

#[test]
fn a_slot_claimed_by_a_dead_sender_is_skipped() {
    let fabric = TempFabric::new("deadwriter");
    let inbox = fabric.create_inbox(small(4)).expect("create inbox");
    let tx = fabric.connect(inbox.lid()).expect("connect");
    claim_without_publishing(&inbox, dead_pid());
    tx.send(b"behind the hole").expect("send");
    assert_eq!(inbox.recv_with(|b| b.to_vec()), None, "waits for the writer first");
    std::thread::sleep(WRITER_STALL_CHECK + Duration::from_millis(5));
    assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(b"behind the hole".to_vec()));
    assert_eq!(inbox.stats().abandoned, 1);
    // The ring keeps working across the wrap-around.
    for round in 0..10u8 {
        tx.send(&[round; 3]).expect("send");
        assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(vec![round; 3]));
    }
}

#[test]
fn a_slot_claimed_by_a_live_slow_sender_is_waited_for() {
    let fabric = TempFabric::new("slowwriter");
    let inbox = fabric.create_inbox(small(4)).expect("create inbox");
    let tx = fabric.connect(inbox.lid()).expect("connect");
    let pos = claim_without_publishing(&inbox, std::process::id());
    tx.send(b"second").expect("send");
    assert_eq!(inbox.recv_with(|b| b.len()), None);
    std::thread::sleep(WRITER_STALL_CHECK + Duration::from_millis(5));
    assert_eq!(inbox.recv_with(|b| b.len()), None, "a live writer is not skipped");
    // The slow writer finishes: publish the (empty) packet the way `send` does.
    let slot = inbox.segment().slot(pos);
    slot.len.store(0, Ordering::Relaxed);
    slot.seq.store(lap_seq(pos + 1), Ordering::Release);
    assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(Vec::new()));
    assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(b"second".to_vec()));
    assert_eq!(inbox.stats().abandoned, 0);
}

#[test]
fn an_impossible_length_word_is_dropped_not_trusted() {
    let fabric = TempFabric::new("badlen");
    let inbox = fabric.create_inbox(small(4)).expect("create inbox");
    let tx = fabric.connect(inbox.lid()).expect("connect");
    tx.send(b"doomed").expect("send");
    tx.send(b"fine").expect("send");
    inbox.segment().slot(0).len.store(1 << 20, Ordering::Relaxed);
    assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(b"fine".to_vec()));
    assert_eq!(inbox.stats().corrupt, 1);
}

#[test]
fn head_and_tail_more_than_a_ring_apart_are_a_corrupted_segment() {
    let fabric = TempFabric::new("indices");
    let inbox = fabric.create_inbox(small(4)).expect("create inbox");
    let tx = fabric.connect(inbox.lid()).expect("connect");
    let path = inbox.path().to_path_buf();
    let expect_corrupt = |what: &str| match tx.send(&[1; 8]) {
        Err(err @ WireError::BadSegment { .. }) => {
            let msg = err.to_string();
            assert!(msg.contains(&path.display().to_string()), "{what}: {msg}");
            assert!(msg.contains("more than a ring apart"), "{what}: {msg}");
        }
        other => panic!("{what}: expected BadSegment, got {other:?}"),
    };
    let seg = inbox.segment();
    // The tail more than a ring ahead of the head.
    seg.tail().store(9, Ordering::Relaxed);
    expect_corrupt("tail a ring and more ahead");
    // The consumer's head beyond the producers' tail, seen when the ring looks full: a sender
    // reads the shared head only then.
    seg.tail().store(0, Ordering::Relaxed);
    for i in 0..4 {
        tx.send(&[i; 8]).expect("room for four");
    }
    seg.head().store(100, Ordering::Relaxed);
    expect_corrupt("head past the tail");
    // Put right (the four packets taken), the ring works again.
    seg.head().store(4, Ordering::Relaxed);
    tx.send(&[7; 8]).expect("a sane ring takes the packet");
    assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(vec![7; 8]));
}

#[test]
fn send_with_writes_in_place_and_a_panicking_writer_leaves_an_empty_packet() {
    let fabric = TempFabric::new("sendwith");
    let inbox = fabric.create_inbox(small(4)).expect("create inbox");
    let tx = fabric.connect(inbox.lid()).expect("connect");
    tx.send_with(5, |b| b.copy_from_slice(b"hello")).expect("send_with");
    assert!(matches!(
        tx.send_with(65, |_| panic!("not called for a packet that does not fit")),
        Err(WireError::TooLarge { len: 65, max: 64 })
    ));
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = tx.send_with(8, |_| panic!("the writer fails"));
    }));
    assert!(panicked.is_err());
    tx.send(b"after").expect("the ring still takes packets");
    assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(b"hello".to_vec()));
    assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(Vec::new()), "the failed write, empty");
    assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(b"after".to_vec()));
}

#[test]
fn opening_a_fabric_to_look_never_creates_it() {
    let fabric = TempFabric::new("look");
    let missing = fabric.dir().join("typo").join("fabric");
    match Fabric::open_existing(Some(&missing)) {
        Err(err @ WireError::NoFabric { .. }) => {
            assert!(err.to_string().contains(&missing.display().to_string()), "{err}");
        }
        other => panic!("expected NoFabric, got {other:?}"),
    }
    assert!(!fabric.dir().join("typo").exists(), "looking created a directory");
    // Attaching is what creates it, with the fabric's mode; then looking finds it.
    Fabric::open(Some(&missing)).expect("open creates the directory");
    let mode = fs::metadata(&missing).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let found = Fabric::open_existing(Some(&missing)).expect("the directory exists now");
    assert_eq!(found.dir(), missing);
}

#[test]
fn a_fabric_directory_that_is_a_symbolic_link_is_refused() {
    let fabric = TempFabric::new("symlink");
    // A directory this user owns with the right mode: only the link itself is wrong, as when
    // another user points /dev/shm/softverbs-<uid> at a directory of their choosing.
    let target = fabric.dir().join("target");
    fs::create_dir(&target).expect("create target");
    fs::set_permissions(&target, fs::Permissions::from_mode(0o700)).expect("chmod 0700");
    let link = fabric.dir().join("link");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    for (how, result) in
        [("open", Fabric::open(Some(&link))), ("open_existing", Fabric::open_existing(Some(&link)))]
    {
        match result {
            Err(err @ WireError::UnsafeDir { .. }) => {
                let msg = err.to_string();
                assert!(msg.contains(&link.display().to_string()), "{how}: {msg}");
                assert!(msg.contains("symbolic link"), "{how}: {msg}");
            }
            other => panic!("{how}: expected UnsafeDir, got {other:?}"),
        }
    }
    assert_eq!(fs::read_dir(&target).expect("list target").count(), 0, "nothing created there");
}

#[test]
fn a_fabric_directory_others_can_enter_is_refused_naming_its_mode() {
    let fabric = TempFabric::new("mode");
    let dir = fabric.dir().join("open");
    fs::create_dir(&dir).expect("create dir");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod 0755");
    for (how, result) in
        [("open", Fabric::open(Some(&dir))), ("open_existing", Fabric::open_existing(Some(&dir)))]
    {
        match result {
            Err(err @ WireError::UnsafeDir { .. }) => {
                let msg = err.to_string();
                assert!(msg.contains(&dir.display().to_string()), "{how}: {msg}");
                assert!(msg.contains("mode 0755"), "{how}: {msg}");
                assert!(msg.contains("0700"), "{how}: {msg}");
            }
            other => panic!("{how}: expected UnsafeDir, got {other:?}"),
        }
    }
    assert_eq!(fs::read_dir(&dir).expect("list").count(), 0, "no lock or inbox created");
    // Put right, it is a fabric like any other.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).expect("chmod 0700");
    let fixed = Fabric::open(Some(&dir)).expect("a 0700 directory of this user");
    let inbox = fixed.create_inbox(small(2)).expect("create inbox");
    fixed.connect(inbox.lid()).expect("connect").send(b"hi").expect("send");
    assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(b"hi".to_vec()));
}

#[test]
fn a_fabric_directory_created_under_a_wide_umask_is_still_0700() {
    let fabric = TempFabric::new("created");
    let dir = fabric.dir().join("a").join("b");
    Fabric::open(Some(&dir)).expect("creates it with its parents");
    let meta = fs::symlink_metadata(&dir).expect("lstat");
    assert!(meta.is_dir());
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    assert_eq!(meta.uid(), os::effective_uid());
}

/// One word of a live inbox damaged on purpose, and what each party must then say about it.
#[derive(Clone, Copy, Debug)]
enum Damage {
    Head,
    Tail,
    State,
    SlotSeq,
}

/// A stray write to one word of a live inbox is found by its owner (which takes the port
/// down: it stops trusting the ring and marks the segment broken), refused by its senders
/// with an error naming the segment, and shown by the fabric listing.
#[test]
fn a_damaged_inbox_word_is_reported_by_owner_senders_and_listing() {
    for damage in [Damage::Head, Damage::Tail, Damage::State, Damage::SlotSeq] {
        let fabric = TempFabric::new("damage");
        let inbox = fabric.create_inbox(small(4)).expect("create inbox");
        let tx = fabric.connect(inbox.lid()).expect("connect");
        let path = inbox.path().to_path_buf();
        let shown = path.display().to_string();
        // A live ring: a packet went round, and the owner finds nothing wrong.
        tx.send(b"before").expect("send");
        assert_eq!(inbox.recv_with(|b| b.to_vec()), Some(b"before".to_vec()));
        assert_eq!(inbox.check_health(), None, "{damage:?}: a sane ring");
        let seg = inbox.segment();
        // (what the owner says, what the listing says)
        let (owner_says, listing_says) = match damage {
            Damage::Head => {
                seg.head().store(1001, Ordering::Relaxed);
                ("sequence number 1 ", "more than a ring apart")
            }
            Damage::Tail => {
                seg.tail().store(101, Ordering::Relaxed);
                ("more than a ring apart", "more than a ring apart")
            }
            Damage::State => {
                seg.state().store(77, Ordering::Relaxed);
                ("unknown state word 77", "unknown state word 77")
            }
            Damage::SlotSeq => {
                seg.slot(1).seq.store(12345, Ordering::Relaxed);
                ("sequence number 12345 ", "sequence number 12345 ")
            }
        };
        let listed_problem = || {
            let listed = fabric.list().expect("list");
            let info = listed.iter().find(|i| i.lid == Some(inbox.lid())).expect("listed");
            info.problem.clone().unwrap_or_default()
        };
        // The listing sees it before anyone else has said anything.
        let problem = listed_problem();
        assert!(problem.starts_with("corrupted: "), "{damage:?}: listed {problem:?}");
        assert!(problem.contains(listing_says), "{damage:?}: listed {problem:?}");
        // The owner does not take garbage for packets, and says what is wrong.
        assert_eq!(inbox.recv_with(|b| b.to_vec()), None, "{damage:?}: nothing received");
        let said = inbox.check_health().map(str::to_string);
        let said = said.unwrap_or_else(|| panic!("{damage:?}: the owner found nothing"));
        assert!(said.contains(owner_says), "{damage:?}: owner said {said:?}");
        assert_eq!(inbox.problem(), Some(said.as_str()), "{damage:?}: kept");
        // Every sender, and every new one, is told, with the segment named.
        let expect_refused = |what: &str, result: Result<(), WireError>| match result {
            Err(err @ WireError::BadSegment { .. }) => {
                let msg = err.to_string();
                assert!(msg.contains(&shown), "{damage:?} {what}: {msg}");
                assert!(msg.contains("corrupted"), "{damage:?} {what}: {msg}");
            }
            other => panic!("{damage:?} {what}: expected BadSegment, got {other:?}"),
        };
        expect_refused("old sender", tx.send(b"after"));
        expect_refused("new sender", fabric.connect(inbox.lid()).map(drop));
        let problem = listed_problem();
        assert!(problem.starts_with("corrupted: "), "{damage:?}: listed {problem:?}");
    }
}

/// A child of `fork()` that drops the inbox, the reach arena and an arena block it inherited
/// leaves them to the parent: no port closed, no file removed, no byte zeroed; and it never
/// had a mapping of the arena (`MADV_DONTFORK`, as `ibv_fork_init` makes registered memory).
#[test]
fn a_fork_child_dropping_copies_leaves_the_parents_port_arena_and_memory() {
    use std::sync::Arc;
    let fabric = TempFabric::new("fork");
    let inbox = fabric.create_inbox(small(8)).expect("create inbox");
    let arena = Arc::new(reach::ReachArena::create(fabric.dir(), inbox.lid()).expect("arena"));
    let block = arena.allocate(8192).expect("a block");
    // SAFETY: the block's 8192 bytes are ours.
    let mem = unsafe { std::slice::from_raw_parts_mut(block.ptr(), 8192) };
    mem.fill(0x5a);
    let ptr = block.ptr() as usize;
    let files = [inbox.path().to_path_buf(), arena.path().to_path_buf()];
    // SAFETY: the child only reads /proc, drops and leaves with _exit.
    let child = unsafe { libc::fork() };
    assert!(child >= 0);
    if child == 0 {
        let maps = fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let mapped = maps.lines().any(|l| {
            let r = l.split(' ').next().unwrap_or("0-0").split_once('-').unwrap_or(("0", "0"));
            let a = usize::from_str_radix(r.0, 16).unwrap_or(0);
            let b = usize::from_str_radix(r.1, 16).unwrap_or(0);
            (a..b).contains(&ptr)
        });
        drop(block);
        drop(arena);
        drop(inbox);
        std::mem::forget(fabric);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(10 + i32::from(mapped)) };
    }
    let mut status = 0;
    let start = Instant::now();
    // SAFETY: our own child.
    while unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) } == 0 {
        if start.elapsed() > Duration::from_secs(20) {
            // SAFETY: our own child.
            unsafe { libc::kill(child, libc::SIGKILL) };
            panic!("the child hung");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(libc::WIFEXITED(status), "the child died dropping its copies: {status:#x}");
    assert_eq!(libc::WEXITSTATUS(status), 10, "the child had no mapping of the arena");
    for f in &files {
        assert!(f.exists(), "{} removed by the child", f.display());
    }
    assert!(mem.iter().all(|&b| b == 0x5a), "the block kept its bytes");
    let tx = fabric.connect(inbox.lid()).expect("the port is still open");
    tx.send(&packet(17, 3)).expect("send");
    let mut buf = [0u8; 64];
    assert_eq!(inbox.recv(&mut buf), Some(17));
    drop(block);
}
