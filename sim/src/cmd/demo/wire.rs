//! What the demo says about the wire: one line per packet in words a learner can follow, one
//! line per work completion, and for each operation the packets it took and what they add up to.

use std::io::Write;

use nic_model::packet::{self, AethKind, OpFlags};
use nic_model::soft::TapDir;
use verbs_api::{WcFlags, WorkCompletion};

use super::w;

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
            AethKind::Nak(c) => format!("NAK {c:?}"),
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

/// One line of a work completion, every field.
pub fn describe_wc(wc: &WorkCompletion) -> String {
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

pub(super) fn printable(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| if b.is_ascii_graphic() || b == b' ' { b as char } else { '.' }).collect()
}

/// Print the packets of one operation and a line that sums them up; returns (packets sent,
/// packets received, datagram bytes).
pub(super) fn explain_wire(
    out: &mut dyn Write,
    device: &str,
    log: &[(TapDir, Vec<u8>)],
) -> (usize, usize, usize) {
    let mut psns = Vec::new();
    let (mut acked, mut naks) = (None, 0);
    let (mut sent, mut received, mut bytes) = (0, 0, 0);
    let mut family = "IPv4";
    for (dir, data) in log {
        let arrow = match dir {
            TapDir::Tx => "->",
            TapDir::Rx => "<-",
        };
        w(out, &format!("  wire  {device} {arrow} {}", describe_packet(data)));
        bytes += data.len();
        let Ok((src, _, p)) = packet::parse_any_datagram(data) else { continue };
        family = if src.is_ipv6() { "IPv6" } else { "IPv4" };
        match dir {
            TapDir::Tx => {
                sent += 1;
                psns.push(p.bth.psn.value());
            }
            TapDir::Rx => {
                received += 1;
                match p.aeth.map(|a| a.kind()) {
                    Some(AethKind::Ack { .. }) => acked = Some(p.bth.psn.value()),
                    Some(_) => naks += 1,
                    None => {}
                }
            }
        }
    }
    let range = match (psns.first(), psns.last()) {
        (Some(a), Some(b)) if a != b => format!(" (PSN {a:#08x} to {b:#08x})"),
        (Some(a), _) => format!(" (PSN {a:#08x})"),
        _ => String::new(),
    };
    let mut got = format!("got {received} back");
    if let Some(p) = acked {
        got.push_str(&format!(", acknowledging every PSN up to {p:#08x}"));
    }
    if naks > 0 {
        got.push_str(&format!(" ({naks} NAK{}: the requester sent again)", plural(naks)));
    }
    w(
        out,
        &format!(
            "  => sent {sent} packet{}{range}, {got}; {bytes} bytes of {family}/UDP datagrams both \
             ways",
            plural(sent)
        ),
    );
    (sent, received, bytes)
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
