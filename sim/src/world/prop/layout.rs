//! Where a property case's bytes live: each WR's gather and scatter pieces in the two MRs,
//! separated by untouched gaps, and the expected final image of each MR byte by byte, so a
//! stray write anywhere shows.

use verbs_api::QpType;

use super::{OpKind, WorkItem};

/// Untouched bytes between buffers, so a stray write shows.
const GAP: usize = 64;
/// The target word of every atomic, at the start of `b`'s MR.
pub(super) const ATOMIC_WORD: usize = 0;
/// The GRH a UD receive buffer starts with.
pub(super) const GRH_LEN: u32 = verbs_api::GRH_LEN as u32;

/// A stretch of an MR.
#[derive(Clone, Copy, Debug)]
pub(super) struct Piece {
    pub(super) off: usize,
    pub(super) len: u32,
}

/// Where each WR's bytes live: gather/scatter pieces in `a`'s MR, its target (RC receive
/// pieces, or the RDMA region) in `b`'s MR, and the UC/UD receive buffers.
pub(super) struct Layout {
    pub(super) local: Vec<Vec<Piece>>,
    pub(super) remote: Vec<Vec<Piece>>,
    /// UC/UD: one buffer per receive, in post order (the k-th receive's `wr_id` is k).
    pub(super) pool: Vec<Piece>,
    pub(super) mr_len: usize,
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

pub(super) fn layout(qp_type: QpType, work: &[WorkItem]) -> Layout {
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

pub(super) fn scatter(mem: &mut [u8], pieces: &[Piece], bytes: &[u8]) {
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
pub(super) struct Image {
    init: Vec<u8>,
    want: Vec<u8>,
    rule: Vec<Rule>,
}

impl Image {
    pub(super) fn new(init: &[u8]) -> Image {
        Image { init: init.to_vec(), want: init.to_vec(), rule: vec![Rule::Exact; init.len()] }
    }

    /// `bytes` scattered over `pieces`: surely there (`certain`), or perhaps, or in part.
    pub(super) fn expect(&mut self, pieces: &[Piece], bytes: &[u8], certain: bool) {
        scatter(&mut self.want, pieces, bytes);
        let rule = if certain { Rule::Exact } else { Rule::OldOrNew };
        for p in pieces {
            self.rule[p.off..p.off + p.len as usize].fill(rule);
        }
    }

    pub(super) fn any(&mut self, p: Piece) {
        self.rule[p.off..p.off + p.len as usize].fill(Rule::Any);
    }

    /// The first byte of `got` its rule does not allow, named by `whose`.
    pub(super) fn check(
        &self,
        what: &str,
        got: &[u8],
        whose: impl Fn(usize) -> String,
    ) -> Result<(), String> {
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
pub(super) fn whose(at: usize, per_wr: &[Vec<Piece>], pool: &[Piece], word: bool) -> String {
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
