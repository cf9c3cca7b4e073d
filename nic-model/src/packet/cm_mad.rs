//! The InfiniBand communication manager's MADs (IBA vol. 1, chapter 12.6): the messages a CM
//! sends on QP1 (the General Services Interface, UD, Q_Key 0x80010000), 256 bytes each: the
//! 24-byte MAD header (base version 1, management class 0x07, class version 2, method Send)
//! and 232 bytes of the message, whose layout each attribute (REQ 0x0010 … SIDR_REP 0x0018)
//! fixes, private data last. Also the IP addressing header the RoCE CM puts at the start of a
//! REQ's (and SIDR_REQ's) private data (IBA annex A11; Linux's cma calls it the CMA header),
//! the service IDs of the IP port spaces, and the RoCE v2 datagram that carries a MAD to QP1.
//!
//! Plain field structs with `parse` and `emit`, as the rest of `packet`: every field is
//! masked to its width on emit (the caller keeps values in range), parse never panics, and
//! a private data longer than its message holds is an error naming the message.
//! Layouts follow the IBA's tables (and Linux's `ibta_vol1_c12.h`, which spells them as
//! byte and bit offsets); the tests check them against tshark's InfiniBand dissector.

use core::fmt;

use super::{
    emit_datagram, emit_datagram6, Bth, Deth, Ip6Udp, IpUdp, Opcode, Packet, PacketError, Psn,
};

/// Bytes of every MAD on QP1.
pub const MAD_LEN: usize = 256;
/// Bytes of the common MAD header.
pub const MAD_HEADER_LEN: usize = 24;
/// Bytes of a CM message after the MAD header.
pub const CM_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;
/// The MAD base version.
pub const MAD_BASE_VERSION: u8 = 1;
/// The communication management class.
pub const CM_MGMT_CLASS: u8 = 0x07;
/// The CM class version (2, as Linux's CM sends).
pub const CM_CLASS_VERSION: u8 = 2;
/// The MAD method every CM message uses: Send.
pub const MAD_METHOD_SEND: u8 = 0x03;
/// QP1: the General Services Interface's queue pair.
pub const GSI_QPN: u32 = 1;

/// Bytes of the IP addressing header at the start of a REQ's private data.
pub const IP_CM_HEADER_LEN: usize = 36;
/// The service ID prefix of `RDMA_PS_TCP` (the port is the low 16 bits).
pub const SERVICE_ID_PS_TCP: u64 = 0x0000_0000_0106_0000;
/// The service ID prefix of `RDMA_PS_UDP`.
pub const SERVICE_ID_PS_UDP: u64 = 0x0000_0000_0111_0000;
/// The service ID prefix of `RDMA_PS_IB`.
pub const SERVICE_ID_PS_IB: u64 = 0x0000_0000_013F_0000;
/// The service ID prefix of `RDMA_PS_IPOIB`.
pub const SERVICE_ID_PS_IPOIB: u64 = 0x0000_0000_0002_0000;

/// The CM's attribute IDs: which message a MAD carries.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u16)]
pub enum CmAttr {
    /// ConnectRequest.
    Req = 0x0010,
    /// MsgRcptAck: more time is needed.
    Mra = 0x0011,
    /// ConnectReject.
    Rej = 0x0012,
    /// ConnectReply.
    Rep = 0x0013,
    /// ReadyToUse.
    Rtu = 0x0014,
    /// DisconnectRequest.
    Dreq = 0x0015,
    /// DisconnectReply.
    Drep = 0x0016,
    /// ServiceIDResReq (UD service ID resolution).
    SidrReq = 0x0017,
    /// ServiceIDResReqResp.
    SidrRep = 0x0018,
}

