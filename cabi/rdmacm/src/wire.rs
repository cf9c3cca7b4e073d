//! The CM across hosts (`SOFTVERBS_NETDEV`): a process whose devices are RoCE v2 devices on a
//! network interface reaches a listener on another host through this gateway. An id whose
//! peer is a remote address sends its control messages (REQ, REP, RTU, REJ, DREQ, DREP) to
//! the gateway's channel socket, as it would to a local peer's; the gateway sends each as the
//! IBA's CM MAD on QP1 (a UD SEND to QP1 with the GSI Q_Key, over UDP to the peer's port 4791)
//! and turns each CM MAD the port hands it (nic-model's `soft/udp/gsi.rs`) back into the
//! message the local id expects, from the gateway's socket. So the rest of the CM does not
//! know whether its peer is local: the gateway is the peer, and it maps each connection's
//! token to the communication IDs on the wire (docs/decisions.md, "The CM across hosts").
//!
//! A UD id (`RDMA_PS_UDP`, or a UD QP) resolves its peer by SIDR_REQ and SIDR_REP instead.
//!
//! Not yet: retries of a lost MAD (a veth pair or a LAN loses
//! few; the requester's REQ life still ends a REQ that got no answer), MRA.
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use nic_model::packet::{
    emit_gsi_datagram, parse_datagram, CmDreq, CmIds, CmMad, CmMsg, CmPath, CmRej, CmRep, CmReq,
    IpCmHeader, IpUdp, SidrRep, SidrReq, IP_CM_HEADER_LEN, MAD_LEN, SERVICE_ID_PS_IB,
    SERVICE_ID_PS_TCP, SERVICE_ID_PS_UDP,
};

use crate::state::{cm_dir, dev_of_ip, devices, gid_of, is_loopback, kind, Msg, Named};

/// One connection through the gateway, by the gateway's token (its local communication ID).
struct Conn {
    /// The local id's channel socket and token, once it sent or was sent a message.
    local: Option<(PathBuf, u64)>,
    /// The peer's communication ID (0 until its REQ or REP).
    remote_comm_id: u32,
    /// The peer's address.
    remote_ip: [u8; 4],
    /// The peer's QPN (for the DREQ).
    remote_qpn: u32,
    /// The transaction ID of the REQ, which its answers carry.
    tid: u64,
    /// A UD id's: SIDR_REQ and SIDR_REP, no connection.
    ud: bool,
    /// The service ID asked for (a SIDR_REP echoes it).
    service_id: u64,
}

/// The gateway of this process.
struct Wire {
    /// Its channel socket: local ids send to it.
    path: PathBuf,
    sock: UnixDatagram,
    /// Where the port hands it QP1 datagrams.
    gsi: UnixDatagram,
    /// Sends the datagrams (from an ephemeral port of the device's address).
    udp: UdpSocket,
    udp_port: u16,
    ip: [u8; 4],
    conns: Mutex<HashMap<u32, Conn>>,
}

/// Whether this process's devices are on a network interface (`SOFTVERBS_NETDEV`).
pub fn on() -> bool {
    std::env::var_os("SOFTVERBS_NETDEV").is_some_and(|v| !v.is_empty())
}

fn wire() -> Option<&'static Wire> {
    static W: OnceLock<Option<&'static Wire>> = OnceLock::new();
    *W.get_or_init(|| {
        if !on() {
            return None;
        }
        match open() {
            Ok(w) => {
                let w: &'static Wire = Box::leak(Box::new(w));
                let _ = WIRE_PATH.set(w.path.clone());
                crate::state::set_remote_sender(sends);
                // SAFETY: registering a plain function to run at exit.
                unsafe { libc::atexit(remove_socket) };
                std::thread::Builder::new()
                    .name("softverbs-cm-wire".into())
                    .spawn(move || run(w))
                    .ok()?;
                Some(w)
            }
            Err(e) => {
                eprintln!("librdmacm (softverbs): the CM across hosts is unavailable: {e}");
                None
            }
        }
    })
}

/// The gateway's socket path, for [`remove_socket`].
static WIRE_PATH: OnceLock<PathBuf> = OnceLock::new();

