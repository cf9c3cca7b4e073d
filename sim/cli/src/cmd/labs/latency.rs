//! Lab 11's grading: a program that measures its own ping-pong latency is graded by what it
//! printed (`lat half_rtt_us median=M iters=N`) against two references taken in the same check:
//! the wire, whose capture times of the requester's SENDs give the half round trips the program
//! really made (the same run, the same machine, so a tight factor is fair), and `ib_send_lat`
//! (perftest) between the same two devices, run by the check after the program, whose
//! `t_typical` is the figure the program's median should resemble (a loose factor: a second run
//! on a busy machine may differ).

use std::io::Read;
use std::net::{IpAddr, TcpListener};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::wire::Wire;
use crate::cmd::{run, CliError};

/// What lab 11 fixes: the message size, the timed iterations and the warm-up ones before them.
pub struct Want {
    /// Bytes of each SEND.
    pub size: u32,
    /// Round trips timed.
    pub iters: u32,
    /// Round trips before them, not timed.
    pub warmup: u32,
}

/// Lab 11's ping-pong (labs/11-latency/lab.c).
pub const LAB11: Want = Want { size: 8, iters: 500, warmup: 50 };

/// How far the printed median may be from the wire's, either way: the program's clock brackets
/// its own post and poll, the capture's its NIC's sends, which differ by the program's own
/// work on each side; a whole round trip reported as half is twice the wire's.
pub const WIRE_FACTOR: f64 = 1.5;
/// How far from `ib_send_lat`'s `t_typical`: another run, maybe on a busier moment. A median
/// outside this but inside `ib_send_lat`'s own range of samples (`t_min` to `t_max`) passes
/// too: on a loaded machine perftest's samples spread as far, and a fair grader cannot ask a
/// program to be steadier than perftest was.
pub const PERFTEST_FACTOR: f64 = 10.0;

/// What `ib_send_lat` printed: its smallest, largest and typical (median) sample, µs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Perftest {
    /// `t_min[usec]`.
    pub min: f64,
    /// `t_max[usec]`.
    pub max: f64,
    /// `t_typical[usec]`, the median.
    pub typical: f64,
}
/// Below this (µs) two medians are close whatever their ratio: clock and capture resolution.
const SLACK_US: f64 = 1.0;

/// Whether `lab` is graded by its measurement (lab 11).
pub fn measures(lab: &super::spec::Lab) -> bool {
    lab.dir == "11-latency"
}

/// The program's `lat half_rtt_us median=M iters=N` line: (M, N).
pub fn printed(stdout: &str) -> Option<(f64, u32)> {
    stdout.lines().find_map(|l| {
        let rest = l.trim_end().strip_prefix("lat half_rtt_us ")?;
        let mut median = None;
        let mut iters = None;
        for f in rest.split_whitespace() {
            match f.split_once('=') {
                Some(("median", v)) => median = v.parse::<f64>().ok(),
                Some(("iters", v)) => iters = v.parse::<u32>().ok(),
                _ => {}
            }
        }
        Some((median?, iters?))
    })
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The median half round trip on the wire (µs): the requester (the sender of the first SEND)
/// sends each ping after the previous pong came back, so the time between two of its SENDs is
/// one round trip.
pub fn wire_median(w: &Wire) -> Option<f64> {
    let first: IpAddr = w.sends.first()?.1;
    let times: Vec<u128> = w.sends.iter().filter(|(_, s)| *s == first).map(|(t, _)| *t).collect();
    median(times.windows(2).map(|p| (p[1] - p[0]) as f64 / 2000.0).collect())
}

/// Why `got` is not close to `reference` (both µs), in words a student can act on; None when
/// it is within `factor` (or [`SLACK_US`]).
fn far(got: f64, reference: f64, factor: f64) -> Option<&'static str> {
    if (got - reference).abs() <= SLACK_US
        || (got <= reference * factor && got * factor >= reference)
    {
        return None;
    }
    let r = got / reference;
    Some(match r {
        r if r > 300.0 => {
            "about a thousand times too large: the median is printed in microseconds (a struct \
             timespec's tv_nsec is nanoseconds: divide by 1000)"
        }
        r if r < 1.0 / 300.0 => {
            "about a thousand times too small: the median is printed in microseconds (tv_sec \
             counts seconds: multiply by 1000000)"
        }
        r if (1.6..2.6).contains(&r) => {
            "about twice the reference: that is a whole round trip; a ping-pong's latency is \
             half of it (ib_send_lat prints the round trip divided by 2)"
        }
        r if r > 1.0 => {
            "larger than the reference: the timer covers more than the round trip (printing, \
             re-posting the receive, or the warm-up iterations); read the clock just before \
             ibv_post_send and just after the reply's receive completion, and leave out the \
             warm-up"
        }
        _ => {
            "smaller than the reference: the timer covers only part of the round trip \
             (ibv_post_send returns before the message leaves); stop it only after the reply's \
             receive completion"
        }
    })
}

