//! `softverbs learn vs-tcp`: RDMA and TCP side by side over a range of message sizes, in one
//! table: latency (ping-pong), bandwidth (a one-way stream), CPU per message and per GB (every
//! thread of both processes: programs, emulated NICs, the kernel's work inside them), system
//! calls of the program threads per message, and bytes copied per message.

use std::io::Write;

use super::bypass::program_calls;
use crate::cmd::learn::runs::{self, Run, Way};
use crate::cmd::learn::session::Session;
use crate::cmd::learn::table::{self, Table};
use crate::cmd::CliError;

/// The sizes a run covers: `largest`, then each 16 times smaller, down to 64 bytes.
pub fn sizes(largest: u32) -> Vec<u32> {
    let mut v = vec![largest.max(1)];
    while let Some(&s) = v.last() {
        if s / 16 < 64 {
            break;
        }
        v.push(s / 16);
    }
    v.reverse();
    v
}

fn cpu_ns(r: &Run) -> u64 {
    let b = r.both();
    b.program.cpu_ns + b.nic.cpu_ns
}

fn copies(r: &Run) -> u64 {
    let b = r.both();
    b.cost.gathered
        + b.cost.packet
        + b.cost.scattered
        + b.cost.program
        + r.tcp_mine.read_bytes
        + r.tcp_mine.written_bytes
        + r.tcp_theirs.read_bytes
        + r.tcp_theirs.written_bytes
}

fn human(n: u32) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

/// Runs the lesson: ping-pongs of `iters` round trips (fewer for large messages) and streams
/// of at least 16 messages and 4 MiB, for each size up to `largest`.
pub fn run(
    s: &mut Session,
    out: &mut dyn Write,
    largest: u32,
    iters: usize,
) -> Result<(), CliError> {
    table::heading(
        out,
        "vs-tcp",
        &[
            "The primer's three advantages, measured: lower latency, higher bandwidth, more CPU left",
            "for the program. Each size runs a ping-pong and a one-way stream, by RDMA and by TCP,",
            "between the same two processes. On one machine both go through memory, so the emulated",
            "NIC's CPU is part of the RDMA column: read the rows for where the time goes.",
        ],
    )?;
    let mut t = Table::default();
    let mut result = Vec::new();
    for size in sizes(largest) {
        let n = (iters / (size as usize / 4096).max(1)).max(10);
        let total = (u64::from(size) * 16).max(4 << 20);
        let rp = runs::rdma_pingpong(s, n, size)?;
        let tp = runs::tcp_pingpong(s, n, size as usize)?;
        let rs = runs::rdma_stream(s, Way::ToTarget, total, size)?;
        let ts = runs::tcp_stream(s, Way::ToTarget, total, size as usize)?;
        table::lines(
            out,
            "  ",
            &[format!(
                "{:>8}: {n} round trips and {} MiB one way, each by RDMA and by TCP",
                human(size),
                total >> 20
            )],
        )?;
        let lat = |r: &Run| r.wall.as_secs_f64() * 1e6 / r.messages as f64;
        let bw = |r: &Run| r.bytes as f64 / r.wall.as_secs_f64() / 1e6;
        let per_msg = |r: &Run| cpu_ns(r) as f64 / 1e3 / r.messages as f64;
        let per_gb = |r: &Run| cpu_ns(r) as f64 / 1e6 / (r.bytes as f64 / 1e9);
        let calls = |r: &Run| program_calls(r) as f64 / r.messages as f64;
        let copy = |r: &Run| copies(r) as f64 / r.messages as f64;
        let h = human(size);
        t.num(&format!("{h:>8} latency, half round trip (us)"), lat(&rp), lat(&tp), 1);
        t.num(&format!("{h:>8} bandwidth (MB/s)"), bw(&rs), bw(&ts), 0);
        t.num(&format!("{h:>8} CPU per message, all threads (us)"), per_msg(&rp), per_msg(&tp), 2);
        t.num(&format!("{h:>8} CPU per GB, all threads (ms)"), per_gb(&rs), per_gb(&ts), 0);
        t.num(&format!("{h:>8} program system calls per message"), calls(&rp), calls(&tp), 3);
        t.num(&format!("{h:>8} bytes copied per message"), copy(&rs), copy(&ts), 0);
        result.push(format!("{size}:{:.3}:{:.3}", calls(&rp), calls(&tp)));
    }
    table::ending(
        out,
        &t,
        &[
            "The RDMA column includes the emulated NICs: threads that copy with the CPU out of the".into(),
            "sender's memory, into packets and ring slots of shared memory, and into the target's".into(),
            "memory (the copies row counts each), where a real NIC reads and writes memory by DMA".into(),
            "and puts the packets on a wire. Both programs busy-poll, as perftest does, so their CPU".into(),
            "per message is mostly waiting; TCP over loopback never leaves the kernel either.".into(),
            "How this emulator compares with real NICs: docs/performance.md.".into(),
        ],
        "RDMA's data path needs no system call and no copy by the program or the kernel; what it costs here is the emulated NIC's.",
        &["softverbs learn vs-tcp --size 64K -n 2000", "softverbs perf lat            (latency, measured properly)"],
    )?;
    writeln!(out, "\nRESULT learn=vs-tcp sizes_calls={}", result.join(","))
        .map_err(crate::cmd::output_error)
}