impl CmAttr {
    /// The attribute of this ID, if the CM has one.
    pub const fn from_id(id: u16) -> Option<CmAttr> {
        Some(match id {
            0x0010 => CmAttr::Req,
            0x0011 => CmAttr::Mra,
            0x0012 => CmAttr::Rej,
            0x0013 => CmAttr::Rep,
            0x0014 => CmAttr::Rtu,
            0x0015 => CmAttr::Dreq,
            0x0016 => CmAttr::Drep,
            0x0017 => CmAttr::SidrReq,
            0x0018 => CmAttr::SidrRep,
            _ => return None,
        })
    }

    /// Where the message's private data starts in the CM data, and how long it is.
    pub const fn private_data(self) -> (usize, usize) {
        match self {
            CmAttr::Req => (140, 92),
            CmAttr::Mra => (10, 222),
            CmAttr::Rej => (84, 148),
            CmAttr::Rep => (36, 196),
            CmAttr::Rtu | CmAttr::Drep => (8, 224),
            CmAttr::Dreq => (12, 220),
            CmAttr::SidrReq => (16, 216),
            CmAttr::SidrRep => (96, 136),
        }
    }
}

/// Why 256 bytes are not a CM MAD, or a message could not be emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MadError {
    /// Not 256 bytes.
    Length(usize),
    /// The header is not a CM MAD's (base version, class, class version or method).
    NotCm {
        /// The management class found.
        class: u8,
        /// The class version found.
        version: u8,
        /// The method found.
        method: u8,
    },
    /// An attribute ID the CM does not have.
    UnknownAttr(u16),
    /// The private data is longer than the message holds.
    PrivateTooLong {
        /// The message.
        attr: CmAttr,
        /// Bytes given.
        len: usize,
        /// Bytes the message holds.
        max: usize,
    },
    /// The IP addressing header's version is not 4 or 6, or its majority version not 0.
    BadIpHeader(u8),
}

impl fmt::Display for MadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MadError::Length(n) => write!(f, "a MAD is {MAD_LEN} bytes, this one {n}"),
            MadError::NotCm { class, version, method } => write!(
                f,
                "not a CM MAD: class {class:#04x} version {version} method {method:#04x} \
                 (a CM MAD is class 0x07 version 2 method Send)"
            ),
            MadError::UnknownAttr(id) => write!(f, "CM attribute {id:#06x} is no CM message"),
            MadError::PrivateTooLong { attr, len, max } => {
                write!(f, "{len} bytes of private data: a {attr:?} holds {max}")
            }
            MadError::BadIpHeader(b) => {
                write!(f, "the CM's IP header has version byte {b:#04x} (4 or 6 expected)")
            }
        }
    }
}

impl std::error::Error for MadError {}

fn u16_at(d: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([d[o], d[o + 1]])
}
fn u32_at(d: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([d[o], d[o + 1], d[o + 2], d[o + 3]])
}
fn u24_at(d: &[u8], o: usize) -> u32 {
    u32_at(d, o) >> 8
}
fn u64_at(d: &[u8], o: usize) -> u64 {
    u64::from_be_bytes(d[o..o + 8].try_into().expect("8 bytes"))
}
fn gid_at(d: &[u8], o: usize) -> [u8; 16] {
    d[o..o + 16].try_into().expect("16 bytes")
}
fn put16(d: &mut [u8], o: usize, v: u16) {
    d[o..o + 2].copy_from_slice(&v.to_be_bytes());
}
fn put32(d: &mut [u8], o: usize, v: u32) {
    d[o..o + 4].copy_from_slice(&v.to_be_bytes());
}
/// A 24-bit field in the top of the word at `o`, the low byte left as it is.
fn put24(d: &mut [u8], o: usize, v: u32) {
    d[o..o + 3].copy_from_slice(&(v & 0xFF_FFFF).to_be_bytes()[1..]);
}
fn put64(d: &mut [u8], o: usize, v: u64) {
    d[o..o + 8].copy_from_slice(&v.to_be_bytes());
}

