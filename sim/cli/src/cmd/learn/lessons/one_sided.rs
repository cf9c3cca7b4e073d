//! `softverbs learn one-sided`: the target program runs a compute loop on a thread of its own
//! while `--size` bytes arrive by RDMA WRITE, are read back by RDMA READ, and then go the same
//! two ways by TCP. Each phase shows the loop's rate and the CPU time of each thread: the
//! target's program (apart from its loop), its emulated NIC, the kernel's share, the initiator.

use std::io::Write;

use crate::cmd::learn::runs::{self, Run, Way};
use crate::cmd::learn::session::Session;
use crate::cmd::learn::table::{self, ms, Table};
use crate::cmd::CliError;

/// The target's compute loop over one phase: iterations, its CPU (ns), wall time (ns).
#[derive(Clone, Copy, Debug, Default)]
pub struct Loop {
    /// Iterations done.
    pub iters: u64,
    /// CPU time of the loop's thread (ns).
    pub cpu_ns: u64,
    /// How long it ran (ns).
    pub wall_ns: u64,
}

impl Loop {
    /// Millions of iterations per second.
    pub fn rate(&self) -> f64 {
        self.iters as f64 / (self.wall_ns.max(1) as f64 / 1e9) / 1e6
    }
}

fn phase(
    s: &mut Session,
    f: impl FnOnce(&mut Session) -> Result<Run, String>,
) -> Result<(Run, Loop), String> {
    s.ask("COMPUTE", "OK")?;
    let run = f(s);
    // Stop the loop whatever happened, so the target is left clean.
    let stopped = s.ask("STOP", "LOOP");
    let run = run?;
    let v: Vec<u64> = stopped?.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    let lp = match v[..] {
        [iters, cpu_ns, wall_ns] => Loop { iters, cpu_ns, wall_ns },
        _ => return Err("the target's LOOP line".into()),
    };
    Ok((run, lp))
}

