//! `softverbs learn sge`: one SEND gathered from three buffers of the sender's memory and
//! scattered into two receive buffers of the target's, with a map of where each byte landed,
//! checked by reading the target's memory back; then a SEND with `max_sge + 1` entries and the
//! error `ibv_post_send` returns for it.

use std::io::Write;

use verbs_api::{SendFlags, SendWr, WrOpcode};

use crate::cmd::learn::measure::Snap;
use crate::cmd::learn::session::{self, Session};
use crate::cmd::learn::table::{self, Table};
use crate::cmd::CliError;

/// The three pieces the SEND gathers: (offset in the sender's MR, bytes).
pub const PIECES: [(usize, &[u8]); 3] =
    [(0, b"one message "), (4096, b"from three "), (12288, b"buffers.")];
/// The two receive SGEs: (offset in the target's MR, length).
pub const RECV_SGES: [(usize, u32); 2] = [(100, 16), (5000, 64)];

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Runs the lesson.
pub fn run(s: &mut Session, out: &mut dyn Write) -> Result<(), CliError> {
    table::heading(
        out,
        "sge",
        &[
            "A work request names its memory as a list of scatter/gather entries (SGEs): address,",
            "length, lkey. The NIC gathers a SEND's bytes from every entry in order and scatters",
            "them into the receive's entries in order; the program copies nothing together.",
        ],
    )?;
    for (off, data) in PIECES {
        s.ep.mr.write(off, data).map_err(|e| e.to_string())?;
    }
    let total: usize = PIECES.iter().map(|p| p.1.len()).sum();
    let words: Vec<String> = RECV_SGES.iter().map(|(o, l)| format!("{o} {l}")).collect();
    s.ask(&format!("POSTRECV {}", words.join(" ")), "OK")?;
    let sges: Vec<_> = PIECES.iter().map(|(o, d)| s.ep.mr.sge(*o, d.len() as u32)).collect();
    // The emulated NICs' copies, counted by softverbs in both processes over the SEND.
    let theirs0 = s.their_snap(false)?;
    let mine0 = Snap::take();
    table::lines(out, "  ", &[format!(
        "RDMA: one SEND with 3 SGEs ({} + {} + {} bytes); the target posted one receive with 2 SGEs ({} + {} bytes).",
        PIECES[0].1.len(), PIECES[1].1.len(), PIECES[2].1.len(), RECV_SGES[0].1, RECV_SGES[1].1
    )])?;
    let wr = SendWr {
        wr_id: 1,
        sg_list: &sges,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
        ..Default::default()
    };
    s.ep.qp.post_send(&[wr]).map_err(|e| e.to_string())?;
    session::poll(&s.ep, 1)?;
    let byte_len: usize =
        s.ask("POLL 1", "WCS")?.trim().parse().map_err(|_| "a byte_len".to_string())?;
    let nic = Snap::take_end().since(&mine0).plus(&s.their_snap(true)?.since(&theirs0)).cost;
    let nic_copied = nic.gathered + nic.packet + nic.scattered;
    // The map: walk the message, byte by byte, through the gather and the scatter lists.
    let message: Vec<u8> = PIECES.iter().flat_map(|p| p.1.iter().copied()).collect();
    let mut map = Vec::new();
    let mut verified = 0usize;
    let mut at = 0usize;
    let mut filled = 0usize;
    let mut from =
        PIECES.iter().enumerate().flat_map(|(i, (o, d))| (0..d.len()).map(move |j| (i, o + j)));
    for (k, (roff, rlen)) in RECV_SGES.iter().enumerate() {
        let n = (*rlen as usize).min(byte_len - at);
        if n == 0 {
            break;
        }
        let landed = s.ask(&format!("READ {roff} {n}"), "BYTES")?;
        let want = &message[at..at + n];
        let ok = landed == hex(want);
        let srcs: Vec<(usize, usize)> = (0..n).filter_map(|_| from.next()).collect();
        // Group the bytes of this receive SGE by the send SGE they came from.
        let mut j = 0;
        while j < srcs.len() {
            let (piece, soff) = srcs[j];
            let run = srcs[j..].iter().take_while(|(p, _)| *p == piece).count();
            map.push(format!(
                "message bytes {:>2}..{:<2} {:<14} from send SGE {piece} (our MR +{soff}) -> receive SGE {k} (target MR +{}){}",
                at + j,
                at + j + run,
                format!("{:?}", String::from_utf8_lossy(&want[j..j + run])),
                roff + j,
                if ok { ", verified" } else { ", NOT as sent" }
            ));
            j += run;
        }
        if ok {
            verified += n;
        }
        filled += 1;
        at += n;
    }
    table::lines(
        out,
        "  ",
        &[format!(
            "  target CQ: one receive completion, byte_len {byte_len}; where each byte landed:"
        )],
    )?;
    table::lines(out, "    ", &map)?;
    // One entry too many.
    let over = s.max_sge as usize + 1;
    let many: Vec<_> = (0..over).map(|i| s.ep.mr.sge(i, 1)).collect();
    let wr = SendWr {
        wr_id: 2,
        sg_list: &many,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
        ..Default::default()
    };
    let err = match s.ep.qp.post_send(&[wr]) {
        Err(e) => e,
        Ok(()) => {
            return Err(CliError::failed(format!(
                "a SEND with {over} SGEs was accepted; max_sge is {}",
                s.max_sge
            )))
        }
    };
    table::lines(out, "  ", &[
        format!("RDMA: ibv_post_send with {over} SGEs, one more than max_sge {} (ibv_query_device):", s.max_sge),
        format!("  -> {} (errno {}): {}", err.errno.name(), err.errno.code(), err.message),
        "  The QP refused it at post time: nothing went on the wire and no completion is due.".into(),
    ])?;
    table::lines(
        out,
        "  ",
        &["TCP: one writev() of the same three buffers; the target reads into one buffer."],
    )?;
    let c0 = s.tcp.count;
    let parts: Vec<&[u8]> = PIECES.iter().map(|p| p.1).collect();
    let took = s.tcp.writev(&parts)?;
    if took < total {
        s.tcp.write_all(&message[took..])?;
    }
    let calls = s.tcp.count.writes - c0.writes;
    s.ask(&format!("TCPRECV {total} 4096"), "GO")?;
    let (_, count, _) = session::parse_done(&s.peer.expect("DONE", session::WAIT)?)?;
    let mut t = Table::default();
    t.lower("calls to send the message (post_send / writev)", 1.0, calls as f64, 0);
    t.fact("gather entries", PIECES.len() as f64, PIECES.len() as f64, 0);
    t.fact("receive buffers filled", filled as f64, 1.0, 0);
    t.fact("bytes that landed where expected", verified as f64, count.read_bytes as f64, 0);
    t.lower("bytes the programs copied", nic.program as f64, 0.0, 0);
    t.lower(
        "bytes the kernel copied (TCP: in and out)",
        0.0,
        (count.read_bytes + took as u64) as f64,
        0,
    );
    t.fact("bytes the emulated NIC copied with the CPU", nic_copied as f64, 0.0, 0);
    table::ending(
        out,
        &t,
        &[
            format!("The gather and the scatter were done by the emulated NIC, with the CPU: {nic_copied} bytes"),
            "copied (the three pieces read, the packets with their headers built in shared memory,".into(),
            "the two buffers written: the initiator's NIC code and the target's NIC or program thread).".into(),
            "A real NIC does both by DMA: its engine reads and writes the memory, and no CPU copies a".into(),
            "byte. TCP's writev also gathers, but the kernel copies each byte in, and read() out again.".into(),
        ],
        "SGEs let one work request read and write scattered memory with no copy by the program or the kernel (here the emulated NIC copies with the CPU; a real NIC by DMA); their number per request is bounded by max_sge.",
        &["softverbs devinfo -v        (max_sge, among the device's limits)", "softverbs learn zero-copy   (who copies the bytes, counted)"],
    )?;
    writeln!(
        out,
        "\nRESULT learn=sge byte_len={byte_len} verified={verified} of={total} nic_copied={nic_copied} program_copied={} error_errno={} error={:?}",
        nic.program,
        err.errno.name(),
        err.message
    )
    .map_err(crate::cmd::output_error)
}