/// One path of a REQ (primary or alternate): 44 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct CmPath {
    /// Local port LID (0 on RoCE).
    pub local_lid: u16,
    /// Remote port LID (0 on RoCE).
    pub remote_lid: u16,
    /// Local port GID (on RoCE v2 over IPv4, `::ffff:a.b.c.d`).
    pub local_gid: [u8; 16],
    /// Remote port GID.
    pub remote_gid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate (6 bits, an `ibv_rate`-like IBA code).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet local: 1 when the path stays in the subnet (RoCE v2 sends 0).
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits, 4.096 µs × 2^n).
    pub local_ack_timeout: u8,
}

impl CmPath {
    fn parse(d: &[u8], o: usize) -> CmPath {
        CmPath {
            local_lid: u16_at(d, o),
            remote_lid: u16_at(d, o + 2),
            local_gid: gid_at(d, o + 4),
            remote_gid: gid_at(d, o + 20),
            flow_label: u32_at(d, o + 36) >> 12,
            packet_rate: d[o + 39] & 0x3F,
            traffic_class: d[o + 40],
            hop_limit: d[o + 41],
            sl: d[o + 42] >> 4,
            subnet_local: d[o + 42] & 0x08 != 0,
            local_ack_timeout: d[o + 43] >> 3,
        }
    }

    fn emit(&self, d: &mut [u8], o: usize) {
        put16(d, o, self.local_lid);
        put16(d, o + 2, self.remote_lid);
        d[o + 4..o + 20].copy_from_slice(&self.local_gid);
        d[o + 20..o + 36].copy_from_slice(&self.remote_gid);
        put32(d, o + 36, (self.flow_label & 0xF_FFFF) << 12 | u32::from(self.packet_rate & 0x3F));
        d[o + 40] = self.traffic_class;
        d[o + 41] = self.hop_limit;
        d[o + 42] = (self.sl & 0x0F) << 4 | u8::from(self.subnet_local) << 3;
        d[o + 43] = (self.local_ack_timeout & 0x1F) << 3;
    }
}

/// ConnectRequest (REQ): what `rdma_connect` sends.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct CmReq {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Service ID (for the IP port spaces, prefix | port).
    pub service_id: u64,
    /// Local CA GUID.
    pub local_ca_guid: u64,
    /// Local Q_Key (for RD).
    pub local_qkey: u32,
    /// Local QPN (24 bits).
    pub local_qpn: u32,
    /// Responder resources (`responder_resources`).
    pub responder_resources: u8,
    /// Local EECN (24 bits).
    pub local_eecn: u32,
    /// Initiator depth.
    pub initiator_depth: u8,
    /// Remote EECN (24 bits).
    pub remote_eecn: u32,
    /// Remote CM response timeout (5 bits).
    pub remote_cm_response_timeout: u8,
    /// Transport service type (2 bits: 0 RC, 1 UC, 3 with `ext_transport` for XRC).
    pub transport: u8,
    /// End-to-end flow control.
    pub e2e_flow_control: bool,
    /// Starting PSN (24 bits).
    pub starting_psn: u32,
    /// Local CM response timeout (5 bits).
    pub local_cm_response_timeout: u8,
    /// Retry count (3 bits).
    pub retry_count: u8,
    /// P_Key.
    pub pkey: u16,
    /// Path packet payload MTU (4 bits, `ibv_mtu`'s code).
    pub path_mtu: u8,
    /// RDC exists.
    pub rdc_exists: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// Max CM retries (4 bits).
    pub max_cm_retries: u8,
    /// SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits).
    pub ext_transport: u8,
    /// The primary path.
    pub primary: CmPath,
    /// The alternate path (all zero: none).
    pub alternate: CmPath,
    /// Private data (at most 92 bytes; the IP CM header first, see [`IpCmHeader`]).
    pub private: Vec<u8>,
}