/// At exit: the gateway's channel socket goes (no file is left in the CM directory).
extern "C" fn remove_socket() {
    if let Some(p) = WIRE_PATH.get() {
        let _ = std::fs::remove_file(p);
    }
}

/// Start the gateway if the devices are on a network interface (a listener must hear REQs
/// from other hosts); nothing otherwise.
pub fn start() {
    let _ = wire();
}

/// The gateway's channel socket if `ip` is an address on another host: the devices are on a
/// network interface and no port of this process has it.
pub fn remote(ip: [u8; 4]) -> Option<PathBuf> {
    if !on() || is_loopback(ip) || ip[0] & 0xF0 == 0xE0 || ip == [0; 4] || dev_of_ip(ip).is_some() {
        return None;
    }
    wire().map(|w| w.path.clone())
}

fn open() -> std::io::Result<Wire> {
    let dev = devices().first().copied().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::NotFound, "no softverbs device on the interface")
    })?;
    let path = cm_dir().join(format!("ch-{}-wire", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let sock = UnixDatagram::bind(&path)?;
    sock.set_nonblocking(true)?;
    let name = nic_model::soft::gsi_socket_name(std::process::id());
    let gsi = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name)?)?;
    gsi.set_nonblocking(true)?;
    let udp = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::from(dev.ip), 0))?;
    let pmtu: libc::c_int = libc::IP_PMTUDISC_DO;
    // SAFETY: an open socket; the value is an int. DF makes the kernel's identification 0,
    // which the ICRC covers (as the port's own socket: nic-model soft/udp.rs).
    unsafe {
        libc::setsockopt(
            udp.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            std::ptr::from_ref(&pmtu).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    let udp_port = udp.local_addr()?.port();
    Ok(Wire { path, sock, gsi, udp, udp_port, ip: dev.ip, conns: Mutex::new(HashMap::new()) })
}

/// A fresh local communication ID (never 0).
fn comm_id() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (std::process::id().wrapping_mul(2_654_435_761) ^ n.wrapping_mul(40_503)).max(1)
}

fn run(w: &'static Wire) {
    let mut buf = vec![0u8; 4096];
    loop {
        let mut fds = [
            libc::pollfd { fd: w.sock.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: w.gsi.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfds.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, 1000) };
        while let Ok(n) = w.sock.recv(&mut buf) {
            if let Some(m) = Msg::from_bytes(&buf[..n]) {
                from_local(w, &m);
            }
        }
        while let Ok(n) = w.gsi.recv(&mut buf) {
            from_wire(w, &buf[..n]);
        }
    }
}

/// Send `msg` as a CM MAD to `to`.
fn send_mad(w: &Wire, to: [u8; 4], tid: u64, msg: CmMsg) {
    let mad = match (CmMad { tid, msg }).emit() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("librdmacm (softverbs): a CM MAD: {e}");
            return;
        }
    };
    let ip = IpUdp {
        src: w.ip,
        dst: to,
        src_port: w.udp_port,
        tos: 0,
        ttl: 64,
        ident: 0,
        dont_fragment: true,
    };
    let mut out = Vec::with_capacity(MAD_LEN + 64);
    if emit_gsi_datagram(&ip, 0, &mad, &mut out).is_ok() {
        let dst = SocketAddrV4::new(Ipv4Addr::from(to), nic_model::packet::ROCE_UDP_PORT);
        if let Err(e) = w.udp.send_to(&out[nic_model::packet::IPV4_UDP_LEN..], dst) {
            eprintln!("librdmacm (softverbs): sending a CM MAD to {dst}: {e}");
        }
    }
}

/// If `to` is the gateway's channel socket, send `m` as a MAD at once, from the caller's
/// thread (a DREP sent just before the process exits must still leave), and say so.
fn sends(to: &std::path::Path, m: &Msg) -> bool {
    match wire() {
        Some(w) if w.path == to => {
            from_local(w, m);
            true
        }
        _ => false,
    }
}

