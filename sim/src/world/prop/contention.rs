//! Playing a [`ContentionCase`]: a star of RC requesters around one target, every atomic on
//! one word, checked to be the outcome of some one-at-a-time order.

use verbs_api::{
    AccessFlags, AtomicTarget, QpCap, QpInitAttr, QpType, SendFlags, SendWr, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

use super::faults::schedule_faults;
use super::oracle::{self, oracle_ok, AtomicResult, ExpectedWc};
use super::run::{drain, Outcome, RUN_LIMIT_NS, SETTLE_EVENTS};
use super::ContentionCase;
use crate::conn::{self, ConnOpts, Endpoint, PortAddress, QpInfo};
use crate::world::{LinkParams, SimWorld, World};

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
    let base = LinkParams { queue_limit: case.queue_limit, ..LinkParams::default() };
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
        let port = PortAddress::of(&tctx, None)?;
        Ok(QpInfo { lid: port.lid, qpn, psn, gid: port.gid })
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
    oracle_ok(finished.is_satisfied(), || {
        format!("not every atomic completed ({finished:?}, limit {RUN_LIMIT_NS} ns): {wcs:?}")
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
    let t = w.total_stats();
    Ok(Outcome {
        send_wcs: wcs.concat(),
        recv_wcs: Vec::new(),
        trace_hash: w.trace().hash(),
        faults_injected: t.faults(),
        queue_drops: t.queue_drops,
        nics,
    })
}
