//! The responder's rights: the rules an RDMA WRITE, READ or atomic must pass before the
//! responder touches the memory it names, written once. The packet responder (`resp`: RC
//! WRITE, READ and atomic, UC WRITE) runs them on each request's first packet, and direct reach
//! (`reach`) runs the same ones over the facts a responder publishes in its reach file, which
//! the shared-memory layer (`wire::reach`) only reads and hands over. rxe splits them between
//! `check_op_valid` (the QP's access flags), `check_resource` (READ/atomic resources) and
//! `check_rkey` (`lookup_mr`: key, PD, access; `mr_check_range`: range).
//!
//! [`check`] applies them in one order, each failure with the NAK it has always had: an invalid
//! request NAK for a request the QP cannot take at all (no READ/atomic resources, a misaligned
//! atomic), a remote access error NAK for one it may not take on this memory (the QP's access
//! flag, then the MR's key, PD, range and access; IBA 9.9.3, class C; rxe's
//! `RESPST_ERR_RKEY_VIOLATION`). A new responder rule goes into [`check`], with what the
//! requester says in [`Request`] and what the responder knows in [`QpRights`]: every path that
//! executes a request runs it then.

use verbs_api::{AccessFlags, FlushType};

use super::mr::{DmaError, Mr, MrTable, PdId};
use super::mw::{is_mw_key, Mw, MwTable};
use super::qp::Qp;
use crate::packet::NakCode;

/// The remote operations that name the responder's memory, each with the access right it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteOp {
    /// RDMA WRITE (with or without immediate): `IBV_ACCESS_REMOTE_WRITE`.
    Write,
    /// RDMA READ: `IBV_ACCESS_REMOTE_READ`.
    Read,
    /// Compare-and-swap or fetch-and-add: `IBV_ACCESS_REMOTE_ATOMIC`.
    Atomic,
    /// ATOMIC WRITE (IBA 1.5): `IBV_ACCESS_REMOTE_WRITE`, as rxe's `check_op_valid` and
    /// `check_rkey` ask.
    AtomicWrite,
    /// FLUSH (IBA 1.5) of the `placement` types asked for, of the request's range or of the
    /// whole MR (`whole_mr`, `IBV_FLUSH_MR`: the range is not checked): `IBV_ACCESS_FLUSH_GLOBAL`
    /// for global visibility; persistence no QP or MR here can grant.
    Flush {
        /// The FETH's placement type.
        placement: FlushType,
        /// Selectivity `IBV_FLUSH_MR`.
        whole_mr: bool,
    },
}

impl RemoteOp {
    /// The access right it needs, of the QP (`qp_access_flags`) and of the MR.
    #[inline]
    pub fn need(self) -> AccessFlags {
        match self {
            RemoteOp::Write => AccessFlags::REMOTE_WRITE,
            RemoteOp::Read => AccessFlags::REMOTE_READ,
            RemoteOp::Atomic => AccessFlags::REMOTE_ATOMIC,
            RemoteOp::AtomicWrite => AccessFlags::REMOTE_WRITE,
            RemoteOp::Flush { placement, .. } => match placement.contains(FlushType::GLOBAL) {
                true => AccessFlags::FLUSH_GLOBAL,
                false => AccessFlags::empty(),
            },
        }
    }
}

/// What a request asks of the responder's memory: its RETH (or AtomicETH), as a packet
/// carries it or as a requester doing direct reach states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The operation.
    pub op: RemoteOp,
    /// The R_Key.
    pub rkey: u32,
    /// The first byte's address (iova).
    pub va: u64,
    /// Bytes (the RETH's DMA length; 8 for an atomic).
    pub len: u64,
}

/// What the responder's QP contributes to the rules.
#[derive(Clone, Copy, Debug)]
pub struct QpRights {
    /// `qp_access_flags`.
    pub access: AccessFlags,
    /// Its PD: an MR of another PD is not this QP's to grant.
    pub pd: PdId,
    /// `max_dest_rd_atomic`: READs and atomics it may have in hand.
    pub max_dest_rd_atomic: u32,
}

impl QpRights {
    /// A QP of this engine's.
    #[inline]
    pub(crate) fn of(qp: &Qp) -> QpRights {
        QpRights {
            access: qp.attr.qp_access_flags,
            pd: qp.pd,
            max_dest_rd_atomic: u32::from(qp.attr.max_dest_rd_atomic),
        }
    }
}