/// ConnectReply (REP): what `rdma_accept` sends.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct CmRep {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID (the REQ's local one).
    pub remote_comm_id: u32,
    /// Local Q_Key.
    pub local_qkey: u32,
    /// Local QPN (24 bits).
    pub local_qpn: u32,
    /// Local EE context number (24 bits).
    pub local_eecn: u32,
    /// Starting PSN (24 bits).
    pub starting_psn: u32,
    /// Responder resources.
    pub responder_resources: u8,
    /// Initiator depth.
    pub initiator_depth: u8,
    /// Target ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub e2e_flow_control: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// SRQ.
    pub srq: bool,
    /// Local CA GUID.
    pub local_ca_guid: u64,
    /// Private data (at most 196 bytes).
    pub private: Vec<u8>,
}

/// ConnectReject (REJ).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct CmRej {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// The message rejected (2 bits: 0 REQ, 1 REP, 2 other).
    pub message_rejected: u8,
    /// Reject info length (7 bits).
    pub reject_info_len: u8,
    /// Reason (28 "consumer reject", 8 "invalid service ID", …).
    pub reason: u16,
    /// Additional reject information (at most 72 bytes; parse returns all 72).
    pub ari: Vec<u8>,
    /// Private data (at most 148 bytes).
    pub private: Vec<u8>,
}

/// MsgRcptAck (MRA): the receiver of a message needs more time to answer it.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct CmMra {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// The message MRAed (2 bits: 0 REQ, 1 REP, 2 LAP).
    pub message_mraed: u8,
    /// Service timeout (5 bits, 4.096 µs × 2^n).
    pub service_timeout: u8,
    /// Private data (at most 222 bytes).
    pub private: Vec<u8>,
}

/// ReadyToUse (RTU), DisconnectReply (DREP): two IDs and private data.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct CmIds {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// Private data (at most 224 bytes).
    pub private: Vec<u8>,
}

/// DisconnectRequest (DREQ): what `rdma_disconnect` sends.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct CmDreq {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// The remote QPN or EECN (24 bits).
    pub remote_qpn: u32,
    /// Private data (at most 220 bytes).
    pub private: Vec<u8>,
}

/// ServiceIDResReq (SIDR_REQ): a UD client asks for a service's QPN and Q_Key.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct SidrReq {
    /// Request ID.
    pub request_id: u32,
    /// P_Key.
    pub pkey: u16,
    /// Service ID.
    pub service_id: u64,
    /// Private data (at most 216 bytes; the IP CM header first).
    pub private: Vec<u8>,
}

/// ServiceIDResReqResp (SIDR_REP).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct SidrRep {
    /// The request's ID.
    pub request_id: u32,
    /// Status (0 the QP is valid, 1 no such service, 2 rejected, …).
    pub status: u8,
    /// Additional information length.
    pub add_info_len: u8,
    /// The service's QPN (24 bits).
    pub qpn: u32,
    /// Service ID.
    pub service_id: u64,
    /// The service's Q_Key.
    pub qkey: u32,
    /// Additional information (at most 72 bytes; parse returns all 72).
    pub add_info: Vec<u8>,
    /// Private data (at most 136 bytes).
    pub private: Vec<u8>,
}

/// One CM message.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum CmMsg {
    /// REQ.
    Req(CmReq),
    /// MRA.
    Mra(CmMra),
    /// REJ.
    Rej(CmRej),
    /// REP.
    Rep(CmRep),
    /// RTU.
    Rtu(CmIds),
    /// DREQ.
    Dreq(CmDreq),
    /// DREP.
    Drep(CmIds),
    /// SIDR_REQ.
    SidrReq(SidrReq),
    /// SIDR_REP.
    SidrRep(SidrRep),
}

impl CmMsg {
    /// The message's attribute.
    pub const fn attr(&self) -> CmAttr {
        match self {
            CmMsg::Req(_) => CmAttr::Req,
            CmMsg::Mra(_) => CmAttr::Mra,
            CmMsg::Rej(_) => CmAttr::Rej,
            CmMsg::Rep(_) => CmAttr::Rep,
            CmMsg::Rtu(_) => CmAttr::Rtu,
            CmMsg::Dreq(_) => CmAttr::Dreq,
            CmMsg::Drep(_) => CmAttr::Drep,
            CmMsg::SidrReq(_) => CmAttr::SidrReq,
            CmMsg::SidrRep(_) => CmAttr::SidrRep,
        }
    }

