//! Playing a property [`Case`] in a two-node world: one QP pair, the workload posted on `a`,
//! receives on `b`, the faults scheduled on the link pair; then the verdict of every oracle
//! of the transport over the completions and the whole of both MRs.

use nic_model::engine::NicStats;
use verbs_api::{
    AccessFlags, AddressHandle, AtomicTarget, CompletionQueue, QpAttr, QpAttrMask, QpCap, QpState,
    QpType, RdmaTarget, RecvWr, SendFlags, SendWr, Sge, UdTarget, WorkCompletion,
};

use super::faults::schedule_faults;
use super::layout::{layout, scatter, ATOMIC_WORD};
use super::oracle::oracle_ok;
use super::verdict::Run;
use super::{Case, OpKind, MAX_INLINE};
use crate::conn::{self, av_to, ConnOpts, Endpoint, PortAddress};
use crate::world::{connect_rc, LinkChange, LinkParams, Rng, SimWorld, World};

/// Virtual time a case may take before its last WR must have completed.
pub const RUN_LIMIT_NS: u64 = 10_000_000_000;
/// Events the world may run after the last completion (stragglers: duplicates, late
/// responses); it must go idle within them.
pub(super) const SETTLE_EVENTS: u64 = 1_000_000;
/// The UD Q_Key (high bit clear: a real Q_Key, not "use the QP's").
const QKEY: u32 = 0x1111_2222;

/// What a run produced, for callers that check more.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The requester's completions (in a contention case, each requester's in turn).
    pub send_wcs: Vec<WorkCompletion>,
    /// The responder's completions.
    pub recv_wcs: Vec<WorkCompletion>,
    /// The trace hash.
    pub trace_hash: u64,
    /// Faults injected (tail drops at a full queue included).
    pub faults_injected: u64,
    /// Of those, packets a full link queue dropped.
    pub queue_drops: u64,
    /// Each NIC's counters, by node: `a` then `b` (a contention case: the target, then the
    /// requesters).
    pub nics: Vec<NicStats>,
}

/// Move every completion waiting on `cq` into `out`.
pub(super) fn drain(cq: &CompletionQueue, out: &mut Vec<WorkCompletion>) -> verbs_api::Result<()> {
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
            let dgid = PortAddress::of(&b.ctx, None)?.gid;
            let ah = a.pd.create_ah(&av_to(dgid, &ConnOpts::default()))?;
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
    let base = LinkParams { queue_limit: case.queue_limit, ..LinkParams::default() };
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
            opcode: w.wr_opcode(),
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
        oracle_ok(quiet || !finished.is_satisfied(), || {
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
    oracle_ok(finished.is_satisfied(), || {
        format!(
            "the last WR did not complete ({finished:?}, limit {RUN_LIMIT_NS} ns); \
             completions {send_wcs:?}"
        )
    })?;
    oracle_ok(idle, || {
        format!("the world was still busy {SETTLE_EVENTS} events after the last completion")
    })?;

    let (trace_hash, faults_injected, queue_drops) = {
        let w = world.lock();
        let t = w.total_stats();
        (w.trace().hash(), t.faults(), t.queue_drops)
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
        a_ip: PortAddress::of(&a.ctx, None)
            .map_err(e)?
            .gid
            .to_ipv4()
            .ok_or("node A's port has no IPv4 GID")?,
        send_wcs: &send_wcs,
        recv_wcs: &recv_wcs,
        nics: [nic_stats(&world, 0), nic_stats(&world, 1)],
        queue_drops,
    };
    match case.qp_type {
        QpType::Rc => run.check_rc()?,
        QpType::Uc => run.check_uc()?,
        QpType::Ud => run.check_ud()?,
    }
    let nics = run.nics.to_vec();
    Ok(Outcome { send_wcs, recv_wcs, trace_hash, faults_injected, queue_drops, nics })
}
