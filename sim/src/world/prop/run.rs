//! Playing property cases: a [`Case`] in a two-node world (one QP pair, the workload posted on
//! `a`, receives on `b`), a [`ContentionCase`] in a star of requesters around one target; then
//! every oracle of the transport over the completions and the whole of both MRs.

use nic_model::engine::{ip_of_lid, NicStats};
use verbs_api::{
    AccessFlags, AddressHandle, AhAttr, AtomicTarget, CompletionQueue, QpAttr, QpAttrMask, QpCap,
    QpInitAttr, QpState, QpType, RdmaTarget, RecvWr, SendFlags, SendWr, Sge, UdTarget, WcOpcode,
    WcStatus, WorkCompletion, WrOpcode,
};

use super::oracle::{self, AtomicResult, ExpectedWc};
use super::{Case, ContentionCase, Dir, FaultEvent, FaultKind, OpKind, WorkItem, MAX_INLINE};
use crate::conn::{self, ConnOpts, Endpoint, QpInfo};
use crate::world::{connect_rc, LinkChange, LinkId, LinkParams, Rng, SimWorld, World};

/// Virtual time a case may take before its last WR must have completed.
pub const RUN_LIMIT_NS: u64 = 10_000_000_000;
/// Events the world may run after the last completion (stragglers: duplicates, late
/// responses); it must go idle within them.
const SETTLE_EVENTS: u64 = 1_000_000;
/// Untouched bytes between buffers, so a stray write shows.
const GAP: usize = 64;
/// The target word of every atomic, at the start of `b`'s MR.
const ATOMIC_WORD: usize = 0;
/// The UD Q_Key (high bit clear: a real Q_Key, not "use the QP's").
const QKEY: u32 = 0x1111_2222;
/// The GRH a UD receive buffer starts with.
const GRH_LEN: u32 = verbs_api::GRH_LEN as u32;
/// Receives posted at least this late meet the first request (1 µs away): an RNR NAK is due.
const RNR_CERTAIN_DELAY_NS: u64 = 5_000;

/// What a run produced, for callers that check more.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The requester's completions (in a contention case, each requester's in turn).
    pub send_wcs: Vec<WorkCompletion>,
    /// The responder's completions.
    pub recv_wcs: Vec<WorkCompletion>,
    /// The trace hash.
    pub trace_hash: u64,
    /// Faults injected.
    pub faults_injected: u64,
    /// Each NIC's counters, by node: `a` then `b` (a contention case: the target, then the
    /// requesters).
    pub nics: Vec<NicStats>,
}

/// A stretch of an MR.
#[derive(Clone, Copy, Debug)]
struct Piece {
    off: usize,
    len: u32,
}

/// Where each WR's bytes live: gather/scatter pieces in `a`'s MR, its target (RC receive
/// pieces, or the RDMA region) in `b`'s MR, and the UC/UD receive buffers.
struct Layout {
    local: Vec<Vec<Piece>>,
    remote: Vec<Vec<Piece>>,
    /// UC/UD: one buffer per receive, in post order (the k-th receive's `wr_id` is k).
    pool: Vec<Piece>,
    mr_len: usize,
}

/// Cut `len` bytes into `parts` pieces at `*at`, each followed by a gap.
fn split(at: &mut usize, len: u32, parts: u8) -> Vec<Piece> {
    let k = u32::from(parts.max(1));
    let mut left = len;
    (0..k)
        .map(|j| {
            let l = if j + 1 == k { left } else { len / k };
            left -= l;
            let p = Piece { off: *at, len: l };
            *at = (*at + l as usize + GAP).next_multiple_of(8);
            p
        })
        .collect()
}

