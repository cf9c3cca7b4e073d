//! What the demo says about the wire: one line per packet in words a learner can follow, one
//! line per work completion, and for each operation the packets it took and what they add up to.

use std::io::Write;

use nic_model::packet::{self, AethKind};
use nic_model::soft::TapDir;

use super::w;
use crate::cmd::words::describe_packet;

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
