//! The ACK template: an RC QP's ACKNOWLEDGE datagram built once, so that each ACK or NAK only
//! patches the few bytes that change (identification, checksum, PSN, AETH) and its ICRC.

use super::datagram::{emit_engine_datagram, Icrc, ICRC_LEN};
use super::headers::{Aeth, Bth};
use super::icrc::IcrcPatch;
use super::ipv4_udp::{fold_ones_complement, IpUdp, IPV4_UDP_LEN};
use super::opcode::{OpFlags, Opcode};
use super::psn::Psn;
use super::transport::Packet;

/// The IPv4/UDP/BTH/AETH/ICRC datagram of an RC ACKNOWLEDGE, 48 bytes (its headers' length from
/// the opcode table).
pub(crate) const ACK_DATAGRAM_LEN: usize =
    IPV4_UDP_LEN + Opcode::RC_ACKNOWLEDGE.row().header_len + ICRC_LEN;

/// The ACKNOWLEDGE datagram of one RC QP, built once with every field that stays the same for
/// the QP's ACKs and NAKs (addresses, ports, destination QP), so that sending one only copies
/// it and sets the IPv4 identification and checksum, the PSN, the AETH and the ICRC: an ACK
/// is on the critical path of every RC message (the responder sends it before it hands the
/// receive completion over). The bytes are those [`emit_datagram`] writes for the same packet.
///
/// The ICRC is not hashed for each ACK but patched from the template's: the ACK differs from
/// the template only in bytes the ICRC masks (the IPv4 checksum) and in the nine bytes of the
/// identification, PSN and AETH, which are zeros in the template, so its ICRC is the template's
/// XOR one table entry per byte ([`IcrcPatch`]): 9 loads instead of hashing 44 bytes.
///
/// [`emit_datagram`]: super::emit_datagram
#[derive(Clone, Debug)]
pub(crate) struct AckTemplate {
    /// The datagram with identification 0, PSN 0 and an AETH of zeros, ICRC left out.
    bytes: [u8; ACK_COVERED_LEN],
    /// The IPv4 header checksum of `bytes`, whose identification is 0.
    checksum: u16,
    /// The ICRC of `bytes`, as [`icrc_ipv4`](super::icrc_ipv4) computes it.
    icrc: u32,
}

/// The bytes of an ACK's datagram that its ICRC covers: all but the ICRC.
const ACK_COVERED_LEN: usize = ACK_DATAGRAM_LEN - ICRC_LEN;

/// Where the fields an ACK changes sit in its datagram.
const IDENT_AT: usize = 4;
const CHECKSUM_AT: usize = 10;
const PSN_AT: usize = IPV4_UDP_LEN + 9;
const AETH_AT: usize = IPV4_UDP_LEN
    + Opcode::RC_ACKNOWLEDGE.row().header_offset(OpFlags::AETH).expect("an ACK carries an AETH");

/// The bytes that change from one ACK of a QP to the next and that its ICRC covers: the IPv4
/// identification (2), the PSN (3) and the AETH (4).
const ACK_PATCHED_AT: [usize; 9] = [
    IDENT_AT,
    IDENT_AT + 1,
    PSN_AT,
    PSN_AT + 1,
    PSN_AT + 2,
    AETH_AT,
    AETH_AT + 1,
    AETH_AT + 2,
    AETH_AT + 3,
];

/// The ICRC tables of the bytes at [`ACK_PATCHED_AT`], shared by every QP's template and built
/// by the compiler.
static ACK_ICRC_PATCH: IcrcPatch<{ ACK_PATCHED_AT.len() }> =
    IcrcPatch::new(ACK_COVERED_LEN, ACK_PATCHED_AT);

impl AckTemplate {
    /// The template for ACKs from `ip.src`/`ip.src_port` to `ip.dst`, for the QP `dest_qp`
    /// (`ip.ident` is ignored: each ACK sets its own).
    pub(crate) fn new(ip: &IpUdp, dest_qp: u32) -> AckTemplate {
        let bth = Bth { opcode: Opcode::RC_ACKNOWLEDGE, pkey: 0xFFFF, dest_qp, ..Bth::default() };
        let mut pkt = Packet::new(bth, &[]);
        pkt.aeth = Some(Aeth { syndrome: 0, msn: 0 });
        let mut out = Vec::with_capacity(ACK_DATAGRAM_LEN);
        emit_engine_datagram(&IpUdp { ident: 0, ..*ip }, &pkt, &mut out);
        let (bytes, icrc) = out.split_at(ACK_COVERED_LEN);
        let bytes: [u8; ACK_COVERED_LEN] = bytes.try_into().expect("an ACK is 48 bytes");
        let icrc = u32::from_le_bytes(icrc.try_into().expect("an ACK is 48 bytes"));
        assert!(
            ACK_PATCHED_AT.iter().all(|&at| bytes[at] == 0),
            "the template has zeros where each ACK patches its ICRC"
        );
        let checksum = u16::from_be_bytes([bytes[CHECKSUM_AT], bytes[CHECKSUM_AT + 1]]);
        AckTemplate { bytes, checksum, icrc }
    }