    fn private(&self) -> &[u8] {
        match self {
            CmMsg::Req(m) => &m.private,
            CmMsg::Mra(m) => &m.private,
            CmMsg::Rej(m) => &m.private,
            CmMsg::Rep(m) => &m.private,
            CmMsg::Rtu(m) | CmMsg::Drep(m) => &m.private,
            CmMsg::Dreq(m) => &m.private,
            CmMsg::SidrReq(m) => &m.private,
            CmMsg::SidrRep(m) => &m.private,
        }
    }
}

/// A CM MAD: the header's transaction ID and the message (the rest of the header is fixed:
/// base version 1, class 0x07, class version 2, method Send, status 0, attribute modifier 0).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CmMad {
    /// Transaction ID (a message and its answer carry the same one).
    pub tid: u64,
    /// The message.
    pub msg: CmMsg,
}

/// Copy `src` (at most `max` bytes long, checked by the caller) into `d` at `o`.
fn put_bytes(d: &mut [u8], o: usize, src: &[u8]) {
    d[o..o + src.len()].copy_from_slice(src);
}

impl CmMad {
    /// The 256 bytes of the MAD; private data shorter than the message's room is padded with
    /// zeros. Errors: private data (or a REJ's ARI, a SIDR_REP's additional information)
    /// longer than the message holds.
    pub fn emit(&self) -> Result<[u8; MAD_LEN], MadError> {
        let attr = self.msg.attr();
        let (po, pmax) = attr.private_data();
        let private = self.msg.private();
        if private.len() > pmax {
            return Err(MadError::PrivateTooLong { attr, len: private.len(), max: pmax });
        }
        let mut mad = [0u8; MAD_LEN];
        mad[0] = MAD_BASE_VERSION;
        mad[1] = CM_MGMT_CLASS;
        mad[2] = CM_CLASS_VERSION;
        mad[3] = MAD_METHOD_SEND;
        put64(&mut mad, 8, self.tid);
        put16(&mut mad, 16, attr as u16);
        let d = &mut mad[MAD_HEADER_LEN..];
        match &self.msg {
            CmMsg::Req(m) => emit_req(m, d),
            CmMsg::Mra(m) => {
                put32(d, 0, m.local_comm_id);
                put32(d, 4, m.remote_comm_id);
                d[8] = (m.message_mraed & 3) << 6;
                d[9] = (m.service_timeout & 0x1F) << 3;
            }
            CmMsg::Rej(m) => {
                if m.ari.len() > 72 {
                    return Err(MadError::PrivateTooLong { attr, len: m.ari.len(), max: 72 });
                }
                put32(d, 0, m.local_comm_id);
                put32(d, 4, m.remote_comm_id);
                d[8] = (m.message_rejected & 3) << 6;
                d[9] = (m.reject_info_len & 0x7F) << 1;
                put16(d, 10, m.reason);
                put_bytes(d, 12, &m.ari);
            }
            CmMsg::Rep(m) => emit_rep(m, d),
            CmMsg::Rtu(m) | CmMsg::Drep(m) => {
                put32(d, 0, m.local_comm_id);
                put32(d, 4, m.remote_comm_id);
            }
            CmMsg::Dreq(m) => {
                put32(d, 0, m.local_comm_id);
                put32(d, 4, m.remote_comm_id);
                put24(d, 8, m.remote_qpn);
            }
            CmMsg::SidrReq(m) => {
                put32(d, 0, m.request_id);
                put16(d, 4, m.pkey);
                put64(d, 8, m.service_id);
            }
            CmMsg::SidrRep(m) => {
                if m.add_info.len() > 72 {
                    return Err(MadError::PrivateTooLong { attr, len: m.add_info.len(), max: 72 });
                }
                put32(d, 0, m.request_id);
                d[4] = m.status;
                d[5] = m.add_info_len;
                put24(d, 8, m.qpn);
                put64(d, 12, m.service_id);
                put32(d, 20, m.qkey);
                put_bytes(d, 24, &m.add_info);
            }
        }
        put_bytes(d, po, private);
        Ok(mad)
    }

