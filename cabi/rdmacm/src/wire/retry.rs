//! The gateway's timers and faults (wire.rs): a MAD waiting for its answer is sent again when
//! its try ends, as ib_cm's retries, and given up after the last with the event the kernel's
//! rdma_cm reports; `SOFTVERBS_FAULTS`' `drop=cm-…#K` words drop the K-th MAD of a kind.
use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{put, Conn, Wire};
use crate::state::{kind, Msg};

/// A MAD waiting for its answer.
pub(super) struct Resend {
    /// Its UDP payload and attribute.
    pub(super) bytes: Vec<u8>,
    pub(super) attr: u16,
    /// When its try ends, and how many tries remain.
    pub(super) due: Instant,
    pub(super) left: u8,
}

/// The plan's `drop=cm-…#K` words and the MADs counted so far, by attribute, each way.
#[derive(Default)]
pub(super) struct MadDrops {
    pub(super) rules: Vec<(u16, bool, u64)>,
    pub(super) seen: HashMap<(u16, bool), u64>,
}

impl MadDrops {
    /// Whether the MAD of `attr` going out (`tx`) or in is one the plan drops.
    pub(super) fn drops(&mut self, attr: u16, tx: bool) -> bool {
        if self.rules.is_empty() {
            return false;
        }
        let n = self.seen.entry((attr, tx)).or_default();
        *n += 1;
        let n = *n;
        let hit = self.rules.iter().any(|&(a, t, k)| a == attr && t == tx && k == n);
        if hit {
            eprintln!(
                "librdmacm (softverbs): SOFTVERBS_FAULTS: CM MAD {attr:#06x} number {n} {} dropped",
                if tx { "sent" } else { "received" }
            );
        }
        hit
    }
}

/// When the earliest try ends.
pub(super) fn next_due(w: &Wire) -> Option<Instant> {
    w.conns.lock().expect("wire").values().filter_map(|c| c.resend.as_ref().map(|r| r.due)).min()
}

/// Sends again each MAD whose try ended unanswered. One out of tries is given up: a REQ, REP or
/// SIDR_REQ ends its connection and gives the local id UNREACHABLE with `-ETIMEDOUT`, as cma.c
/// reports ib_cm's `IB_CM_REQ_ERROR`, `IB_CM_REP_ERROR` and `IB_CM_SIDR_REQ_ERROR`; a DREQ's
/// id gets DISCONNECTED from the local CM's own timer (`watch::start_dreq_timeout`).
pub(super) fn resend_due(w: &Wire) {
    let now = Instant::now();
    let mut again = Vec::new();
    let mut ended = Vec::new();
    let mut conns = w.conns.lock().expect("wire");
    for (&t, c) in conns.iter_mut() {
        let Some(r) = c.resend.as_mut() else { continue };
        if r.due > now {
            continue;
        }
        if r.left == 0 {
            if matches!(r.attr, 0x0010 | 0x0013 | 0x0017) {
                ended.push(t);
            }
            c.resend = None;
            continue;
        }
        r.left -= 1;
        r.due = now + c.timeout;
        again.push((c.remote_ip, r.attr, r.bytes.clone()));
    }
    let ended: Vec<_> = ended.into_iter().filter_map(|t| conns.remove(&t)?.local).collect();
    drop(conns);
    for (to, attr, bytes) in again {
        put(w, to, attr, &bytes);
    }
    for (path, tok) in ended {
        let mut m = Msg::new(kind::LOCAL, tok);
        m.event = crate::cm_abi::ev::UNREACHABLE;
        m.status = -libc::ETIMEDOUT;
        crate::outbox::send(&w.sock, &path, m.bytes());
    }
}

/// A try of a CM message: the kernel's `kernel`, or `SOFTVERBS_CM_TRY_MS` when set (tests
/// shorten the tries with it, as they shorten the local CM's).
pub(super) fn try_len(kernel: Duration) -> Duration {
    if std::env::var_os("SOFTVERBS_CM_TRY_MS").is_some() {
        crate::watch::cm_try()
    } else {
        kernel
    }
}

/// Waits for an answer to `bytes` on connection `c`.
pub(super) fn await_answer(c: &mut Conn, attr: u16, bytes: Option<Vec<u8>>) {
    c.resend =
        bytes.map(|bytes| Resend { bytes, attr, due: Instant::now() + c.timeout, left: c.retries });
}
