//! The responder's IBA 1.5 operations, RC only, as rxe executes them (`rxe_resp.c`:
//! `atomic_write_reply`, `process_flush`): ATOMIC WRITE (8 bytes placed in one store after
//! every earlier write) and FLUSH (the named memory made visible at the placement type asked
//! for). Each is checked by the rules of `rights` first, answered with a zero-length RDMA READ
//! RESPONSE ONLY carrying an ACK (rxe's `send_read_response_ack`), and remembered as a
//! responder resource, so a duplicate is answered again and never executed twice.

use std::sync::atomic::{fence, Ordering};

use verbs_api::{FlushLevel, FlushType};

use super::super::qp::{Qp, RdResource};
use super::super::rights::{self, RemoteOp, Request};
use super::super::Hca;
use super::{nak_error, save_resource};
use crate::packet::{Aeth, Bth, NakCode, OpFlags, Opcode, Packet, Psn};

/// An ATOMIC WRITE or FLUSH in sequence (`flags` tells which).
pub(crate) fn on_request(qp: &mut Qp, hca: &mut Hca, pkt: &Packet<'_>, flags: OpFlags) {
    let psn = pkt.bth.psn;
    let Some(reth) = pkt.reth else {
        nak_error(qp, hca, psn, NakCode::InvalidRequest);
        return;
    };
    if flags.contains(OpFlags::ATOMIC_WRITE) {
        // rxe's `check_rkey`: the payload is the RETH's length, and the value is one word.
        if reth.dma_len != 8 || pkt.payload.len() != 8 {
            nak_error(qp, hca, psn, NakCode::InvalidRequest);
            return;
        }
        let req = Request { op: RemoteOp::AtomicWrite, rkey: reth.rkey, va: reth.va, len: 8 };
        let bytes: [u8; 8] = pkt.payload.try_into().expect("8 bytes, checked above");
        let stored = match rights::request(qp, &hca.mrs, &hca.mws, &req) {
            Ok(Some((mr, off))) => mr.memory.atomic_write(off, bytes),
            Ok(None) => None,
            Err(code) => {
                nak_error(qp, hca, psn, code);
                return;
            }
        };
        if stored.is_none() {
            // The iova is aligned (checked) but the memory is not: a misaligned atomic.
            nak_error(qp, hca, psn, NakCode::InvalidRequest);
            return;
        }
    } else {
        let Some(feth) = pkt.feth else {
            nak_error(qp, hca, psn, NakCode::InvalidRequest);
            return;
        };
        let placement = FlushType::from_bits_retain(feth.placement);
        // rxe flushes the whole MR for any selectivity but the range.
        let whole_mr = FlushLevel::from_ibv(feth.selectivity) != Some(FlushLevel::Range);
        let op = RemoteOp::Flush { placement, whole_mr };
        let req = Request { op, rkey: reth.rkey, va: reth.va, len: u64::from(reth.dma_len) };
        if let Err(code) = rights::request(qp, &hca.mrs, &hca.mws, &req) {
            nak_error(qp, hca, psn, code);
            return;
        }
        // Global visibility: every write this responder placed before the FLUSH is visible
        // to every reader of the memory once the FLUSH is answered (rxe: a write barrier).
        // Persistence was refused above: no memory here is persistent.
        if placement.contains(FlushType::GLOBAL) {
            fence(Ordering::SeqCst);
        }
    }
    qp.resp.msn = (qp.resp.msn + 1) & Psn::MASK;
    save_resource(qp, RdResource::Replied { psn, msn: qp.resp.msn });
    qp.resp.set_epsn(psn.next());
    send_empty_read_response(qp, hca, psn, qp.resp.msn);
}

/// A duplicate ATOMIC WRITE or FLUSH: its answer again if it is still remembered, else
/// nothing (rxe drops it: class D).
pub(crate) fn duplicate(qp: &mut Qp, hca: &mut Hca, psn: Psn) {
    let found = qp.resp.resources.iter().find_map(|r| match *r {
        RdResource::Replied { psn: p, msn } if p == psn => Some(msn),
        _ => None,
    });
    if let Some(msn) = found {
        send_empty_read_response(qp, hca, psn, msn);
    }
}

/// The answer to an ATOMIC WRITE or FLUSH: an RDMA READ RESPONSE ONLY with no payload and an
/// ACK AETH.
fn send_empty_read_response(qp: &Qp, hca: &mut Hca, psn: Psn, msn: u32) {
    let bth = Bth {
        opcode: Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        pkey: 0xFFFF,
        dest_qp: qp.attr.dest_qp_num,
        psn,
        ..Bth::default()
    };
    let mut p = Packet::new(bth, &[]);
    p.aeth = Some(Aeth::ack(msn));
    hca.transmit(qp, &p);
}