/// A message from a local id to its remote peer: as a MAD.
fn from_local(w: &Wire, m: &Msg) {
    let pd = &m.pd[..(m.pd_len as usize).min(256)];
    let mut conns = w.conns.lock().expect("wire");
    if m.kind == kind::REQ && m.to == 0 {
        let t = comm_id();
        let tid = u64::from(t) << 32 | 1;
        let ud = m.qkey != 0;
        let prefix = match (m.ps_ib != 0, ud) {
            (true, _) => SERVICE_ID_PS_IB,
            (false, true) => SERVICE_ID_PS_UDP,
            (false, false) => SERVICE_ID_PS_TCP,
        };
        let service_id = prefix | u64::from(m.dst_port);
        conns.insert(
            t,
            Conn {
                local: Some((m.reply_path(), m.from)),
                remote_comm_id: 0,
                remote_ip: m.dst_ip,
                remote_qpn: 0,
                tid,
                ud,
                service_id,
            },
        );
        drop(conns);
        let hdr = IpCmHeader {
            src_port: m.src_port,
            src: Ipv4Addr::from(m.src_ip).into(),
            dst: Ipv4Addr::from(m.dst_ip).into(),
        };
        let mut private = hdr.to_bytes().to_vec();
        if ud {
            private.extend_from_slice(&pd[..pd.len().min(216 - IP_CM_HEADER_LEN)]);
            let req = SidrReq { request_id: t, pkey: 0xFFFF, service_id, private };
            send_mad(w, m.dst_ip, tid, CmMsg::SidrReq(req));
            return;
        }
        private.extend_from_slice(&pd[..pd.len().min(92 - IP_CM_HEADER_LEN)]);
        let req = CmReq {
            local_comm_id: t,
            service_id,
            local_ca_guid: guid(w.ip),
            local_qpn: m.qpn,
            responder_resources: m.rd_atomic,
            initiator_depth: m.rd_atomic,
            remote_cm_response_timeout: 20,
            starting_psn: m.psn,
            local_cm_response_timeout: 20,
            retry_count: 7,
            pkey: 0xFFFF,
            path_mtu: 3,
            rnr_retry_count: m.rnr_retry,
            max_cm_retries: 15,
            primary: CmPath {
                local_gid: gid_of(w.ip),
                remote_gid: gid_of(m.dst_ip),
                hop_limit: 64,
                local_ack_timeout: 14,
                ..CmPath::default()
            },
            private,
            ..CmReq::default()
        };
        send_mad(w, m.dst_ip, tid, CmMsg::Req(req));
        return;
    }
    let Ok(t) = u32::try_from(m.to) else { return };
    let Some(c) = conns.get_mut(&t) else { return };
    // RTU, DREQ and DREP name no reply socket (the CM sends them where the peer is known).
    let reply = m.reply_path();
    if !reply.as_os_str().is_empty() {
        c.local = Some((reply, m.from));
    }
    let (to, tid, remote) = (c.remote_ip, c.tid, c.remote_comm_id);
    if c.ud {
        // The listener's answer to a SIDR_REQ: its QP and Q_Key, or a refusal.
        let (status, qpn, qkey) = match m.kind {
            kind::REP => (0, m.qpn, m.qkey),
            kind::REJ => (2, 0, 0),
            _ => return,
        };
        let rep = SidrRep {
            request_id: remote,
            status,
            qpn,
            service_id: c.service_id,
            qkey,
            private: pd[..pd.len().min(136)].to_vec(),
            ..SidrRep::default()
        };
        conns.remove(&t);
        drop(conns);
        send_mad(w, to, tid, CmMsg::SidrRep(rep));
        return;
    }
    let ids = CmIds { local_comm_id: t, remote_comm_id: remote, private: pd.to_vec() };
    let msg = match m.kind {
        kind::REP => CmMsg::Rep(CmRep {
            local_comm_id: t,
            remote_comm_id: remote,
            local_qpn: m.qpn,
            starting_psn: m.psn,
            responder_resources: m.rd_atomic,
            initiator_depth: m.rd_atomic,
            target_ack_delay: 15,
            rnr_retry_count: m.rnr_retry,
            local_ca_guid: guid(w.ip),
            private: pd[..pd.len().min(196)].to_vec(),
            ..CmRep::default()
        }),
        kind::RTU => CmMsg::Rtu(ids),
        kind::REJ => {
            conns.remove(&t);
            CmMsg::Rej(CmRej {
                local_comm_id: t,
                remote_comm_id: remote,
                message_rejected: if remote == 0 { 2 } else { 0 },
                reason: u16::try_from(m.status).unwrap_or(28),
                private: pd[..pd.len().min(148)].to_vec(),
                ..CmRej::default()
            })
        }
        kind::DREQ => CmMsg::Dreq(CmDreq {
            local_comm_id: t,
            remote_comm_id: remote,
            remote_qpn: c.remote_qpn,
            private: pd[..pd.len().min(220)].to_vec(),
        }),
        kind::DREP => {
            conns.remove(&t);
            CmMsg::Drep(ids)
        }
        _ => return,
    };
    drop(conns);
    send_mad(w, to, tid, msg);
}

