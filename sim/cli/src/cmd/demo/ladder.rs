//! The demo's packet ladder (`demo --ladder`, `demo --svg FILE`): what the wire tap of the
//! initiator's device saw and the completions the demo polled, kept in order during the run
//! and drawn after it with [`softverbs_sim::ladder`].

use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use nic_model::soft::TapDir;
use softverbs_sim::ladder::{self, Ladder, MarkKind, Packet};
use verbs_api::WorkCompletion;

use crate::cmd::CliError;

/// The initiator's lifeline and the target's.
const INITIATOR: usize = 0;
const TARGET: usize = 1;

enum Seen {
    /// A datagram the initiator's device sent (Tx) or received (Rx), and when.
    Packet(u64, TapDir, Vec<u8>),
    /// A completion the initiator polled, and when.
    Cqe(u64, String),
    /// Words the run put on the initiator's lifeline (which operation comes next), and when.
    Note(u64, String),
}

/// What the demo saw, in order, for its ladder.
pub(super) struct Recorder {
    start: Instant,
    seen: Mutex<Vec<Seen>>,
    /// The target's receive completion, as the target reported it at the end.
    target_cqe: Mutex<Option<String>>,
    terminal: bool,
    svg: Option<PathBuf>,
    /// Rows spaced by time (`--time-scale`).
    time_scale: bool,
    /// The initiator's `rnr_retry`, when the run set one: an RNR NAK past it begins no wait.
    rnr_retry: Mutex<Option<u8>>,
}

impl Recorder {
    /// A recorder if `--ladder` or `--svg` asked for one; `time_scale`: rows spaced by time.
    pub(super) fn new(terminal: bool, svg: Option<PathBuf>, time_scale: bool) -> Option<Recorder> {
        (terminal || svg.is_some()).then(|| Recorder {
            start: Instant::now(),
            seen: Mutex::new(Vec::new()),
            target_cqe: Mutex::new(None),
            terminal,
            svg,
            time_scale,
            rnr_retry: Mutex::new(None),
        })
    }

    /// The initiator's QP has this `rnr_retry`.
    pub(super) fn rnr_retry(&self, r: u8) {
        *self.rnr_retry.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
    }

    /// Words for the initiator's lifeline, drawn where the run is now.
    pub(super) fn note(&self, what: &str) {
        self.push(Seen::Note(self.ns(), what.to_string()));
    }