fn layout(qp_type: QpType, work: &[WorkItem]) -> Layout {
    let (mut a, mut b) = (0usize, ATOMIC_WORD + 8 + GAP);
    let mut local = Vec::new();
    let mut remote = Vec::new();
    for w in work {
        local.push(split(&mut a, w.len, w.sges));
        remote.push(match w.kind {
            OpKind::Send if qp_type == QpType::Rc => split(&mut b, w.len, w.sges),
            OpKind::Write | OpKind::Read => split(&mut b, w.len, 1),
            _ => Vec::new(),
        });
    }
    let mut pool = Vec::new();
    if qp_type != QpType::Rc {
        // Any message may land in any receive: each holds the longest (and UD's GRH).
        let grh = if qp_type == QpType::Ud { GRH_LEN } else { 0 };
        let consuming = work.iter().filter(|w| w.consumes_recv());
        let cap = consuming.clone().map(|w| w.len).max().unwrap_or(0) + grh;
        for _ in consuming {
            pool.extend(split(&mut b, cap, 1));
        }
    }
    Layout { local, remote, pool, mr_len: a.max(b) + GAP }
}

fn scatter(mem: &mut [u8], pieces: &[Piece], bytes: &[u8]) {
    let mut at = 0;
    for p in pieces {
        let n = p.len as usize;
        mem[p.off..p.off + n].copy_from_slice(&bytes[at..at + n]);
        at += n;
    }
}

/// What each byte of an MR may be at the end.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Exactly the expected value.
    Exact,
    /// The initial value or the expected one (a message that may have been placed in part).
    OldOrNew,
    /// Anything (receive buffers whose content the completions account for).
    Any,
}

/// The expected final content of an MR.
struct Image {
    init: Vec<u8>,
    want: Vec<u8>,
    rule: Vec<Rule>,
}

impl Image {
    fn new(init: &[u8]) -> Image {
        Image { init: init.to_vec(), want: init.to_vec(), rule: vec![Rule::Exact; init.len()] }
    }

    /// `bytes` scattered over `pieces`: surely there (`certain`), or perhaps, or in part.
    fn expect(&mut self, pieces: &[Piece], bytes: &[u8], certain: bool) {
        scatter(&mut self.want, pieces, bytes);
        let rule = if certain { Rule::Exact } else { Rule::OldOrNew };
        for p in pieces {
            self.rule[p.off..p.off + p.len as usize].fill(rule);
        }
    }

    fn any(&mut self, p: Piece) {
        self.rule[p.off..p.off + p.len as usize].fill(Rule::Any);
    }

    /// The first byte of `got` its rule does not allow, named by `whose`.
    fn check(&self, what: &str, got: &[u8], whose: impl Fn(usize) -> String) -> Result<(), String> {
        let bad = (0..got.len()).find(|&i| match self.rule[i] {
            Rule::Exact => got[i] != self.want[i],
            Rule::OldOrNew => got[i] != self.want[i] && got[i] != self.init[i],
            Rule::Any => false,
        });
        match bad {
            None => Ok(()),
            Some(i) => Err(format!(
                "{what}: byte {i} ({}) is {:#04x}, expected {:#04x}{}",
                whose(i),
                got[i],
                self.want[i],
                if self.rule[i] == Rule::OldOrNew {
                    format!(" or its old {:#04x}", self.init[i])
                } else {
                    String::new()
                }
            )),
        }
    }
}

/// Which WR's buffer holds byte `at`, for error messages.
fn whose(at: usize, per_wr: &[Vec<Piece>], pool: &[Piece], word: bool) -> String {
    if word && at < ATOMIC_WORD + 8 {
        return "the atomic word".into();
    }
    let inside = |p: &Piece| at >= p.off && at < p.off + p.len as usize;
    for (i, ps) in per_wr.iter().enumerate() {
        if let Some(p) = ps.iter().find(|p| inside(p)) {
            return format!("wr {i}, byte {} of its piece at {}", at - p.off, p.off);
        }
    }
    if let Some(k) = pool.iter().position(inside) {
        return format!("receive buffer {k}");
    }
    "between buffers: no WR may write it".into()
}

