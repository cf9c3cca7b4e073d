//! `softverbs labs check N PROGRAM`: run a student's lab program on softverbs (through
//! `softverbs run`'s library set-up, on a private fabric, with a capture, for a bounded time,
//! killing whatever it forked), then grade what it left: the packets on the wire, the
//! completions it printed and the bytes that landed, each check with its points and, when it
//! fails, a sentence saying what is wrong and what to change.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::latency;
use super::spec::{Lab, WcWant};
use super::wire::{self, Journal, Wire};
use crate::cmd::{run, CliError};

/// How long a lab program may run: every lab finishes in well under a second on softverbs; a
/// program still running after this waits for something that will not come.
pub const TIME_LIMIT: Duration = Duration::from_secs(20);

/// What the program did: its exit status (None: killed at the time limit), its output and the
/// packets its devices saw.
struct Outcome {
    status: Option<i32>,
    stdout: String,
    /// Its stderr, without the journal's lines.
    stderr: String,
    /// The packets its devices saw.
    wire: Wire,
    /// The memory regions and QPs it made.
    journal: Journal,
}

/// A private directory (mode 0700) for the run's fabric and captures, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, CliError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir =
            std::env::temp_dir().join(format!("softverbs-lab-{}-{nanos}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(dir.join("fabric"))
            .map_err(|e| CliError::failed(format!("cannot make {}: {e}", dir.display())))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Kill the program's whole process group (it forks its sides), by the group's id.
fn kill_group(child: &mut Child) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
    let _ = child.kill();
    let _ = child.wait();
}

fn reader(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut p) = pipe {
            let mut b = Vec::new();
            let _ = p.read_to_end(&mut b);
            s = String::from_utf8_lossy(&b).into_owned();
        }
        s
    })
}

/// Run `program` as the lab's checker does.
fn execute(program: &Path) -> Result<Outcome, CliError> {
    let scratch = Scratch::new()?;
    let mut cmd = run::command(Some(&scratch.0.join("fabric")), program.as_os_str(), &[])?;
    cmd.env("SOFTVERBS_PCAP", scratch.0.join("cap-{pid}.pcap"))
        .env("SOFTVERBS_LOG", wire::JOURNAL_FILTER)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| CliError::usage(format!("cannot run {}: {e}", program.display())))?;
    let out = reader(child.stdout.take());
    let err = reader(child.stderr.take());
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s.code().unwrap_or(-1)),
            Ok(None) if start.elapsed() < TIME_LIMIT => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => break None,
        }
    };
    // Its forked sides too, whether it finished or not: nothing of the run stays behind.
    kill_group(&mut child);
    let stdout = out.join().unwrap_or_default();
    let (journal, stderr) = Journal::split(&err.join().unwrap_or_default());
    Ok(Outcome { status, stdout, stderr, wire: wire::read(&scratch.0), journal })
}

/// The `key=value` fields of a `wc SIDE ...` line.
fn fields(line: &str) -> HashMap<&str, &str> {
    line.split_whitespace().filter_map(|t| t.split_once('=')).collect()
}

/// What to change for a completion that failed with `status`; `refused`: what the wire and
/// the journal say of the first refused access, if one was.
fn status_hint(status: &str, want: &WcWant, refused: Option<&str>) -> String {
    match status {
        "IBV_WC_REM_ACCESS_ERR" | "IBV_WC_REM_INV_REQ_ERR" if refused.is_some() => {
            refused.unwrap_or_default().to_string()
        }
        "IBV_WC_REM_ACCESS_ERR" => "the responder refused the access: its memory region needs \
             the IBV_ACCESS_REMOTE_* flag for this operation in ibv_reg_mr, its QP the same in \
             qp_access_flags, and the rkey and address must be the peer's"
            .to_string(),
        "IBV_WC_RNR_RETRY_EXC_ERR" => {
            "the responder had no receive posted (Receiver Not Ready): ibv_post_recv before the \
             requester sends"
                .to_string()
        }
        "IBV_WC_LOC_PROT_ERR" => "the SGE's lkey or range is not inside a memory region of this \
             side with IBV_ACCESS_LOCAL_WRITE"
            .to_string(),
        _ => want.hint.to_string(),
    }
}

