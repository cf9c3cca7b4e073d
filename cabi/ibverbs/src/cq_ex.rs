//! Extended CQs (`ibv_create_cq_ex`): the polling entry points of `struct ibv_cq_ex` that the
//! inline `ibv_start_poll`, `ibv_next_poll`, `ibv_end_poll` and `ibv_wc_read_*` call. Each poll
//! takes one completion into the CQ; the readers read that one.
//!
//! As for `ibv_poll_cq`, libibverbs leaves serialising one CQ's polling to the program, so the
//! current completion is kept unlocked in the CQ.

use std::ffi::{c_int, c_void};

use verbs_api::{IbvEnum, WorkCompletion};

use crate::convert::wc_c;
use crate::verbs::{cq_of, make_cq};
use softverbs_cabi_abi::*;

/// The completion the last start/next poll took.
///
/// # Safety
/// `q` is a live softverbs CQ (its box begins with the `ibv_cq_ex`); polling is serialised.
unsafe fn current<'a>(q: *mut ibv_cq_ex) -> &'a WorkCompletion {
    // SAFETY: the caller's contract.
    unsafe { &*(*(q as *const crate::verbs::Cq)).current_ptr() }
}

/// Take the next completion: 0, `ENOENT` when there is none, `EINVAL` for a bad CQ.
unsafe fn take(q: *mut ibv_cq_ex, what: &str) -> c_int {
    let Some(cq) = cq_of(what, q as *mut ibv_cq) else { return libc::EINVAL };
    let mut wc = [WorkCompletion::default()];
    match cq.cq.poll(&mut wc) {
        Ok(1) => {
            // SAFETY: polling is serialised by the program (libibverbs' rule).
            unsafe {
                *cq.current_ptr() = wc[0];
                (*q).status = wc[0].status.to_c_int();
                (*q).wr_id = wc[0].wr_id;
            }
            0
        }
        Ok(_) => libc::ENOENT,
        Err(e) => crate::refuse_err(what, &e),
    }
}

unsafe extern "C" fn start_poll(q: *mut ibv_cq_ex, attr: *mut c_void) -> c_int {
    // `struct ibv_poll_cq_attr` is one `comp_mask`, which must be 0.
    // SAFETY: the caller's attr (NULL is refused).
    if attr.is_null() || unsafe { *(attr as *const u32) } != 0 {
        return crate::refuse("ibv_start_poll", libc::EINVAL, "poll_cq_attr NULL or comp_mask set");
    }
    // SAFETY: called through the CQ's own pointer.
    unsafe { take(q, "ibv_start_poll") }
}

unsafe extern "C" fn next_poll(q: *mut ibv_cq_ex) -> c_int {
    // SAFETY: as start_poll.
    unsafe { take(q, "ibv_next_poll") }
}

unsafe extern "C" fn end_poll(_q: *mut ibv_cq_ex) {}

macro_rules! reader {
    ($name:ident -> $t:ty, |$w:ident| $e:expr) => {
        unsafe extern "C" fn $name(q: *mut ibv_cq_ex) -> $t {
            // SAFETY: called through the CQ's own pointer, after a successful poll.
            let $w = wc_c(unsafe { current(q) });
            $e
        }
    };
}

reader!(read_opcode -> c_int, |w| w.opcode);
reader!(read_vendor_err -> u32, |w| w.vendor_err);
reader!(read_byte_len -> u32, |w| w.byte_len);
reader!(read_imm_data -> u32, |w| w.imm_data);
reader!(read_qp_num -> u32, |w| w.qp_num);
reader!(read_src_qp -> u32, |w| w.src_qp);
reader!(read_wc_flags -> u32, |w| w.wc_flags);
reader!(read_slid -> u32, |w| w.slid as u32);
reader!(read_sl -> u8, |w| w.sl);
reader!(read_dlid_path_bits -> u8, |w| w.dlid_path_bits);

/// Fill the polling entry points; those for fields softverbs does not give (timestamps, VLAN,
/// flow tag, tag matching) stay NULL, as `ibv_create_cq_ex` refuses to be asked for them.
pub(crate) fn fill(c: &mut ibv_cq_ex) {
    c.start_poll = Some(start_poll);
    c.next_poll = Some(next_poll);
    c.end_poll = Some(end_poll);
    c.read_opcode = Some(read_opcode);
    c.read_vendor_err = Some(read_vendor_err);
    c.read_byte_len = Some(read_byte_len);
    c.read_imm_data = Some(read_imm_data);
    c.read_qp_num = Some(read_qp_num);
    c.read_src_qp = Some(read_src_qp);
    c.read_wc_flags = Some(read_wc_flags);
    c.read_slid = Some(read_slid);
    c.read_sl = Some(read_sl);
    c.read_dlid_path_bits = Some(read_dlid_path_bits);
}

/// `verbs_context.create_cq_ex`, behind the inline `ibv_create_cq_ex`: the standard completion
/// fields only (no timestamps, VLAN, flow tag or tag matching; `EOPNOTSUPP` for those), no
/// creation flags or parent domain.
pub(crate) unsafe extern "C" fn create_cq_ex(
    c: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    const W: &str = "ibv_create_cq_ex";
    if attr.is_null() {
        return crate::refuse_null(W, libc::EINVAL, "cq_attr is NULL");
    }
    // SAFETY: checked non-NULL; the caller's struct.
    let a = unsafe { &*attr };
    // IBV_WC_EX_WITH_BYTE_LEN .. IBV_WC_EX_WITH_DLID_PATH_BITS.
    if a.wc_flags & !0x7f != 0 || (a.comp_mask & 1 != 0 && a.flags != 0) || a.comp_mask & !1 != 0 {
        return crate::refuse_null(
            W,
            libc::EOPNOTSUPP,
            &format!(
                "wc_flags {:#x}, comp_mask {:#x}: softverbs has the standard completion fields \
                 only (no timestamps, VLAN, flow tag, tag matching, flags or parent domain)",
                a.wc_flags, a.comp_mask
            ),
        );
    }
    let cqe = a.cqe.min(i32::MAX as u32) as c_int;
    let p = make_cq(W, c, cqe, a.cq_context, a.channel, a.comp_vector as c_int) as *mut ibv_cq_ex;
    if !p.is_null() {
        // SAFETY: a CQ just made, not yet seen by the program.
        fill(unsafe { &mut *p });
    }
    p
}
