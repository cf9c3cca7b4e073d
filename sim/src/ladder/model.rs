//! What a packet ladder shows, independent of how it is drawn: the lifelines (one per node),
//! and in order the packets between them (opcode, PSN, ACK/NAK, dropped or not) and the marks
//! on a lifeline (a completion written, a timer fired, an RNR wait begun or ended).

use nic_model::packet::{self, AethKind, NakCode, Opcode};

/// A packet ladder: lifelines and what happened between them, oldest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ladder {
    /// What the ladder shows (the SVG's `<title>`, the terminal ladder's first line).
    pub title: String,
    /// One lifeline per node, left to right.
    pub lanes: Vec<String>,
    /// What happened, in order.
    pub events: Vec<Event>,
    /// The requesters' `rnr_retry`, if known: an RNR NAK that finds no retry left (7 means no
    /// limit) begins no wait, the QP goes to the error state instead.
    pub rnr_retry: Option<u8>,
    /// Space the rows by the time between them (a longer gap, more blank rows, each gap
    /// labelled with its length), not evenly.
    pub time_scale: bool,
}

/// One row of a ladder.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A packet from one lifeline to another.
    Packet(Packet),
    /// Something on one lifeline.
    Mark(Mark),
}

/// What an acknowledgement packet's AETH says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Response {
    /// A positive acknowledgement up to this packet's PSN.
    Ack,
    /// An RNR NAK: the responder had no receive posted; the requester waits for the timer code.
    RnrNak(u8),
    /// A NAK with this syndrome.
    Nak(Option<NakCode>),
}

/// One packet, as the ladder draws it.
#[derive(Clone, Debug, PartialEq)]
pub struct Packet {
    /// The lifeline it leaves.
    pub from: usize,
    /// The lifeline it is bound for.
    pub to: usize,
    /// Virtual or wall-clock time, in ns since the ladder's start, if known.
    pub time_ns: Option<u64>,
    /// The BTH opcode.
    pub opcode: u8,
    /// The BTH PSN.
    pub psn: u32,
    /// The AETH's meaning, on responses that carry one.
    pub response: Option<Response>,
    /// Why it never arrived (`lost`, `queue full`, `partition`, ...), if it was dropped.
    pub dropped: Option<&'static str>,
    /// Payload bytes.
    pub payload: usize,
}

/// What a mark on a lifeline means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkKind {
    /// A work completion was written to a CQ on this node.
    Completion,
    /// A transport timer fired (the local ACK timeout or the RNR timer).
    Timer,
    /// The requester began waiting out an RNR NAK's timer.
    RnrWait,
    /// Words on a lifeline that explain the rows around them (no event of the transport: why a
    /// NAK came, which operation a packet belongs to, a QP that went to the error state).
    Note,
}

/// A mark on one lifeline.
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    /// The lifeline.
    pub lane: usize,
    /// When, in ns since the ladder's start, if known.
    pub time_ns: Option<u64>,
    /// What.
    pub kind: MarkKind,
    /// The words next to it (`CQE RDMA_WRITE success`, `local ACK timeout`).
    pub label: String,
}

/// The IBA name of a NAK syndrome, as a learner reads it in the specification (C9-... "NAK
/// codes").
pub fn nak_name(code: Option<NakCode>) -> &'static str {
    match code {
        Some(NakCode::PsnSequenceError) => "PSN sequence error",
        Some(NakCode::InvalidRequest) => "invalid request",
        Some(NakCode::RemoteAccessError) => "remote access error",
        Some(NakCode::RemoteOperationalError) => "remote operational error",
        Some(NakCode::InvalidRdRequest) => "invalid RD request",
        None => "reserved syndrome",
    }
}

impl Packet {
    /// The packet in `datagram` (IPv4 or IPv6, UDP, BTH...) from lifeline `from` to `to`.
    /// A datagram that does not parse (a corrupted or truncated one) still shows the opcode
    /// and PSN its BTH bytes hold, as the simulator's trace does.
    pub fn from_datagram(from: usize, to: usize, time_ns: Option<u64>, datagram: &[u8]) -> Packet {
        match packet::parse_any_datagram(datagram) {
            Ok((_, _, p)) => Packet {
                from,
                to,
                time_ns,
                opcode: p.bth.opcode.0,
                psn: p.bth.psn.value(),
                response: p.aeth.map(|a| match a.kind() {
                    AethKind::Ack { .. } => Response::Ack,
                    AethKind::RnrNak { timer } => Response::RnrNak(timer),
                    AethKind::Nak(c) => Response::Nak(Some(c)),
                    AethKind::Reserved(_) => Response::Nak(None),
                }),
                dropped: None,
                payload: p.payload.len(),
            },
            Err(_) => {
                let bth = if datagram.first().is_some_and(|b| b >> 4 == 6) { 48 } else { 28 };
                let psn = datagram
                    .get(bth + 9..bth + 12)
                    .map_or(0, |b| u32::from_be_bytes([0, b[0], b[1], b[2]]));
                Packet {
                    from,
                    to,
                    time_ns,
                    opcode: datagram.get(bth).copied().unwrap_or(0xff),
                    psn,
                    response: None,
                    dropped: None,
                    payload: 0,
                }
            }
        }
    }

