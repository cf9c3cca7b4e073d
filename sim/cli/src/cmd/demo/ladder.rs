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
}

/// What the demo saw, in order, for its ladder.
pub(super) struct Recorder {
    start: Instant,
    seen: Mutex<Vec<Seen>>,
    /// The target's receive completion, as the target reported it at the end.
    target_cqe: Mutex<Option<String>>,
    terminal: bool,
    svg: Option<PathBuf>,
}

impl Recorder {
    /// A recorder if `--ladder` or `--svg` asked for one.
    pub(super) fn new(terminal: bool, svg: Option<PathBuf>) -> Option<Recorder> {
        (terminal || svg.is_some()).then(|| Recorder {
            start: Instant::now(),
            seen: Mutex::new(Vec::new()),
            target_cqe: Mutex::new(None),
            terminal,
            svg,
        })
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

    /// A completion the initiator polled.
    pub(super) fn cqe(&self, wc: &WorkCompletion) {
        self.push(Seen::Cqe(self.ns(), format!("CQE {} {}", wc.opcode.name(), wc.status.name())));
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
        let target_cqe = self.target_cqe.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut recv_shown = false;
        let mut last_send: Option<usize> = None;
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        // Times from the first packet: the set-up before it is not on the wire.
        let t0 = seen.iter().find_map(|s| match s {
            Seen::Packet(t, ..) => Some(*t),
            Seen::Cqe(..) => None,
        });
        let since = |t: u64| Some(t.saturating_sub(t0.unwrap_or(0)));
        for s in seen.iter() {
            match s {
                Seen::Packet(t, dir, data) => {
                    let (from, to) = match dir {
                        TapDir::Tx => (INITIATOR, TARGET),
                        TapDir::Rx => (TARGET, INITIATOR),
                    };
                    // The tap sees no timers: a request the initiator sends while it waits out
                    // an RNR NAK is what its RNR timer firing looks like on the wire (the demo
                    // has one QP, so nothing else can be sent meanwhile).
                    if from == INITIATOR && l.in_rnr_wait(INITIATOR) {
                        let label = "RNR timer fired: send again".to_string();
                        l.mark(INITIATOR, since(*t), MarkKind::Timer, label);
                    }
                    let p = Packet::from_datagram(from, to, since(*t), data);
                    let is_send = p.opcode_name().contains("SEND ONLY")
                        || p.opcode_name().contains("SEND LAST");
                    let acked = matches!(p.response, Some(softverbs_sim::ladder::Response::Ack));
                    l.packet(p);
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
                    l.mark(INITIATOR, since(*t), MarkKind::Completion, what.clone())
                }
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
        let r = Recorder::new(true, None).unwrap();
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
