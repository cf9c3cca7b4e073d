//! A program's registered memory moved onto shared pages, as the kernel pins it: `ibv_reg_mr`
//! of a C program's buffer (and Rust's `reg_mr_raw`) copies the registered pages (page
//! granularity, neighbours on the same pages included) into pages of a shared file — a block
//! of the device's reach arena, so peers' NICs reach the MR as a Rust program's owned one, or
//! a `memfd` when the device has no reach file — and maps that file over the program's range
//! (`mmap(MAP_FIXED | MAP_SHARED)`). The NIC keeps a second mapping of the same pages, so
//! whatever the program does to its own view (`munmap`, `mremap`, `MADV_DONTNEED`, a new
//! mapping over it) the MR's pages stay the NIC's until `ibv_dereg_mr`, as pinned pages do.
//!
//! A process-wide table holds the moved page ranges ("runs") with a use count per page:
//! registrations of pages already moved share them (one inside a run uses the run's pages
//! and stays reachable; one across runs gets a mapping of its own that strings their pages
//! together, which the NIC uses and peers do not reach); a run is trusted only while the
//! program's view of it is still the file's pages, read in `/proc/self/maps` at each
//! registration. When the last MR over a run goes, the program's view gets private
//! anonymous pages again with the same bytes (`mremap` of a filled copy over it), and the
//! run's file pages are given back. A `fork()` child gets private copies of every moved page
//! (as Linux copies pinned pages at fork) and inherits no NIC mapping (`MADV_DONTFORK`).
//!
//! Not moved (the MR keeps the program's pointer, as before: valid only while the program
//! keeps the memory mapped, and not reachable): memory that is already a shared mapping,
//! hugetlb memory, executable or special mappings, the registering thread's stack, a range
//! across mappings of different protections, `SOFTVERBS_PIN=off`, and any step that fails
//! (no room in `/dev/shm`, a system call refused): a registration never fails for it.
//! `docs/c.md`, "Registered memory", says what a program may and may not rely on.

use std::cell::UnsafeCell;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard, Once, OnceLock};

use verbs_api::{AccessFlags, Result};

use crate::engine::mr::MrMemory;
use crate::wire::reach::{ArenaBlock, ReachArena};

/// The page size this module works in (the arena's block alignment); other page sizes turn
/// it off.
const PAGE: usize = 4096;

/// How much moves at a time (each chunk is read-only only while it is copied).
const CHUNK: usize = 2 << 20;

/// What `SOFTVERBS_PIN` says: `on` (or `1`) and `off` (or `0`); None for anything else,
/// which the soft backend's environment check refuses, naming it (`soft::EnvConfig`).
pub(crate) fn setting(v: &str) -> Option<bool> {
    match v {
        "on" | "1" => Some(true),
        "off" | "0" => Some(false),
        _ => None,
    }
}

/// Whether registrations move pages: `SOFTVERBS_PIN=off` turns it off (the MR keeps the
/// program's pointer, as before), and so does a page size other than 4 KiB.
fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        // SAFETY: sysconf only reads a system constant.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let var = std::env::var("SOFTVERBS_PIN").ok();
        page == PAGE as libc::c_long && var.as_deref().and_then(setting) != Some(false)
    })
}

/// The memory of an MR over `len` bytes of the program's memory at `addr` with `access`:
/// refused as the kernel refuses what it cannot pin (`umem::check_pinnable`); else the pages
/// moved onto shared memory (from `arena` when given, where peers reach them), or the
/// program's pointer where they cannot move.
///
/// # Safety
/// As `PdOps::reg_mr_raw`: where the pages cannot move, the memory must stay mapped for as
/// long as the returned value lives.
pub unsafe fn pin(
    addr: *mut u8,
    len: usize,
    access: AccessFlags,
    arena: Option<&Arc<ReachArena>>,
) -> Result<Arc<MrMemory>> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok();
    crate::umem::check_pinnable_in(maps.as_deref(), addr as u64, len, access)?;
    // SAFETY: the caller's promise, for memory that does not move.
    let borrowed = || unsafe { MrMemory::borrow_raw(addr, len) };
    let Some(maps) = maps.filter(|_| enabled()) else { return Ok(borrowed()) };
    fork_handlers();
    let _fork = ForkGuard::lock();
    let mut table = lock_table();
    match table.pin(&maps, addr as usize, len, arena) {
        Some(pin) => {
            let at = pin.at;
            // SAFETY: `at..at+len` is the NIC's mapping of the MR's pages (a run's, or a
            // mapping of the pin's own), which the pin keeps mapped.
            Ok(unsafe { MrMemory::kept(at, len, Box::new(pin)) })
        }
        None => Ok(borrowed()),
    }
}