/// A TCP port no one listens on now, for `ib_send_lat`'s handshake.
fn free_port() -> Result<u16, CliError> {
    let l = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| CliError::failed(format!("a port for ib_send_lat: {e}")))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| CliError::failed(format!("a port for ib_send_lat: {e}")))
}

/// Whether something listens on TCP `port` (from /proc/net/tcp and tcp6, without connecting:
/// perftest's server takes one connection only).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && format!("{} ", f[1]).ends_with(&want) && f[3] == "0A"
            })
        })
    })
}

/// Ends a child and what it forked, if still running.
fn stop(c: &mut Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// Waits (bounded) for `c` to end: its stdout, and whether it succeeded.
fn finish(c: &mut Child, limit: Duration) -> (bool, String) {
    let start = Instant::now();
    let ok = loop {
        match c.try_wait() {
            Ok(Some(s)) => break s.success(),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                stop(c);
                break false;
            }
        }
    };
    let mut out = String::new();
    if let Some(mut o) = c.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    (ok, out)
}

/// `ib_send_lat -s SIZE -n ITERS` between softverbs0 and softverbs1 on a fabric of its own in
/// `scratch`, through `softverbs run`: the client's `t_typical` (µs), or why there is none.
pub fn ib_send_lat(scratch: &Path, want: &Want) -> Result<Perftest, String> {
    let fabric = scratch.join("perftest-fabric");
    // Private, as the library wants a fabric directory to be.
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&fabric)
        .map_err(|e| format!("cannot make {}: {e}", fabric.display()))?;
    let port = free_port().map_err(|e| e.to_string())?.to_string();
    let (size, iters) = (want.size.to_string(), want.iters.to_string());
    let spawn = |dev: &str, server: Option<&str>| -> Result<Child, String> {
        let mut args: Vec<std::ffi::OsString> =
            ["-d", dev, "-p", &port, "-s", &size, "-n", &iters].iter().map(Into::into).collect();
        args.extend(server.map(Into::into));
        let mut cmd = run::command(Some(&fabric), "ib_send_lat".as_ref(), &args)
            .map_err(|e| e.to_string())?;
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
        cmd.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                "ib_send_lat is not installed (apt-get install perftest)".to_string()
            }
            _ => format!("cannot run ib_send_lat: {e}"),
        })
    };
    let mut server = spawn("softverbs0", None)?;
    let start = Instant::now();
    while !listening(port.parse().unwrap_or(0)) {
        if start.elapsed() > Duration::from_secs(10) || matches!(server.try_wait(), Ok(Some(_))) {
            let (_, out) = finish(&mut server, Duration::ZERO);
            let said = out.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('-'));
            return Err(format!(
                "ib_send_lat's server did not start listening{}",
                said.map(|l| format!(" (it said: {l})")).unwrap_or_default()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client = match spawn("softverbs1", Some("127.0.0.1")) {
        Ok(c) => c,
        Err(e) => {
            stop(&mut server);
            return Err(e);
        }
    };
    let limit = Duration::from_secs(60);
    let (ok, out) = finish(&mut client, limit);
    let _ = finish(&mut server, Duration::from_secs(5));
    if !ok {
        return Err("ib_send_lat did not finish".into());
    }
    // The result row: #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%.
    out.lines()
        .find_map(|l| {
            let f: Vec<f64> =
                l.split_whitespace().map(str::parse).collect::<Result<_, _>>().ok()?;
            (f.len() >= 5 && f[0] == f64::from(want.size)).then(|| Perftest {
                min: f[2],
                max: f[3],
                typical: f[4],
            })
        })
        .ok_or_else(|| "ib_send_lat printed no result row".into())
}

/// The grades of lab 11's measurement: each (points, what, why it failed).
pub fn grade(
    n: u32,
    want: &Want,
    stdout: &str,
    wire: &Wire,
    perftest: impl FnOnce() -> Result<Perftest, String>,
) -> Vec<(u32, String, Option<String>)> {
    let line = format!("lat half_rtt_us median=M iters={}", want.iters);
    let Some((got, iters)) = printed(stdout) else {
        let why = format!(
            "lab {n}: the program did not print `{line}`: time each round trip with \
             clock_gettime(CLOCK_MONOTONIC), keep half of each, and print their median in \
             microseconds (TODO(1)-(3))"
        );
        return vec![(2, format!("output: {line}"), Some(why))];
    };
    let mut g = Vec::new();
    let iters_wrong = (iters != want.iters).then(|| {
        format!(
            "lab {n}: the program says iters={iters}, expected {}: the median is of the {} \
             timed round trips, after the {} warm-up ones",
            want.iters, want.iters, want.warmup
        )
    });
    g.push((2, format!("output: {line}"), iters_wrong));
    let on_wire = wire_median(wire);
    let wrong = match on_wire {
        None => Some(format!(
            "lab {n}: the wire shows no ping-pong of SENDs to compare the median with"
        )),
        Some(w) => far(got, w, WIRE_FACTOR).map(|why| {
            format!(
                "lab {n}: the program's median half round trip is {got:.2} us, the wire's \
                 {w:.2} us (from the capture's times of the requester's SENDs): {why}"
            )
        }),
    };
    g.push((
        3,
        format!("the median ({got:.2} us) is the wire's half round trip, within {WIRE_FACTOR}x"),
        wrong,
    ));
    let (what, wrong) = match perftest() {
        Ok(p) => {
            let t = p.typical;
            let inside = got >= p.min && got <= p.max;
            (
                format!(
                    "the median ({got:.2} us) is near ib_send_lat's t_typical ({t:.2} us, -s {} \
                     -n {}), within {PERFTEST_FACTOR}x or its range ({:.2}-{:.2} us)",
                    want.size, want.iters, p.min, p.max
                ),
                far(got, t, PERFTEST_FACTOR).filter(|_| !inside).map(|why| {
                    format!(
                        "lab {n}: the program's median is {got:.2} us, ib_send_lat's t_typical \
                         {t:.2} us (its samples {:.2}-{:.2} us): {why}",
                        p.min, p.max
                    )
                }),
            )
        }
        Err(e) => (
            "the median is near ib_send_lat's t_typical".to_string(),
            Some(format!("lab {n}: ib_send_lat could not be run to compare with: {e}")),
        ),
    };
    g.push((3, what, wrong));
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reasons_name_the_mistake() {
        assert_eq!(printed("x\nlat half_rtt_us median=5.25 iters=500\n"), Some((5.25, 500)));
        assert_eq!(printed("lat half_rtt_us median=abc iters=500"), None);
        assert_eq!(far(10.0, 9.0, WIRE_FACTOR), None);
        assert_eq!(far(1.2, 0.4, WIRE_FACTOR), None, "within a microsecond");
        assert!(far(20.0, 10.0, WIRE_FACTOR).unwrap().contains("whole round trip"));
        assert!(far(10000.0, 10.0, WIRE_FACTOR).unwrap().contains("thousand times too large"));
        assert!(far(0.01, 10.0, WIRE_FACTOR).unwrap().contains("thousand times too small"));
        assert!(far(2.0, 10.0, WIRE_FACTOR).unwrap().contains("only part of the round trip"));
        assert!(far(40.0, 10.0, WIRE_FACTOR).unwrap().contains("covers more than"));
        let mut w = Wire::default();
        w.sends.extend([
            (0, [10, 0, 0, 1].into()),
            (5_000, [10, 0, 0, 2].into()),
            (10_000, [10, 0, 0, 1].into()),
            (30_000, [10, 0, 0, 1].into()),
        ]);
        // Round trips of 10 and 20 us: halves 5 and 10, the upper middle 10.
        assert_eq!(wire_median(&w), Some(10.0));
        let g = grade(11, &LAB11, "lat half_rtt_us median=20.00 iters=500", &w, || {
            Ok(Perftest { min: 5.0, max: 15.0, typical: 9.0 })
        });
        assert!(g[1].2.as_deref().is_some_and(|s| s.contains("whole round trip")), "{:?}", g[1]);
        assert!(g[2].2.is_none(), "{:?}", g[2]);
        // Beyond 10x of t_typical but inside perftest's own samples' range: a busy moment.
        let g = grade(11, &LAB11, "lat half_rtt_us median=100.00 iters=500", &w, || {
            Ok(Perftest { min: 5.0, max: 150.0, typical: 9.0 })
        });
        assert!(g[2].2.is_none(), "{:?}", g[2]);
        let g = grade(11, &LAB11, "lat half_rtt_us median=9000.00 iters=500", &w, || {
            Ok(Perftest { min: 5.0, max: 150.0, typical: 9.0 })
        });
        assert!(g[2].2.as_deref().is_some_and(|s| s.contains("thousand times too large")));
        let g = grade(11, &LAB11, "lat half_rtt_us median=10.00 iters=500", &w, || {
            Err("ib_send_lat is not installed (apt-get install perftest)".into())
        });
        assert!(g[1].2.is_none());
        assert!(g[2].2.as_deref().is_some_and(|s| s.contains("apt-get install perftest")));
    }
}
