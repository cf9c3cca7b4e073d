//! `softverbs learn vs-tcp`: RDMA and TCP side by side over a range of message sizes, in one
//! table: latency (ping-pong), bandwidth (a one-way stream), CPU per message and per GB (every
//! thread of both processes: programs, emulated NICs, the kernel's work inside them), system
//! calls of the program threads per message, and bytes copied per message. Each size is
//! measured [`SAMPLES`] times, RDMA and TCP taking turns to go first, and each cell shows the
//! median and the range; the takeaway is computed from the table's own verdicts, so it cannot
//! contradict it. The measuring is behind [`Measure`], so a test can feed the numbers.

use std::io::Write;

use super::bypass::program_calls;
use crate::cmd::learn::runs::{self, Run, Way};
use crate::cmd::learn::session::{self, Session};
use crate::cmd::learn::table::{self, Better, Cell, Table, Verdict};
use crate::cmd::CliError;

/// How many times each size is measured.
pub const SAMPLES: usize = 5;
/// Threads the RDMA side keeps busy: two programs polling their CQs and an emulated NIC
/// thread in each process.
pub const RDMA_BUSY: usize = 4;
/// The published column's heading, and its source (docs/learn/vs-tcp.md cites it).
const PUBLISHED: &str = "published, ConnectX-6";

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

/// One sample of one size: each quantity as `[RDMA, TCP]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Half a round trip of a ping-pong, microseconds.
    pub lat_us: [f64; 2],
    /// A one-way stream, MB/s.
    pub bw_mbs: [f64; 2],
    /// CPU of every thread of both processes per ping-pong message, microseconds.
    pub cpu_per_msg_us: [f64; 2],
    /// CPU of every thread of both processes per GB streamed, milliseconds.
    pub cpu_per_gb_ms: [f64; 2],
    /// The programs' system calls per ping-pong message.
    pub calls: [f64; 2],
    /// Bytes copied per streamed message (by anyone: program, emulated NIC, kernel).
    pub copies: [f64; 2],
}

/// What measures the samples: the live session, or a stand-in that feeds numbers.
pub trait Measure {
    /// One sample of `size`: `n` round trips and a stream of `total` bytes each way; RDMA
    /// first if `rdma_first`, else TCP.
    fn sample(
        &mut self,
        size: u32,
        n: usize,
        total: u64,
        rdma_first: bool,
    ) -> Result<Sample, CliError>;
}

/// The machine the lesson runs on: its cores and how busy they already were.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Machine {
    /// Cores this process may run on.
    pub cores: usize,
    /// The 1-minute load average before the lesson started.
    pub load: f64,
}

impl Machine {
    /// This machine, now.
    pub fn now() -> Machine {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let load = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
            .unwrap_or(0.0);
        Machine { cores, load }
    }

    /// Cores not already busy (never below zero).
    pub fn free(&self) -> f64 {
        (self.cores as f64 - self.load).max(0.0)
    }

    /// Whether the RDMA side's busy threads outnumber the free cores.
    pub fn crowded(&self) -> bool {
        self.free() < RDMA_BUSY as f64
    }
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

/// The live measurement: the session's two processes.
struct Live<'a>(&'a mut Session);