fn wr_opcode(w: &WorkItem) -> WrOpcode {
    match (w.kind, w.imm.is_some()) {
        (OpKind::Send, false) => WrOpcode::Send,
        (OpKind::Send, true) => WrOpcode::SendWithImm,
        (OpKind::Write, false) => WrOpcode::RdmaWrite,
        (OpKind::Write, true) => WrOpcode::RdmaWriteWithImm,
        (OpKind::Read, _) => WrOpcode::RdmaRead,
        (OpKind::CompareSwap, _) => WrOpcode::AtomicCmpAndSwp,
        (OpKind::FetchAdd, _) => WrOpcode::AtomicFetchAndAdd,
    }
}

fn drain(cq: &CompletionQueue, out: &mut Vec<WorkCompletion>) -> verbs_api::Result<()> {
    let mut buf = [WorkCompletion::default(); 32];
    loop {
        let n = cq.poll(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        out.extend_from_slice(&buf[..n]);
    }
}

fn nic_stats(world: &SimWorld, node: usize) -> NicStats {
    world.lock().nic(node).map(|n| n.stats().clone()).unwrap_or_default()
}

/// Connect `a` (node 0) to `b` (node 1) with QPs of the case's type; UD also gets the address
/// handle `a` sends with.
fn connect_pair(
    world: &SimWorld,
    case: &Case,
    n: u32,
    mr_len: usize,
) -> verbs_api::Result<(Endpoint, Endpoint, Option<AddressHandle>)> {
    let cap = QpCap {
        max_send_wr: n,
        max_recv_wr: n,
        max_send_sge: 3,
        max_recv_sge: 3,
        max_inline_data: MAX_INLINE,
    };
    let depth = 2 * n + 8;
    let opts = ConnOpts {
        mtu: case.mtu,
        timeout: case.timeout,
        retry_cnt: case.retry_cnt,
        rnr_retry: case.rnr_retry,
        min_rnr_timer: 1,
        ..ConnOpts::default()
    };
    let (psn_a, psn_b) = (case.psns.0 & 0xFF_FFFF, case.psns.1 & 0xFF_FFFF);
    match case.qp_type {
        QpType::Rc => {
            let (a, b) = connect_rc(world, 0, 1, cap, depth, mr_len, &opts, (psn_a, psn_b))?;
            Ok((a, b, None))
        }
        QpType::Uc => {
            let opts = ConnOpts { access: AccessFlags::REMOTE_WRITE, ..opts };
            let a = Endpoint::new(&world.context(0)?, QpType::Uc, cap, depth, mr_len)?;
            let b = Endpoint::new(&world.context(1)?, QpType::Uc, cap, depth, mr_len)?;
            conn::connect(&a.qp, psn_a, &b.info(psn_b)?, &opts)?;
            conn::connect(&b.qp, psn_b, &a.info(psn_a)?, &opts)?;
            Ok((a, b, None))
        }
        QpType::Ud => {
            let ud = |node, psn| -> verbs_api::Result<Endpoint> {
                let e = Endpoint::new(&world.context(node)?, QpType::Ud, cap, depth, mr_len)?;
                let init = QpAttr {
                    qp_state: QpState::Init,
                    port_num: 1,
                    qkey: QKEY,
                    ..QpAttr::default()
                };
                let m = QpAttrMask::STATE
                    | QpAttrMask::PKEY_INDEX
                    | QpAttrMask::PORT
                    | QpAttrMask::QKEY;
                e.qp.modify(&init, m)?;
                e.qp.modify(
                    &QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() },
                    QpAttrMask::STATE,
                )?;
                let rts = QpAttr { qp_state: QpState::Rts, sq_psn: psn, ..QpAttr::default() };
                e.qp.modify(&rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN)?;
                Ok(e)
            };
            let (a, b) = (ud(0, psn_a)?, ud(1, psn_b)?);
            let dlid = b.ctx.query_port(1)?.lid;
            let ah = a.pd.create_ah(&AhAttr { dlid, port_num: 1, ..AhAttr::default() })?;
            Ok((a, b, Some(ah)))
        }
    }
}

