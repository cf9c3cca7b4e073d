//! `softverbs learn zero-copy`: who copies a message's bytes. RDMA WRITEs of `--size` bytes
//! into the target's memory, then the same bytes by TCP, with every copy counted: the program's
//! (through the MR's read/write), the emulated NIC's DMA reads and writes and its packet/ring
//! copy (softverbs' own counters), and the kernel's (`rchar`/`wchar` of the threads that called
//! `read`/`write`, as the kernel books them).

use std::io::Write;

use crate::cmd::learn::runs::{self, Run, Way};
use crate::cmd::learn::session::Session;
use crate::cmd::learn::table::{self, ms, Table};
use crate::cmd::CliError;

fn rw(s: &crate::cmd::learn::measure::ThreadSample) -> u64 {
    s.rchar + s.wchar
}

/// Bytes the kernel copied in `read`/`write` calls for the program threads that moved data in
/// `r`: the initiator's, and the target's in a TCP run (in an RDMA run the target program only
/// waited for its next command line, which is not data).
fn kernel_bytes(r: &Run) -> u64 {
    let target = if r.tcp_theirs.calls() == 0 { 0 } else { rw(&r.theirs.program) };
    rw(&r.mine.program) + target
}

/// Runs the lesson: `count` messages of `size` bytes each way.
pub fn run(s: &mut Session, out: &mut dyn Write, size: u32, count: u64) -> Result<(), CliError> {
    table::heading(
        out,
        "zero-copy",
        &[
            "With RDMA the NIC reads the message from the sender's registered memory and writes it",
            "into the target's: the programs copy nothing, and the kernel is not asked to. With TCP",
            "the kernel copies every byte twice: into the socket on write(), out of it on read().",
        ],
    )?;
    let total = u64::from(size) * count;
    // One pass over the memory first, unmeasured: the first touch of each page and the first
    // datagram to the peer (which maps its inbox) are set-up, not the cost of a message.
    let window = (s.ep.mr.len() as u64).min(total);
    runs::rdma_stream(s, Way::ToTarget, window, size)?;
    runs::tcp_stream(s, Way::ToTarget, window, size as usize)?;
    let resent = s.retransmits();
    let rdma = runs::rdma_stream(s, Way::ToTarget, total, size)?;
    // A packet sent again is gathered and copied again: counted, and said.
    let resent = s.retransmits() - resent;
    table::lines(
        out,
        "  ",
        &[format!(
            "RDMA: {count} RDMA WRITEs of {size} bytes into the target's memory in {:.1} ms",
            rdma.wall.as_secs_f64() * 1e3
        )],
    )?;
    let tcp = runs::tcp_stream(s, Way::ToTarget, total, size as usize)?;
    table::lines(
        out,
        "  ",
        &[format!(
            "TCP:  {} write() calls of {size} bytes, {} read() calls by the target, in {:.1} ms",
            tcp.tcp_mine.writes,
            tcp.tcp_theirs.reads,
            tcp.wall.as_secs_f64() * 1e3
        )],
    )?;
    let (r, t) = (rdma.both(), tcp.both());
    let per = |b: u64| b as f64 / count as f64;
    let (rk, tk) = (kernel_bytes(&rdma), kernel_bytes(&tcp));
    let mut tb = Table::default();
    tb.fact("bytes per message", f64::from(size), f64::from(size), 0);
    tb.lower("copied by the programs (MR read/write)", per(r.cost.program), per(t.cost.program), 0);
    tb.lower(
        "read from memory by the NIC (DMA read)",
        per(r.cost.gathered),
        per(t.cost.gathered),
        0,
    );
    tb.lower(
        "copied by the emulation into packets/ring",
        per(r.cost.packet),
        per(t.cost.packet),
        0,
    );
    tb.lower(
        "written to memory by the NIC (DMA write)",
        per(r.cost.scattered),
        per(t.cost.scattered),
        0,
    );
    tb.lower("copied by the kernel for the programs (rchar+wchar)", per(rk), per(tk), 0);
    tb.lower("read/written by the kernel for the NIC threads", per(rw(&r.nic)), per(rw(&t.nic)), 0);
    tb.lower("packets the NIC sent again (go-back-N)", resent as f64, 0.0, 0);
    tb.lower("CPU of the program threads (ms)", ms(r.program.cpu_ns), ms(t.program.cpu_ns), 2);
    tb.approx(
        "  of which in the kernel (ms, a tick sample)",
        ms(r.program.sys_ns),
        ms(t.program.sys_ns),
        2,
    );
    tb.lower("CPU of the emulated NIC threads (ms)", ms(r.nic.cpu_ns), ms(t.nic.cpu_ns), 2);
    table::ending(
        out,
        &tb,
        &[
            format!("The emulated NIC is a thread of each process, and it copies with the CPU: {:.0} bytes", per(r.cost.gathered + r.cost.packet + r.cost.scattered)),
            "per message (read from the sender's MR, into a ring slot of the shared-memory wire, out".into(),
            format!("into the target's MR), costing its threads {:.2} ms of CPU. A real NIC reads the message once", ms(r.nic.cpu_ns)),
            "by DMA and writes it once by DMA, in silicon, with no CPU and no ring copy. And while a".into(),
            "program calls in, softverbs runs the NIC's work inline, in the program's own verbs calls".into(),
            "(ibv_post_send builds the packets, ibv_poll_cq takes them in): part of the programs' CPU".into(),
            "above is that work, and none of it is a copy the program asked for.".into(),
            format!("The TCP bytes were copied by the kernel for the programs: {:.2} ms of their CPU.", ms(t.program.cpu_ns)),
        ],
        "RDMA takes the programs and the kernel out of the copying; with TCP the kernel copies every byte in and out.",
        &["softverbs learn zero-copy --size 1M -n 64", "softverbs learn vs-tcp       (copies and CPU over a range of sizes)"],
    )?;
    writeln!(
        out,
        "\nRESULT learn=zero-copy size={size} count={count} rdma_program={} rdma_gathered={} rdma_packet={} rdma_scattered={} rdma_kernel={rk} rdma_retransmits={resent} tcp_program={} tcp_kernel={tk} tcp_bytes={}",
        r.cost.program, r.cost.gathered, r.cost.packet, r.cost.scattered, t.cost.program, tcp.bytes
    )
    .map_err(crate::cmd::output_error)
}