/// The CA GUID the gateway's MADs carry: the soft device's form with the address in it.
fn guid(ip: [u8; 4]) -> u64 {
    0x0200_5eff_fe00_0000 | u64::from(u32::from_be_bytes(ip) & 0xFF_FFFF)
}

/// A datagram to QP1 from the port: a CM MAD from another host, to its local id.
fn from_wire(w: &Wire, d: &[u8]) {
    let Ok((ip, pkt)) = parse_datagram(d) else { return };
    if pkt.deth.map(|x| x.qkey) != Some(0x8001_0000) {
        return;
    }
    let Ok(mad) = CmMad::parse(pkt.payload) else { return };
    let tid = mad.tid;
    let mut conns = w.conns.lock().expect("wire");
    let (t, m) = match mad.msg {
        CmMsg::Req(r) => {
            drop(conns);
            return req_from_wire(w, ip.src, tid, r);
        }
        CmMsg::Rep(r) => {
            let Some(c) = conns.get_mut(&r.remote_comm_id) else { return };
            c.remote_comm_id = r.local_comm_id;
            c.remote_qpn = r.local_qpn;
            let mut m = Msg::new(kind::REP, 0);
            m.qpn = r.local_qpn;
            m.psn = r.starting_psn;
            m.rd_atomic = r.responder_resources;
            m.rnr_retry = r.rnr_retry_count;
            m.src_ip = ip.src;
            m.set_pd(&r.private);
            (r.remote_comm_id, m)
        }
        CmMsg::Rtu(r) => (r.remote_comm_id, Msg::new(kind::RTU, 0)),
        CmMsg::Rej(r) => {
            let mut m = Msg::new(kind::REJ, 0);
            m.status = i32::from(r.reason);
            m.set_pd(&r.private);
            (r.remote_comm_id, m)
        }
        CmMsg::Dreq(r) => {
            let mut m = Msg::new(kind::DREQ, 0);
            m.set_pd(&r.private);
            (r.remote_comm_id, m)
        }
        CmMsg::Drep(r) => {
            let mut m = Msg::new(kind::DREP, 0);
            m.set_pd(&r.private);
            (r.remote_comm_id, m)
        }
        CmMsg::SidrReq(r) => {
            drop(conns);
            return sidr_req_from_wire(w, ip.src, tid, r);
        }
        CmMsg::SidrRep(r) => {
            // Status 0: the service's QP; else refused (as librdmacm reports a SIDR_REP
            // with a status: REJECTED with it).
            let mut m = Msg::new(if r.status == 0 { kind::REP } else { kind::REJ }, 0);
            m.status = i32::from(r.status);
            m.qpn = r.qpn;
            m.qkey = r.qkey;
            m.src_ip = ip.src;
            m.set_pd(&r.private);
            (r.request_id, m)
        }
        // MRA: the REQ's life covers it.
        _ => return,
    };
    let Some(c) = conns.get(&t) else { return };
    let Some((path, tok)) = c.local.clone() else { return };
    if m.kind == kind::DREP || m.kind == kind::REJ || c.ud {
        conns.remove(&t);
    }
    drop(conns);
    let mut m = m;
    m.to = tok;
    m.from = u64::from(t);
    m.set_reply(&w.path);
    crate::outbox::send(&w.sock, &path, m.bytes());
}