    /// The opcode's IBA name (`RC SEND ONLY`, `RC RDMA WRITE FIRST`, `RC ACKNOWLEDGE`).
    pub fn opcode_name(&self) -> &'static str {
        Opcode(self.opcode).info().map_or("unknown opcode", |i| i.name)
    }

    /// The arrow's label: opcode name, PSN in hex and, on a response, what its AETH says.
    pub fn label(&self) -> String {
        let mut s = format!("{} PSN {:#08x}", self.opcode_name(), self.psn);
        match self.response {
            // A READ RESPONSE's AETH acknowledges as well, but "ACK" on every response packet
            // says nothing new: only a bare ACKNOWLEDGE gets the word.
            Some(Response::Ack) if self.opcode == Opcode::RC_ACKNOWLEDGE.0 => s.push_str(" ACK"),
            Some(Response::Ack) | None => {}
            Some(Response::RnrNak(t)) => s.push_str(&format!(" RNR NAK (timer {t})")),
            Some(Response::Nak(c)) => s.push_str(&format!(" NAK {}", nak_name(c))),
        }
        s
    }
}

impl Ladder {
    /// An empty ladder with these lifelines.
    pub fn new(title: impl Into<String>, lanes: Vec<String>) -> Ladder {
        Ladder {
            title: title.into(),
            lanes,
            events: Vec::new(),
            rnr_retry: None,
            time_scale: false,
        }
    }

    /// The packets, in order.
    pub fn packets(&self) -> impl Iterator<Item = &Packet> {
        self.events.iter().filter_map(|e| match e {
            Event::Packet(p) => Some(p),
            Event::Mark(_) => None,
        })
    }

    /// Add a packet. Besides the packet, an RNR NAK that arrives marks the start of the
    /// requester's RNR wait on its lifeline, and a timer that fires on a lifeline that is in
    /// an RNR wait is that wait's RNR timer (see [`Ladder::timer`]).
    pub fn packet(&mut self, p: Packet) {
        let rnr = matches!(p.response, Some(Response::RnrNak(_))) && p.dropped.is_none();
        let (to, time_ns, psn) = (p.to, p.time_ns, p.psn);
        // The RNR NAKs this lane already had for this PSN: each was a retry spent.
        let spent = self
            .packets()
            .filter(|q| q.to == to && q.psn == psn && q.dropped.is_none())
            .filter(|q| matches!(q.response, Some(Response::RnrNak(_))))
            .count();
        self.events.push(Event::Packet(p));
        if rnr {
            match self.rnr_retry {
                Some(r) if r < 7 && spent >= usize::from(r) => {
                    let label = format!(
                        "no RNR retry left (rnr_retry {r}): no wait, the QP goes to IBV_QPS_ERR"
                    );
                    self.mark(to, time_ns, MarkKind::Note, label);
                }
                _ => self.mark(to, time_ns, MarkKind::RnrWait, "RNR wait begins".into()),
            }
        }
    }

    /// Add a mark.
    pub fn mark(&mut self, lane: usize, time_ns: Option<u64>, kind: MarkKind, label: String) {
        self.events.push(Event::Mark(Mark { lane, time_ns, kind, label }));
    }

    /// Whether `lane` is waiting out an RNR NAK: one arrived and no timer has fired since.
    pub fn in_rnr_wait(&self, lane: usize) -> bool {
        for e in self.events.iter().rev() {
            if let Event::Mark(m) = e {
                if m.lane == lane {
                    match m.kind {
                        MarkKind::RnrWait => return true,
                        MarkKind::Timer => return false,
                        MarkKind::Completion | MarkKind::Note => {}
                    }
                }
            }
        }
        false
    }

    /// A transport timer fired on `lane`: the RNR timer if the lane is in an RNR wait, else
    /// the local ACK timeout (the only other transport timer a requester runs).
    pub fn timer(&mut self, lane: usize, time_ns: Option<u64>) {
        let label = if self.in_rnr_wait(lane) {
            "RNR timer fired: send again"
        } else {
            "local ACK timeout: go back and resend"
        };
        self.mark(lane, time_ns, MarkKind::Timer, label.into());
    }

    /// The lanes that are in an RNR wait just before each event (for drawing the lifeline).
    pub fn rnr_waiting(&self) -> Vec<Vec<bool>> {
        let mut waiting = vec![false; self.lanes.len()];
        let mut out = Vec::with_capacity(self.events.len());
        for e in &self.events {
            out.push(waiting.clone());
            if let Event::Mark(m) = e {
                if let Some(w) = waiting.get_mut(m.lane) {
                    match m.kind {
                        MarkKind::RnrWait => *w = true,
                        MarkKind::Timer => *w = false,
                        MarkKind::Completion | MarkKind::Note => {}
                    }
                }
            }
        }
        out
    }

    /// With [`Ladder::time_scale`], the blank rows to leave before each event and the gap they
    /// stand for: none under 100 µs since the last timed event, then one row per decade (100 µs,
    /// 1 ms, 10 ms and more: at most three), so that a 1.2 ms wait no longer looks like the
    /// 5 µs between two packets. Without it, none.
    pub fn time_gaps(&self) -> Vec<(usize, u64)> {
        let mut last: Option<u64> = None;
        self.events
            .iter()
            .map(|e| {
                let t = match e {
                    Event::Packet(p) => p.time_ns,
                    Event::Mark(m) => m.time_ns,
                };
                let Some(t) = t.filter(|_| self.time_scale) else { return (0, 0) };
                let dt = last.map_or(0, |l| t.saturating_sub(l));
                last = Some(t);
                let rows = match dt {
                    0..100_000 => 0,
                    100_000..1_000_000 => 1,
                    1_000_000..10_000_000 => 2,
                    _ => 3,
                };
                (rows, dt)
            })
            .collect()
    }
}