// ---------------- the table ----------------

/// Where a run's pages live, and the NIC's mapping of them.
enum Backing {
    /// A block of the device's reach arena: the NIC's mapping is the arena's own.
    Arena(#[allow(dead_code)] ArenaBlock),
    /// A `memfd` of the run's size, mapped for the NIC at `view`; open for mappings that
    /// string runs together (`Run::fd`).
    Memfd(#[allow(dead_code)] OwnedFd),
}

/// Pages of the program, `lo..lo+len`, moved onto a shared file.
struct Run {
    lo: usize,
    len: usize,
    /// The NIC's mapping of the run's first byte.
    view: *mut u8,
    backing: Backing,
    /// The file, its identity as `/proc/self/maps` shows it, and the run's offset in it.
    fd: RawFd,
    file: FileId,
    off: u64,
    /// The process that made it (a `fork()` child's copy of the table frees nothing).
    pid: u32,
}

// SAFETY: `view` is shared memory reached only through raw copies; the run is immutable.
unsafe impl Send for Run {}
// SAFETY: as above.
unsafe impl Sync for Run {}

impl Run {
    /// The file offset where the program's `addr` (inside the run) lives.
    fn off_of(&self, addr: usize) -> u64 {
        self.off + (addr - self.lo) as u64
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Backing::Memfd(_) = self.backing {
            if self.pid == std::process::id() {
                // SAFETY: the NIC's mapping of the memfd, made by `Table::move_pages`, used
                // by nobody now (every pin over the run is gone).
                unsafe { sys::munmap(self.view.cast(), self.len) };
            }
        }
        // An arena block gives its pages back (zeroed) when it drops, in its owner only.
    }
}

/// A run in the table, with a use count per page (the MRs over each page).
struct Entry {
    run: Arc<Run>,
    uses: Vec<u32>,
    /// Whether the program's view of the run was still the file's pages when last looked
    /// at; a run the program has left is never used for a new registration.
    attached: bool,
}

/// Every run of the process, and the mappings the pins strung together.
#[derive(Default)]
struct Table {
    entries: Vec<Entry>,
    /// The NIC-side mappings of pins across runs (address, length).
    strung: Vec<(usize, usize)>,
}

static TABLE: Mutex<Table> = Mutex::new(Table { entries: Vec::new(), strung: Vec::new() });

fn lock_table() -> MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// What one MR holds: the pages of the runs it uses, and where the NIC finds its first byte.
struct Pin {
    /// (run, first page, pages) for each piece, in address order.
    pieces: Vec<(Arc<Run>, usize, usize)>,
    at: *mut u8,
    /// The pin's own mapping when it spans runs (address, length).
    strung: Option<(usize, usize)>,
    pid: u32,
}

// SAFETY: as `Run`.
unsafe impl Send for Pin {}
// SAFETY: as `Run`.
unsafe impl Sync for Pin {}

impl Drop for Pin {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            // A fork child's inherited MR: the pages are the parent's business.
            return;
        }
        let _fork = ForkGuard::lock();
        let mut table = lock_table();
        if let Some((at, len)) = self.strung.take() {
            table.strung.retain(|&s| s != (at, len));
            // SAFETY: the pin's own mapping, which nothing uses once the MR is gone.
            unsafe { sys::munmap(at as *mut libc::c_void, len) };
        }
        for (run, first, pages) in self.pieces.drain(..) {
            table.unuse(&run, first, pages);
        }
        table.settle();
    }
}