impl Measure for Live<'_> {
    fn sample(
        &mut self,
        size: u32,
        n: usize,
        total: u64,
        rdma_first: bool,
    ) -> Result<Sample, CliError> {
        let s = &mut *self.0;
        let (rp, tp, rs, ts) = if rdma_first {
            let rp = runs::rdma_pingpong(s, n, size)?;
            let tp = runs::tcp_pingpong(s, n, size as usize)?;
            let rs = runs::rdma_stream(s, Way::ToTarget, total, size)?;
            (rp, tp, rs, runs::tcp_stream(s, Way::ToTarget, total, size as usize)?)
        } else {
            let tp = runs::tcp_pingpong(s, n, size as usize)?;
            let rp = runs::rdma_pingpong(s, n, size)?;
            let ts = runs::tcp_stream(s, Way::ToTarget, total, size as usize)?;
            (rp, tp, runs::rdma_stream(s, Way::ToTarget, total, size)?, ts)
        };
        let lat = |r: &Run| r.wall.as_secs_f64() * 1e6 / r.messages as f64;
        let bw = |r: &Run| r.bytes as f64 / r.wall.as_secs_f64() / 1e6;
        let per_msg = |r: &Run| cpu_ns(r) as f64 / 1e3 / r.messages as f64;
        let per_gb = |r: &Run| cpu_ns(r) as f64 / 1e6 / (r.bytes as f64 / 1e9);
        let calls = |r: &Run| program_calls(r) as f64 / r.messages as f64;
        let copy = |r: &Run| copies(r) as f64 / r.messages as f64;
        Ok(Sample {
            lat_us: [lat(&rp), lat(&tp)],
            bw_mbs: [bw(&rs), bw(&ts)],
            cpu_per_msg_us: [per_msg(&rp), per_msg(&tp)],
            cpu_per_gb_ms: [per_gb(&rs), per_gb(&ts)],
            calls: [calls(&rp), calls(&tp)],
            copies: [copy(&rs), copy(&ts)],
        })
    }
}

