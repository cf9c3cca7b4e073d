//! The table's behaviour in this process, on memfd runs (no reach arena) and on arena runs,
//! over memory mapped for each test (never the heap: other tests' threads write there).

use super::*;
use std::sync::atomic::Ordering;

/// `pages` fresh private pages, filled with `fill`.
fn pages(pages: usize, fill: u8) -> *mut u8 {
    // SAFETY: a new private mapping.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            pages * PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    // SAFETY: just mapped.
    unsafe { std::ptr::write_bytes(p.cast::<u8>(), fill, pages * PAGE) };
    p.cast()
}

fn shared(p: *mut u8) -> Option<bool> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(Vma::parse)
        .find(|v| v.lo <= p as usize && (p as usize) < v.hi)
        .map(|v| v.shared)
}

fn pin_at(p: *mut u8, len: usize, arena: Option<&Arc<ReachArena>>) -> Arc<MrMemory> {
    // SAFETY: the tests' mappings outlive their MRs or are moved.
    unsafe { pin(p, len, AccessFlags::all(), arena) }.expect("pin")
}

#[test]
fn maps_lines_parse_with_their_file_and_offset() {
    let v =
        Vma::parse("7f00a000-7f00c000 rw-s 0001f000 00:1a 4242    /dev/shm/x (deleted)").unwrap();
    assert_eq!((v.lo, v.hi, v.off), (0x7f00a000, 0x7f00c000, 0x1f000));
    assert!(v.read && v.write && !v.exec && v.shared);
    assert_eq!(v.file, FileId { major: 0, minor: 0x1a, ino: 4242 });
    assert_eq!(v.name, "/dev/shm/x");
    let heap = Vma::parse("55d0e000-55d2f000 rw-p 00000000 00:00 0  [heap]").unwrap();
    assert!(!heap.shared && heap.name == "[heap]");
}

#[test]
fn registered_pages_stay_the_nics_after_munmap_and_come_back_private() {
    let p = pages(3, 7);
    let m = pin_at(p.wrapping_add(100), 2 * PAGE, None);
    assert_ne!(m.addr(), p as u64 + 100, "the NIC has its own mapping");
    assert_eq!(shared(p), Some(true), "the program's view is the shared pages");
    let mut got = [0u8; 4];
    m.read(0, &mut got).unwrap();
    assert_eq!(got, [7; 4], "the bytes moved with the pages");
    m.write(8, b"nic!").unwrap();
    // SAFETY: the program's view of its own buffer.
    assert_eq!(unsafe { std::slice::from_raw_parts(p.add(108), 4) }, b"nic!");
    // The program unmaps its buffer: the NIC's pages stay.
    // SAFETY: the test's own mapping.
    unsafe { libc::munmap(p.cast(), 3 * PAGE) };
    m.write(16, b"late").unwrap();
    m.read(16, &mut got).unwrap();
    assert_eq!(&got, b"late");
    drop(m);

    // Deregistered while still mapped: private pages again, with the bytes.
    let q = pages(2, 9);
    let m = pin_at(q, PAGE + 1, None);
    m.write(0, b"kept").unwrap();
    drop(m);
    assert_eq!(shared(q), Some(false), "private again");
    // SAFETY: the test's own mapping.
    assert_eq!(unsafe { std::slice::from_raw_parts(q, 5) }, b"kept\x09");
    // SAFETY: as above.
    unsafe { libc::munmap(q.cast(), 2 * PAGE) };
}

#[test]
fn overlapping_registrations_share_pages_and_each_dereg_leaves_the_others() {
    let p = pages(4, 0);
    // Two MRs sharing page 1, a third inside the first.
    let a = pin_at(p, 2 * PAGE - 8, None);
    let b = pin_at(p.wrapping_add(PAGE + 16), 2 * PAGE, None);
    let c = pin_at(p.wrapping_add(64), 64, None);
    a.write(PAGE + 16, b"from a").unwrap();
    let mut got = [0u8; 6];
    b.read(0, &mut got).unwrap();
    assert_eq!(&got, b"from a", "one page, whichever MR names it");
    drop(a);
    b.write(8, b"from b").unwrap();
    c.write(0, b"from c").unwrap();
    // SAFETY: the program's view of its own buffer.
    let view = |off: usize| unsafe { std::slice::from_raw_parts(p.add(off), 6).to_vec() };
    assert_eq!(view(PAGE + 24), b"from b", "b's pages still shared with the program");
    assert_eq!(view(64), b"from c", "c still holds page 0");
    drop(c);
    drop(b);
    assert_eq!(shared(p), Some(false));
    assert_eq!(shared(p.wrapping_add(2 * PAGE)), Some(false));
    assert_eq!(view(PAGE + 16), b"from a");
    assert_eq!(lock_table().entries.iter().filter(|e| e.run.lo == p as usize).count(), 0);
    // SAFETY: the test's own mapping.
    unsafe { libc::munmap(p.cast(), 4 * PAGE) };
}

