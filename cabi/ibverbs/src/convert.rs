//! Conversions between libibverbs' C structs and softverbs' values, beneath the rooms: access
//! flags, work completions, gather lists and receive-WR chains, async events.

use std::ffi::{c_int, c_void};

use softverbs_cabi_abi::*;
use verbs_api::{
    AccessFlags, AsyncElement, AsyncEvent, IbvEnum, RecvWr, Sge, WcFlags, WorkCompletion,
};

use crate::object::{lookup, CQS, QPS, SRQS};
use crate::{refuse, refuse_err};

/// The most SGEs one work request may carry here (the soft NIC's `max_sge` is 32).
pub(crate) const MAX_SGE: usize = 32;

/// The access flags softverbs enforces, from `enum ibv_access_flags` (`IBV_ACCESS_MW_BIND`
/// included): the optional bits (`IBV_ACCESS_RELAXED_ORDERING` and up, which a device may
/// ignore) and `IBV_ACCESS_HUGETLB` (a hint) are dropped; zero-based MRs are refused; the
/// `IBV_ACCESS_ON_DEMAND` bit is dropped here (the caller registers on demand).
/// `IBV_ACCESS_FLUSH_GLOBAL` is taken; `IBV_ACCESS_FLUSH_PERSISTENT` is `EINVAL`, as rxe
/// refuses it for memory that is not persistent memory (none here is).
pub(crate) fn access(what: &str, flags: u32) -> Result<AccessFlags, c_int> {
    const OPTIONAL_FIRST: u32 = 1 << 20;
    const IGNORED: u32 = 0x80;
    const FLUSH_PERSISTENT: u32 = 1 << 9;
    if flags & FLUSH_PERSISTENT != 0 {
        let why =
            "IBV_ACCESS_FLUSH_PERSISTENT: no memory here is persistent memory (rxe refuses it too)";
        return Err(refuse(what, libc::EINVAL, why));
    }
    let f = flags & (OPTIONAL_FIRST - 1) & !IGNORED;
    // IBV_ACCESS_ON_DEMAND is the caller's to act on (`reg_mr`), not a right.
    const ON_DEMAND: u32 = 0x40;
    if f & !(0x1f | AccessFlags::FLUSH_GLOBAL.bits() | ON_DEMAND) != 0 {
        return Err(refuse(
            what,
            libc::EOPNOTSUPP,
            &format!("access flags {flags:#x}: zero-based MRs are not supported"),
        ));
    }
    Ok(AccessFlags::from_bits_truncate(f))
}

/// `struct ibv_wc` of a softverbs work completion.
#[inline]
pub(crate) fn wc_c(w: &WorkCompletion) -> ibv_wc {
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status.to_c_int(),
        opcode: w.opcode.to_c_int(),
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        // The union's other member, `invalidated_rkey`, is in host order.
        imm_data: match w.wc_flags.contains(WcFlags::WITH_INV) {
            true => w.imm_data,
            false => w.imm_data.to_be(),
        },
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags.bits(),
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

/// Convert a C gather/scatter list into `buf`; None (with a log line) if too long or NULL.
#[inline]
pub(crate) fn sges<'a>(
    what: &str,
    list: *const ibv_sge,
    n: c_int,
    buf: &'a mut [Sge; MAX_SGE],
) -> Option<&'a [Sge]> {
    if n < 0 || n as usize > MAX_SGE || (n > 0 && list.is_null()) {
        refuse(what, libc::EINVAL, &format!("num_sge {n}: at most {MAX_SGE}, and a list"));
        return None;
    }
    for (i, s) in buf.iter_mut().enumerate().take(n as usize) {
        // SAFETY: the caller's list has num_sge entries.
        let c = unsafe { &*list.add(i) };
        *s = Sge { addr: c.addr, length: c.length, lkey: c.lkey };
    }
    Some(&buf[..n as usize])
}

/// Post a chain of receive WRs through `post` one by one; on failure `bad` names the WR.
#[inline]
pub(crate) fn post_recv_chain(
    what: &str,
    mut wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    post: impl Fn(&[RecvWr<'_>]) -> verbs_api::Result<()>,
) -> c_int {
    let mut buf = [Sge::default(); MAX_SGE];
    while !wr.is_null() {
        // SAFETY: the caller's WR chain.
        let w = unsafe { &*wr };
        let rc = match sges(what, w.sg_list, w.num_sge, &mut buf) {
            Some(sg) => match post(&[RecvWr { wr_id: w.wr_id, sg_list: sg }]) {
                Ok(()) => 0,
                Err(e) => refuse_err(what, &e),
            },
            None => libc::EINVAL,
        };
        if rc != 0 {
            if !bad.is_null() {
                // SAFETY: the caller's out pointer.
                unsafe { *bad = wr };
            }
            return rc;
        }
        wr = w.next;
    }
    0
}

/// `enum ibv_event_type` and the element of a softverbs async event.
pub(crate) fn async_event_c(ev: &AsyncEvent) -> (c_int, *mut c_void) {
    let ty = ev.event_type.to_c_int();
    let el = match ev.element {
        AsyncElement::Qp(n) => lookup(&QPS, n),
        AsyncElement::Cq(id) => lookup(&CQS, id),
        AsyncElement::Srq(id) => lookup(&SRQS, id),
        AsyncElement::Port(p) => p as usize,
        AsyncElement::Device => 0,
    };
    (ty, el as *mut c_void)
}
