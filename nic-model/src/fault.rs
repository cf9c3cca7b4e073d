//! The fault vocabulary both worlds speak: the per-packet fault parameters (loss, duplication,
//! reorder jitter, corruption, truncation), the seeded generator that decides each packet's
//! fate, the order in which it draws, and drops of chosen packets. The simulator's links
//! (`sim/src/world/link.rs`) and the soft backend's `SOFTVERBS_FAULTS` (`soft/faults.rs`)
//! both decide with [`FaultParams::lose`] and [`FaultParams::decide`], so a rate means the same
//! thing in a scenario file and in a real run.

use std::collections::BTreeSet;

/// A seeded pseudo-random generator (xoshiro256**, seeded through SplitMix64). Small, fast and
/// the same on every platform, so a seed names a run.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

/// One SplitMix64 step: expands a seed into well-mixed state words.
fn splitmix_next(x: &mut u64) -> u64 {
    let out = crate::engine::splitmix64(*x);
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    out
}

impl Rng {
    /// A generator whose whole stream is determined by `seed`.
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let s = [
            splitmix_next(&mut x),
            splitmix_next(&mut x),
            splitmix_next(&mut x),
            splitmix_next(&mut x),
        ];
        Rng { s }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A uniform value in `0..n` (0 when `n` is 0). Lemire's multiply-shift; the tiny bias is
    /// irrelevant for fault injection.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// True with probability `p` (clamped to [0, 1]); draws nothing when `p` is 0 or 1, so a
    /// fault that is off does not shift the stream of the others.
    #[inline]
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        if p >= 1.0 {
            return true;
        }
        // 53 random bits against the probability scaled to 2^53: exact, no float rounding.
        let threshold = (p * (1u64 << 53) as f64) as u64;
        (self.next_u64() >> 11) < threshold
    }
}

/// Per-packet fault probabilities (each in [0, 1]) and reorder jitter: a simulated link's
/// faults, or one direction of a soft port's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultParams {
    /// Probability a packet is lost.
    pub loss: f64,
    /// Probability a packet is duplicated.
    pub dup: f64,
    /// Each packet is delayed by a uniform extra 0..=this many ns, which reorders packets.
    pub reorder_jitter_ns: u64,
    /// Probability one bit of a packet is flipped (the receiver's ICRC check then drops it).
    pub corrupt: f64,
    /// Probability a packet is cut short.
    pub truncate: f64,
}

/// What [`FaultParams::decide`] chose for one packet that was not lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketFate {
    /// Send a copy right behind it.
    pub duplicate: bool,
    /// Flip bit `.1` of byte `.0`.
    pub flip: Option<(usize, u8)>,
    /// Keep only this many bytes.
    pub keep: Option<usize>,
    /// Hold it this much longer (0: not at all).
    pub jitter_ns: u64,
}

impl PacketFate {
    /// Applies the flip and the cut to the packet's bytes.
    pub fn apply(&self, data: &mut Vec<u8>) {
        if let Some((at, bit)) = self.flip {
            data[at] ^= 1 << bit;
        }
        if let Some(keep) = self.keep {
            data.truncate(keep);
        }
    }

    /// Whether the packet's bytes change.
    pub fn alters(&self) -> bool {
        self.flip.is_some() || self.keep.is_some()
    }
}

impl FaultParams {
    /// No fault at all.
    pub fn is_clean(&self) -> bool {
        *self == FaultParams::default()
    }

    /// Whether the packet is lost: the first draw of every packet.
    #[inline]
    pub fn lose(&self, rng: &mut Rng) -> bool {
        rng.chance(self.loss)
    }

    /// The rest of a packet's fate, for a packet of `len` bytes that was not lost, drawn in
    /// this order: duplicate; corrupt (then the byte and bit); truncate (then the length
    /// kept); jitter. A flip lands where the ICRC covers it: from the BTH on, never BTH byte 4
    /// (the FECN/BECN byte, which the ICRC masks because switches may change it).
    pub fn decide(&self, rng: &mut Rng, len: usize) -> PacketFate {
        let mut fate = PacketFate { duplicate: rng.chance(self.dup), ..PacketFate::default() };
        if rng.chance(self.corrupt) && len > 28 {
            let span = (len - 29) as u64;
            let mut at = 28 + rng.below(span) as usize;
            if at >= 32 {
                at += 1;
            }
            fate.flip = Some((at, rng.below(8) as u8));
        }
        if rng.chance(self.truncate) && len > 0 {
            fate.keep = Some(rng.below(len as u64) as usize);
        }
        if self.reorder_jitter_ns > 0 {
            fate.jitter_ns = rng.below(self.reorder_jitter_ns + 1);
        }
        fate
    }
}

/// Chosen packets to drop, by their index in a count (0 = the first ever).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DropNth {
    pending: BTreeSet<u64>,
}

impl DropNth {
    /// Drop the packet with this index too.
    pub fn add(&mut self, index: u64) {
        self.pending.insert(index);
    }

    /// Whether the packet with this index is to be dropped (each index once).
    #[inline]
    pub fn take(&mut self, index: u64) -> bool {
        !self.pending.is_empty() && self.pending.remove(&index)
    }

    /// Whether no drop is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_seeds_differ() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let mut c = Rng::new(8);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
    }

    #[test]
    fn below_and_chance_stay_in_range() {
        let mut r = Rng::new(1);
        assert!((0..1000).all(|_| r.below(10) < 10));
        assert_eq!(r.below(0), 0);
        let hits = (0..10_000).filter(|_| r.chance(0.25)).count();
        assert!((2000..3000).contains(&hits), "{hits}");
        assert!(!r.chance(0.0));
        assert!(r.chance(1.0));
    }

    #[test]
    fn a_fate_flips_only_icrc_covered_bits_and_cuts_short() {
        let p = FaultParams { corrupt: 1.0, truncate: 1.0, ..FaultParams::default() };
        let mut rng = Rng::new(3);
        for _ in 0..200 {
            let f = p.decide(&mut rng, 60);
            let (at, bit) = f.flip.expect("always corrupts");
            assert!((28..60).contains(&at) && at != 32 && bit < 8, "{at}");
            assert!(f.keep.expect("always truncates") < 60);
            let mut d = vec![0u8; 60];
            f.apply(&mut d);
            assert!(d.len() < 60);
        }
        let mut n = DropNth::default();
        n.add(2);
        assert!(!n.take(1) && n.take(2) && !n.take(2) && n.is_empty());
    }
}