/// Runs the lesson on the session: on a crowded machine the programs of both processes
/// yield their cores after each empty poll (and the method says so).
pub fn run(
    s: &mut Session,
    out: &mut dyn Write,
    largest: u32,
    iters: usize,
) -> Result<(), CliError> {
    let machine = Machine::now();
    if machine.crowded() {
        s.ask("YIELD 1", "OK")?;
        session::YIELD.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    // One short round of each, unmeasured: the first touch of the memory and the first
    // datagram to the peer are set-up, not the cost of a message.
    let first = sizes(largest)[0];
    runs::rdma_pingpong(s, 10, first)?;
    runs::tcp_pingpong(s, 10, first as usize)?;
    lesson(&mut Live(s), out, largest, iters, machine)
}

/// The per-size row groups of the table, and the samples' raw numbers for the RESULT line.
fn rows(t: &mut Table, size: u32, v: &[Sample]) {
    let h = human(size);
    let col = |f: &dyn Fn(&Sample) -> [f64; 2], d: usize| {
        let r: Vec<f64> = v.iter().map(|s| f(s)[0]).collect();
        let c: Vec<f64> = v.iter().map(|s| f(s)[1]).collect();
        (Cell::spread(&r, d), Cell::spread(&c, d))
    };
    let (r, c) = col(&|s| s.lat_us, 1);
    t.row(&format!("{h:>8} latency, half round trip (us)"), r, c, Better::Lower);
    if size <= 256 {
        t.published(PUBLISHED, "< 0.6");
    }
    let (r, c) = col(&|s| s.bw_mbs, 0);
    t.row(&format!("{h:>8} bandwidth (MB/s)"), r, c, Better::Higher);
    t.published(PUBLISHED, "25000 (200 Gb/s)");
    let (r, c) = col(&|s| s.cpu_per_msg_us, 2);
    t.row(&format!("{h:>8} CPU per message, all threads (us)"), r, c, Better::Lower);
    let (r, c) = col(&|s| s.cpu_per_gb_ms, 0);
    t.row(&format!("{h:>8} CPU per GB, all threads (ms)"), r, c, Better::Lower);
    let (r, c) = col(&|s| s.calls, 3);
    t.row(&format!("{h:>8} program system calls per message"), r, c, Better::Lower);
    let (r, c) = col(&|s| s.copies, 0);
    t.row(&format!("{h:>8} bytes copied per message"), r, c, Better::Lower);
}

/// Which sizes each side won on one quantity (a row label ending), as a phrase:
/// `RDMA lower at 256 B, 4 KiB; TCP lower at 1 MiB; unclear at 64 KiB`.
fn phrase(verdicts: &[(String, Verdict)], sizes: &[u32], what: &str, word: &str) -> String {
    let mut rdma = Vec::new();
    let mut tcp = Vec::new();
    let mut even = Vec::new();
    let mut unclear = Vec::new();
    for &size in sizes {
        let h = human(size);
        let Some((_, v)) = verdicts.iter().find(|(l, _)| l.starts_with(&h) && l.ends_with(what))
        else {
            continue;
        };
        match v {
            Verdict::Rdma(_) => rdma.push(h),
            Verdict::Tcp(_) => tcp.push(h),
            Verdict::Even => even.push(h),
            Verdict::Unclear | Verdict::None => unclear.push(h),
        }
    }
    let mut parts = Vec::new();
    for (side, list) in [("RDMA", &rdma), ("TCP", &tcp)] {
        if !list.is_empty() {
            parts.push(format!("{side} {word} at {}", list.join(", ")));
        }
    }
    if !even.is_empty() {
        parts.push(format!("even at {}", even.join(", ")));
    }
    if !unclear.is_empty() {
        parts.push(format!(
            "no clear winner at {} (the samples' ranges overlap)",
            unclear.join(", ")
        ));
    }
    parts.join("; ")
}

/// The takeaway, computed from the table's verdicts: where each side won latency and
/// bandwidth, and, when TCP won any of them, that this machine contradicts RDMA hardware.
pub fn takeaway(t: &Table, sizes: &[u32]) -> (String, bool) {
    let v = t.verdicts();
    let lat = phrase(&v, sizes, "latency, half round trip (us)", "lower");
    let bw = phrase(&v, sizes, "bandwidth (MB/s)", "higher");
    let tcp_won = v.iter().any(|(l, v)| {
        matches!(v, Verdict::Tcp(_)) && (l.contains("latency") || l.contains("bandwidth"))
    });
    let mut s = format!("in this run's table, latency: {lat}. Bandwidth: {bw}.");
    if tcp_won {
        s += " Where TCP won, this machine contradicts RDMA hardware, where the primer's advantages \
              hold: here the emulated NIC is CPU threads that compete with the programs \
              for the cores, and TCP over loopback never leaves memory.";
    } else {
        s += " RDMA hardware keeps these advantages for reasons this emulation does not share: \
              its NIC is silicon, not CPU threads.";
    }
    (s, tcp_won)
}

/// The lesson, on any [`Measure`]: the method, the samples, the table with its verdicts and
/// published figures, and the takeaway computed from them.
pub fn lesson(
    m: &mut dyn Measure,
    out: &mut dyn Write,
    largest: u32,
    iters: usize,
    machine: Machine,
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
    let crowded = machine.crowded();
    let mut method = vec![
        format!("How each side waits: RDMA keeps {RDMA_BUSY} threads busy (both programs busy-poll their CQs, as perftest does, and each process has an emulated NIC thread); TCP's 2 programs block in read() until the kernel wakes them."),
        format!("This machine: {} cores, load average {:.1} before the run: about {:.1} free for {RDMA_BUSY} busy RDMA threads.", machine.cores, machine.load, machine.free()),
    ];
    if crowded {
        method.push(format!("Warning: fewer free cores than the {RDMA_BUSY} busy RDMA threads, so the RDMA numbers measure the scheduler as much as RDMA. Adapted: the programs yield their core (sched_yield) after each empty poll, so the emulated NICs they wait for can run."));
    }
    method.push(format!("Each size is measured {SAMPLES} times, RDMA and TCP taking turns to go first; each cell is the median (min-max). Where the ranges overlap, no side is called better."));
    table::lines(out, "  ", &method)?;
    let mut t = Table::default();
    let mut result = Vec::new();
    let all = sizes(largest);
    for &size in &all {
        let n = (iters / (size as usize / 4096).max(1) / SAMPLES).max(10);
        let total = (u64::from(size) * 16).max(2 << 20);
        table::lines(
            out,
            "  ",
            &[format!(
                "{:>8}: {SAMPLES} samples of {n} round trips and {:.1} MiB one way, each by RDMA and by TCP",
                human(size),
                total as f64 / f64::from(1 << 20)
            )],
        )?;
        let mut v = Vec::with_capacity(SAMPLES);
        for k in 0..SAMPLES {
            v.push(m.sample(size, n, total, k % 2 == 0)?);
        }
        rows(&mut t, size, &v);
        let med = |f: &dyn Fn(&Sample) -> f64| match Cell::spread(
            &v.iter().map(f).collect::<Vec<_>>(),
            3,
        ) {
            Cell::Spread { median, .. } => median,
            _ => 0.0,
        };
        result.push(format!("{size}:{:.3}:{:.3}", med(&|s| s.calls[0]), med(&|s| s.calls[1])));
    }
    let (take, tcp_won) = takeaway(&t, &all);
    let verdicts: Vec<String> = t
        .verdicts()
        .iter()
        .filter(|(l, _)| l.contains("latency") || l.contains("bandwidth"))
        .map(|(_, v)| match v {
            Verdict::Rdma(_) => "rdma",
            Verdict::Tcp(_) => "tcp",
            Verdict::Even => "even",
            _ => "unclear",
        })
        .map(String::from)
        .collect();
    table::lines(out, "", &["", "Measured in this run:"])?;
    t.print(out)?;
    table::lines(
        out,
        "",
        &[
            "",
            "Laptop figures say nothing about RDMA hardware's. The published column is not measured here:",
            "it is what NVIDIA publishes for a ConnectX-6 adapter (200 Gb/s per port, sub-600 ns latency;",
            "docs/learn/vs-tcp.md cites it), and it is what the RDMA column would be compared with on hardware.",
        ],
    )?;
    table::lines(out, "", &["", "What is emulated:"])?;
    table::lines(out, "  ", &[
        "The RDMA column includes the emulated NICs: threads that copy with the CPU out of the",
        "sender's memory, into packets and ring slots of shared memory, and into the target's",
        "memory (the copies row counts each), where a real NIC reads and writes memory by DMA",
        "and puts the packets on a wire. RDMA WRITEs travel here as packets (direct reach off),",
        "so the packets and copies can be counted; softverbs perf write_bw measures the direct",
        "copy into the peer's memory instead. TCP over loopback never leaves the kernel either.",
        "How this emulator compares with real NICs: docs/performance.md.",
    ])?;
    table::lines(out, "", &["", &format!("Takeaway: {take}"), "", "Try:"])?;
    table::lines(
        out,
        "  ",
        &[
            "softverbs learn vs-tcp --size 64K -n 2000",
            "softverbs perf lat            (latency, measured properly)",
        ],
    )?;
    writeln!(
        out,
        "\nRESULT learn=vs-tcp sizes_calls={} verdicts={} tcp_won={tcp_won} crowded={crowded}",
        result.join(","),
        verdicts.join(",")
    )
    .map_err(crate::cmd::output_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in: RDMA's latency is `rdma_us`, TCP's `tcp_us`, at every size; bandwidths
    /// follow from them (a message per latency).
    struct StandIn {
        rdma_us: f64,
        tcp_us: f64,
        calls: usize,
    }

    impl Measure for StandIn {
        fn sample(&mut self, size: u32, _: usize, _: u64, _: bool) -> Result<Sample, CliError> {
            self.calls += 1;
            // A little noise, so that the ranges are ranges.
            let j = 1.0 + (self.calls % 3) as f64 * 0.01;
            let (r, t) = (self.rdma_us * j, self.tcp_us * j);
            Ok(Sample {
                lat_us: [r, t],
                bw_mbs: [f64::from(size) / r, f64::from(size) / t],
                cpu_per_msg_us: [2.0 * r, t],
                cpu_per_gb_ms: [100.0, 200.0],
                calls: [0.001, 2.0],
                copies: [3.0 * f64::from(size), 2.0 * f64::from(size)],
            })
        }
    }

    fn text(m: &mut StandIn, machine: Machine) -> String {
        let mut out = Vec::new();
        lesson(m, &mut out, 4096, 100, machine).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn takeaway_line(s: &str) -> &str {
        s.lines().find(|l| l.starts_with("Takeaway:")).expect("a takeaway")
    }

    fn row<'a>(s: &'a str, label: &str) -> &'a str {
        s.lines().find(|l| l.contains(label)).unwrap_or_else(|| panic!("{label} in {s}"))
    }

    const QUIET: Machine = Machine { cores: 8, load: 0.0 };

    #[test]
    fn a_slow_rdma_side_gets_a_takeaway_that_says_tcp_won() {
        let mut m = StandIn { rdma_us: 120.0, tcp_us: 10.0, calls: 0 };
        let s = text(&mut m, QUIET);
        assert_eq!(m.calls, 2 * SAMPLES, "every size sampled {SAMPLES} times");
        assert!(row(&s, "256 B latency").contains("better: TCP 12.0×"), "{s}");
        assert!(row(&s, "4 KiB bandwidth").contains("better: TCP 12.0×"), "{s}");
        let t = takeaway_line(&s);
        assert!(t.contains("latency: TCP lower at 256 B, 4 KiB."), "{t}");
        assert!(t.contains("Bandwidth: TCP higher at 256 B, 4 KiB."), "{t}");
        assert!(!t.contains("RDMA lower") && t.contains("contradicts RDMA hardware"), "{t}");
        assert!(s.contains("Laptop figures say nothing about RDMA hardware's."), "{s}");
        assert!(s.contains("verdicts=tcp,tcp,tcp,tcp tcp_won=true"), "{s}");
    }

    #[test]
    fn a_slow_tcp_side_gets_a_takeaway_that_says_rdma_won() {
        let mut m = StandIn { rdma_us: 2.0, tcp_us: 30.0, calls: 0 };
        let s = text(&mut m, QUIET);
        assert!(row(&s, "256 B latency").contains("better: RDMA 15.0×"), "{s}");
        // The published figure sits in its own labelled column on the small-message row.
        assert!(row(&s, "256 B latency").trim_end().ends_with("< 0.6"), "{s}");
        assert!(row(&s, "which is better").trim_end().ends_with(PUBLISHED), "{s}");
        let t = takeaway_line(&s);
        assert!(t.contains("latency: RDMA lower at 256 B, 4 KiB."), "{t}");
        assert!(t.contains("Bandwidth: RDMA higher at 256 B, 4 KiB."), "{t}");
        assert!(!t.contains("TCP lower") && !t.contains("contradicts"), "{t}");
        // CPU per message: 4 us against 30 in this stand-in.
        assert!(row(&s, "256 B CPU per message").contains("better: RDMA 7.5×"), "{s}");
        assert!(s.contains("tcp_won=false crowded=false"), "{s}");
    }

    #[test]
    fn mixed_results_split_the_takeaway_by_size_and_a_crowded_machine_is_warned_about() {
        struct Mixed(usize);
        impl Measure for Mixed {
            fn sample(&mut self, size: u32, _: usize, _: u64, _: bool) -> Result<Sample, CliError> {
                self.0 += 1;
                let lat = if size == 256 { [2.0, 30.0] } else { [400.0, 270.0] };
                // Overlapping ranges at 4 KiB bandwidth: 900..1100 against 1000 each time.
                let bw = if size == 256 {
                    [50.0, 10.0]
                } else {
                    [900.0 + (self.0 % 3) as f64 * 100.0, 1000.0]
                };
                Ok(Sample { lat_us: lat, bw_mbs: bw, ..Sample::default() })
            }
        }
        let mut out = Vec::new();
        lesson(&mut Mixed(0), &mut out, 4096, 100, Machine { cores: 2, load: 1.5 }).unwrap();
        let s = String::from_utf8(out).unwrap();
        let t = takeaway_line(&s);
        assert!(t.contains("latency: RDMA lower at 256 B; TCP lower at 4 KiB."), "{t}");
        assert!(t.contains("Bandwidth: RDMA higher at 256 B; no clear winner at 4 KiB"), "{t}");
        assert!(row(&s, "4 KiB bandwidth").contains("unclear: ranges overlap"), "{s}");
        assert!(t.contains("contradicts RDMA hardware"), "{t}");
        assert!(s.contains("2 cores, load average 1.5 before the run: about 0.5 free"), "{s}");
        assert!(s.contains("Warning: fewer free cores than the 4 busy RDMA threads"), "{s}");
        // All-zero rows print no ratio at all.
        assert!(row(&s, "256 B program system calls").contains("even"), "{s}");
        assert!(s.contains("crowded=true"), "{s}");
    }
}