    /// Writes into `out`, which is exactly [`ACK_DATAGRAM_LEN`] bytes, the ACK (or NAK) with
    /// this identification, PSN and AETH, with its ICRC or not (`icrc`).
    pub(crate) fn emit_into(&self, ident: u16, psn: Psn, aeth: Aeth, out: &mut [u8], icrc: Icrc) {
        let (covered, out_icrc) = out.split_at_mut(ACK_COVERED_LEN);
        covered.copy_from_slice(&self.bytes);
        covered[IDENT_AT..IDENT_AT + 2].copy_from_slice(&ident.to_be_bytes());
        // RFC 1624: the identification went from 0 to `ident`, so the header's one's-complement
        // sum (the checksum's complement) grows by `ident`.
        let checksum = !fold_ones_complement(u64::from(!self.checksum) + u64::from(ident));
        covered[CHECKSUM_AT..CHECKSUM_AT + 2].copy_from_slice(&checksum.to_be_bytes());
        covered[PSN_AT..PSN_AT + 3].copy_from_slice(&psn.value().to_be_bytes()[1..]);
        covered[AETH_AT..AETH_AT + 4].copy_from_slice(&aeth.to_bytes());
        // The bytes just written, read back at the offsets the tables were built for; the
        // template has zeros there, so they are also the changes from it.
        let value = match icrc {
            Icrc::Carried => ACK_ICRC_PATCH.icrc(self.icrc, ACK_PATCHED_AT.map(|at| covered[at])),
            Icrc::Unset => 0,
        };
        out_icrc.copy_from_slice(&value.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::super::datagram::{emit_datagram, parse_datagram};
    use super::super::headers::NakCode;
    use super::super::testing::{any_ip_udp, ip_variants};
    use super::*;
    use proptest::prelude::*;

    /// Any AETH a responder sends (ACK, RNR NAK, each NAK code) or a reserved syndrome, with
    /// any 24-bit MSN.
    fn any_aeth() -> impl Strategy<Value = Aeth> {
        let msn = || 0..1u32 << 24;
        let nak_code = prop::sample::select(vec![
            NakCode::PsnSequenceError,
            NakCode::InvalidRequest,
            NakCode::RemoteAccessError,
            NakCode::RemoteOperationalError,
            NakCode::InvalidRdRequest,
        ]);
        prop_oneof![
            msn().prop_map(Aeth::ack),
            (0..32u8, msn()).prop_map(|(timer, msn)| Aeth::rnr_nak(timer, msn)),
            (nak_code, msn()).prop_map(|(code, msn)| Aeth::nak(code, msn)),
            (any::<u8>(), msn()).prop_map(|(syndrome, msn)| Aeth { syndrome, msn }),
        ]
    }

    /// The ACK (or NAK) of `dest_qp` with this PSN and AETH as a packet, for `emit_datagram`.
    fn ack_packet(dest_qp: u32, psn: u32, aeth: Aeth) -> Packet<'static> {
        let bth = Bth {
            opcode: Opcode::RC_ACKNOWLEDGE,
            pkey: 0xFFFF,
            dest_qp,
            psn: Psn::new(psn),
            ..Bth::default()
        };
        let mut pkt = Packet::new(bth, &[]);
        pkt.aeth = Some(aeth);
        pkt
    }

    #[test]
    fn an_ack_from_its_template_is_the_ack_emit_writes() {
        let aeths = [
            Aeth::ack(0),
            Aeth::ack(0x00AB_CDEF),
            Aeth::ack(0x00FF_FFFF),
            Aeth::rnr_nak(14, 7),
            Aeth::nak(NakCode::PsnSequenceError, 3),
            Aeth::nak(NakCode::RemoteAccessError, 0x0080_0001),
        ];
        let (mut fast, mut general) = (Vec::new(), Vec::new());
        for ip in ip_variants() {
            for dest_qp in [0x11, 0x00AB_CDEF, 0x00FF_FFFF] {
                let template = AckTemplate::new(&ip, dest_qp);
                for ident in [0, 1, 0x7FFF, 0x8000, 0xFFFE, 0xFFFF, 0x1234] {
                    for psn in [0, 1, 0x0012_3456, 0x00FF_FFFF] {
                        for aeth in aeths {
                            // Into a buffer with stale bytes in it (a ring slot).
                            fast.clear();
                            fast.resize(ACK_DATAGRAM_LEN, 0x5A);
                            template.emit_into(
                                ident,
                                Psn::new(psn),
                                aeth,
                                &mut fast,
                                Icrc::Carried,
                            );
                            let pkt = ack_packet(dest_qp, psn, aeth);
                            emit_datagram(&IpUdp { ident, ..ip }, &pkt, &mut general).unwrap();
                            assert_eq!(
                                fast, general,
                                "{ip:?} qp {dest_qp:#x} ident {ident} psn {psn}"
                            );
                            assert_eq!(fast.len(), ACK_DATAGRAM_LEN);
                            // Without its ICRC: the same bytes up to it, then zeros.
                            fast.fill(0x5A);
                            template.emit_into(ident, Psn::new(psn), aeth, &mut fast, Icrc::Unset);
                            assert_eq!(fast[..ACK_COVERED_LEN], general[..ACK_COVERED_LEN]);
                            assert_eq!(fast[ACK_COVERED_LEN..], [0; ICRC_LEN]);
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn an_ack_from_any_template_is_the_ack_emit_writes(
            ip in any_ip_udp(),
            dest_qp in 0..1u32 << 24,
            ident in any::<u16>(),
            psn in 0..1u32 << 24,
            aeth in any_aeth(),
            stale in any::<u8>(),
        ) {
            // The template ignores `ip.ident`; each ACK carries its own. Emitted into a buffer
            // with stale bytes in it (a ring slot).
            let template = AckTemplate::new(&ip, dest_qp);
            let mut fast = [stale; ACK_DATAGRAM_LEN];
            template.emit_into(ident, Psn::new(psn), aeth, &mut fast, Icrc::Carried);
            let pkt = ack_packet(dest_qp, psn, aeth);
            let ip = IpUdp { ident, ..ip };
            let mut general = Vec::new();
            emit_datagram(&ip, &pkt, &mut general).unwrap();
            prop_assert_eq!(&fast[..], &general[..]);
            prop_assert_eq!(parse_datagram(&fast), Ok((ip, pkt)));
        }
    }
}