/// What an MR contributes to the rules, from this engine's MR table or from a slot a peer
/// publishes (raw facts, no memory).
#[derive(Clone, Copy, Debug)]
pub struct MrRights {
    /// Its key (`lkey` and `rkey`).
    pub key: u32,
    /// Its PD.
    pub pd: PdId,
    /// The rights it was registered with.
    pub access: AccessFlags,
    /// The iova of its first byte.
    pub iova: u64,
    /// Its length in bytes.
    pub len: u64,
}

impl MrRights {
    /// A memory window bound to `mr`, as the rules see it (rxe's `rxe_lookup_mw`): its own
    /// key, PD, access and bounds (from 0 if it is zero-based), and how far its first byte is
    /// into `mr`.
    #[inline]
    pub(crate) fn of_window(w: &Mw, mr: &Mr) -> (MrRights, u64) {
        let iova = if w.zero_based { 0 } else { w.addr };
        let rights = MrRights { key: w.key, pd: w.pd, access: w.access, iova, len: w.length };
        (rights, w.addr - mr.iova)
    }

    /// An MR of this engine's table.
    #[inline]
    pub(crate) fn of(mr: &Mr) -> MrRights {
        MrRights {
            key: mr.key,
            pd: mr.pd,
            access: mr.access,
            iova: mr.iova,
            len: mr.memory.len() as u64,
        }
    }
}

/// What the responder's rules (`rights::check`) grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// The request's bytes start this many bytes into the MR.
    At(u64),
    /// A zero-length READ or WRITE: nothing to touch, and no key to check (C9-88; rxe's
    /// `check_rkey` sets no MR for it).
    Nothing,
}

/// The responder's rules for `req` on a QP with `qp`'s rights, where `mr` is what the request's
/// R_Key names (None: nothing). In order:
///
/// 1. A READ or atomic needs responder resources (`max_dest_rd_atomic` > 0; rxe's
///    `check_resource`): invalid request.
/// 2. An atomic's address is 8-byte aligned (rxe's `RESPST_ERR_MISALIGNED_ATOMIC`): invalid
///    request.
/// 3. A zero-length READ or WRITE is granted with no further check (C9-88).
/// 4. The QP allows the operation remotely (`qp_access_flags`; rxe's `check_op_valid` →
///    `check_qp_attr_access`, which rxe makes before rule 1 and answers with an invalid
///    request NAK): remote access error, as softverbs has always answered it.
/// 5. The MR's key, PD, range and access ([`check_mr`]): remote access error. A FLUSH of the
///    whole MR is held to the key, PD and access only (rxe's `check_rkey` skips the range).
/// 6. An ATOMIC WRITE's address is 8-byte aligned (rxe's `rxe_mr_do_atomic_write`, after
///    the key: `RESPST_ERR_MISALIGNED_ATOMIC`): invalid request.
///
/// An ATOMIC WRITE needs responder resources as a READ does (rule 1; rxe's `check_resource`),
/// a FLUSH none; neither is a zero-length shortcut (rule 3). A persistent FLUSH is refused at
/// rule 4: no QP here takes one (rxe answers invalid request for a QP without
/// `IBV_ACCESS_FLUSH_PERSISTENT`, remote access error for one with it, whose MRs can never
/// have it on memory that is not persistent).
#[inline]
pub fn check(qp: &QpRights, req: &Request, mr: Option<&MrRights>) -> Result<Grant, NakCode> {
    let rd_atomic = !matches!(req.op, RemoteOp::Write | RemoteOp::Flush { .. });
    if rd_atomic && qp.max_dest_rd_atomic == 0 {
        return Err(NakCode::InvalidRequest);
    }
    if req.op == RemoteOp::Atomic && !req.va.is_multiple_of(8) {
        return Err(NakCode::InvalidRequest);
    }
    if req.len == 0 && matches!(req.op, RemoteOp::Write | RemoteOp::Read) {
        return Ok(Grant::Nothing);
    }
    let need = req.op.need();
    if !qp.access.contains(need) {
        return Err(NakCode::RemoteAccessError);
    }
    let (va, len) = match (req.op, mr) {
        (RemoteOp::Flush { placement, .. }, _) if placement.contains(FlushType::PERSISTENT) => {
            return Err(NakCode::RemoteAccessError);
        }
        (RemoteOp::Flush { whole_mr: true, .. }, Some(mr)) => (mr.iova, mr.len),
        _ => (req.va, req.len),
    };
    match check_mr(mr, req.rkey, qp.pd, va, len, need) {
        Ok(_) if req.op == RemoteOp::AtomicWrite && !va.is_multiple_of(8) => {
            Err(NakCode::InvalidRequest)
        }
        Ok(at) => Ok(Grant::At(at)),
        Err(_) => Err(NakCode::RemoteAccessError),
    }
}