/// Runs the lesson: `total` bytes each way, in messages of `msg` bytes.
pub fn run(s: &mut Session, out: &mut dyn Write, total: u64, msg: u32) -> Result<(), CliError> {
    table::heading(
        out,
        "one-sided",
        &[
            "RDMA WRITE and READ are one-sided: the target's NIC executes them against memory the",
            "target registered, and the target program takes no part. Watch its compute loop keep",
            "its pace and its program thread use no CPU while the data moves; then watch TCP, where",
            "the target program itself must call read() and write() for every byte.",
        ],
    )?;
    let mib = total as f64 / (1 << 20) as f64;
    let mut phases = Vec::new();
    for (name, rdma, way) in [
        ("RDMA WRITE into the target", true, Way::ToTarget),
        ("RDMA READ of the target   ", true, Way::FromTarget),
        ("TCP to the target         ", false, Way::ToTarget),
        ("TCP from the target       ", false, Way::FromTarget),
    ] {
        let (run, lp) = phase(s, |s| {
            if rdma {
                runs::rdma_stream(s, way, total, msg)
            } else {
                runs::tcp_stream(s, way, total, msg as usize)
            }
        })?;
        table::lines(out, "  ", &[format!(
            "{name} {mib:.0} MiB in {:>7.1} ms; target loop {:>6.1} M/s; target program {:>6.2} ms CPU, its NIC {:>6.2} ms; initiator {:>6.2} ms, its NIC {:>6.2} ms",
            run.wall.as_secs_f64() * 1e3,
            lp.rate(),
            ms(run.theirs.program.cpu_ns),
            ms(run.theirs.nic.cpu_ns),
            ms(run.mine.program.cpu_ns),
            ms(run.mine.nic.cpu_ns),
        )])?;
        phases.push((run, lp));
    }
    let sum = |a: usize, f: &dyn Fn(&Run, &Loop) -> f64| {
        f(&phases[a].0, &phases[a].1) + f(&phases[a + 1].0, &phases[a + 1].1)
    };
    let mut t = Table::default();
    t.lower(
        "time for both ways (ms)",
        sum(0, &|r, _| r.wall.as_secs_f64() * 1e3),
        sum(2, &|r, _| r.wall.as_secs_f64() * 1e3),
        1,
    );
    let rate = |a: usize| {
        let it = (phases[a].1.iters + phases[a + 1].1.iters) as f64;
        let wall = (phases[a].1.wall_ns + phases[a + 1].1.wall_ns) as f64 / 1e9;
        it / wall / 1e6
    };
    t.higher("target compute loop (M iterations/s)", rate(0), rate(2), 1);
    t.lower(
        "target compute loop's CPU (ms)",
        sum(0, &|_, l| ms(l.cpu_ns)),
        sum(2, &|_, l| ms(l.cpu_ns)),
        1,
    );
    t.lower(
        "target program CPU, apart from its loop (ms)",
        sum(0, &|r, _| ms(r.theirs.program.cpu_ns)),
        sum(2, &|r, _| ms(r.theirs.program.cpu_ns)),
        2,
    );
    t.approx(
        "  of which in the kernel (ms, a tick sample)",
        sum(0, &|r, _| ms(r.theirs.program.sys_ns)),
        sum(2, &|r, _| ms(r.theirs.program.sys_ns)),
        2,
    );
    t.lower(
        "target emulated NIC thread CPU (ms)",
        sum(0, &|r, _| ms(r.theirs.nic.cpu_ns)),
        sum(2, &|r, _| ms(r.theirs.nic.cpu_ns)),
        2,
    );
    t.lower(
        "initiator program CPU (ms)",
        sum(0, &|r, _| ms(r.mine.program.cpu_ns)),
        sum(2, &|r, _| ms(r.mine.program.cpu_ns)),
        2,
    );
    t.lower(
        "initiator emulated NIC thread CPU (ms)",
        sum(0, &|r, _| ms(r.mine.nic.cpu_ns)),
        sum(2, &|r, _| ms(r.mine.nic.cpu_ns)),
        2,
    );
    let (tp_rdma, tn_rdma) =
        (sum(0, &|r, _| ms(r.theirs.program.cpu_ns)), sum(0, &|r, _| ms(r.theirs.nic.cpu_ns)));
    let tp_tcp = sum(2, &|r, _| ms(r.theirs.program.cpu_ns));
    table::ending(
        out,
        &t,
        &[
            format!("The target program used {tp_rdma:.2} ms of CPU while {mib:.0} MiB went each way by RDMA (answering"),
            "the lesson's requests for its measurements, before and after each phase); the emulated".into(),
            format!("NIC thread in its process used {tn_rdma:.2} ms, work a real NIC does in silicon; the TCP receiver"),
            format!("(the target program itself) used {tp_tcp:.2} ms for the same bytes. On a machine with few cores the"),
            "emulated NIC thread also competes with the compute loop, which a real NIC never does.".into(),
            "The initiator's program CPU includes the NIC work softverbs runs inline in its verbs".into(),
            "calls (building and taking in packets while it posts and polls).".into(),
        ],
        "one-sided operations move data without the target program: its CPU stays with its own work.",
        &["softverbs learn one-sided --size 64M", "softverbs demo               (a WRITE and a READ, packet by packet)"],
    )?;
    writeln!(
        out,
        "\nRESULT learn=one-sided bytes={total} rdma_target_program_ns={} tcp_target_program_ns={} rdma_target_nic_ns={} rdma_loop_rate={:.3} tcp_loop_rate={:.3}",
        phases[0].0.theirs.program.cpu_ns + phases[1].0.theirs.program.cpu_ns,
        phases[2].0.theirs.program.cpu_ns + phases[3].0.theirs.program.cpu_ns,
        phases[0].0.theirs.nic.cpu_ns + phases[1].0.theirs.nic.cpu_ns,
        rate(0),
        rate(2)
    )
    .map_err(crate::cmd::output_error)
}
