//! What a scenario checks besides statuses: every message carries its own seeded pattern in a
//! place of its own, so that a lost, misplaced, duplicated or damaged message shows in the
//! bytes; at the end the bytes that landed (WRITE and SEND at the target, READ results and
//! atomics' original values at the initiator, atomics' words at the target) are compared with
//! what each successful WR must have left, and each completion's fields and order are checked
//! as it is polled.
//!
//! Each message `i` of a connection owns `[off_i, off_i + size_i)` (8-byte aligned) in both
//! endpoints' MRs: a WRITE or SEND goes from the initiator's range to the target's, a READ
//! from the target's to the initiator's, an atomic works on the target's first word and returns
//! the original into the initiator's; the `k`-th receive WQE (`wr_id` `k`) points at the range
//! of the `k`-th message that consumes one.

use verbs_api::{MemoryRegion, WcFlags, WcOpcode, WcStatus, WorkCompletion};

use super::spec::Op;

/// One message of a connection: what it is, how long, and where its bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Msg {
    pub op: Op,
    pub size: u32,
    /// Offset of its range in both MRs.
    pub off: usize,
}

/// A connection's messages laid out one after another, each 8-byte aligned.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    /// The messages in post order (`wr_id` = index).
    pub msgs: Vec<Msg>,
    /// Indices of the messages that consume a receive WQE, in post order.
    pub receivers: Vec<usize>,
    /// Bytes each MR needs.
    pub mr_len: usize,
    /// The connection's pattern seed.
    seed: u64,
}