/// The diagnosis for one wanted completion, None when the program printed it right.
fn check_wc(n: u32, want: &WcWant, out: &str, refused: Option<&str>) -> Option<String> {
    let prefix = format!("wc {} ", want.side);
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with(&prefix)).collect();
    // The successful completion of the wanted opcode; else one in error (its opcode is
    // undefined, 0 as on rxe, so it can be any WR's); else the first.
    let ok = |l: &&&str| fields(l).get("status") == Some(&"IBV_WC_SUCCESS");
    let line = lines
        .iter()
        .filter(ok)
        .find(|l| fields(l).get("opcode") == Some(&want.opcode))
        .or_else(|| lines.iter().find(|l| !ok(l)))
        .or(lines.first());
    let Some(line) = line else {
        return Some(format!(
            "lab {n}: the {} printed no completion (a `wc {} ...` line), expected one with \
             opcode {}: {}",
            want.side, want.side, want.opcode, want.hint
        ));
    };
    let f = fields(line);
    let side = want.side;
    let status = f.get("status").copied().unwrap_or("(none)");
    if status != "IBV_WC_SUCCESS" {
        return Some(format!(
            "lab {n}: the {side}'s completion has status {status}, expected IBV_WC_SUCCESS: {}",
            status_hint(status, want, refused)
        ));
    }
    let opcode = f.get("opcode").copied().unwrap_or("(none)");
    if opcode != want.opcode {
        return Some(format!(
            "lab {n}: the {side}'s completion has opcode {opcode}, expected {}: {}",
            want.opcode, want.hint
        ));
    }
    if let Some(len) = want.byte_len {
        let got = f.get("byte_len").copied().unwrap_or("(none)");
        if got != len.to_string() {
            return Some(format!(
                "lab {n}: the {side}'s {opcode} completion has byte_len={got}, expected {len}: \
                 {}",
                want.hint
            ));
        }
    }
    if let Some(imm) = want.imm {
        let got = f.get("imm").copied().unwrap_or("(none)");
        if got != imm {
            return Some(format!(
                "lab {n}: the {side}'s completion has imm={got}, expected {imm} (imm_data is \
                 in network byte order: htonl on the sender, ntohl on the receiver): {}",
                want.hint
            ));
        }
    }
    None
}

/// The attribute mask each transition requires of an RC QP (the IBA's table of required
/// attributes, as the kernel's `ib_modify_qp_is_ok` checks it), for a program whose stderr
/// says `modify to STATE: ...` (labkit's `lab_die`) was refused.
fn refused_modify(stderr: &str) -> Option<String> {
    let (state, mask) = [
        ("INIT", "IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS"),
        (
            "RTR",
            "IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | \
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER",
        ),
        (
            "RTS",
            "IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY \
             | IBV_QP_MAX_QP_RD_ATOMIC",
        ),
    ]
    .into_iter()
    .find(|(st, _)| stderr.contains(&format!("modify to {st}:")))?;
    Some(format!(
        ": ibv_modify_qp to {state} was refused; an RC QP's move to {state} requires the mask \
         {mask}, each attribute set"
    ))
}

/// What a graded check looks at: the order in which a failure is taken as the first mistake
/// the program met (a completion that failed with an error status is where the program met
/// it; a missing packet, completion or line comes after).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    FailedCompletion,
    Wire,
    Completion,
    Output,
    Exit,
}