#[test]
fn pages_on_the_arena_are_reachable_and_given_back() {
    let dir = std::env::temp_dir().join(format!("sv-pinned-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    let arena = Arc::new(ReachArena::create(&dir, 77).unwrap());
    let p = pages(2, 3);
    let m = pin_at(p.wrapping_add(10), PAGE, Some(&arena));
    assert!(arena.publish_mr(0x100, 1, 0, p as u64 + 10, m.addr() as *const u8, m.len()));
    m.write(0, b"peer").unwrap();
    // SAFETY: the program's view.
    assert_eq!(unsafe { std::slice::from_raw_parts(p.add(10), 4) }, b"peer");
    arena.withdraw_mr(0x100);
    drop(m);
    assert_eq!(shared(p), Some(false));
    // SAFETY: the program's view.
    assert_eq!(unsafe { std::slice::from_raw_parts(p.add(10), 5) }, b"peer\x03");
    // SAFETY: the test's own mapping.
    unsafe { libc::munmap(p.cast(), 2 * PAGE) };
    drop(arena);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_shared_mapping_keeps_the_programs_pointer() {
    // SAFETY: a new shared anonymous mapping.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    let m = pin_at(p.cast(), 64, None);
    assert_eq!(m.addr(), p as u64, "not moved");
    drop(m);
    // SAFETY: the test's own mapping.
    unsafe { libc::munmap(p, PAGE) };
}

#[test]
fn a_thread_writing_the_pages_while_they_move_loses_no_write() {
    use std::sync::atomic::{AtomicBool, AtomicU8};
    const N: usize = 64;
    let p = pages(N, 0);
    let addr = p as usize;
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let done = done.clone();
        std::thread::spawn(move || {
            // Each byte written once, spread over the time the pages move back and forth: a
            // write made between a move's copy and its new mapping would be lost.
            for i in 0..N * PAGE {
                // SAFETY: the test's pages, mapped (and moved) for the whole test.
                let b = unsafe { AtomicU8::from_ptr((addr + i) as *mut u8) };
                b.store(1, Ordering::Relaxed);
                for _ in 0..20 {
                    std::hint::spin_loop();
                }
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut moves = 0;
    while !done.load(Ordering::Acquire) {
        drop(pin_at(p, N * PAGE, None));
        moves += 1;
    }
    writer.join().unwrap();
    // SAFETY: the program's view, no writer left.
    let view = unsafe { std::slice::from_raw_parts(p, N * PAGE) };
    let lost = view.iter().filter(|&&b| b != 1).count();
    assert_eq!(lost, 0, "{lost} writes lost over {moves} moves");
    // SAFETY: the test's own mapping.
    unsafe { libc::munmap(p.cast(), N * PAGE) };
}

#[test]
fn a_range_larger_than_a_chunk_moves_and_comes_back_whole() {
    let n = 3 * CHUNK / PAGE + 5;
    let p = pages(n, 0);
    for i in 0..n {
        // SAFETY: the test's pages.
        unsafe { *p.add(i * PAGE + 7) = i as u8 };
    }
    let m = pin_at(p.wrapping_add(3), n * PAGE - 3, None);
    assert_eq!(shared(p.wrapping_add((n - 1) * PAGE)), Some(true));
    let mut b = [0u8; 1];
    for i in [0, CHUNK / PAGE, n - 1] {
        m.read(i * PAGE + 4, &mut b).unwrap();
        assert_eq!(b[0], i as u8, "page {i}");
    }
    m.write((n - 1) * PAGE, b"end").unwrap();
    drop(m);
    assert_eq!(shared(p), Some(false));
    assert_eq!(shared(p.wrapping_add((n - 1) * PAGE)), Some(false));
    // SAFETY: the program's view.
    let end = unsafe { std::slice::from_raw_parts(p.add((n - 1) * PAGE + 3), 3) };
    assert_eq!(end, b"end");
    // SAFETY: the test's own mapping.
    unsafe { libc::munmap(p.cast(), n * PAGE) };
}