/// The SplitMix64 step: a good 64-bit mix, for patterns only.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Plan {
    /// Lay out `ops` (op, size); patterns follow from `seed`.
    pub fn new(ops: &[(Op, u32)], seed: u64) -> Plan {
        let mut off = 0usize;
        let mut msgs = Vec::with_capacity(ops.len());
        for &(op, size) in ops {
            msgs.push(Msg { op, size, off });
            off += (size as usize).max(8).next_multiple_of(8);
        }
        let receivers = (0..msgs.len()).filter(|&i| msgs[i].op.consumes_recv()).collect();
        Plan { msgs, receivers, mr_len: off.max(8), seed }
    }

    /// Message `i`'s pattern: `len` bytes that differ from every other message's (of this and
    /// every other connection with another seed).
    pub fn pattern(&self, i: usize, len: usize) -> Vec<u8> {
        let base = mix(self.seed ^ mix(i as u64));
        let mut out = vec![0u8; len.next_multiple_of(8)];
        for (w, word) in out.chunks_exact_mut(8).enumerate() {
            word.copy_from_slice(&mix(base.wrapping_add(w as u64)).to_le_bytes());
        }
        out.truncate(len);
        out
    }

    /// Message `i`'s atomic word before the atomic, and its (compare_add, swap) operands.
    pub fn atomic_operands(&self, i: usize) -> (u64, u64, u64) {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.pattern(i, 8));
        let before = u64::from_ne_bytes(w);
        match self.msgs[i].op {
            // Compare with the current value, so that the swap happens exactly once.
            Op::Cas => (before, before, !before),
            _ => (before, i as u64 + 1, 0),
        }
    }

    /// The target word after message `i`'s atomic ran once.
    fn atomic_after(&self, i: usize) -> u64 {
        let (before, add, swap) = self.atomic_operands(i);
        match self.msgs[i].op {
            Op::Cas => swap,
            _ => before.wrapping_add(add),
        }
    }

    /// Write every message's source bytes: the initiator's range of WRITEs and SENDs, the
    /// target's range of READs and atomic words.
    pub fn fill(&self, initiator: &MemoryRegion, target: &MemoryRegion) -> Result<(), String> {
        for (i, m) in self.msgs.iter().enumerate() {
            let (mr, len) = match m.op {
                Op::Send | Op::SendImm | Op::Write | Op::WriteImm => (initiator, m.size),
                Op::Read => (target, m.size),
                Op::Cas | Op::Fadd => (target, 8),
            };
            mr.write(m.off, &self.pattern(i, len as usize)).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Check that message `i`, which completed successfully, left what it must; returns the
    /// bytes checked. The error names the message and its first differing byte.
    pub fn verify(
        &self,
        i: usize,
        initiator: &MemoryRegion,
        target: &MemoryRegion,
    ) -> Result<u64, String> {
        let m = self.msgs[i];
        let what = format!("message {i} ({} of {} bytes)", m.op.name(), m.size);
        let read = |mr: &MemoryRegion, len: usize| {
            mr.read_vec(m.off, len).map_err(|e| format!("{what}: reading the result: {e}"))
        };
        match m.op {
            Op::Send | Op::SendImm | Op::Write | Op::WriteImm | Op::Read => {
                let (side, mr) = match m.op {
                    Op::Read => ("the initiator's READ buffer", initiator),
                    _ => ("the target", target),
                };
                let got = read(mr, m.size as usize)?;
                compare(&what, side, &self.pattern(i, m.size as usize), &got)?;
                Ok(m.size as u64)
            }
            Op::Cas | Op::Fadd => {
                let (before, ..) = self.atomic_operands(i);
                let result = read(initiator, 8)?;
                compare(&what, "the atomic's returned original", &before.to_ne_bytes(), &result)?;
                let word = read(target, 8)?;
                compare(&what, "the target word", &self.atomic_after(i).to_ne_bytes(), &word)?;
                Ok(16)
            }
        }
    }

    /// Check the next requester completion: `expected` is the `wr_id` the oldest outstanding
    /// WR has (RC completes in post order), and a successful one carries its opcode and length.
    pub fn check_send_wc(&self, wc: &WorkCompletion, expected: Option<u64>) -> Result<(), String> {
        if Some(wc.wr_id) != expected {
            return Err(format!(
                "send completion wr_id {} arrived where message {expected:?} was next (RC completes in order)",
                wc.wr_id
            ));
        }
        let i = wc.wr_id as usize;
        let m = self.msgs[i];
        if wc.status != WcStatus::Success {
            return Ok(());
        }
        let want = WcOpcode::for_send(m.op.wr_opcode());
        if wc.opcode != want {
            return Err(format!(
                "message {i} ({}): send completion opcode {}, expected {}",
                m.op.name(),
                wc.opcode.name(),
                want.name()
            ));
        }
        let len = match m.op {
            Op::Read => Some(m.size),
            Op::Cas | Op::Fadd => Some(8),
            _ => None,
        };
        if let Some(len) = len.filter(|&l| l != wc.byte_len) {
            return Err(format!(
                "message {i} ({}): send completion byte_len {}, expected {len}",
                m.op.name(),
                wc.byte_len
            ));
        }
        Ok(())
    }

    /// Check the `k`-th receive completion of the target (`k` counts every receive completion,
    /// so a lost, duplicated or reordered message shows as a wrong `wr_id` or length). Returns
    /// the message it completes, if it succeeded.
    pub fn check_recv_wc(
        &self,
        k: usize,
        wc: &WorkCompletion,
        qpns: (u32, u32),
    ) -> Result<Option<usize>, String> {
        let Some(&i) = self.receivers.get(k) else {
            return Err(format!(
                "receive completion {k} (wr_id {}) is one more than the {} messages that consume a receive",
                wc.wr_id,
                self.receivers.len()
            ));
        };
        let m = self.msgs[i];
        let what =
            format!("receive completion {k} (message {i}, {} of {} bytes)", m.op.name(), m.size);
        if wc.wr_id != k as u64 {
            return Err(format!(
                "{what}: wr_id {}, expected {k} (receives complete in order)",
                wc.wr_id
            ));
        }
        if wc.status != WcStatus::Success {
            return Ok(None);
        }
        let opcode = if m.op == Op::WriteImm { WcOpcode::RecvRdmaWithImm } else { WcOpcode::Recv };
        let imm = matches!(m.op, Op::SendImm | Op::WriteImm);
        let mut wrong = Vec::new();
        if wc.opcode != opcode {
            wrong.push(format!("opcode {}, expected {}", wc.opcode.name(), opcode.name()));
        }
        if wc.byte_len != m.size {
            wrong.push(format!("byte_len {}, expected {}", wc.byte_len, m.size));
        }
        if wc.wc_flags.contains(WcFlags::WITH_IMM) != imm {
            wrong.push(format!("IBV_WC_WITH_IMM is {}, expected {imm}", !imm));
        } else if imm && wc.imm_data != i as u32 {
            wrong.push(format!("imm_data {}, expected {i}", wc.imm_data));
        }
        if (wc.qp_num, wc.src_qp) != (qpns.1, qpns.0) {
            wrong.push(format!(
                "qp_num {:#x} src_qp {:#x}, expected {:#x} {:#x}",
                wc.qp_num, wc.src_qp, qpns.1, qpns.0
            ));
        }
        match wrong.is_empty() {
            true => Ok(Some(i)),
            false => Err(format!("{what}: {}", wrong.join(", "))),
        }
    }
}

/// `Err` naming the first byte where `got` differs from `want`.
fn compare(what: &str, side: &str, want: &[u8], got: &[u8]) -> Result<(), String> {
    // The usual case in one `memcmp`; the byte-by-byte search only to name a difference (a
    // 256-host run checks 16 MiB or more, and the search was an eighth of its process time).
    if want == got {
        return Ok(());
    }
    match want.iter().zip(got).position(|(w, g)| w != g) {
        None if want.len() == got.len() => Ok(()),
        None => Err(format!("{what}: {side} holds {} bytes, expected {}", got.len(), want.len())),
        Some(j) => {
            Err(format!("{what}: byte {j} of {side} is {:#04x}, expected {:#04x}", got[j], want[j]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wc(wr_id: u64, opcode: WcOpcode, byte_len: u32) -> WorkCompletion {
        WorkCompletion { wr_id, opcode, byte_len, ..WorkCompletion::default() }
    }

    #[test]
    fn patterns_are_distinct_per_message_and_per_seed() {
        let ops = [(Op::Write, 64), (Op::Write, 64), (Op::Send, 3)];
        let (p, q) = (Plan::new(&ops, 1), Plan::new(&ops, 2));
        assert_ne!(p.pattern(0, 64), p.pattern(1, 64), "two messages of one connection");
        assert_ne!(p.pattern(0, 64), q.pattern(0, 64), "one message of two connections");
        assert_eq!(p.pattern(0, 64), p.pattern(0, 64), "a pattern is a function of the seed");
        assert_eq!(&p.pattern(0, 64)[..5], &p.pattern(0, 5)[..]);
        assert_eq!([p.msgs[1].off, p.msgs[2].off, p.mr_len], [64, 128, 136]);
        assert_eq!(p.receivers, [2]);
    }

    #[test]
    fn a_wrong_byte_is_named_with_its_message_and_offset() {
        let want = [1u8, 2, 3, 4];
        assert!(compare("m", "the target", &want, &want).is_ok());
        let e = compare("message 7 (write of 4 bytes)", "the target", &want, &[1, 2, 9, 4]);
        assert_eq!(
            e.unwrap_err(),
            "message 7 (write of 4 bytes): byte 2 of the target is 0x09, expected 0x03"
        );
    }

    #[test]
    fn completions_out_of_order_or_with_wrong_fields_are_caught() {
        let ops = [(Op::Send, 16), (Op::Read, 32), (Op::SendImm, 8), (Op::WriteImm, 4)];
        let p = Plan::new(&ops, 5);
        assert!(p.check_send_wc(&wc(0, WcOpcode::Send, 0), Some(0)).is_ok());
        assert!(p.check_send_wc(&wc(1, WcOpcode::RdmaRead, 32), Some(0)).is_err(), "order");
        let e = p.check_send_wc(&wc(1, WcOpcode::RdmaRead, 31), Some(1)).unwrap_err();
        assert!(e.contains("byte_len 31, expected 32"), "{e}");

        let qpns = (0x11, 0x12);
        let mut r = wc(0, WcOpcode::Recv, 16);
        r.qp_num = 0x12;
        r.src_qp = 0x11;
        assert_eq!(p.check_recv_wc(0, &r, qpns), Ok(Some(0)));
        let mut imm = WorkCompletion { wr_id: 1, byte_len: 8, ..r };
        let e = p.check_recv_wc(1, &imm, qpns).unwrap_err();
        assert!(e.contains("IBV_WC_WITH_IMM is false, expected true"), "{e}");
        imm.wc_flags = WcFlags::WITH_IMM;
        imm.imm_data = 2;
        assert_eq!(p.check_recv_wc(1, &imm, qpns), Ok(Some(2)));
        let e = p.check_recv_wc(1, &WorkCompletion { byte_len: 16, ..imm }, qpns).unwrap_err();
        assert!(e.contains("receive completion 1 (message 2") && e.contains("byte_len 16"), "{e}");
        let dup = WorkCompletion { wr_id: 1, ..imm };
        assert!(p.check_recv_wc(2, &dup, qpns).unwrap_err().contains("wr_id 1, expected 2"));
        let w = WorkCompletion {
            wr_id: 2,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: 4,
            imm_data: 3,
            ..imm
        };
        assert_eq!(p.check_recv_wc(2, &w, qpns), Ok(Some(3)));
        assert!(p.check_recv_wc(3, &w, qpns).unwrap_err().contains("one more than the 3"));
    }
}
