//! The soft backend over a shared-memory fabric whose inbox is damaged under a live device.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use verbs_api::{AsyncElement, AsyncEventType, PortState};

use super::{Port, SendOutcome, ShmPort, Soft};
use crate::engine::{ip_of_slot, slot_of_gid, GID_INDEX_IPV4};
use crate::wire::layout::{HEADER_SIZE, OFF_HEAD, OFF_STATE, OFF_TAIL, SLOT_OFF_SEQ};
use crate::wire::{Fabric, InboxConfig};

/// A private fabric directory, removed however the test ends.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let path =
            std::env::temp_dir().join(format!("softverbs-soft-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::DirBuilder::new().mode(0o700).create(&path).expect("creating the fabric directory");
        Dir(path)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A stray write into the inbox of an open device: its program gets IBV_EVENT_PORT_ERR, the
/// port reads DOWN, the device says which segment is corrupted and how, senders are refused
/// naming it, and the fabric listing shows it. One case per word the ring depends on.
#[test]
fn a_damaged_inbox_takes_the_port_down_with_an_event_naming_the_segment() {
    let cases: [(&str, usize, &[u8], &str); 4] = [
        ("head", OFF_HEAD, &1001u64.to_ne_bytes(), "more than a ring apart"),
        ("tail", OFF_TAIL, &100_000u64.to_ne_bytes(), "more than a ring apart"),
        ("state", OFF_STATE, &77u32.to_ne_bytes(), "unknown state word 77"),
        // Slot 0 is the head slot of a ring nobody has sent to yet.
        ("seq", HEADER_SIZE + SLOT_OFF_SEQ, &12345u32.to_ne_bytes(), "sequence number 12345 "),
    ];
    for (word, offset, bytes, says) in cases {
        let dir = Dir::new(word);
        let soft = Soft::shared_memory(Some(&dir.0)).expect("soft on the fabric");
        let ctx = soft.open("softverbs0").expect("opening softverbs0");
        let port = ctx.query_port(1).expect("query_port");
        assert_eq!(port.state, PortState::Active, "{word}");
        let first = ctx.get_async_event(Some(Duration::from_secs(1))).expect("PORT_ACTIVE");
        assert_eq!(first.event_type, AsyncEventType::PortActive, "{word}");

        let fabric = Fabric::open_existing(Some(&dir.0)).expect("the fabric");
        let slot = slot_of_gid(&ctx.query_gid(1, GID_INDEX_IPV4).expect("query_gid"))
            .expect("a softverbs port's IPv4 GID");
        let path = fabric.inbox_path(slot);
        let shown = path.display().to_string();
        let file = fs::OpenOptions::new().write(true).open(&path).expect("open the segment");
        file.write_all_at(bytes, offset as u64).expect("the stray write");

        let event = ctx.get_async_event(Some(Duration::from_secs(5))).unwrap_or_else(|e| {
            let listed = fabric.list().expect("list");
            panic!(
                "{word}: no event after the damage: {e} {listed:?} {:?}",
                soft.stats("softverbs0")
            );
        });
        assert_eq!(event.event_type, AsyncEventType::PortErr, "{word}");
        assert_eq!(event.element, AsyncElement::Port(1), "{word}");
        let port = ctx.query_port(1).expect("query_port");
        assert_eq!(port.state, PortState::Down, "{word}");
        let said = soft.stats("softverbs0").expect("stats").port_error.unwrap_or_default();
        assert!(said.contains(&shown), "{word}: {said:?}");
        assert!(said.contains("corrupted: "), "{word}: {said:?}");
        assert!(said.contains(says), "{word}: {said:?}");

        // Whoever connects to send to it meets an error naming the segment, not silence.
        match fabric.connect(slot) {
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains(&shown) && msg.contains("corrupted"), "{word}: {msg}");
            }
            Ok(_) => panic!("{word}: a new sender was let in"),
        }
        // A port of another device sending to it: the datagram is lost, as to a port that is
        // down, and the port says why, naming the segment.
        let cfg = InboxConfig { slots: 4, slot_size: 64, gid: [0; 16] };
        let sender = ShmPort::create(fabric.clone(), cfg, false).expect("a sending port");
        let outcome = sender.egress(&Default::default()).send(ip_of_slot(slot), &[0; 60]);
        assert_eq!(outcome, SendOutcome::Unreachable, "{word}");
        let why = sender.peer_problem().unwrap_or_default();
        assert!(why.contains(&shown) && why.contains("corrupted: "), "{word}: {why:?}");
        drop(sender);
        let listed = fabric.list().expect("list");
        let info = listed.iter().find(|i| i.lid == Some(slot)).expect("listed");
        let problem = info.problem.clone().unwrap_or_default();
        assert!(problem.starts_with("corrupted: "), "{word}: listed {problem:?}");
        // Bounded: the device closes, and its segment goes with it.
        drop(ctx);
        drop(soft);
        let deadline = Instant::now() + Duration::from_secs(5);
        while path.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!path.exists(), "{word}: the segment is removed with the device");
    }
}

/// `Soft::watch_async_events` (behind the C library's pollable `async_fd`): the watcher is
/// called once for the event already queued (PORT_ACTIVE) and once more when the port goes
/// down, while the events stay queued for `get_async_event`; a device that is not open is an
/// error.
#[test]
fn an_async_event_watcher_counts_each_event_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let dir = Dir::new("watch");
    let soft = Soft::shared_memory(Some(&dir.0)).expect("soft on the fabric");
    let ctx = soft.open("softverbs0").expect("opening softverbs0");
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    let token = soft
        .watch_async_events(
            "softverbs0",
            Arc::new(move || {
                s.fetch_add(1, Ordering::SeqCst);
            }),
        )
        .expect("watch");
    assert_eq!(seen.load(Ordering::SeqCst), 1, "the PORT_ACTIVE already queued");
    assert!(soft.watch_async_events("softverbs9", Arc::new(|| {})).is_err(), "no such device");

    let fabric = Fabric::open_existing(Some(&dir.0)).expect("the fabric");
    let slot = slot_of_gid(&ctx.query_gid(1, GID_INDEX_IPV4).expect("query_gid")).expect("slot");
    let file = fs::OpenOptions::new().write(true).open(fabric.inbox_path(slot)).expect("segment");
    file.write_all_at(&1001u64.to_ne_bytes(), OFF_HEAD as u64).expect("the stray write");
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(seen.load(Ordering::SeqCst), 2, "PORT_ERR told once");
    let events: Vec<AsyncEventType> = (0..2)
        .map(|_| ctx.get_async_event(Some(Duration::from_secs(1))).expect("event").event_type)
        .collect();
    assert_eq!(events, [AsyncEventType::PortActive, AsyncEventType::PortErr]);
    soft.unwatch_async_events("softverbs0", token);
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}