/// Run a case and check every oracle of its transport (see the module documentation of
/// [`super`]); `Err` describes the first violation, starting with the seed.
pub fn run_case(case: &Case) -> Result<Outcome, String> {
    run_inner(case).map_err(|e| format!("seed {}: {e}", case.seed))
}

fn run_inner(case: &Case) -> Result<Outcome, String> {
    let e = |e: verbs_api::Error| e.to_string();
    let mut work = case.workload.clone();
    let Some(last) = work.last_mut() else {
        return Err("the case has an empty workload".into());
    };
    // The last WR is signaled so the run has an end every program can observe.
    last.signaled = true;
    let n = work.len();
    let base = LinkParams { queue_limit: 0, ..LinkParams::default() };
    let world = {
        let mut w = World::new(case.seed);
        w.configure_nics(|c| c.window = case.window);
        let (a, b) = (w.add_node("a"), w.add_node("b"));
        w.add_duplex(a, b, base.clone());
        SimWorld::new(w)
    };
    let lay = layout(case.qp_type, &work);
    let (a, b, ah) = connect_pair(&world, case, n as u32, lay.mr_len).map_err(e)?;

    // Contents: the sources (a's gather pieces, b's READ regions) are seeded bytes; the rest zero.
    let mut fill = Rng::new(case.seed ^ 0xda7a);
    let (mut a_init, mut b_init) = (vec![0u8; lay.mr_len], vec![0u8; lay.mr_len]);
    let mut sent = Vec::new();
    for (i, w) in work.iter().enumerate() {
        let bytes: Vec<u8> = match w.kind {
            OpKind::Send | OpKind::Write | OpKind::Read => {
                (0..w.len).map(|_| fill.next_u64() as u8).collect()
            }
            OpKind::CompareSwap | OpKind::FetchAdd => Vec::new(),
        };
        match w.kind {
            OpKind::Send | OpKind::Write => scatter(&mut a_init, &lay.local[i], &bytes),
            OpKind::Read => scatter(&mut b_init, &lay.remote[i], &bytes),
            OpKind::CompareSwap | OpKind::FetchAdd => {}
        }
        sent.push(bytes);
    }
    a.mr.write(0, &a_init).map_err(e)?;
    b.mr.write(0, &b_init).map_err(e)?;

    let post_recvs = || -> Result<(), String> {
        let post = |wr_id: u64, sg: &[Sge]| {
            b.qp.post_recv(&[RecvWr { wr_id, sg_list: sg }])
                .map_err(|x| format!("post_recv {wr_id}: {x}"))
        };
        if case.qp_type == QpType::Rc {
            for (i, w) in work.iter().enumerate().filter(|(_, w)| w.consumes_recv()) {
                let sg: Vec<Sge> = lay.remote[i].iter().map(|p| b.mr.sge(p.off, p.len)).collect();
                post(i as u64, if w.kind == OpKind::Send { &sg } else { &[] })?;
            }
        } else {
            for (k, p) in lay.pool.iter().enumerate() {
                post(k as u64, &[b.mr.sge(p.off, p.len)])?;
            }
        }
        Ok(())
    };
    if case.recv_delay_ns == 0 {
        post_recvs()?;
    }

    let start = world.now_ns();
    schedule_faults(&world, start, &case.faults, &base, 0, 1);
    if let Some(cut) = case.cut_at_ns {
        let mut w = world.lock();
        for l in 0..2 {
            w.schedule(start + cut, l, LinkChange::Partition);
        }
    }
    for (i, w) in work.iter().enumerate() {
        let sges: Vec<Sge> = lay.local[i].iter().map(|p| a.mr.sge(p.off, p.len)).collect();
        let mut flags = SendFlags::empty();
        if w.signaled {
            flags |= SendFlags::SIGNALED;
        }
        if w.inline {
            flags |= SendFlags::INLINE;
        }
        let wr = SendWr {
            wr_id: i as u64,
            sg_list: &sges,
            opcode: wr_opcode(w),
            send_flags: flags,
            imm_data: w.imm.unwrap_or(0),
            rdma: RdmaTarget {
                remote_addr: b.mr.addr() + lay.remote[i].first().map_or(0, |p| p.off) as u64,
                rkey: b.mr.rkey(),
            },
            atomic: AtomicTarget {
                remote_addr: b.mr.addr() + ATOMIC_WORD as u64,
                rkey: b.mr.rkey(),
                compare_add: w.operand,
                swap: w.swap,
            },
            ud: ah.as_ref().map(|ah| UdTarget {
                ah: ah.clone(),
                remote_qpn: b.qp.qp_num(),
                remote_qkey: QKEY,
            }),
            ..Default::default()
        };
        a.qp.post_send(&[wr]).map_err(|err| format!("post_send wr {i} {w:?}: {err}"))?;
    }

    // Run until the last WR completes (success or error) on `a`.
    let mut send_wcs = Vec::new();
    let mut recv_wcs = Vec::new();
    if case.recv_delay_ns > 0 {
        world.run_until(start + case.recv_delay_ns);
        post_recvs()?;
    }
    let mut poll_err = None;
    let finished = world.run_until_pred(
        || {
            if let Err(x) = drain(&a.cq, &mut send_wcs) {
                poll_err = Some(x.to_string());
                return true;
            }
            send_wcs.iter().any(|w| w.wr_id as usize == n - 1)
        },
        start + RUN_LIMIT_NS,
    );
    if let Some(x) = poll_err {
        return Err(x);
    }
    if case.cut_at_ns.is_some() {
        // The requester is done: it gave up (or finished before the cut). Heal the cut; from
        // now on nothing may be sent or delivered.
        drain(&b.cq, &mut recv_wcs).map_err(e)?;
        let b_mem = b.mr.read_vec(0, lay.mr_len).map_err(e)?;
        let a_tx = nic_stats(&world, 0).tx_packets;
        let mut w = world.lock();
        for l in 0..2 {
            w.change_link(l, LinkChange::Heal);
        }
        let idle = w.run_until_idle(SETTLE_EVENTS);
        drop(w);
        drain(&b.cq, &mut recv_wcs).map_err(e)?;
        let b_after = b.mr.read_vec(0, lay.mr_len).map_err(e)?;
        let a_tx_after = nic_stats(&world, 0).tx_packets;
        let quiet = idle && a_tx_after == a_tx && b_after == b_mem;
        oracle_ok(quiet || !finished, || {
            format!(
                "after the requester's last completion and the heal, something happened: \
                 idle {idle}, requester sent {} more packets, responder memory changed: {}",
                a_tx_after - a_tx,
                b_after != b_mem
            )
        })?;
    }
    // Let stragglers (duplicates, late responses) land, so everything after is checked fully.
    let idle = world.run_until_idle(SETTLE_EVENTS);
    drain(&a.cq, &mut send_wcs).map_err(e)?;
    drain(&b.cq, &mut recv_wcs).map_err(e)?;
    oracle_ok(finished, || {
        format!("the last WR did not complete within {RUN_LIMIT_NS} ns; completions {send_wcs:?}")
    })?;
    oracle_ok(idle, || {
        format!("the world was still busy {SETTLE_EVENTS} events after the last completion")
    })?;

    let (trace_hash, faults_injected) = {
        let w = world.lock();
        (w.trace().hash(), w.total_stats().faults())
    };
    let run = Run {
        case,
        work: &work,
        lay: &lay,
        sent: &sent,
        a_init: &a_init,
        b_init: &b_init,
        a_mem: a.mr.read_vec(0, lay.mr_len).map_err(e)?,
        b_mem: b.mr.read_vec(0, lay.mr_len).map_err(e)?,
        a_qpn: a.qp.qp_num(),
        b_qpn: b.qp.qp_num(),
        a_ip: ip_of_lid(a.ctx.query_port(1).map_err(e)?.lid),
        send_wcs: &send_wcs,
        recv_wcs: &recv_wcs,
        nics: [nic_stats(&world, 0), nic_stats(&world, 1)],
    };
    match case.qp_type {
        QpType::Rc => run.check_rc()?,
        QpType::Uc => run.check_uc()?,
        QpType::Ud => run.check_ud()?,
    }
    let nics = run.nics.to_vec();
    Ok(Outcome { send_wcs, recv_wcs, trace_hash, faults_injected, nics })
}