impl Table {
    /// Moves (or finds moved) the pages of `addr..addr+len`; None where they cannot move.
    fn pin(
        &mut self,
        maps: &str,
        addr: usize,
        len: usize,
        arena: Option<&Arc<ReachArena>>,
    ) -> Option<Pin> {
        let vmas: Vec<Vma<'_>> = maps.lines().filter_map(Vma::parse).collect();
        let (lo, hi) = (addr & !(PAGE - 1), (addr + len).next_multiple_of(PAGE));
        // Runs the program has left (unmapped, or mapped something else over) are not used.
        for e in self.entries.iter_mut().filter(|e| e.attached) {
            let (a, b) = (lo.max(e.run.lo), hi.min(e.run.lo + e.run.len));
            if a < b && !maps_run(&vmas, &e.run, a, b) {
                e.attached = false;
            }
        }
        // The range in pieces: inside an attached run, or not moved yet.
        let mut pieces: Vec<(usize, usize, Option<usize>)> = Vec::new();
        let mut x = lo;
        while x < hi {
            let inside = self
                .entries
                .iter()
                .position(|e| e.attached && e.run.lo <= x && x < e.run.lo + e.run.len);
            let end = match inside {
                Some(i) => hi.min(self.entries[i].run.lo + self.entries[i].run.len),
                None => self
                    .entries
                    .iter()
                    .filter(|e| e.attached && e.run.lo > x)
                    .map(|e| e.run.lo)
                    .min()
                    .unwrap_or(hi)
                    .min(hi),
            };
            pieces.push((x, end, inside));
            x = end;
        }
        // Every new piece must be movable before anything moves.
        let stack = &pieces as *const _ as usize;
        let mut prots = Vec::new();
        for &(a, b, inside) in &pieces {
            if inside.is_none() {
                prots.push(movable(&vmas, a, b, stack)?);
            }
        }
        let mut prots = prots.into_iter();
        for piece in pieces.iter_mut() {
            if piece.2.is_none() {
                let prot = prots.next().expect("one per new piece");
                match move_pages(piece.0, piece.1, prot, arena) {
                    Some(run) => {
                        let pages = (piece.1 - piece.0) / PAGE;
                        self.entries.push(Entry { run, uses: vec![0; pages], attached: true });
                        piece.2 = Some(self.entries.len() - 1);
                    }
                    None => {
                        self.settle();
                        return None;
                    }
                }
            }
        }
        let mut pin = Pin {
            pieces: Vec::new(),
            at: std::ptr::null_mut(),
            strung: None,
            pid: std::process::id(),
        };
        for &(a, b, inside) in &pieces {
            let e = &mut self.entries[inside.expect("every piece has a run")];
            let first = (a - e.run.lo) / PAGE;
            let pages = (b - a) / PAGE;
            e.uses[first..first + pages].iter_mut().for_each(|u| *u += 1);
            pin.pieces.push((e.run.clone(), first, pages));
        }
        if let [(run, first, _)] = &pin.pieces[..] {
            // SAFETY: `addr` lies in the run's page `first` onwards; the view maps the run.
            pin.at = unsafe { run.view.add(first * PAGE + (addr - lo)) };
            return Some(pin);
        }
        match string(&pin.pieces, hi - lo) {
            Some(base) => {
                pin.strung = Some((base, hi - lo));
                self.strung.push((base, hi - lo));
                pin.at = (base + (addr - lo)) as *mut u8;
                Some(pin)
            }
            None => {
                for (run, first, pages) in std::mem::take(&mut pin.pieces) {
                    self.unuse(&run, first, pages);
                }
                self.settle();
                // Nothing left to free (and its drop would take the locks held here).
                std::mem::forget(pin);
                None
            }
        }
    }

    /// One MR fewer over `pages` pages of `run` from page `first`.
    fn unuse(&mut self, run: &Arc<Run>, first: usize, pages: usize) {
        if let Some(e) = self.entries.iter_mut().find(|e| Arc::ptr_eq(&e.run, run)) {
            e.uses[first..first + pages].iter_mut().for_each(|u| *u = u.saturating_sub(1));
        }
    }