/// The MR's part of the rules (rxe's `lookup_mr` and `mr_check_range`): `rkey` names `mr`, which
/// belongs to the QP's PD `pd`, holds `[va, va+len)` and was registered with `need`. The offset
/// of `va` in the MR, or what failed first. A request's later packets are held to this part
/// alone (rxe's `rxe_recheck_mr`): the MR may have been deregistered since the first.
#[inline]
pub fn check_mr(
    mr: Option<&MrRights>,
    rkey: u32,
    pd: PdId,
    va: u64,
    len: u64,
    need: AccessFlags,
) -> Result<u64, DmaError> {
    let mr = match mr {
        Some(mr) if mr.key == rkey => mr,
        _ => return Err(DmaError::BadKey),
    };
    if mr.pd != pd {
        return Err(DmaError::WrongPd);
    }
    let start = va.checked_sub(mr.iova).ok_or(DmaError::Bounds)?;
    match start.checked_add(len) {
        Some(end) if end <= mr.len => {}
        _ => return Err(DmaError::Bounds),
    }
    if !mr.access.contains(need) {
        return Err(DmaError::Access);
    }
    Ok(start)
}

/// Whether one SEND or RDMA WRITE packet carries what its place in the message allows at a
/// path MTU of `mtu` bytes (IBA 9.7.5.1.2 length checks; rxe's `check_length`): a FIRST or
/// MIDDLE packet exactly one MTU, a LAST packet 1 to MTU bytes, an ONLY packet at most one
/// MTU. The packet responder holds every SEND and WRITE packet to it (a requester on a larger
/// path MTU is NAKed, invalid request), and [`message_fits_mtu`] holds direct reach to it.
#[inline]
pub fn payload_fits(first: bool, last: bool, len: u64, mtu: u64) -> bool {
    match (first, last) {
        (true, true) => len <= mtu,
        (false, true) => (1..=mtu).contains(&len),
        _ => len == mtu,
    }
}

/// Whether a message of `len` bytes that a requester on a path MTU of `sent_mtu` bytes sends
/// as packets would be taken by a responder on a path MTU of `mtu` bytes, packet by packet:
/// an RDMA WRITE's packets, cut at `sent_mtu`, each pass [`payload_fits`] at `mtu`; an RDMA
/// READ's responses, cut at `mtu`, are the ones the requester's completer expects at
/// `sent_mtu` (`comp`: every response but the last one MTU long, else `BAD_RESP_ERR`); an
/// atomic carries no payload. Direct reach ([`crate::engine::ReachAsk::check`]) asks it, so
/// that a pair whose path MTUs disagree fails by reach exactly as by packets.
#[inline]
pub fn message_fits_mtu(op: RemoteOp, len: u64, sent_mtu: u64, mtu: u64) -> bool {
    if matches!(op, RemoteOp::Atomic | RemoteOp::AtomicWrite | RemoteOp::Flush { .. })
        || sent_mtu == mtu
    {
        return true;
    }
    // On different MTUs only a message of one packet under both passes: a WRITE's ONLY
    // packet fits the responder's MTU; a READ's one response is the ONLY one expected.
    let one = sent_mtu.min(mtu);
    match op {
        RemoteOp::Write if len <= sent_mtu => payload_fits(true, true, len, mtu),
        RemoteOp::Write => {
            // FIRST at `sent_mtu` bytes: never exactly `mtu` when they differ.
            payload_fits(true, false, sent_mtu, mtu)
        }
        _ => len <= one,
    }
}

/// [`check`] for a request that arrived at `qp` as packets: the MR from this engine's table,
/// or a memory window's (`mws`; its own rights, the type 2 window's QP), and where the bytes
/// are in the MR (None for [`Grant::Nothing`]).
#[inline]
pub(crate) fn request<'m>(
    qp: &Qp,
    mrs: &'m MrTable,
    mws: &MwTable,
    req: &Request,
) -> Result<Option<(&'m Mr, usize)>, NakCode> {
    if is_mw_key(req.rkey) {
        return window_request(qp, mrs, mws, req);
    }
    let mr = mrs.get(req.rkey);
    match check(&QpRights::of(qp), req, mr.map(MrRights::of).as_ref())? {
        Grant::At(at) => Ok(mr.map(|mr| (mr, at as usize))),
        Grant::Nothing => Ok(None),
    }
}

