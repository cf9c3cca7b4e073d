//! `softverbs learn messages`: RDMA moves messages, TCP moves a byte stream. Three SENDs of 10,
//! 200 and 3000 bytes give three receive completions with exactly those `byte_len`s; three TCP
//! `write()`s of the same sizes arrive as whatever `read()` returns.

use std::io::Write;

use crate::cmd::learn::session::{self, Session};
use crate::cmd::learn::table::{self, Table};
use crate::cmd::CliError;

/// The three message sizes.
pub const SIZES: [u32; 3] = [10, 200, 3000];
/// Each receive buffer (and the spacing of the messages in the MRs).
const SLOT: u32 = 4096;

/// Message `i`'s bytes: letters, starting at a different one for each message.
fn pattern(i: usize, len: u32) -> Vec<u8> {
    (0..len).map(|j| b'a' + ((i as u32 + j) % 26) as u8).collect()
}

/// Runs the lesson.
pub fn run(s: &mut Session, out: &mut dyn Write) -> Result<(), CliError> {
    table::heading(
        out,
        "messages",
        &[
            "An RDMA SEND is a message: the receiver gets one completion per SEND, and its byte_len",
            "is the SEND's length, however the bytes were cut into packets. TCP is a stream: the",
            "receiver's read() returns whatever has arrived, joined or split as it happens.",
        ],
    )?;
    for (i, _) in SIZES.iter().enumerate() {
        s.ask(&format!("POSTRECV {} {SLOT}", i as u32 * SLOT), "OK")?;
    }
    for (i, &len) in SIZES.iter().enumerate() {
        s.ep.mr.write(i * SLOT as usize, &pattern(i, len)).map_err(|e| e.to_string())?;
    }
    table::lines(out, "  ", &["RDMA: the target posted three receives of 4096 bytes; we post three SENDs of 10, 200 and 3000 bytes."])?;
    for (i, &len) in SIZES.iter().enumerate() {
        session::post_send(&s.ep, i as u64, i * SLOT as usize, len)?;
    }
    session::poll(&s.ep, 3)?;
    let wcs = s.ask("POLL 3", "WCS")?;
    let lens: Vec<u32> = wcs.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    // Each message's bytes, read back from the receive buffer its completion names.
    let mut landed = 0;
    for (i, l) in lens.iter().enumerate() {
        let got = s.ask(&format!("READ {} {l}", i as u32 * SLOT), "BYTES")?;
        let want: String = pattern(i, *l).iter().map(|b| format!("{b:02x}")).collect();
        let same = got == want && *l == SIZES[i];
        landed += usize::from(same);
        table::lines(
            out,
            "  ",
            &[format!(
                "  target CQ: receive completion {}: byte_len {l}; its buffer holds {}",
                i + 1,
                if same { "that message's bytes, as sent" } else { "OTHER bytes" }
            )],
        )?;
    }
    table::lines(out, "  ", &["TCP: we call write() three times, with 10, 200 and 3000 bytes; then the target reads with a 4096-byte buffer."])?;
    let c0 = s.tcp.count;
    for &len in &SIZES {
        s.tcp.write_all(&vec![b'x'; len as usize])?;
    }
    let writes = s.tcp.count.writes - c0.writes;
    let total: u32 = SIZES.iter().sum();
    s.ask(&format!("TCPRECV {total} {SLOT}"), "GO")?;
    let (_, count, sizes) = session::parse_done(&s.peer.expect("DONE", session::WAIT)?)?;
    for (i, n) in sizes.iter().enumerate() {
        table::lines(out, "  ", &[format!("  target read() {}: returned {n} bytes", i + 1)])?;
    }
    let show = |v: &[String]| v.join(" + ");
    let rdma_sizes: Vec<String> = lens.iter().map(|l| l.to_string()).collect();
    let tcp_sizes: Vec<String> = sizes.iter().map(|l| l.to_string()).collect();
    let mut t = Table::default();
    t.fact("messages sent (SENDs / write() calls)", 3.0, writes as f64, 0);
    t.fact("what the receiver got (completions / reads)", lens.len() as f64, count.reads as f64, 0);
    t.text("their sizes (bytes)", &show(&rdma_sizes), &show(&tcp_sizes));
    t.fact("bytes received", lens.iter().sum::<u32>() as f64, count.read_bytes as f64, 0);
    table::ending(
        out,
        &t,
        &[
            "The target's NIC is a thread of the target process; it put each SEND into the next".into(),
            "posted receive and wrote one completion per message, as a real NIC does in silicon.".into(),
            "The TCP bytes went through the kernel's loopback; how read() cuts them depends on timing.".into(),
        ],
        "with RDMA the receiver sees the sender's messages; with TCP it must find their ends itself.",
        &["softverbs learn sge          (one message from three buffers into two)", "softverbs demo               (the packets of a SEND, one by one)"],
    )?;
    writeln!(
        out,
        "\nRESULT learn=messages rdma_lens=[{}] rdma_as_sent={landed} tcp_reads=[{}] tcp_bytes={}",
        rdma_sizes.join(","),
        tcp_sizes.join(","),
        count.read_bytes
    )
    .map_err(crate::cmd::output_error)
}
