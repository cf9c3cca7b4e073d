//! `softverbs learn bypass`: system calls and context switches per message. A ping-pong of
//! `--iters` round trips by RDMA SEND (both programs busy-poll their CQs) and then by TCP
//! (`write`, then `read` until the message is whole), with the system calls counted by softverbs
//! itself: the soft backend counts every one it makes ([`nic_model::cost`]), the lesson counts
//! its TCP calls, and the kernel's per-thread `syscr`/`syscw` and context switches check both.

use std::io::Write;

use crate::cmd::learn::runs::{self, Run};
use crate::cmd::learn::session::Session;
use crate::cmd::learn::table::{self, Table};
use crate::cmd::CliError;

/// The system calls of the program threads on the data path, as counted by softverbs: the soft
/// backend's (RDMA) plus the lesson's own TCP calls.
pub fn program_calls(r: &Run) -> u64 {
    r.both().cost.program_calls.total() + r.tcp_calls()
}

/// Of [`program_calls`], those that woke a sleeping emulated NIC thread (the peer's, through
/// its doorbell, or the program's own): the emulation's, since a real NIC never sleeps.
pub fn nic_wakes(r: &Run) -> u64 {
    let c = r.both().cost.program_calls;
    c.futex_wake + c.unpark
}

/// Runs the lesson.
pub fn run(s: &mut Session, out: &mut dyn Write, iters: usize, size: u32) -> Result<(), CliError> {
    table::heading(
        out,
        "bypass",
        &[
            "An RDMA program posts work and polls for completions in its own memory: no system call",
            "on the data path, so the kernel is bypassed. A TCP program asks the kernel for every",
            "message: at least a write() to send it and a read() to receive it, and a read() that",
            "finds nothing yet puts the thread to sleep (a voluntary context switch).",
        ],
    )?;
    // The first round trip of each pays for setting up the path (the soft backend maps the
    // peer's inbox on its first datagram, reads its header and checks its owner is alive).
    let (rdma_first, tcp_first) =
        (runs::rdma_pingpong(s, 1, size)?, runs::tcp_pingpong(s, 1, size as usize)?);
    let kio = |x: &Run| x.both().program.syscr + x.both().program.syscw;
    table::lines(out, "  ", &[format!(
        "First round trip of each (setting up the path): RDMA {} read/write calls the kernel counted, TCP {}",
        kio(&rdma_first),
        kio(&tcp_first)
    )])?;
    let rdma = runs::rdma_pingpong(s, iters, size)?;
    table::lines(
        out,
        "  ",
        &[format!(
            "RDMA: {iters} round trips of {size}-byte SENDs in {:.1} ms ({} messages)",
            rdma.wall.as_secs_f64() * 1e3,
            rdma.messages
        )],
    )?;
    let tcp = runs::tcp_pingpong(s, iters, size as usize)?;
    table::lines(
        out,
        "  ",
        &[format!(
            "TCP:  {iters} round trips of {size} bytes in {:.1} ms: {} write() and {} read() calls",
            tcp.wall.as_secs_f64() * 1e3,
            tcp.tcp_mine.writes + tcp.tcp_theirs.writes,
            tcp.tcp_mine.reads + tcp.tcp_theirs.reads
        )],
    )?;
    let (r, t) = (rdma.both(), tcp.both());
    let per = |v: u64, run: &Run| v as f64 / run.messages as f64;
    let (rc, tc) = (program_calls(&rdma), program_calls(&tcp));
    let mut tb = Table::default();
    tb.lower("system calls per message, program threads", per(rc, &rdma), per(tc, &tcp), 3);
    tb.lower(
        "  waking a sleeping emulated NIC thread",
        per(nic_wakes(&rdma), &rdma),
        per(nic_wakes(&tcp), &tcp),
        3,
    );
    tb.lower(
        "  the data path's own (the rest)",
        per(rc - nic_wakes(&rdma), &rdma),
        per(tc - nic_wakes(&tcp), &tcp),
        3,
    );
    tb.lower(
        "  read/write calls the kernel counted",
        per(kio(&rdma), &rdma),
        per(kio(&tcp), &tcp),
        3,
    );
    tb.lower(
        "  voluntary context switches",
        per(r.program.vcsw, &rdma),
        per(t.program.vcsw, &tcp),
        3,
    );
    tb.lower(
        "  involuntary context switches",
        per(r.program.ivcsw, &rdma),
        per(t.program.ivcsw, &tcp),
        3,
    );
    tb.lower(
        "system calls per message, emulated NIC threads",
        per(r.cost.nic_calls.total(), &rdma),
        per(t.cost.nic_calls.total(), &tcp),
        3,
    );
    tb.lower(
        "half round trip (us)",
        rdma.wall.as_secs_f64() * 1e6 / rdma.messages as f64,
        tcp.wall.as_secs_f64() * 1e6 / tcp.messages as f64,
        1,
    );
    tb.lower(
        "program CPU per message (us)",
        r.program.cpu_ns as f64 / 1e3 / rdma.messages as f64,
        t.program.cpu_ns as f64 / 1e3 / tcp.messages as f64,
        2,
    );
    tb.approx(
        "  of which in the kernel (us, a tick sample)",
        r.program.sys_ns as f64 / 1e3 / rdma.messages as f64,
        t.program.sys_ns as f64 / 1e3 / tcp.messages as f64,
        2,
    );
    let nc = r.cost.nic_calls;
    table::ending(
        out,
        &tb,
        &[
            "The emulated NIC is a thread in each process. While a program polls, that thread stands".into(),
            format!("by, looking once a millisecond whether it is needed: its {} system calls in this run", nc.total()),
            format!("({} parks, {} futex waits, {} wakes, {} scheduler calls) stand for work a real NIC", nc.park, nc.futex_wait, nc.futex_wake + nc.unpark, nc.sched),
            "does in silicon, where a program's post and poll are memory writes and reads too.".into(),
            "When a program is descheduled for over a millisecond, its NIC thread takes over and".into(),
            "then sleeps on its doorbell; the peer's next SEND wakes it with a system call, counted".into(),
            "above on the program threads. A real NIC never sleeps: a doorbell is a memory write.".into(),
            "softverbs counts its own system calls (futex and parker waits and wakes, scheduler calls)".into(),
            "at the call sites; a TCP call is counted by the lesson at the call and by the kernel.".into(),
        ],
        "RDMA's data path makes no system call; TCP's makes at least two per message, and sleeps in read().",
        &["softverbs learn bypass -n 100000", "softverbs perf syscalls -n 20000 --base 2000   (the same count with perf or strace)"],
    )?;
    writeln!(
        out,
        "\nRESULT learn=bypass iters={iters} size={size} rdma_messages={} rdma_program_calls={rc} rdma_nic_wakes={} rdma_kernel_rw={} rdma_nic_calls={} tcp_messages={} tcp_program_calls={tc} tcp_kernel_rw={} first_rdma_kernel_rw={} first_tcp_kernel_rw={}",
        rdma.messages, nic_wakes(&rdma), kio(&rdma), nc.total(), tcp.messages, kio(&tcp), kio(&rdma_first), kio(&tcp_first)
    )
    .map_err(crate::cmd::output_error)
}