/// [`request`] for a memory window's rkey, out of the MR path's way.
#[cold]
fn window_request<'m>(
    qp: &Qp,
    mrs: &'m MrTable,
    mws: &MwTable,
    req: &Request,
) -> Result<Option<(&'m Mr, usize)>, NakCode> {
    let target = mws.target(mrs, req.rkey, Some(qp.qpn));
    let window = target.map(|(mr, w)| (mr, MrRights::of_window(w, mr)));
    match check(&QpRights::of(qp), req, window.map(|(_, (r, _))| r).as_ref())? {
        Grant::At(at) => Ok(window.map(|(mr, (_, base))| (mr, (at + base) as usize))),
        Grant::Nothing => Ok(None),
    }
}

/// [`check_mr`] against this engine's table, for a later packet of a request (a WRITE's
/// payload, a READ's next response): the MR and the offset of `va` in it.
#[inline]
pub(crate) fn remote<'m>(
    mrs: &'m MrTable,
    mws: &MwTable,
    pd: PdId,
    rkey: u32,
    va: u64,
    len: u64,
    need: AccessFlags,
) -> Result<(&'m Mr, usize), DmaError> {
    if is_mw_key(rkey) {
        // rxe's `rxe_recheck_mr`: the window may have been invalidated since the first packet.
        let (mr, w) = mws.target(mrs, rkey, None).ok_or(DmaError::BadKey)?;
        let (rights, base) = MrRights::of_window(w, mr);
        let at = check_mr(Some(&rights), rkey, pd, va, len, need)?;
        return Ok((mr, (at + base) as usize));
    }
    let mr = mrs.get(rkey).ok_or(DmaError::BadKey)?;
    let at = check_mr(Some(&MrRights::of(mr)), rkey, pd, va, len, need)?;
    Ok((mr, at as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: AccessFlags = AccessFlags::all();

    fn qp(access: AccessFlags, rd: u32) -> QpRights {
        QpRights { access, pd: 3, max_dest_rd_atomic: rd }
    }

    fn mr(access: AccessFlags) -> MrRights {
        MrRights { key: 0x105, pd: 3, access, iova: 0x1000, len: 64 }
    }

    fn req(op: RemoteOp, va: u64, len: u64) -> Request {
        Request { op, rkey: 0x105, va, len }
    }

    #[test]
    fn the_rules_fail_in_their_order_with_their_naks() {
        use NakCode::{InvalidRequest as Ir, RemoteAccessError as Rae};
        let m = mr(ALL);
        let ok = qp(ALL, 1);
        // 1, before anything else: no resources for a READ, even of nothing.
        assert_eq!(check(&qp(AccessFlags::empty(), 0), &req(RemoteOp::Read, 0, 0), None), Err(Ir));
        assert_eq!(check(&ok, &req(RemoteOp::Read, 0x1000, 0), Some(&m)), Ok(Grant::Nothing));
        // 2, before the QP's flags.
        let none = qp(AccessFlags::empty(), 1);
        assert_eq!(check(&none, &req(RemoteOp::Atomic, 0x1004, 8), Some(&m)), Err(Ir));
        assert_eq!(check(&none, &req(RemoteOp::Atomic, 0x1008, 8), Some(&m)), Err(Rae));
        // 3: a zero-length WRITE needs no key; an atomic always does.
        assert_eq!(check(&none, &req(RemoteOp::Write, 0, 0), None), Ok(Grant::Nothing));
        assert_eq!(check(&ok, &req(RemoteOp::Atomic, 0x1008, 8), None), Err(Rae));
        // 4 and 5.
        assert_eq!(check(&ok, &req(RemoteOp::Write, 0x1008, 8), Some(&m)), Ok(Grant::At(8)));
        let wo = qp(AccessFlags::REMOTE_WRITE, 1);
        assert_eq!(check(&wo, &req(RemoteOp::Read, 0x1008, 8), Some(&m)), Err(Rae));
        assert_eq!(check(&ok, &req(RemoteOp::Write, 0x1038, 9), Some(&m)), Err(Rae));
    }

    #[test]
    fn atomic_write_and_flush_follow_rxe() {
        use NakCode::{InvalidRequest as Ir, RemoteAccessError as Rae};
        let m = mr(ALL);
        let ok = qp(ALL, 1);
        let aw = RemoteOp::AtomicWrite;
        // Resources, as for a READ; then REMOTE_WRITE on the QP and the MR; the range; then
        // the alignment, last.
        assert_eq!(check(&qp(ALL, 0), &req(aw, 0x1008, 8), Some(&m)), Err(Ir));
        assert_eq!(check(&ok, &req(aw, 0x1008, 8), Some(&m)), Ok(Grant::At(8)));
        let ro = qp(AccessFlags::REMOTE_READ, 1);
        assert_eq!(check(&ro, &req(aw, 0x1008, 8), Some(&m)), Err(Rae));
        assert_eq!(check(&ok, &req(aw, 0x1008, 8), Some(&mr(AccessFlags::REMOTE_READ))), Err(Rae));
        assert_eq!(check(&ok, &req(aw, 0x103c, 8), Some(&m)), Err(Rae));
        assert_eq!(check(&ok, &req(aw, 0x1004, 8), Some(&m)), Err(Ir));
        // FLUSH: no resources needed; FLUSH_GLOBAL on both; the range unless the whole MR.
        let global = |whole_mr| RemoteOp::Flush { placement: FlushType::GLOBAL, whole_mr };
        assert_eq!(check(&qp(ALL, 0), &req(global(false), 0x1000, 64), Some(&m)), Ok(Grant::At(0)));
        assert_eq!(check(&ok, &req(global(false), 0x1000, 0), Some(&m)), Ok(Grant::At(0)));
        assert_eq!(check(&ok, &req(global(false), 0x1000, 65), Some(&m)), Err(Rae));
        assert_eq!(check(&ok, &req(global(true), 0, 1 << 40), Some(&m)), Ok(Grant::At(0)));
        assert_eq!(check(&ok, &req(global(true), 0, 0), None), Err(Rae));
        let rw = qp(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ, 1);
        assert_eq!(check(&rw, &req(global(false), 0x1000, 8), Some(&m)), Err(Rae));
        let no_flush = mr(AccessFlags::REMOTE_WRITE);
        assert_eq!(check(&ok, &req(global(false), 0x1000, 8), Some(&no_flush)), Err(Rae));
        let persistent = RemoteOp::Flush { placement: FlushType::PERSISTENT, whole_mr: false };
        assert_eq!(check(&ok, &req(persistent, 0x1000, 8), Some(&m)), Err(Rae));
    }

    #[test]
    fn a_message_fits_the_responders_mtu_as_its_packets_would() {
        use RemoteOp::{Atomic, Read, Write};
        // Equal MTUs: anything.
        assert!(message_fits_mtu(Write, 1 << 20, 1024, 1024));
        assert!(message_fits_mtu(Read, 1 << 20, 1024, 1024));
        // A larger requester MTU: an ONLY packet up to the responder's MTU passes, not more.
        assert!(message_fits_mtu(Write, 256, 1024, 256));
        assert!(!message_fits_mtu(Write, 257, 1024, 256));
        assert!(!message_fits_mtu(Write, 4096, 1024, 256));
        // A smaller requester MTU: one packet passes; a FIRST of 256 bytes is not 1024.
        assert!(message_fits_mtu(Write, 256, 256, 1024));
        assert!(!message_fits_mtu(Write, 4096, 256, 1024));
        assert!(message_fits_mtu(Write, 0, 256, 1024), "a zero-length WRITE");
        // READ responses are cut at the responder's MTU, expected at the requester's.
        assert!(message_fits_mtu(Read, 256, 1024, 256));
        assert!(!message_fits_mtu(Read, 300, 1024, 256));
        assert!(!message_fits_mtu(Read, 300, 256, 1024));
        assert!(message_fits_mtu(Atomic, 8, 256, 4096));
        // The per-packet rule itself.
        assert!(payload_fits(true, true, 0, 256) && !payload_fits(false, true, 0, 256));
        assert!(payload_fits(false, false, 256, 256) && !payload_fits(true, false, 255, 256));
    }

    #[test]
    fn the_mr_part_names_what_failed_first() {
        let need = AccessFlags::REMOTE_WRITE;
        let m = mr(AccessFlags::REMOTE_READ);
        assert_eq!(check_mr(None, 0x105, 3, 0x1000, 8, need), Err(DmaError::BadKey));
        assert_eq!(check_mr(Some(&m), 0x205, 3, 0x1000, 8, need), Err(DmaError::BadKey));
        assert_eq!(check_mr(Some(&m), 0x105, 4, 0x1000, 8, need), Err(DmaError::WrongPd));
        assert_eq!(check_mr(Some(&m), 0x105, 3, 0xfff, 8, need), Err(DmaError::Bounds));
        assert_eq!(check_mr(Some(&m), 0x105, 3, 0x1000, 65, need), Err(DmaError::Bounds));
        assert_eq!(check_mr(Some(&m), 0x105, 3, u64::MAX, 8, need), Err(DmaError::Bounds));
        assert_eq!(check_mr(Some(&m), 0x105, 3, 0x1000, 64, need), Err(DmaError::Access));
        let r = AccessFlags::REMOTE_READ;
        assert_eq!(check_mr(Some(&m), 0x105, 3, 0x1000, 64, r), Ok(0));
    }
}