    /// The CM MAD in `mad` (256 bytes). Errors: another length, a header that is not a CM
    /// MAD's (base version, class, class version, method Send), an unknown attribute ID.
    /// Private data comes back whole (the message's full room: the wire has no length).
    pub fn parse(mad: &[u8]) -> Result<CmMad, MadError> {
        if mad.len() != MAD_LEN {
            return Err(MadError::Length(mad.len()));
        }
        if mad[0] != MAD_BASE_VERSION
            || mad[1] != CM_MGMT_CLASS
            || mad[2] != CM_CLASS_VERSION
            || mad[3] != MAD_METHOD_SEND
        {
            return Err(MadError::NotCm { class: mad[1], version: mad[2], method: mad[3] });
        }
        let tid = u64_at(mad, 8);
        let id = u16_at(mad, 16);
        let attr = CmAttr::from_id(id).ok_or(MadError::UnknownAttr(id))?;
        let d = &mad[MAD_HEADER_LEN..];
        let (po, plen) = attr.private_data();
        let private = d[po..po + plen].to_vec();
        let (local, remote) = (u32_at(d, 0), u32_at(d, 4));
        let msg = match attr {
            CmAttr::Req => CmMsg::Req(parse_req(d, private)),
            CmAttr::Mra => CmMsg::Mra(CmMra {
                local_comm_id: local,
                remote_comm_id: remote,
                message_mraed: d[8] >> 6,
                service_timeout: d[9] >> 3,
                private,
            }),
            CmAttr::Rej => CmMsg::Rej(CmRej {
                local_comm_id: local,
                remote_comm_id: remote,
                message_rejected: d[8] >> 6,
                reject_info_len: d[9] >> 1,
                reason: u16_at(d, 10),
                ari: d[12..84].to_vec(),
                private,
            }),
            CmAttr::Rep => CmMsg::Rep(parse_rep(d, private)),
            CmAttr::Rtu => {
                CmMsg::Rtu(CmIds { local_comm_id: local, remote_comm_id: remote, private })
            }
            CmAttr::Drep => {
                CmMsg::Drep(CmIds { local_comm_id: local, remote_comm_id: remote, private })
            }
            CmAttr::Dreq => CmMsg::Dreq(CmDreq {
                local_comm_id: local,
                remote_comm_id: remote,
                remote_qpn: u24_at(d, 8),
                private,
            }),
            CmAttr::SidrReq => CmMsg::SidrReq(SidrReq {
                request_id: local,
                pkey: u16_at(d, 4),
                service_id: u64_at(d, 8),
                private,
            }),
            CmAttr::SidrRep => CmMsg::SidrRep(SidrRep {
                request_id: local,
                status: d[4],
                add_info_len: d[5],
                qpn: u24_at(d, 8),
                service_id: u64_at(d, 12),
                qkey: u32_at(d, 20),
                add_info: d[24..96].to_vec(),
                private,
            }),
        };
        Ok(CmMad { tid, msg })
    }
}