    /// Runs no MR uses any more: the program's view of them gets private pages with the same
    /// bytes, and the run goes (its file pages given back).
    fn settle(&mut self) {
        if !self.entries.iter().any(|e| e.uses.iter().all(|&u| u == 0)) {
            return;
        }
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let strung = self.strung.clone();
        self.entries.retain(|e| {
            let unused = e.uses.iter().all(|&u| u == 0);
            if unused && !restore(&maps, &e.run, &strung) {
                // The program still maps some of its pages: never freed.
                std::mem::forget(e.run.clone());
            }
            !unused
        });
    }
}

/// Whether the program's view of `a..b` (inside `run`) is the run's file pages.
fn maps_run(vmas: &[Vma<'_>], run: &Run, a: usize, b: usize) -> bool {
    let mut x = a;
    for v in vmas {
        if v.hi <= x || x >= b {
            continue;
        }
        if v.lo > x || !v.shared || v.file != run.file || v.off_of(x) != run.off_of(x) {
            return false;
        }
        x = v.hi;
    }
    x >= b
}

/// The protection of `a..b` if its pages can move: private, not executable, not hugetlb, not
/// special, not the calling thread's stack (`stack` is an address in it), all of one
/// protection. None otherwise.
fn movable(vmas: &[Vma<'_>], a: usize, b: usize, stack: usize) -> Option<libc::c_int> {
    let mut x = a;
    let mut prot = None;
    for v in vmas {
        if v.hi <= x || x >= b {
            continue;
        }
        let special =
            v.name.starts_with('[') && v.name != "[heap]" && !v.name.starts_with("[anon:");
        let huge = v.name.contains("huge");
        if v.lo > x || v.shared || v.exec || special || huge || (v.lo <= stack && stack < v.hi) {
            return None;
        }
        let p = libc::PROT_READ | if v.write { libc::PROT_WRITE } else { 0 };
        if *prot.get_or_insert(p) != p || !v.read {
            return None;
        }
        x = v.hi;
    }
    if x < b {
        return None;
    }
    prot
}

/// Moves the program's pages `a..b` onto a new run: a block of `arena` (or a memfd when
/// there is none, or no room), filled with their bytes, then mapped over them. None, and
/// nothing changed, when a step fails.
fn move_pages(
    a: usize,
    b: usize,
    prot: libc::c_int,
    arena: Option<&Arc<ReachArena>>,
) -> Option<Arc<Run>> {
    let len = b - a;
    let (backing, fd, off, view) = match arena.and_then(|r| Some((r, r.allocate_pages(len)?))) {
        Some((r, block)) => {
            let (off, view) = (block.file_offset(), block.ptr());
            (Backing::Arena(block), r.fd(), off, view)
        }
        None => {
            let fd = memfd(len)?;
            // SAFETY: a new shared mapping of the memfd's `len` bytes, at an address the
            // kernel chooses.
            let view = unsafe {
                sys::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if view == libc::MAP_FAILED {
                return None;
            }
            // SAFETY: advice on the mapping just made: a fork child does not inherit it.
            unsafe { sys::madvise(view, len, libc::MADV_DONTFORK) };
            let raw = fd.as_raw_fd();
            (Backing::Memfd(fd), raw, 0, view.cast::<u8>())
        }
    };
    let file = file_id(fd)?;
    let run = Arc::new(Run { lo: a, len, view, backing, fd, file, off, pid: std::process::id() });
    // In chunks, each its own window, so a thread writing there waits for one chunk's copy.
    let mut done = 0;
    while done < len {
        let n = CHUNK.min(len - done);
        let (at, from) = (a + done, off + done as u64);
        let moved = window::moving(at, n, prot, || {
            // SAFETY: `at..at+n` is mapped readable (checked by `movable`) and `view + done`
            // starts `n` bytes of the new run's pages, which nothing else uses yet.
            unsafe { std::ptr::copy_nonoverlapping(at as *const u8, view.add(done), n) };
            // SAFETY: replaces the program's pages (whose bytes were just copied) with the
            // same bytes in the file; the program sees no change but where its pages live.
            let to = unsafe {
                sys::mmap(
                    at as *mut libc::c_void,
                    n,
                    prot,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    fd,
                    from as libc::off_t,
                )
            };
            to != libc::MAP_FAILED
        });
        if !moved {
            tracing::debug!(
                addr = at,
                len = n,
                "registered pages not moved: mmap over them failed"
            );
            if done > 0 && !private_copy(a, done, prot) {
                // The program still maps part of the run: its pages must never be freed.
                std::mem::forget(run);
            }
            return None;
        }
        done += n;
    }
    Some(run)
}

/// A memfd of `len` bytes, its pages reserved (so a full `/dev/shm` fails here, not by
/// `SIGBUS` later).
fn memfd(len: usize) -> Option<OwnedFd> {
    // SAFETY: a new descriptor, owned at once.
    let fd = unsafe { libc::memfd_create(c"softverbs-pinned".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is a new descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: the descriptor is open for the call.
    let rc = unsafe { libc::posix_fallocate(fd.as_raw_fd(), 0, len as libc::off_t) };
    (rc == 0).then_some(fd)
}

/// The file's identity as `/proc/self/maps` shows it: device (major, minor) and inode.
fn file_id(fd: RawFd) -> Option<FileId> {
    // SAFETY: fstat writes the zeroed struct it is given.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open; `st` is valid for writes.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some(FileId { major: libc::major(st.st_dev), minor: libc::minor(st.st_dev), ino: st.st_ino })
}

/// A mapping of `len` bytes that strings the pieces' pages together in order, for the NIC
/// (a registration across runs); its address, or None.
fn string(pieces: &[(Arc<Run>, usize, usize)], len: usize) -> Option<usize> {
    // SAFETY: a new reservation at an address the kernel chooses.
    let base = unsafe {
        sys::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    let base = base as usize;
    let mut at = base;
    for (run, first, pages) in pieces {
        let n = pages * PAGE;
        // SAFETY: maps the run's file pages over part of the reservation just made.
        let p = unsafe {
            sys::mmap(
                at as *mut libc::c_void,
                n,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                run.fd,
                (run.off + (first * PAGE) as u64) as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            // SAFETY: the reservation made above, used by nobody.
            unsafe { sys::munmap(base as *mut libc::c_void, len) };
            return None;
        }
        at += n;
    }
    // SAFETY: advice on the mapping just made: a fork child does not inherit it.
    unsafe { sys::madvise(base as *mut libc::c_void, len, libc::MADV_DONTFORK) };
    Some(base)
}

/// Gives the program private anonymous pages again wherever it still maps `run`'s file
/// pages (where it registered them, or where `mremap` moved them), with their bytes; the
/// NIC's own mappings of the file (the run's view, the arena, `strung`) are left alone.
///
/// It allocates nothing (a `fork()` child runs it before anything may touch the heap).
/// False if some of them could not be made private (the run's pages must then never be
/// freed).
fn restore(maps: &str, run: &Run, strung: &[(usize, usize)]) -> bool {
    let nic = run.view as usize as u64;
    let mut all = true;
    let vmas = maps.lines().filter_map(Vma::parse);
    for v in vmas.filter(|v| v.shared && v.file == run.file) {
        let ours = (v.lo as u64).wrapping_sub(v.off) == nic.wrapping_sub(run.off)
            || strung.iter().any(|&(s, l)| v.lo >= s && v.hi <= s + l);
        // A mapping of the whole reach file (the arena's own, or a peer view of this
        // device's own file) starts at offset 0, where no run lies; a program's view may
        // reach past the run (the kernel merges views of neighbouring runs into one).
        let whole = matches!(run.backing, Backing::Arena(_)) && v.off == 0;
        let (fa, fb) = (v.off.max(run.off), v.off_end().min(run.off + run.len as u64));
        if ours || whole || fa >= fb {
            continue;
        }
        all &= private_copy(v.lo + (fa - v.off) as usize, (fb - fa) as usize, v.prot());
    }
    all
}

/// Replaces `a..a+len` (mapped readable) with private anonymous pages holding its bytes,
/// protected with `prot`: a filled copy moved over it (a chunk at a time, each in its own
/// window). False if some of it could not be (those pages stay shared).
fn private_copy(a: usize, len: usize, prot: libc::c_int) -> bool {
    // SAFETY: a new private mapping at an address the kernel chooses.
    let tmp = unsafe {
        sys::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if tmp == libc::MAP_FAILED {
        tracing::warn!(addr = a, len, "deregistered pages stay shared: no memory for a copy");
        return false;
    }
    let tmp = tmp as usize;
    let mut done = 0;
    while done < len {
        let n = CHUNK.min(len - done);
        let (at, copy) = (a + done, (tmp + done) as *mut libc::c_void);
        let moved = window::moving(at, n, prot, || {
            // SAFETY: `at..at+n` is mapped readable (maps says so); `copy` is `n` bytes of
            // the new mapping, moved over the program's pages in one step.
            unsafe {
                std::ptr::copy_nonoverlapping(at as *const u8, copy.cast::<u8>(), n);
                libc::mprotect(copy, n, prot);
                let flags = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED;
                sys::mremap(copy, n, n, flags, at as *mut libc::c_void) != libc::MAP_FAILED
            }
        });
        if !moved {
            // SAFETY: what is left of the copy, not moved.
            unsafe { sys::munmap(copy, len - done) };
            tracing::warn!(addr = at, len = n, "deregistered pages stay shared: mremap failed");
            return false;
        }
        done += n;
    }
    true
}

// ---------------- fork ----------------

/// Serializes registrations and deregistrations against `fork()`: held from `fork`'s prepare
/// step to its end, so a child's table is whole.
struct ForkLock(UnsafeCell<libc::pthread_mutex_t>);

// SAFETY: a pthread mutex is made to be shared between threads.
unsafe impl Sync for ForkLock {}

static FORK_LOCK: ForkLock = ForkLock(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));

struct ForkGuard;

impl ForkGuard {
    fn lock() -> ForkGuard {
        // SAFETY: a static, initialized mutex.
        unsafe { libc::pthread_mutex_lock(FORK_LOCK.0.get()) };
        ForkGuard
    }
}

/// Holds off every moving window (and registration) for as long as it lives: for a test that
/// sets this process's `SIGSEGV` action itself, which a window open at the same time would
/// save and put back across it.
#[cfg(test)]
pub(crate) fn hold_windows() -> impl Drop {
    ForkGuard::lock()
}

impl Drop for ForkGuard {
    fn drop(&mut self) {
        // SAFETY: locked by this thread in `lock`.
        unsafe { libc::pthread_mutex_unlock(FORK_LOCK.0.get()) };
    }
}

fn fork_handlers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers three functions that stay valid for the process's life.
        unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    });
}

extern "C" fn prepare() {
    // SAFETY: a static, initialized mutex; released by `parent` or `child`.
    unsafe { libc::pthread_mutex_lock(FORK_LOCK.0.get()) };
}

extern "C" fn parent() {
    // SAFETY: locked by this thread in `prepare`.
    unsafe { libc::pthread_mutex_unlock(FORK_LOCK.0.get()) };
}

/// In the child (one thread, the table whole): every moved page becomes a private copy, so
/// nothing the child writes reaches its parent's pages nor the parent's writes the child's;
/// the table is forgotten (the runs are the parent's; their NIC mappings are not here).
extern "C" fn child() {
    {
        let mut table = lock_table();
        if !table.entries.is_empty() {
            // The child's heap may lie on pages still shared with the parent until they are
            // restored: nothing here allocates.
            let maps = MapsText::read();
            for e in &table.entries {
                restore(maps.text(), &e.run, &[]);
            }
        }
        let entries = std::mem::take(&mut table.entries);
        std::mem::forget(entries);
        table.strung.clear();
    }
    // SAFETY: locked by the forking thread in `prepare`; this is that thread's copy.
    unsafe { libc::pthread_mutex_unlock(FORK_LOCK.0.get()) };
}

// ---------------- /proc/self/maps ----------------

/// `/proc/self/maps` read with no allocation (into a mapping of its own, up to 8 MiB:
/// 80 000 lines), for a `fork()` child.
struct MapsText {
    buf: *mut u8,
    len: usize,
}

impl MapsText {
    const CAP: usize = 8 << 20;

    fn read() -> MapsText {
        // SAFETY: a new private mapping, pages made only as they are written.
        let buf = unsafe {
            sys::mmap(
                std::ptr::null_mut(),
                Self::CAP,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if buf == libc::MAP_FAILED {
            return MapsText { buf: std::ptr::null_mut(), len: 0 };
        }
        let buf = buf.cast::<u8>();
        let mut len = 0;
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        let fd =
            unsafe { libc::open(c"/proc/self/maps".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd >= 0 {
            while len < Self::CAP {
                // SAFETY: reads into the mapping's room left.
                let n = unsafe { libc::read(fd, buf.add(len).cast(), Self::CAP - len) };
                if n <= 0 {
                    break;
                }
                len += n as usize;
            }
            // SAFETY: opened above.
            unsafe { libc::close(fd) };
        }
        // A line cut at the end is dropped.
        // SAFETY: `len` bytes were read into `buf`.
        let read = unsafe { std::slice::from_raw_parts(buf, len) };
        let len = read.iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1);
        MapsText { buf, len }
    }

    fn text(&self) -> &str {
        if self.buf.is_null() {
            return "";
        }
        // SAFETY: `len` bytes read into the mapping, which lives as long as `self`.
        let bytes = unsafe { std::slice::from_raw_parts(self.buf, self.len) };
        std::str::from_utf8(bytes).unwrap_or("")
    }
}

impl Drop for MapsText {
    fn drop(&mut self) {
        if !self.buf.is_null() {
            // SAFETY: the mapping made in `read`.
            unsafe { sys::munmap(self.buf.cast(), Self::CAP) };
        }
    }
}

/// A file as `/proc/self/maps` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    major: u32,
    minor: u32,
    ino: u64,
}

/// One line of `/proc/self/maps`: `lo-hi perms offset major:minor inode [name]`.
#[derive(Debug)]
struct Vma<'a> {
    lo: usize,
    hi: usize,
    read: bool,
    write: bool,
    exec: bool,
    shared: bool,
    off: u64,
    file: FileId,
    name: &'a str,
}

impl<'a> Vma<'a> {
    fn parse(line: &'a str) -> Option<Vma<'a>> {
        let mut f = line.split_ascii_whitespace();
        let (lo, hi) = f.next()?.split_once('-')?;
        let perms = f.next()?.as_bytes();
        let off = u64::from_str_radix(f.next()?, 16).ok()?;
        let (major, minor) = f.next()?.split_once(':')?;
        let ino = f.next()?.parse().ok()?;
        let name = f.next().unwrap_or("");
        Some(Vma {
            lo: usize::from_str_radix(lo, 16).ok()?,
            hi: usize::from_str_radix(hi, 16).ok()?,
            read: perms.first() == Some(&b'r'),
            write: perms.get(1) == Some(&b'w'),
            exec: perms.get(2) == Some(&b'x'),
            shared: perms.get(3) == Some(&b's'),
            off,
            file: FileId {
                major: u32::from_str_radix(major, 16).ok()?,
                minor: u32::from_str_radix(minor, 16).ok()?,
                ino,
            },
            name,
        })
    }

    fn off_of(&self, addr: usize) -> u64 {
        self.off + (addr - self.lo) as u64
    }

    fn off_end(&self) -> u64 {
        self.off + (self.hi - self.lo) as u64
    }

    fn prot(&self) -> libc::c_int {
        let mut p = libc::PROT_NONE;
        if self.read {
            p |= libc::PROT_READ;
        }
        if self.write {
            p |= libc::PROT_WRITE;
        }
        p
    }
}

mod sys;
#[cfg(test)]
mod tests;
mod window;