/// The first call softverbs refused (its `SOFTVERBS_LOG` warning), for a program that exited
/// with an error, with a word on what an atomic needs when that was the reason.
fn refused_call(refused: &[String]) -> Option<String> {
    let first = refused.first()?;
    let why = match first.contains("not 8-byte aligned") {
        true => {
            "; an atomic acts on one aligned 8-byte word, so wr.wr.atomic.remote_addr must \
             be a multiple of 8 (the peer's address plus 0, 8, 16, ...)"
        }
        false => "",
    };
    Some(format!(": softverbs refused a call, {first}{why}"))
}

/// One graded check: points, what it checks, and its diagnosis when it failed.
struct Graded {
    points: u32,
    what: String,
    kind: Kind,
    wrong: Option<String>,
}

/// Why a wire row's count is not the one wanted: `hint` (what to post) only when the packet is
/// missing altogether; fewer than wanted means the program stopped early, more means repeats.
fn wire_wrong(n: u32, op: &str, got: usize, count: usize, hint: &str) -> String {
    match got {
        0 => format!("lab {n}: no {op} packet was on the wire, expected {count}: {hint}"),
        g if g < count => format!(
            "lab {n}: only {g} {op} packets were on the wire, expected {count}: the program \
             stopped early, or some were never posted ({hint})"
        ),
        g => format!(
            "lab {n}: {g} {op} packets were on the wire, expected {count}: each is posted once"
        ),
    }
}

/// Grade `out` against `lab`.
fn grade(lab: &Lab, out: &Outcome) -> Vec<Graded> {
    let n = lab.n;
    let mut g = Vec::new();
    let said = match out.stderr.trim().is_empty() {
        true => String::new(),
        false => " (its stderr, below, says why)".into(),
    };
    let exit_wrong = match out.status {
        Some(0) => None,
        Some(s) => Some(format!(
            "lab {n}: the program exited with status {s}, expected 0{}",
            refused_modify(&out.stderr)
                .or_else(|| refused_call(&out.journal.refused))
                .unwrap_or(said)
        )),
        None => Some(format!(
            "lab {n}: the program was still running after {} s and was stopped: something \
             waits for a completion or an event that never comes",
            TIME_LIMIT.as_secs()
        )),
    };
    g.push(Graded {
        points: 1,
        what: "the program exits with status 0".into(),
        kind: Kind::Exit,
        wrong: exit_wrong,
    });
    for &(op, count, hint) in lab.wire {
        let got = out.wire.ops.get(op).copied().unwrap_or(0);
        let wrong = (got != count).then(|| wire_wrong(n, op, got, count, hint));
        g.push(Graded {
            points: 2,
            what: format!("wire: {count} x {op}"),
            kind: Kind::Wire,
            wrong,
        });
    }
    let refused = out.wire.refused_access(&out.journal);
    for w in lab.wcs {
        let wrong = check_wc(n, w, &out.stdout, refused.as_deref());
        let kind = match &wrong {
            Some(why) if why.contains("completion has status") => Kind::FailedCompletion,
            _ => Kind::Completion,
        };
        g.push(Graded {
            points: 2,
            what: format!("completion: {} {}", w.side, w.opcode),
            kind,
            wrong,
        });
    }
    for &(line, hint) in lab.lines {
        let printed = out.stdout.lines().any(|l| l.trim_end() == line);
        let wrong = (!printed).then(|| {
            // The line the program printed in place of it: the same words up to the first
            // `=` (`mr length=`), or the same first two words (`mem responder`).
            let key = match line.find('=') {
                Some(i) => line[..=i].to_string(),
                None => line.split_whitespace().take(2).collect::<Vec<_>>().join(" "),
            };
            // (Not a line another check wants and got: that one is not in place of this.)
            let wanted = |l: &str| lab.lines.iter().any(|(w, _)| l.trim_end() == *w);
            match out.stdout.lines().find(|l| l.starts_with(&key) && !wanted(l)) {
                Some(got) => format!(
                    "lab {n}: the program printed `{}`, expected `{line}`: {hint}",
                    got.trim_end()
                ),
                None => format!("lab {n}: the program did not print `{line}`: {hint}"),
            }
        });
        g.push(Graded { points: 2, what: format!("output: {line}"), kind: Kind::Output, wrong });
    }
    if latency::measures(lab) {
        // ib_send_lat runs only when the program printed a median to compare with it.
        let perftest = || {
            let scratch = Scratch::new().map_err(|e| e.to_string())?;
            latency::ib_send_lat(&scratch.0, &latency::LAB11)
        };
        for (points, what, wrong) in
            latency::grade(n, &latency::LAB11, &out.stdout, &out.wire, perftest)
        {
            g.push(Graded { points, what, kind: Kind::Output, wrong });
        }
    }
    g
}

