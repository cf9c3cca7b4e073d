//! Packet sequence numbers (BTH PSN): 24-bit serial numbers.
//!
//! All PSN arithmetic and ordering lives here, so that no caller ever compares two PSNs with `<`
//! (which is wrong across the 2^24 wrap).

use core::fmt;

/// A 24-bit packet sequence number, the BTH `PSN` field (IBA 9.2; the same width as the ePSN
/// and MSN counters). Ordering is serial: use [`Psn::diff`], [`Psn::is_before`], [`Psn::is_after`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Psn(u32);

impl Psn {
    /// The 24 bits a PSN occupies on the wire.
    pub const MASK: u32 = 0x00FF_FFFF;

    /// A PSN from the low 24 bits of `v` (higher bits are dropped).
    pub const fn new(v: u32) -> Psn {
        Psn(v & Self::MASK)
    }

    /// The PSN as an integer in `0..2^24`.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    pub const fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }

    /// The following PSN, `self + 1` modulo 2^24.
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// The serial difference `self - other`, in `[-2^23, 2^23)`: positive when `self` is after
    /// `other`. Both PSNs are exactly 2^23 apart at the boundary, which reads as "before".
    pub const fn diff(self, other: Psn) -> i32 {
        // Put the 24-bit difference in the top of a 32-bit word, then shift back arithmetically
        // so that bit 23 becomes the sign.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// `self` precedes `other` in serial order (`diff < 0`), e.g. a duplicate of an earlier packet.
    pub const fn is_before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// `self` follows `other` in serial order (`diff > 0`), e.g. a packet beyond the expected PSN.
    pub const fn is_after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// The number of PSNs from `self` up to (not including) `end`, going forward modulo 2^24:
    /// `end - self` as an unsigned 24-bit count.
    pub const fn distance_to(self, end: Psn) -> u32 {
        end.0.wrapping_sub(self.0) & Self::MASK
    }
}

impl fmt::Display for Psn {
    /// Decimal, as Wireshark shows the BTH PSN.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOP: Psn = Psn::new(Psn::MASK);

    #[test]
    fn new_masks_to_24_bits() {
        assert_eq!(Psn::new(0x0100_0005).value(), 5);
        assert_eq!(Psn::new(0xFFFF_FFFF).value(), 0x00FF_FFFF);
    }

    #[test]
    fn wraps_at_2_pow_24() {
        assert_eq!(TOP.next(), Psn::new(0));
        assert_eq!(TOP.add(2), Psn::new(1));
        assert_eq!(Psn::new(5).add(Psn::MASK), Psn::new(4));
        assert_eq!(Psn::new(5).add(u32::MAX), Psn::new(4));
    }

    #[test]
    fn diff_across_the_wrap() {
        assert_eq!(Psn::new(0).diff(TOP), 1);
        assert_eq!(TOP.diff(Psn::new(0)), -1);
        assert_eq!(Psn::new(3).diff(Psn::new(0x00FF_FFFE)), 5);
        assert_eq!(Psn::new(0x00FF_FFFE).diff(Psn::new(3)), -5);
        assert_eq!(Psn::new(7).diff(Psn::new(7)), 0);
        assert!(Psn::new(0).is_after(TOP));
        assert!(TOP.is_before(Psn::new(0)));
    }

    #[test]
    fn half_space_edges() {
        let base = Psn::new(100);
        let half = 1u32 << 23;
        // The furthest "after" is 2^23 - 1 ahead.
        assert_eq!(base.add(half - 1).diff(base), (1 << 23) - 1);
        assert!(base.add(half - 1).is_after(base));
        // Exactly 2^23 ahead wraps to the most negative difference: "before".
        assert_eq!(base.add(half).diff(base), -(1 << 23));
        assert!(base.add(half).is_before(base));
        assert!(!base.add(half).is_after(base));
        // 2^23 + 1 ahead is 2^23 - 1 behind.
        assert_eq!(base.add(half + 1).diff(base), -((1 << 23) - 1));
        // And from the other side.
        assert_eq!(base.diff(base.add(half)), -(1 << 23));
        assert!(base.is_before(base.add(half - 1)));
        assert!(!base.is_before(base) && !base.is_after(base));
    }

    #[test]
    fn diff_range_holds_everywhere() {
        for a in [0, 1, 0x7F_FFFF, 0x80_0000, 0x80_0001, Psn::MASK] {
            for b in [0, 1, 0x7F_FFFF, 0x80_0000, 0x80_0001, Psn::MASK] {
                let d = Psn::new(a).diff(Psn::new(b));
                assert!((-(1 << 23)..(1 << 23)).contains(&d), "{a:#x} - {b:#x} = {d}");
                // diff is consistent with add.
                assert_eq!(Psn::new(b).add(d as u32), Psn::new(a));
            }
        }
    }

    #[test]
    fn distance_to_counts_forward() {
        assert_eq!(Psn::new(10).distance_to(Psn::new(13)), 3);
        assert_eq!(TOP.distance_to(Psn::new(2)), 3);
        assert_eq!(Psn::new(4).distance_to(Psn::new(4)), 0);
    }

    #[test]
    fn display_is_decimal() {
        assert_eq!(Psn::new(0x12_3456).to_string(), "1193046");
    }
}