fn oracle_ok(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

/// Everything the oracles look at once a case has run.
struct Run<'a> {
    case: &'a Case,
    work: &'a [WorkItem],
    lay: &'a Layout,
    sent: &'a [Vec<u8>],
    a_init: &'a [u8],
    b_init: &'a [u8],
    a_mem: Vec<u8>,
    b_mem: Vec<u8>,
    a_qpn: u32,
    b_qpn: u32,
    a_ip: [u8; 4],
    send_wcs: &'a [WorkCompletion],
    recv_wcs: &'a [WorkCompletion],
    /// Requester, responder.
    nics: [NicStats; 2],
}

impl Run<'_> {
    /// The send completion WR `i` gives with `status`.
    fn send_wc(&self, i: usize, status: WcStatus) -> ExpectedWc {
        let w = &self.work[i];
        ExpectedWc {
            wr_id: i as u64,
            status,
            opcode: WcOpcode::for_send(wr_opcode(w)),
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
        self.case.faults.is_empty() && self.case.cut_at_ns.is_none()
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

    fn check_rc(&self) -> Result<(), String> {
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

    fn check_uc(&self) -> Result<(), String> {
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

    fn check_ud(&self) -> Result<(), String> {
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

/// Turn fault values into link changes on the link pair `forward` (requests) and `backward`
/// (responses), relative to `start`: at each boundary, each direction's parameters are `base`
/// plus every fault active then (so overlapping faults combine); `DropNth` counts from the
/// packets the link has carried so far; a partition cuts and heals both. Changes due by now
/// apply at once (faults at 0 ns act on the WRs posted next), later ones are scheduled.
pub fn schedule_faults(
    world: &SimWorld,
    start: u64,
    faults: &[FaultEvent],
    base: &LinkParams,
    forward: LinkId,
    backward: LinkId,
) {
    let mut w = world.lock();
    let now = w.now_ns();
    // A change due now applies at once, so it acts on what is posted right after.
    let change = |w: &mut World, at_ns: u64, link: LinkId, c: LinkChange| {
        if at_ns <= now {
            w.change_link(link, c);
        } else {
            w.schedule(at_ns, link, c);
        }
    };
    let link = |d: Dir| if d == Dir::Forward { forward } else { backward };
    let mut bounds: Vec<u64> = Vec::new();
    for f in faults {
        match f.kind {
            FaultKind::Loss { dur_ns, .. }
            | FaultKind::Duplicate { dur_ns, .. }
            | FaultKind::Corrupt { dur_ns, .. }
            | FaultKind::Truncate { dur_ns, .. }
            | FaultKind::Reorder { dur_ns, .. } => {
                bounds.push(f.at_ns);
                bounds.push(f.at_ns.saturating_add(dur_ns));
            }
            FaultKind::DropNth { dir, n } => {
                let l = link(dir);
                let from = w.links()[l].stats.offered;
                w.change_link(l, LinkChange::DropNth(from + n));
            }
            FaultKind::Partition { dur_ns } => {
                for l in [forward, backward] {
                    change(&mut w, start + f.at_ns, l, LinkChange::Partition);
                    change(&mut w, start + f.at_ns.saturating_add(dur_ns), l, LinkChange::Heal);
                }
            }
        }
    }
    bounds.sort_unstable();
    bounds.dedup();
    let rate = |ppm: u32| f64::from(ppm.min(1_000_000)) / 1e6;
    for &t in &bounds {
        for d in [Dir::Forward, Dir::Backward] {
            let mut p = base.clone();
            let active = |at: u64, dur: u64| at <= t && t < at.saturating_add(dur);
            for f in faults {
                match f.kind {
                    FaultKind::Loss { dir, ppm, dur_ns } if dir == d && active(f.at_ns, dur_ns) => {
                        p.loss = p.loss.max(rate(ppm))
                    }
                    FaultKind::Duplicate { dir, ppm, dur_ns }
                        if dir == d && active(f.at_ns, dur_ns) =>
                    {
                        p.dup = p.dup.max(rate(ppm))
                    }
                    FaultKind::Corrupt { dir, ppm, dur_ns }
                        if dir == d && active(f.at_ns, dur_ns) =>
                    {
                        p.corrupt = p.corrupt.max(rate(ppm))
                    }
                    FaultKind::Truncate { dir, ppm, dur_ns }
                        if dir == d && active(f.at_ns, dur_ns) =>
                    {
                        p.truncate = p.truncate.max(rate(ppm))
                    }
                    FaultKind::Reorder { dir, jitter_ns, dur_ns }
                        if dir == d && active(f.at_ns, dur_ns) =>
                    {
                        p.reorder_jitter_ns = p.reorder_jitter_ns.max(jitter_ns)
                    }
                    _ => {}
                }
            }
            change(&mut w, start + t, link(d), LinkChange::Params(p));
        }
    }
}

/// Run a contention case: requesters `r0..` each connected by RC to one target, every atomic
/// on the same word of one MR, posted round-robin at once; checks that every atomic completes
/// (bounded faults, retries left) with the right fields, and that the values returned and the
/// final word are those of some one-at-a-time order.
pub fn run_contention(case: &ContentionCase) -> Result<Outcome, String> {
    contention_inner(case).map_err(|e| format!("seed {}: {e}", case.seed))
}

fn contention_inner(case: &ContentionCase) -> Result<Outcome, String> {
    let e = |e: verbs_api::Error| e.to_string();
    if case.per_qp.is_empty() {
        return Err("the case has no requesters".into());
    }
    let base = LinkParams { queue_limit: 0, ..LinkParams::default() };
    let mut w = World::new(case.seed);
    let target = w.add_node("target");
    let mut links = Vec::new();
    for i in 0..case.per_qp.len() {
        let r = w.add_node(format!("r{i}"));
        links.push(w.add_duplex(r, target, base.clone()));
    }
    let world = SimWorld::new(w);

    let tctx = world.context(target).map_err(e)?;
    let pd = tctx.alloc_pd().map_err(e)?;
    let depth = 8;
    let tcq = tctx.create_cq(depth, None, 0).map_err(e)?;
    let word = pd.reg_mr(64, AccessFlags::all()).map_err(e)?;
    let tinfo = |qpn, psn| -> verbs_api::Result<QpInfo> {
        Ok(QpInfo { lid: tctx.query_port(1)?.lid, qpn, psn, gid: tctx.query_gid(1, 0)? })
    };
    let opts = ConnOpts { timeout: 10, ..ConnOpts::default() };
    let mut requesters = Vec::new();
    let mut target_qps = Vec::new();
    for (i, ops) in case.per_qp.iter().enumerate() {
        let n = ops.len().max(1) as u32;
        let cap = QpCap {
            max_send_wr: n,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let r = Endpoint::new(
            &world.context(1 + i).map_err(e)?,
            QpType::Rc,
            cap,
            n + 4,
            8 * n as usize,
        )
        .map_err(e)?;
        let tqp = pd
            .create_qp(&QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: tcq.clone(),
                recv_cq: tcq.clone(),
                srq: None,
                cap,
                sq_sig_all: false,
            })
            .map_err(e)?;
        let (psn_r, psn_t) = (0x10_0000 * i as u32 + 7, 0x10_0000 * i as u32 + 0x8_0000);
        conn::connect(&r.qp, psn_r, &tinfo(tqp.qp_num(), psn_t).map_err(e)?, &opts).map_err(e)?;
        conn::connect(&tqp, psn_t, &r.info(psn_r).map_err(e)?, &opts).map_err(e)?;
        requesters.push(r);
        target_qps.push(tqp);
    }

    let start = world.now_ns();
    for &(fwd, back) in &links {
        schedule_faults(&world, start, &case.faults, &base, fwd, back);
    }
    let longest = case.per_qp.iter().map(Vec::len).max().unwrap_or(0);
    for k in 0..longest {
        for (r, ops) in requesters.iter().zip(&case.per_qp) {
            let Some(&op) = ops.get(k) else { continue };
            let (opcode, compare_add, swap) = match op {
                super::AtomicOp::CompareSwap { compare, swap } => {
                    (WrOpcode::AtomicCmpAndSwp, compare, swap)
                }
                super::AtomicOp::FetchAdd { add } => (WrOpcode::AtomicFetchAndAdd, add, 0),
            };
            let sge = [r.mr.sge(8 * k, 8)];
            let wr = SendWr {
                wr_id: k as u64,
                sg_list: &sge,
                opcode,
                send_flags: SendFlags::SIGNALED,
                atomic: AtomicTarget {
                    remote_addr: word.addr(),
                    rkey: word.rkey(),
                    compare_add,
                    swap,
                },
                ..Default::default()
            };
            r.qp.post_send(&[wr]).map_err(|x| format!("post_send atomic {k}: {x}"))?;
        }
    }

    let mut wcs: Vec<Vec<WorkCompletion>> = vec![Vec::new(); requesters.len()];
    let mut poll_err = None;
    let finished = world.run_until_pred(
        || {
            for (r, got) in requesters.iter().zip(wcs.iter_mut()) {
                if let Err(x) = drain(&r.cq, got) {
                    poll_err = Some(x.to_string());
                    return true;
                }
            }
            wcs.iter().zip(&case.per_qp).all(|(got, ops)| got.len() >= ops.len())
        },
        start + RUN_LIMIT_NS,
    );
    if let Some(x) = poll_err {
        return Err(x);
    }
    let idle = world.run_until_idle(SETTLE_EVENTS);
    for (r, got) in requesters.iter().zip(wcs.iter_mut()) {
        drain(&r.cq, got).map_err(e)?;
    }
    oracle_ok(finished, || {
        format!("not every atomic completed within {RUN_LIMIT_NS} ns: {wcs:?}")
    })?;
    oracle_ok(idle, || {
        format!("the world was still busy {SETTLE_EVENTS} events after the last completion")
    })?;

    let mut results = Vec::new();
    for (i, ((r, got), ops)) in requesters.iter().zip(&wcs).zip(&case.per_qp).enumerate() {
        let want: Vec<ExpectedWc> = ops
            .iter()
            .enumerate()
            .map(|(k, op)| ExpectedWc {
                wr_id: k as u64,
                status: WcStatus::Success,
                opcode: match op {
                    super::AtomicOp::CompareSwap { .. } => WcOpcode::CompSwap,
                    super::AtomicOp::FetchAdd { .. } => WcOpcode::FetchAdd,
                },
                byte_len: 8,
                imm: None,
                grh: false,
                qp_num: r.qp.qp_num(),
                src_qp: None,
            })
            .collect();
        oracle::check_completions(&format!("requester {i}'s send queue"), &want, got)?;
        let mut mine = Vec::new();
        for (k, &op) in ops.iter().enumerate() {
            mine.push(AtomicResult { op, returned: r.mr.read_u64(8 * k).map_err(e)? });
        }
        results.push(mine);
    }
    let last = word.read_u64(0).map_err(e)?;
    oracle::check_atomics_serial(0, &results, Some(last))?;
    oracle_ok(word.read_vec(8, 56).map_err(e)?.iter().all(|&b| b == 0), || {
        "a byte next to the atomic word changed".to_string()
    })?;

    let w = world.lock();
    let nics = (0..w.nodes().len()).filter_map(|i| w.nic(i).map(|n| n.stats().clone())).collect();
    Ok(Outcome {
        send_wcs: wcs.concat(),
        recv_wcs: Vec::new(),
        trace_hash: w.trace().hash(),
        faults_injected: w.total_stats().faults(),
        nics,
    })
}
