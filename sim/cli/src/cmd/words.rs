//! The words every teaching command uses for what it saw: one line per RoCEv2 packet and one
//! per work completion, every field named as the IBA and libibverbs name it. `demo` and
//! `learn` both print through here, so a packet reads the same in each.

use nic_model::packet::{self, AethKind, OpFlags};
use verbs_api::{WcFlags, WorkCompletion};

/// One line of a packet, in words a learner can follow.
pub fn describe_packet(data: &[u8]) -> String {
    let (src, dst, p) = match packet::parse_any_datagram(data) {
        Ok(v) => v,
        Err(e) => return format!("malformed datagram ({e})"),
    };
    let name = p.bth.opcode.info().map_or("?", |i| i.name);
    let mut s = format!(
        "{:<34} PSN {:#08x}  to QP {:#08x}  {src} -> {dst}",
        name,
        p.bth.psn.value(),
        p.bth.dest_qp,
    );
    if p.bth.ack_req {
        s.push_str("  AckReq");
    }
    if p.bth.solicited {
        s.push_str("  SE");
    }
    if let Some(r) = p.reth {
        s.push_str(&format!("  RETH va={:#x} rkey={:#x} len={}", r.va, r.rkey, r.dma_len));
    }
    if let Some(a) = p.atomic_eth {
        s.push_str(&format!(
            "  AtomicETH va={:#x} rkey={:#x} swap/add={} compare={}",
            a.va, a.rkey, a.swap_add, a.compare
        ));
    }
    if let Some(a) = p.aeth {
        let k = match a.kind() {
            AethKind::Ack { .. } => "ACK".to_string(),
            AethKind::RnrNak { timer } => format!("RNR NAK (timer {timer})"),
            AethKind::Nak(c) => format!("NAK ({})", nak_name(c)),
            AethKind::Reserved(x) => format!("reserved syndrome {x:#x}"),
        };
        s.push_str(&format!("  AETH {k} MSN {}", a.msn));
    }
    if let Some(o) = p.atomic_ack_eth {
        s.push_str(&format!("  original={o}"));
    }
    if let Some(i) = p.imm {
        s.push_str(&format!("  ImmDt={i:#x}"));
    }
    let has_payload = p.bth.opcode.info().is_some_and(|i| i.flags.contains(OpFlags::PAYLOAD));
    if has_payload {
        s.push_str(&format!("  {} B payload", p.payload.len()));
    }
    s
}

/// A NAK code's name as the IBA's table of AETH NAK codes writes it (and Wireshark prints it).
pub fn nak_name(c: packet::NakCode) -> &'static str {
    match c {
        packet::NakCode::PsnSequenceError => "PSN sequence error",
        packet::NakCode::InvalidRequest => "invalid request",
        packet::NakCode::RemoteAccessError => "remote access error",
        packet::NakCode::RemoteOperationalError => "remote operational error",
        packet::NakCode::InvalidRdRequest => "invalid RD request",
    }
}

/// One line of a work completion, every field that is defined: `man ibv_poll_cq` leaves
/// every field but `wr_id`, `status`, `qp_num` and `vendor_err` undefined unless the status
/// is `IBV_WC_SUCCESS`, so an error completion prints those and says so.
pub fn describe_wc(wc: &WorkCompletion) -> String {
    if wc.status != verbs_api::WcStatus::Success {
        return format!(
            "wr_id={} status={} qp_num={:#x} vendor_err={:#x} (opcode, byte_len: undefined unless IBV_WC_SUCCESS)",
            wc.wr_id,
            wc.status.name(),
            wc.qp_num,
            wc.vendor_err
        );
    }
    let mut s = format!(
        "wr_id={} status={} opcode={} byte_len={} qp_num={:#x}",
        wc.wr_id,
        wc.status.name(),
        wc.opcode.name(),
        wc.byte_len,
        wc.qp_num
    );
    if wc.opcode == verbs_api::WcOpcode::Recv || wc.opcode == verbs_api::WcOpcode::RecvRdmaWithImm {
        s.push_str(&format!(" src_qp={:#x} slid={}", wc.src_qp, wc.slid));
    }
    if wc.wc_flags.contains(WcFlags::WITH_IMM) {
        s.push_str(&format!(" imm_data={:#x}", wc.imm_data));
    }
    s
}
