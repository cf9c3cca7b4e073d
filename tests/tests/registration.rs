//! Registration as the kernel pins (issue 29, item 13): `ibv_reg_mr` over memory that is not
//! mapped — or not mapped as the access flags need — is refused with `EFAULT` naming the
//! address, and length 0 with `EINVAL`, as `ib_umem_get` refuses them under rxe and mlx5; so
//! no peer's WRITE can reach memory the NIC could not pin and kill its owner with SIGSEGV. A
//! valid registration of program memory still works, with direct reach on and off, and in the
//! simulator. (`cabi/ibverbs/tests/reg_mr.rs` holds the same from C.)

use std::time::Duration;

use softverbs_sim::conn::ConnOpts;
use softverbs_sim::world::{LinkParams, SimWorld};
use softverbs_tests::RcPair;
use verbs_api::*;

const WAIT: Duration = Duration::from_secs(20);
const PAGE: usize = 4096;

/// `pages` pages of fresh anonymous memory with protection `prot`, unmapped when dropped.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(pages: usize, prot: i32) -> Mapping {
        let len = pages * PAGE;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap");
        Mapping { ptr: ptr.cast(), len }
    }
    fn at(&self, page: usize) -> *mut u8 {
        self.ptr.wrapping_add(page * PAGE)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: this mapping's own range; no MR over it outlives the test that made it.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// `ibv_reg_mr` of `len` bytes at `addr` on `pd`: the error, or None when it was registered.
fn refused(pd: &ProtectionDomain, addr: *mut u8, len: usize, access: AccessFlags) -> Option<Error> {
    // SAFETY: every range this test registers is either refused or a live `Mapping` (or the
    // pair's own buffer) that outlives the MR, which is dropped at once.
    unsafe { pd.reg_mr_raw(addr, len, access) }.err()
}

/// What every backend must refuse, and what it must take.
fn refusals(pd: &ProtectionDomain) {
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let e = refused(pd, 0x10000 as *mut u8, PAGE, rw).expect("0x10000 is not mapped");
    assert_eq!(e.errno, Errno::Fault, "{e}");
    assert!(e.message.contains("0x10000"), "the error names the address: {e}");
    let e = refused(pd, std::ptr::null_mut(), PAGE, rw).expect("NULL");
    assert_eq!(e.errno, Errno::Fault, "{e}");

    let two = Mapping::new(2, libc::PROT_READ | libc::PROT_WRITE);
    let e = refused(pd, two.at(0), 0, rw).expect("length 0");
    assert_eq!(e.errno, Errno::Inval, "{e}");
    let Err(e) = pd.reg_mr(0, rw) else { panic!("length 0 of owned memory was registered") };
    assert_eq!(e.errno, Errno::Inval, "{e}");

    // A range that runs off the end of its mapping: the first byte past it is named.
    // SAFETY: the second page of `two`, which nothing uses.
    assert_eq!(unsafe { libc::munmap(two.at(1).cast(), PAGE) }, 0);
    let e = refused(pd, two.at(0).wrapping_add(100), PAGE, rw).expect("half unmapped");
    assert_eq!(e.errno, Errno::Fault, "{e}");
    assert!(e.message.contains(&format!("{:#x}", two.at(1) as u64)), "{e}");
    assert!(refused(pd, two.at(0), PAGE, rw).is_none(), "the mapped page alone");

    // Protection: a read-only page for an MR that may be written; a page with no access.
    let ro = Mapping::new(1, libc::PROT_READ);
    let e = refused(pd, ro.at(0), PAGE, AccessFlags::LOCAL_WRITE).expect("read-only, writable MR");
    assert_eq!(e.errno, Errno::Fault, "{e}");
    assert!(refused(pd, ro.at(0), PAGE, AccessFlags::REMOTE_READ).is_none(), "read-only MR");
    let none = Mapping::new(1, libc::PROT_NONE);
    let e = refused(pd, none.at(0), PAGE, AccessFlags::REMOTE_READ).expect("PROT_NONE");
    assert_eq!(e.errno, Errno::Fault, "{e}");
}

#[test]
fn unmapped_memory_and_length_0_are_refused_and_program_memory_still_works_reach_on_and_off() {
    for reach in [true, false] {
        let opts = ConnOpts { retry_cnt: 2, timeout: 12, ..ConnOpts::default() };
        let cap = QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let p = RcPair::new(&format!("reg_pin_{reach}"), cap, PAGE, &opts, |s| s.set_reach(reach));
        refusals(&p.b.pd);

        // The responder's own memory, registered raw: a peer's WRITE lands there.
        let buf = Mapping::new(1, libc::PROT_READ | libc::PROT_WRITE);
        let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        // SAFETY: `buf` outlives `mr`, dropped before it at the end of this iteration.
        let mr = unsafe { p.b.pd.reg_mr_raw(buf.at(0), PAGE, all) }.expect("a mapped page");
        assert_eq!((mr.addr(), mr.len()), (buf.at(0) as u64, PAGE));
        p.a.mr.write(0, b"pinned and reached").unwrap();
        let sges = [p.a.mr.sge(0, 18)];
        let wr = SendWr {
            wr_id: 5,
            sg_list: &sges,
            opcode: WrOpcode::RdmaWrite,
            send_flags: SendFlags::SIGNALED,
            rdma: RdmaTarget { remote_addr: mr.addr() + 100, rkey: mr.rkey() },
            ..Default::default()
        };
        p.a.qp.post_send(&[wr]).expect("post_send");
        let wc = p.a.cq.poll_n(1, WAIT).expect("a completion")[0];
        assert_eq!((wc.wr_id, wc.status, wc.byte_len), (5, WcStatus::Success, 18), "{wc:?}");
        // SAFETY: the page is mapped and the WRITE has completed.
        let landed = unsafe { std::slice::from_raw_parts(buf.at(0).add(100), 18) };
        assert_eq!(landed, b"pinned and reached", "reach {reach}");
        drop(mr);
    }
}

#[test]
fn the_simulator_refuses_as_the_kernel_does() {
    let world = SimWorld::mesh(3, 1, LinkParams::default());
    let pd = world.context(0).unwrap().alloc_pd().unwrap();
    refusals(&pd);
}

/// Registered pages stay the NIC's until `ibv_dereg_mr`, as pinned pages do (issue 29, item
/// 13; `docs/decisions.md`, "Registered pages on shared memory"): after the program unmaps
/// its registered buffer, a peer's WRITE still completes with success into the MR's pages and
/// a READ returns it; and the program's raw memory is reached as owned MRs are (with reach
/// on, the WRITE and READ are reached).
#[test]
fn registered_program_memory_outlives_its_munmap_and_is_reached_reach_on_and_off() {
    for reach in [true, false] {
        let opts = ConnOpts { retry_cnt: 2, timeout: 12, ..ConnOpts::default() };
        let cap = QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let p =
            RcPair::new(&format!("reg_munmap_{reach}"), cap, PAGE, &opts, |s| s.set_reach(reach));
        let buf = Mapping::new(4, libc::PROT_READ | libc::PROT_WRITE);
        let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        // SAFETY: the MR's pages are moved onto shared memory the MR holds (crate::pinned),
        // so they outlive the program's mapping, which this test unmaps.
        let mr = unsafe { p.b.pd.reg_mr_raw(buf.at(1).wrapping_add(10), 2 * PAGE, all) }
            .expect("mapped pages");
        let reached = || p.soft.stats("softverbs0").unwrap().nic.reached;
        let before = reached();
        // SAFETY: the test's own mapping; `forget` below keeps it from being unmapped again.
        assert_eq!(unsafe { libc::munmap(buf.ptr.cast(), buf.len) }, 0);
        std::mem::forget(buf);
        p.a.mr.write(0, b"after the munmap").unwrap();
        let post = |id: u64, opcode: WrOpcode, local: usize, remote: u64| {
            let sges = [p.a.mr.sge(local, 16)];
            let wr = SendWr {
                wr_id: id,
                sg_list: &sges,
                opcode,
                send_flags: SendFlags::SIGNALED,
                rdma: RdmaTarget { remote_addr: remote, rkey: mr.rkey() },
                ..Default::default()
            };
            p.a.qp.post_send(&[wr]).expect("post_send");
            p.a.cq.poll_n(1, WAIT).expect("a completion")[0]
        };
        let wc = post(7, WrOpcode::RdmaWrite, 0, mr.addr() + PAGE as u64);
        assert_eq!((wc.wr_id, wc.status, wc.byte_len), (7, WcStatus::Success, 16), "{wc:?}");
        let wc = post(8, WrOpcode::RdmaRead, 100, mr.addr() + PAGE as u64);
        assert_eq!((wc.wr_id, wc.status, wc.byte_len), (8, WcStatus::Success, 16), "{wc:?}");
        let mut back = [0u8; 16];
        p.a.mr.read(100, &mut back).unwrap();
        assert_eq!(&back, b"after the munmap", "reach {reach}");
        let mut there = [0u8; 16];
        mr.read(PAGE, &mut there).unwrap();
        assert_eq!(&there, b"after the munmap", "the MR's own pages, reach {reach}");
        assert_eq!(reached() - before, if reach { 2 } else { 0 }, "reach {reach}");
        mr.dereg().expect("ibv_dereg_mr");
    }
}