fn emit_req(m: &CmReq, d: &mut [u8]) {
    put32(d, 0, m.local_comm_id);
    put64(d, 8, m.service_id);
    put64(d, 16, m.local_ca_guid);
    put32(d, 28, m.local_qkey);
    put24(d, 32, m.local_qpn);
    d[35] = m.responder_resources;
    put24(d, 36, m.local_eecn);
    d[39] = m.initiator_depth;
    put24(d, 40, m.remote_eecn);
    d[43] = (m.remote_cm_response_timeout & 0x1F) << 3
        | (m.transport & 3) << 1
        | u8::from(m.e2e_flow_control);
    put24(d, 44, m.starting_psn);
    d[47] = (m.local_cm_response_timeout & 0x1F) << 3 | (m.retry_count & 7);
    put16(d, 48, m.pkey);
    d[50] = (m.path_mtu & 0x0F) << 4 | u8::from(m.rdc_exists) << 3 | (m.rnr_retry_count & 7);
    d[51] = (m.max_cm_retries & 0x0F) << 4 | u8::from(m.srq) << 3 | (m.ext_transport & 7);
    m.primary.emit(d, 52);
    m.alternate.emit(d, 96);
}

fn parse_req(d: &[u8], private: Vec<u8>) -> CmReq {
    CmReq {
        local_comm_id: u32_at(d, 0),
        service_id: u64_at(d, 8),
        local_ca_guid: u64_at(d, 16),
        local_qkey: u32_at(d, 28),
        local_qpn: u24_at(d, 32),
        responder_resources: d[35],
        local_eecn: u24_at(d, 36),
        initiator_depth: d[39],
        remote_eecn: u24_at(d, 40),
        remote_cm_response_timeout: d[43] >> 3,
        transport: (d[43] >> 1) & 3,
        e2e_flow_control: d[43] & 1 != 0,
        starting_psn: u24_at(d, 44),
        local_cm_response_timeout: d[47] >> 3,
        retry_count: d[47] & 7,
        pkey: u16_at(d, 48),
        path_mtu: d[50] >> 4,
        rdc_exists: d[50] & 0x08 != 0,
        rnr_retry_count: d[50] & 7,
        max_cm_retries: d[51] >> 4,
        srq: d[51] & 0x08 != 0,
        ext_transport: d[51] & 7,
        primary: CmPath::parse(d, 52),
        alternate: CmPath::parse(d, 96),
        private,
    }
}

fn emit_rep(m: &CmRep, d: &mut [u8]) {
    put32(d, 0, m.local_comm_id);
    put32(d, 4, m.remote_comm_id);
    put32(d, 8, m.local_qkey);
    put24(d, 12, m.local_qpn);
    put24(d, 16, m.local_eecn);
    put24(d, 20, m.starting_psn);
    d[24] = m.responder_resources;
    d[25] = m.initiator_depth;
    d[26] = (m.target_ack_delay & 0x1F) << 3
        | (m.failover_accepted & 3) << 1
        | u8::from(m.e2e_flow_control);
    d[27] = (m.rnr_retry_count & 7) << 5 | u8::from(m.srq) << 4;
    put64(d, 28, m.local_ca_guid);
}

fn parse_rep(d: &[u8], private: Vec<u8>) -> CmRep {
    CmRep {
        local_comm_id: u32_at(d, 0),
        remote_comm_id: u32_at(d, 4),
        local_qkey: u32_at(d, 8),
        local_qpn: u24_at(d, 12),
        local_eecn: u24_at(d, 16),
        starting_psn: u24_at(d, 20),
        responder_resources: d[24],
        initiator_depth: d[25],
        target_ack_delay: d[26] >> 3,
        failover_accepted: (d[26] >> 1) & 3,
        e2e_flow_control: d[26] & 1 != 0,
        rnr_retry_count: d[27] >> 5,
        srq: d[27] & 0x10 != 0,
        local_ca_guid: u64_at(d, 28),
        private,
    }
}

/// The IP addressing header a RoCE CM puts first in a REQ's (and SIDR_REQ's) private data
/// (IBA annex A11; Linux's `struct cma_hdr`): version byte 0, IP version in the high nibble
/// of the next, the source port, then the source and destination addresses (an IPv4
/// address in the last 4 bytes of its 16, the rest zero).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IpCmHeader {
    /// The client's (source) port.
    pub src_port: u16,
    /// Source address.
    pub src: std::net::IpAddr,
    /// Destination address.
    pub dst: std::net::IpAddr,
}