/// A REQ from another host: to the listener of its address and port, or a REJ (invalid
/// service ID, as a CM with no listener there answers).
fn req_from_wire(w: &Wire, from: [u8; 4], tid: u64, r: CmReq) {
    let hdr = IpCmHeader::parse(&r.private).ok();
    let src = hdr.and_then(|h| v4(h.src)).unwrap_or(from);
    let dst = hdr.and_then(|h| v4(h.dst)).unwrap_or(w.ip);
    let port = (r.service_id & 0xFFFF) as u16;
    let ib = r.service_id & !0xFFFF == SERVICE_ID_PS_IB;
    let t = comm_id();
    let listener = match crate::watch::look_up((dst, port), ib) {
        Named::Listener(path, tok) => Some((path, tok)),
        _ => None,
    };
    let Some((path, tok)) = listener else {
        let rej = CmRej {
            local_comm_id: t,
            remote_comm_id: r.local_comm_id,
            message_rejected: 0,
            reason: 8,
            ..CmRej::default()
        };
        send_mad(w, from, tid, CmMsg::Rej(rej));
        return;
    };
    w.conns.lock().expect("wire").insert(
        t,
        Conn {
            local: None,
            remote_comm_id: r.local_comm_id,
            remote_ip: from,
            remote_qpn: r.local_qpn,
            tid,
            ud: false,
            service_id: r.service_id,
        },
    );
    let mut m = Msg::new(kind::REQ, tok);
    m.from = u64::from(t);
    m.set_reply(&w.path);
    m.qpn = r.local_qpn;
    m.psn = r.starting_psn;
    m.src_ip = src;
    m.src_port = hdr.map_or(0, |h| h.src_port);
    m.dst_ip = dst;
    m.dst_port = port;
    m.rd_atomic = r.initiator_depth;
    m.rnr_retry = r.rnr_retry_count;
    m.ps_ib = u8::from(ib);
    m.set_pd(&r.private[IP_CM_HEADER_LEN.min(r.private.len())..]);
    crate::outbox::send(&w.sock, &path, m.bytes());
}

/// A SIDR_REQ from another host: to the listener of its address and port as a REQ (the
/// listener answers with its UD QP), or a SIDR_REP with status 1 (no such service).
fn sidr_req_from_wire(w: &Wire, from: [u8; 4], tid: u64, r: SidrReq) {
    let hdr = IpCmHeader::parse(&r.private).ok();
    let src = hdr.and_then(|h| v4(h.src)).unwrap_or(from);
    let dst = hdr.and_then(|h| v4(h.dst)).unwrap_or(w.ip);
    let port = (r.service_id & 0xFFFF) as u16;
    let ib = r.service_id & !0xFFFF == SERVICE_ID_PS_IB;
    let Named::Listener(path, tok) = crate::watch::look_up((dst, port), ib) else {
        let rep = SidrRep {
            request_id: r.request_id,
            status: 1,
            service_id: r.service_id,
            ..SidrRep::default()
        };
        send_mad(w, from, tid, CmMsg::SidrRep(rep));
        return;
    };
    let t = comm_id();
    let conn = Conn {
        local: None,
        remote_comm_id: r.request_id,
        remote_ip: from,
        remote_qpn: 0,
        tid,
        ud: true,
        service_id: r.service_id,
    };
    w.conns.lock().expect("wire").insert(t, conn);
    let mut m = Msg::new(kind::REQ, tok);
    m.from = u64::from(t);
    m.set_reply(&w.path);
    m.src_ip = src;
    m.src_port = hdr.map_or(0, |h| h.src_port);
    m.dst_ip = dst;
    m.dst_port = port;
    m.ps_ib = u8::from(ib);
    m.set_pd(&r.private[IP_CM_HEADER_LEN.min(r.private.len())..]);
    crate::outbox::send(&w.sock, &path, m.bytes());
}

/// An address of the IP CM header as IPv4 (an IPv4-mapped IPv6 one too).
fn v4(a: std::net::IpAddr) -> Option<[u8; 4]> {
    match a {
        std::net::IpAddr::V4(x) => Some(x.octets()),
        std::net::IpAddr::V6(x) => x.to_ipv4_mapped().map(|x| x.octets()),
    }
}