    fn ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn push(&self, s: Seen) {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).push(s);
    }

    /// A datagram the wire tap saw.
    pub(super) fn packet(&self, dir: TapDir, data: &[u8]) {
        self.push(Seen::Packet(self.ns(), dir, data.to_vec()));
    }

    /// A completion the initiator polled: its opcode and status, or, in error, its wr_id and
    /// status (the opcode of a completion in error is undefined: rxe leaves it 0).
    pub(super) fn cqe(&self, wc: &WorkCompletion) {
        self.push(Seen::Cqe(
            self.ns(),
            format!("CQE {}", softverbs_sim::world::scenario::cqe_label(wc)),
        ));
    }

    /// A line the target reported at the end: its receive completion is drawn where its NIC
    /// wrote it, on the arrival of the SEND that its ACK acknowledged (its program polled it
    /// only at the end).
    pub(super) fn target_line(&self, line: &str) {
        if let Some(wc) = line.strip_prefix("target CQ: ") {
            let field = |k: &str| {
                wc.split_whitespace().find_map(|f| f.strip_prefix(k)).unwrap_or("?").to_string()
            };
            let label = format!("CQE {} {}", field("opcode="), field("status="));
            *self.target_cqe.lock().unwrap_or_else(|e| e.into_inner()) = Some(label);
        }
    }

    /// The ladder of what was seen.
    pub(super) fn ladder(&self, initiator: &str, target: &str) -> Ladder {
        let mut l = Ladder::new(
            format!("softverbs demo: packet ladder of the initiator's wire ({initiator})"),
            vec![format!("initiator {initiator}"), format!("target {target}")],
        );
        l.time_scale = self.time_scale;
        l.rnr_retry = *self.rnr_retry.lock().unwrap_or_else(|e| e.into_inner());
        let target_cqe = self.target_cqe.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut recv_shown = false;
        let mut last_send: Option<usize> = None;
        // The PSNs the initiator has sent, the last one, and whether it is resending a round.
        let mut sent = std::collections::HashSet::new();
        let mut last_tx: Option<u32> = None;
        let mut resending = false;
        // A PSN sequence error NAK since the last send: a go-back that no timer started.
        let mut nak_back = false;
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        // Times from the first packet: the set-up before it is not on the wire.
        let t0 = seen.iter().find_map(|s| match s {
            Seen::Packet(t, ..) => Some(*t),
            Seen::Cqe(..) | Seen::Note(..) => None,
        });
        let since = |t: u64| Some(t.saturating_sub(t0.unwrap_or(0)));
        for s in seen.iter() {
            match s {
                Seen::Packet(t, dir, data) => {
                    let (from, to) = match dir {
                        TapDir::Tx => (INITIATOR, TARGET),
                        TapDir::Rx => (TARGET, INITIATOR),
                    };
                    let p = Packet::from_datagram(from, to, since(*t), data);
                    // The tap sees no timers, but the sends show them (the demo has one QP,
                    // so nothing else is sent meanwhile): a request sent while the initiator
                    // waits out an RNR NAK is its RNR timer firing; a PSN sent before, with no
                    // NAK asking for it, starts a round of resends that its local ACK timer
                    // started.
                    if from == INITIATOR {
                        let again = sent.contains(&p.psn);
                        let new_round = !resending || last_tx.is_some_and(|l| p.psn <= l);
                        if l.in_rnr_wait(INITIATOR) {
                            let label = "RNR timer fired: send again".to_string();
                            l.mark(INITIATOR, since(*t), MarkKind::Timer, label);
                            resending = true;
                        } else if again && new_round && !nak_back {
                            let label = "local ACK timeout: no ACK came; go back and resend".into();
                            l.mark(INITIATOR, since(*t), MarkKind::Timer, label);
                            resending = true;
                        } else if !again {
                            resending = false;
                        }
                        nak_back = false;
                        sent.insert(p.psn);
                        last_tx = Some(p.psn);
                    }
                    let is_send = p.opcode_name().contains("SEND ONLY")
                        || p.opcode_name().contains("SEND LAST");
                    let acked = matches!(p.response, Some(softverbs_sim::ladder::Response::Ack));
                    let seq_err = matches!(
                        p.response,
                        Some(softverbs_sim::ladder::Response::Nak(Some(
                            nic_model::packet::NakCode::PsnSequenceError
                        )))
                    );
                    let rnr_before = l.packets().any(|q| {
                        q.to == INITIATOR
                            && matches!(
                                q.response,
                                Some(softverbs_sim::ladder::Response::RnrNak(_))
                            )
                    });
                    let psn = p.psn;
                    l.packet(p);
                    if seq_err {
                        nak_back = true;
                        // Why it came: the target refused PSN `psn` (an RNR NAK, or a lost
                        // packet) and then saw the next one, out of order.
                        let why = match rnr_before {
                            true => format!(
                                "target expects PSN {psn:#08x} (RNR NAKed), got a later one"
                            ),
                            false => format!("target expects PSN {psn:#08x}, got a later one"),
                        };
                        l.mark(INITIATOR, since(*t), MarkKind::Note, why);
                    }
                    if from == INITIATOR && is_send {
                        // The last transmission of the SEND so far: if an ACK follows, this
                        // is the one that landed in the target's receive.
                        last_send = Some(l.events.len());
                    } else if acked {
                        if let (Some(at), Some(c), false) =
                            (last_send.take(), &target_cqe, recv_shown)
                        {
                            let mark = softverbs_sim::ladder::Mark {
                                lane: TARGET,
                                time_ns: None,
                                kind: MarkKind::Completion,
                                label: c.clone(),
                            };
                            l.events.insert(at, softverbs_sim::ladder::Event::Mark(mark));
                            recv_shown = true;
                        }
                    }
                }
                Seen::Cqe(t, what) => {
                    // The last local ACK timeout resends nothing: it ends the retries.
                    if what.ends_with(" IBV_WC_RETRY_EXC_ERR") {
                        let label = "local ACK timeout: no retry left (retry_cnt spent)".into();
                        l.mark(INITIATOR, since(*t), MarkKind::Timer, label);
                    }
                    l.mark(INITIATOR, since(*t), MarkKind::Completion, what.clone())
                }
                Seen::Note(t, what) => l.mark(INITIATOR, since(*t), MarkKind::Note, what.clone()),
            }
        }
        l
    }

    /// Draw the ladder: in the terminal, to the SVG file, or both.
    pub(super) fn draw(
        &self,
        initiator: &str,
        target: &str,
        tapped: bool,
        out: &mut dyn Write,
    ) -> Result<(), CliError> {
        if !tapped {
            let _ = writeln!(
                out,
                "\nNo packet ladder: {initiator} is not a softverbs device, so its packets are not \
                 seen here."
            );
            return Ok(());
        }
        let l = self.ladder(initiator, target);
        if self.terminal {
            let _ = writeln!(out);
            ladder::print(&l, out).map_err(crate::cmd::output_error)?;
        }
        if let Some(path) = &self.svg {
            ladder::write_svg(&l, path).map_err(CliError::failed)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nic_model::packet::{emit_datagram, Aeth, Bth, IpUdp, Opcode, Psn};

    fn datagram(opcode: Opcode, psn: u32, aeth: Option<Aeth>, payload: &[u8]) -> Vec<u8> {
        let bth = Bth { opcode, psn: Psn::new(psn), dest_qp: 0x11, ..Bth::default() };
        let mut p = nic_model::packet::Packet::new(bth, payload);
        p.aeth = aeth;
        let mut out = Vec::new();
        emit_datagram(&IpUdp::default(), &p, &mut out).unwrap();
        out
    }

    #[test]
    fn an_rnr_nak_then_the_send_again_is_a_wait_ended_by_the_rnr_timer() {
        let r = Recorder::new(true, None, false).unwrap();
        let send = datagram(Opcode::RC_SEND_ONLY, 0x1000, None, b"hello");
        r.packet(TapDir::Tx, &send);
        r.packet(
            TapDir::Rx,
            &datagram(Opcode::RC_ACKNOWLEDGE, 0x1000, Some(Aeth::rnr_nak(14, 0)), &[]),
        );
        r.packet(TapDir::Tx, &send);
        r.packet(TapDir::Rx, &datagram(Opcode::RC_ACKNOWLEDGE, 0x1000, Some(Aeth::ack(1)), &[]));
        r.target_line("target CQ: wr_id=100 status=IBV_WC_SUCCESS opcode=IBV_WC_RECV byte_len=5");
        let l = r.ladder("softverbs0", "softverbs1");
        let rows: Vec<String> = l
            .events
            .iter()
            .map(|e| match e {
                softverbs_sim::ladder::Event::Packet(p) => {
                    format!("{}->{} {}", p.from, p.to, p.label())
                }
                softverbs_sim::ladder::Event::Mark(m) => {
                    format!("{} {:?} {}", m.lane, m.kind, m.label)
                }
            })
            .collect();
        assert_eq!(
            rows,
            [
                "0->1 RC SEND ONLY PSN 0x001000",
                "1->0 RC ACKNOWLEDGE PSN 0x001000 RNR NAK (timer 14)",
                "0 RnrWait RNR wait begins",
                "0 Timer RNR timer fired: send again",
                "0->1 RC SEND ONLY PSN 0x001000",
                // The receive completion: on the SEND the ACK acknowledged, not the first one.
                "1 Completion CQE IBV_WC_RECV IBV_WC_SUCCESS",
                "1->0 RC ACKNOWLEDGE PSN 0x001000 ACK",
            ]
        );
        assert!(!l.in_rnr_wait(0));
    }
}