fn ip_bytes(a: std::net::IpAddr) -> [u8; 16] {
    match a {
        std::net::IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[12..].copy_from_slice(&v4.octets());
            b
        }
        std::net::IpAddr::V6(v6) => v6.octets(),
    }
}

impl IpCmHeader {
    /// The 36 bytes (IPv4 when both addresses are IPv4, else IPv6 with IPv4 ones mapped).
    pub fn to_bytes(&self) -> [u8; IP_CM_HEADER_LEN] {
        use std::net::IpAddr;
        let v4 = self.src.is_ipv4() && self.dst.is_ipv4();
        let as6 = |a: IpAddr| match a {
            IpAddr::V4(x) if !v4 => IpAddr::V6(x.to_ipv6_mapped()),
            other => other,
        };
        let mut b = [0u8; IP_CM_HEADER_LEN];
        b[1] = if v4 { 4 << 4 } else { 6 << 4 };
        put16(&mut b, 2, self.src_port);
        b[4..20].copy_from_slice(&ip_bytes(as6(self.src)));
        b[20..36].copy_from_slice(&ip_bytes(as6(self.dst)));
        b
    }

    /// The header at the start of `private` (at least 36 bytes). Errors: too short, or a
    /// version byte that is not 0, or an IP version that is not 4 or 6.
    pub fn parse(private: &[u8]) -> Result<IpCmHeader, MadError> {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        if private.len() < IP_CM_HEADER_LEN {
            return Err(MadError::Length(private.len()));
        }
        let v = private[1] >> 4;
        if private[0] != 0 || (v != 4 && v != 6) {
            return Err(MadError::BadIpHeader(private[1]));
        }
        let addr = |o: usize| -> IpAddr {
            let b = gid_at(private, o);
            if v == 4 {
                IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]))
            } else {
                IpAddr::V6(Ipv6Addr::from(b))
            }
        };
        Ok(IpCmHeader { src_port: u16_at(private, 2), src: addr(4), dst: addr(20) })
    }
}

/// The RoCE v2 datagram (IPv4, UDP to 4791, BTH UD SEND ONLY to QP1 with P_Key 0xFFFF, DETH
/// with the GSI Q_Key and source QP 1, the MAD, ICRC) that carries `mad` from `ip.src` to
/// `ip.dst`, written into `out`.
pub fn emit_gsi_datagram(
    ip: &IpUdp,
    psn: u32,
    mad: &[u8; MAD_LEN],
    out: &mut Vec<u8>,
) -> Result<(), PacketError> {
    emit_datagram(ip, &gsi_packet(psn, mad), out)
}

/// [`emit_gsi_datagram`] over IPv6: the same UD SEND to QP1, from `ip.src` to `ip.dst`, its
/// ICRC over the IPv6 headers (as rxe sends a MAD of an `AF_INET6` id's CM).
pub fn emit_gsi_datagram6(
    ip: &Ip6Udp,
    psn: u32,
    mad: &[u8; MAD_LEN],
    out: &mut Vec<u8>,
) -> Result<(), PacketError> {
    emit_datagram6(ip, &gsi_packet(psn, mad), out)
}

/// The UD SEND ONLY to QP1 (P_Key 0xFFFF, PSN `psn`, DETH with the GSI Q_Key and source QP 1)
/// that carries `mad`, over either IP version.
fn gsi_packet(psn: u32, mad: &[u8; MAD_LEN]) -> Packet<'_> {
    let bth = Bth {
        opcode: Opcode::UD_SEND_ONLY,
        pkey: 0xFFFF,
        dest_qp: GSI_QPN,
        psn: Psn::new(psn & 0xFF_FFFF),
        ..Bth::default()
    };
    let mut pkt = Packet::new(bth, mad);
    pkt.deth = Some(Deth { qkey: Deth::GSI_QKEY, src_qp: GSI_QPN });
    pkt
}

#[cfg(test)]
mod tests;
