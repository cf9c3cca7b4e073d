//! The verdict on a played two-node case: its completions, both MRs and the NICs' counters
//! against the oracles of its transport (RC, UC, UD).

use nic_model::engine::NicStats;
use verbs_api::{QpType, WcOpcode, WcStatus, WorkCompletion};

use super::layout::{whose, Image, Layout, Piece, ATOMIC_WORD, GRH_LEN};
use super::oracle::{self, oracle_ok, AtomicResult, ExpectedWc};
use super::{Case, OpKind, WorkItem};

/// Receives posted at least this late meet the first request (1 µs away): an RNR NAK is due.
const RNR_CERTAIN_DELAY_NS: u64 = 5_000;

/// Everything the oracles look at once a case has run.
pub(super) struct Run<'a> {
    pub(super) case: &'a Case,
    pub(super) work: &'a [WorkItem],
    pub(super) lay: &'a Layout,
    pub(super) sent: &'a [Vec<u8>],
    pub(super) a_init: &'a [u8],
    pub(super) b_init: &'a [u8],
    pub(super) a_mem: Vec<u8>,
    pub(super) b_mem: Vec<u8>,
    pub(super) a_qpn: u32,
    pub(super) b_qpn: u32,
    pub(super) a_ip: [u8; 4],
    pub(super) send_wcs: &'a [WorkCompletion],
    pub(super) recv_wcs: &'a [WorkCompletion],
    /// Requester, responder.
    pub(super) nics: [NicStats; 2],
    /// Packets a full link queue dropped.
    pub(super) queue_drops: u64,
}