/// The check whose diagnosis is shown: the first mistake the program met. A refused
/// `ibv_modify_qp` stopped it before anything was sent, so everything after follows from it;
/// otherwise the first failure in [`Kind`]'s order. The exit status is the mistake only when
/// nothing else failed.
fn first_mistake(graded: &[Graded], out: &Outcome) -> Option<usize> {
    let refused = refused_modify(&out.stderr).is_some() || !out.journal.refused.is_empty();
    if refused && graded[0].wrong.is_some() {
        return Some(0);
    }
    graded
        .iter()
        .enumerate()
        .filter(|(_, c)| c.wrong.is_some())
        .min_by_key(|(i, c)| (c.kind, *i))
        .map(|(i, _)| i)
}

/// `softverbs labs check`: run, grade, print each check and the grade line. Ok when every
/// check passed; exit status 1 (a [`CliError::failed`] with the grade) otherwise.
pub fn check(lab: &Lab, program: &Path, w: &mut dyn Write) -> Result<(), CliError> {
    if !program.is_file() {
        return Err(CliError::usage(format!(
            "{} is not a file: build your lab first (labs/{}/README.md says how)",
            program.display(),
            lab.dir
        )));
    }
    let out = execute(program)?;
    let graded = grade(lab, &out);
    let first = first_mistake(&graded, &out);
    let io = crate::cmd::output_error;
    writeln!(w, "lab {}: {} ({})", lab.n, lab.title, program.display()).map_err(io)?;
    let (mut got, mut total) = (0, 0);
    let mut untold = 0;
    for (i, c) in graded.iter().enumerate() {
        total += c.points;
        let (mark, p) = match &c.wrong {
            None => ("pass", c.points),
            Some(_) => ("FAIL", 0),
        };
        got += p;
        writeln!(w, "  [{mark}] {p}/{}  {}", c.points, c.what).map_err(io)?;
        match &c.wrong {
            // The exit status is what happened, said always; a diagnosis only for the first
            // mistake: one mistake at a time, as the program met them.
            Some(why) if Some(i) == first || c.kind == Kind::Exit => {
                writeln!(w, "         {why}").map_err(io)?;
            }
            Some(_) => untold += 1,
            None => {}
        }
    }
    if untold > 0 {
        let after = match first.map(|i| graded[i].kind) {
            Some(Kind::Exit) => {
                "the program stopped at the refused call, so the other failed \
                 checks follow from that and say nothing yet of their own: fix it and check again"
            }
            _ => {
                "one mistake at a time: the first the program met is explained above; the \
                 other failed checks may follow from it: fix it and check again"
            }
        };
        writeln!(w, "  {after}").map_err(io)?;
    }
    let failed = graded.iter().any(|c| c.wrong.is_some());
    if failed && !out.stderr.trim().is_empty() {
        writeln!(w, "  the program's stderr:").map_err(io)?;
        for l in out.stderr.lines().take(10) {
            writeln!(w, "    {l}").map_err(io)?;
        }
    }
    let verdict = if failed { "fail" } else { "pass" };
    writeln!(w, "lab {}: {got}/{total} points: {verdict}", lab.n).map_err(io)?;
    match failed {
        false => Ok(()),
        true => Err(CliError::failed(format!("lab {} not passed ({got}/{total} points)", lab.n))),
    }
}