impl Run<'_> {
    /// The send completion WR `i` gives with `status`.
    fn send_wc(&self, i: usize, status: WcStatus) -> ExpectedWc {
        let w = &self.work[i];
        ExpectedWc {
            wr_id: i as u64,
            status,
            opcode: WcOpcode::for_send(w.wr_opcode()),
            byte_len: w.len,
            imm: None,
            grh: false,
            qp_num: self.a_qpn,
            src_qp: None,
        }
    }

    /// The receive completion message `i` gives in the receive with `wr_id`.
    fn recv_wc(&self, i: usize, wr_id: u64) -> ExpectedWc {
        let w = &self.work[i];
        let ud = self.case.qp_type == QpType::Ud;
        ExpectedWc {
            wr_id,
            status: WcStatus::Success,
            opcode: if w.kind == OpKind::Send { WcOpcode::Recv } else { WcOpcode::RecvRdmaWithImm },
            byte_len: w.len + if ud { GRH_LEN } else { 0 },
            imm: w.imm,
            grh: ud,
            qp_num: self.b_qpn,
            src_qp: Some(self.a_qpn),
        }
    }

    fn consuming(&self) -> Vec<usize> {
        (0..self.work.len()).filter(|&i| self.work[i].consumes_recv()).collect()
    }

    fn clean_link(&self) -> bool {
        self.case.faults.is_empty() && self.case.cut_at_ns.is_none() && self.queue_drops == 0
    }

    fn check_images(&self, a_img: &Image, b_img: &Image) -> Result<(), String> {
        let lay = self.lay;
        a_img.check("requester memory", &self.a_mem, |i| whose(i, &lay.local, &[], false))?;
        b_img.check("responder memory", &self.b_mem, |i| whose(i, &lay.remote, &lay.pool, true))
    }

    /// UC and UD complete each WR once its last packet is sent: every signaled WR, successful,
    /// in post order. And no more receives complete than were posted.
    fn check_local_completions(&self) -> Result<(), String> {
        oracle_ok(self.recv_wcs.len() <= self.lay.pool.len(), || {
            format!(
                "{} receive completions, but only {} receives were posted",
                self.recv_wcs.len(),
                self.lay.pool.len()
            )
        })?;
        let want: Vec<ExpectedWc> = (0..self.work.len())
            .filter(|&i| self.work[i].signaled)
            .map(|i| self.send_wc(i, WcStatus::Success))
            .collect();
        oracle::check_completions("send queue", &want, self.send_wcs)
    }

    /// Whether receive completion `c` (the `k`-th receive) is message `j`, whole: `Err` says
    /// why not.
    fn is_message(&self, k: usize, c: &WorkCompletion, j: usize) -> Result<(), String> {
        oracle::check_wc(&self.recv_wc(j, k as u64), c)?;
        let w = &self.work[j];
        let off = match w.kind {
            OpKind::Send => {
                let grh = if self.case.qp_type == QpType::Ud { GRH_LEN as usize } else { 0 };
                self.lay.pool[k].off + grh
            }
            _ => self.lay.remote[j][0].off,
        };
        oracle::check_bytes(
            &format!("message {j}'s bytes"),
            &self.sent[j],
            &self.b_mem[off..off + w.len as usize],
        )
    }

    /// The RC oracles: see the module documentation of [`super`].
    pub(super) fn check_rc(&self) -> Result<(), String> {
        let (work, n) = (self.work, self.work.len());
        let first_err = self.send_wcs.iter().find(|c| c.status != WcStatus::Success);
        if let (None, Some(c)) = (self.case.cut_at_ns, first_err) {
            return Err(format!(
                "bounded faults with retries left must complete successfully, but wr {} \
                 completed with {:?}; send completions {:?}",
                c.wr_id, c.status, self.send_wcs
            ));
        }
        let failed = first_err.map(|c| c.wr_id as usize);
        let done = failed.unwrap_or(n).min(n);

        // Send completions: the signaled WRs before the failed one succeed, in post order;
        // the failed one ends with RETRY_EXC_ERR, every later one (signaled or not) is flushed.
        let mut want: Vec<ExpectedWc> = (0..done)
            .filter(|&i| work[i].signaled)
            .map(|i| self.send_wc(i, WcStatus::Success))
            .collect();
        if failed.is_some() && done < n {
            want.push(self.send_wc(done, WcStatus::RetryExcErr));
            want.extend((done + 1..n).map(|i| self.send_wc(i, WcStatus::WrFlushErr)));
        }
        oracle::check_completions("send queue", &want, self.send_wcs)?;

        // Receives: exactly once and in order; every message up to the failed one, and when
        // nothing failed, all of them.
        let consuming = self.consuming();
        let must = consuming.iter().filter(|&&i| i < done).count();
        let delivered = match failed {
            None => consuming.len(),
            Some(_) => self.recv_wcs.len().clamp(must, consuming.len()),
        };
        let ids = |v: &[usize]| v.iter().map(|&i| i as u64).collect::<Vec<_>>();
        let got: Vec<u64> = self.recv_wcs.iter().map(|c| c.wr_id).collect();
        oracle::check_exactly_once_in_order("receives", &ids(&consuming[..delivered]), &got)?;
        let want_recv: Vec<ExpectedWc> =
            consuming[..delivered].iter().map(|&i| self.recv_wc(i, i as u64)).collect();
        oracle::check_completions("receive queue", &want_recv, self.recv_wcs)?;

        // Atomics: one at a time, in post order. The word takes the values `word[k]` after the
        // first k; those that completed returned them; after a failure, later ones may or may
        // not have run.
        let atomics: Vec<usize> = (0..n).filter(|&i| work[i].atomic_op().is_some()).collect();
        let mut word = vec![0u64];
        for &i in &atomics {
            let op = work[i].atomic_op().expect("filtered to atomics");
            word.push(op.apply(*word.last().expect("starts with one value")));
        }
        let read_u64 = |mem: &[u8], off: usize| {
            u64::from_ne_bytes(mem[off..off + 8].try_into().expect("8 bytes"))
        };
        let completed = atomics.iter().filter(|&&i| i < done).count();
        let results: Vec<AtomicResult> = atomics[..completed]
            .iter()
            .map(|&i| AtomicResult {
                op: work[i].atomic_op().expect("filtered to atomics"),
                returned: read_u64(&self.a_mem, self.lay.local[i][0].off),
            })
            .collect();
        let last = read_u64(&self.b_mem, ATOMIC_WORD);
        oracle::check_atomics_serial(0, &[results], failed.is_none().then_some(last))?;
        oracle_ok(word[completed..].contains(&last), || {
            format!(
                "the atomic word ends as {last}, which no prefix of the atomics run one at a \
                 time leaves (values {:?}, {completed} completed)",
                word
            )
        })?;

        // Memory: every WR before the failed one took effect exactly; later ones perhaps, in
        // part; nothing else changed.
        let received = |i: usize| got.contains(&(i as u64));
        let mut a_img = Image::new(self.a_init);
        let mut b_img = Image::new(self.b_init);
        let mut k = 0;
        for (i, w) in work.iter().enumerate() {
            let certain = i < done;
            match w.kind {
                OpKind::Send | OpKind::Write => {
                    b_img.expect(&self.lay.remote[i], &self.sent[i], certain || received(i))
                }
                OpKind::Read => a_img.expect(&self.lay.local[i], &self.sent[i], certain),
                OpKind::CompareSwap | OpKind::FetchAdd => {
                    a_img.expect(&self.lay.local[i], &word[k].to_ne_bytes(), certain);
                    k += 1;
                }
            }
        }
        b_img.expect(&[Piece { off: ATOMIC_WORD, len: 8 }], &last.to_ne_bytes(), true);
        self.check_images(&a_img, &b_img)?;

        let [req, resp] = &self.nics;
        if self.clean_link() && self.case.recv_delay_ns == 0 {
            // A clean link needs no recovery of any kind.
            for (who, s) in [("requester", req), ("responder", resp)] {
                oracle_ok(
                    s.retransmits + s.timeouts + s.seq_naks_sent + s.rnr_naks_sent == 0
                        && s.rx_duplicates == 0,
                    || format!("on a clean link the {who} needed a recovery: {s:?}"),
                )?;
            }
        }
        if self.clean_link() && self.case.recv_delay_ns > 0 {
            // Receives posted late: RNR NAKs pause the requester, which resumes by itself.
            if self.case.recv_delay_ns >= RNR_CERTAIN_DELAY_NS && work[0].consumes_recv() {
                oracle_ok(resp.rnr_naks_sent > 0 && req.rnr_naks_received > 0, || {
                    format!("the receives came late but no RNR NAK was sent: {resp:?}")
                })?;
            }
            oracle_ok(req.timeouts == 0, || {
                format!("recovering from RNR NAKs needed {} local ACK timeouts", req.timeouts)
            })?;
        }
        Ok(())
    }

    /// The UC oracles.
    pub(super) fn check_uc(&self) -> Result<(), String> {
        self.check_local_completions()?;
        // Each receive is one whole message, sent after the one the previous receive holds.
        let consuming = self.consuming();
        let mut next = 0;
        let mut matched = Vec::new();
        for (k, c) in self.recv_wcs.iter().enumerate() {
            let Some(p) = consuming[next..].iter().position(|&j| self.is_message(k, c, j).is_ok())
            else {
                let why = consuming.get(next).map(|&j| self.is_message(k, c, j));
                return Err(format!(
                    "receive #{k} is no whole message sent after message {:?}: a message was \
                     delivered twice, out of order or in part (as the next message: {why:?})",
                    matched.last()
                ));
            };
            matched.push(consuming[next + p]);
            next += p + 1;
        }
        let ids = |v: &[usize]| v.iter().map(|&i| i as u64).collect::<Vec<_>>();
        oracle::check_at_most_once_in_order("UC messages", &ids(&consuming), &ids(&matched))?;
        if self.clean_link() {
            oracle::check_exactly_once_in_order(
                "UC messages on a clean link",
                &ids(&consuming),
                &ids(&matched),
            )?;
        }
        // Memory: a WRITE lands whole if its receive says so (or the link is clean), else
        // perhaps in part; receive buffers were checked above; nothing else changes.
        let a_img = Image::new(self.a_init);
        let mut b_img = Image::new(self.b_init);
        for i in (0..self.work.len()).filter(|&i| self.work[i].kind == OpKind::Write) {
            let whole = self.clean_link() || matched.contains(&i);
            b_img.expect(&self.lay.remote[i], &self.sent[i], whole);
        }
        for &p in &self.lay.pool {
            b_img.any(p);
        }
        self.check_images(&a_img, &b_img)
    }

    /// The UD oracles.
    pub(super) fn check_ud(&self) -> Result<(), String> {
        self.check_local_completions()?;
        let req = &self.nics[0];
        let n = self.work.len() as u64;
        oracle_ok(req.tx_packets == n && req.retransmits == 0, || {
            format!("UD sends each datagram once: {n} WRs, {} packets sent", req.tx_packets)
        })?;
        // Each receive is one whole datagram, with the sender's address in its GRH, and no
        // datagram is received twice.
        let mut taken = vec![false; self.work.len()];
        let mut matched = Vec::new();
        for (k, c) in self.recv_wcs.iter().enumerate() {
            let untaken = || (0..self.work.len()).filter(|&j| !taken[j]);
            let Some(j) = untaken().find(|&j| self.is_message(k, c, j).is_ok()) else {
                let why = untaken().next().map(|j| self.is_message(k, c, j));
                return Err(format!(
                    "receive #{k} is no whole datagram that was sent and not yet received \
                     (as the first such datagram: {why:?})"
                ));
            };
            taken[j] = true;
            matched.push(j as u64);
            let src = self.lay.pool[k].off + 20 + 12;
            oracle_ok(self.b_mem[src..src + 4] == self.a_ip, || {
                format!(
                    "receive #{k}: the GRH's IPv4 source is {:?}, not the sender's {:?}",
                    &self.b_mem[src..src + 4],
                    self.a_ip
                )
            })?;
        }
        let sent: Vec<u64> = (0..n).collect();
        oracle::check_at_most_once("UD datagrams", &sent, &matched)?;
        if self.clean_link() {
            oracle_ok(taken.iter().all(|&t| t), || {
                format!("on a clean link only {} of {n} datagrams arrived", self.recv_wcs.len())
            })?;
        }
        let a_img = Image::new(self.a_init);
        let mut b_img = Image::new(self.b_init);
        for &p in &self.lay.pool {
            b_img.any(p);
        }
        self.check_images(&a_img, &b_img)
    }
}
