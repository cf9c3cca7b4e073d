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
//! A lost MAD is sent again as the kernel's CM (drivers/infiniband/core/cm.c) sends it: the
//! REQ after twice the path's packet life time plus the REQ's remote CM response timeout,
//! the REP after the REQ's local CM response timeout, the DREQ after the connection's, each at
//! most the REQ's `max_cm_retries` times, until its answer comes (REP or REJ, RTU or REJ,
//! DREP). A duplicate REQ the listener has not answered yet gets an MRA (the REP's own timer
//! covers one it answered), a duplicate REP whose RTU went gets the RTU again (else an MRA), a
//! DREQ for no connection a DREP; an MRA received pushes its message's next try back by the
//! MRA's service timeout. A SIDR_REQ is sent again after rdma_cm's SIDR timeout until its
//! SIDR_REP comes; a copy of one the listener has not answered yet is dropped.
//! `SOFTVERBS_FAULTS`' `drop=cm-req#K` (`cm-rep`, `cm-rtu`, `cm-dreq`, `cm-drep`, `cm-rej`,
//! `cm-mra`, `cm-sidr-req`, `cm-sidr-rep`; `rx:` for the way in) drops the K-th such MAD here.
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nic_model::packet::{
    emit_gsi_datagram, CmDreq, CmIds, CmMad, CmMra, CmMsg, CmPath, CmRej, CmRep, CmReq, IpCmHeader,
    IpUdp, SidrRep, SidrReq, IP_CM_HEADER_LEN, MAD_LEN, SERVICE_ID_PS_IB, SERVICE_ID_PS_TCP,
    SERVICE_ID_PS_UDP,
};

use crate::state::{cm_dir, dev_of_ip, devices, is_loopback, kind, Msg, Named};

mod retry;
use retry::{await_answer, next_due, resend_due, try_len, MadDrops, Resend};

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
    /// How long a try of this connection's REQ, REP or DREQ lasts, and how many tries follow
    /// the first (from the REQ, as ib_cm derives them).
    timeout: Duration,
    retries: u8,
    /// The MAD this side waits to have answered, sent again when its try ends.
    resend: Option<Resend>,
    /// Whether this (passive) side sent its REP.
    rep_sent: bool,
    /// The RTU this (active) side sent, sent again for a duplicate REP.
    rtu: Option<Vec<u8>>,
}

/// IBA's 4.096 µs × 2^t as ib_cm's `cm_convert_to_ms`: 2^(t-8) ms.
fn cm_ms(t: u8) -> Duration {
    Duration::from_millis(1 << (t.min(31).saturating_sub(8)))
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
    drops: Mutex<MadDrops>,
    /// The address's gate name, held by one CM of the address (wire_mux.rs).
    gate: crate::wire_mux::Gate,
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
                    .spawn(move || {
                        // The program's signals are its own threads' (the kernel's CM has none).
                        nic_model::wire::block_async_signals();
                        run(w)
                    })
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
    // UDP checksum 0, as rxe sends QP1's MADs (its prepare_udp_hdr).
    let on: libc::c_int = 1;
    // SAFETY: an open socket; the value is an int.
    unsafe {
        libc::setsockopt(
            udp.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            std::ptr::from_ref(&on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    let udp_port = udp.local_addr()?.port();
    let plan = std::env::var("SOFTVERBS_FAULTS").ok().filter(|t| !t.is_empty());
    let rules = plan
        .and_then(|t| nic_model::soft::FaultPlan::parse(&t).ok())
        .map_or_else(Vec::new, |p| p.mad_drops());
    let drops = Mutex::new(MadDrops { rules, ..MadDrops::default() });
    let conns = Mutex::new(HashMap::new());
    let gate = crate::wire_mux::Gate::new(dev.ip);
    Ok(Wire { path, sock, gsi, udp, udp_port, ip: dev.ip, conns, drops, gate })
}

/// The CM response timeout the REQ asks for (`CMA_CM_RESPONSE_TIMEOUT`: 2^(20-8) ms).
const CM_RESPONSE_TIMEOUT: u8 = 20;
/// The REQ's tries after the first (`CMA_MAX_CM_RETRIES`).
const MAX_CM_RETRIES: u8 = 15;
/// The primary path's local ACK timeout the REQ carries (its packet life time + 1).
const REQ_ACK_TIMEOUT: u8 = 14;
/// The service timeout of an MRA this side sends (the kernel's cma: 24, about 67 s).
const MRA_SERVICE_TIMEOUT: u8 = 24;

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
            libc::pollfd { fd: w.gate.take(), events: libc::POLLIN, revents: 0 },
        ];
        let wait = next_due(w).map_or(1000, |d| {
            d.saturating_duration_since(Instant::now()).as_millis().min(1000) as libc::c_int
        });
        // SAFETY: three pollfds (poll skips a negative descriptor).
        unsafe { libc::poll(fds.as_mut_ptr(), 3, wait) };
        resend_due(w);
        while let Ok(n) = w.sock.recv(&mut buf) {
            if let Some(m) = Msg::from_bytes(&buf[..n]) {
                from_local(w, &m);
            }
        }
        while let Some(n) = w.gate.recv(&mut buf) {
            from_wire(w, &buf[..n], true);
        }
        while let Ok(n) = w.gsi.recv(&mut buf) {
            // From this process's port, or handed on by another CM of the host.
            match buf[..n].strip_prefix(crate::wire_mux::HANDED) {
                Some(d) => from_wire(w, d, false),
                None => from_wire(w, &buf[..n], true),
            }
        }
    }
}

/// Send `msg` as a CM MAD to `to`; the UDP payload sent (or dropped by the fault plan).
fn send_mad(w: &Wire, to: [u8; 4], tid: u64, msg: CmMsg) -> Option<Vec<u8>> {
    let attr = CmAttr::of(&msg);
    let mad = match (CmMad { tid, msg }).emit() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("librdmacm (softverbs): a CM MAD: {e}");
            return None;
        }
    };
    if let Some(v6) = crate::wire6::gsi_payload(to, &mad) {
        // An IPv6 peer (wire6.rs): the datagram over IPv6.
        let bytes = v6.map_err(|e| eprintln!("librdmacm (softverbs): a CM MAD: {e}")).ok()?;
        put(w, to, attr, &bytes);
        return Some(bytes);
    }
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
    emit_gsi_datagram(&ip, 0, &mad, &mut out).ok()?;
    let bytes = out.split_off(nic_model::packet::IPV4_UDP_LEN);
    put(w, to, attr, &bytes);
    Some(bytes)
}

/// Send a MAD's UDP payload to `to`'s port 4791, unless the fault plan drops it.
fn put(w: &Wire, to: [u8; 4], attr: u16, bytes: &[u8]) {
    if w.drops.lock().expect("drops").drops(attr, true) {
        return;
    }
    if crate::wire6::peer(to).is_some() {
        // An IPv6 peer: over IPv6, from the socket its payload was made for.
        if let Err(e) = crate::wire6::send(to, bytes) {
            eprintln!("librdmacm (softverbs): sending a CM MAD over IPv6: {e}");
        }
        return;
    }
    let dst = SocketAddrV4::new(Ipv4Addr::from(to), nic_model::packet::ROCE_UDP_PORT);
    if let Err(e) = w.udp.send_to(bytes, dst) {
        eprintln!("librdmacm (softverbs): sending a CM MAD to {dst}: {e}");
    }
}

/// A MAD's attribute ID.
struct CmAttr;

impl CmAttr {
    fn of(m: &CmMsg) -> u16 {
        match m {
            CmMsg::Req(_) => 0x0010,
            CmMsg::Mra(_) => 0x0011,
            CmMsg::Rej(_) => 0x0012,
            CmMsg::Rep(_) => 0x0013,
            CmMsg::Rtu(_) => 0x0014,
            CmMsg::Dreq(_) => 0x0015,
            CmMsg::Drep(_) => 0x0016,
            CmMsg::SidrReq(_) => 0x0017,
            CmMsg::SidrRep(_) => 0x0018,
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
                // ib_send_cm_req: twice the packet life time (the path's local ACK timeout
                // less one) plus the remote CM response timeout, CMA_MAX_CM_RETRIES tries.
                timeout: try_len(cm_ms(REQ_ACK_TIMEOUT - 1) * 2 + cm_ms(CM_RESPONSE_TIMEOUT)),
                retries: MAX_CM_RETRIES,
                resend: None,
                rep_sent: false,
                rtu: None,
            },
        );
        drop(conns);
        // IPv4 addresses, or IPv6 ones to a peer behind a stand-in (wire6.rs).
        let (hdr, local_gid, remote_gid) = crate::wire6::req_addrs(m, w.ip);
        let mut private = hdr.to_bytes().to_vec();
        if ud {
            private.extend_from_slice(&pd[..pd.len().min(216 - IP_CM_HEADER_LEN)]);
            let req = SidrReq { request_id: t, pkey: 0xFFFF, service_id, private };
            // Sent again until a SIDR_REP comes, as ib_send_cm_sidr_req with rdma_cm's
            // timeout (2^(CMA_CM_RESPONSE_TIMEOUT - 8) ms) and CMA_MAX_CM_RETRIES.
            let bytes = send_mad(w, m.dst_ip, tid, CmMsg::SidrReq(req));
            if let Some(c) = w.conns.lock().expect("wire").get_mut(&t) {
                c.timeout = try_len(Duration::from_millis(1 << (CM_RESPONSE_TIMEOUT - 8)));
                await_answer(c, 0x0017, bytes);
            }
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
            remote_cm_response_timeout: CM_RESPONSE_TIMEOUT,
            starting_psn: m.psn,
            local_cm_response_timeout: CM_RESPONSE_TIMEOUT,
            retry_count: 7,
            pkey: 0xFFFF,
            path_mtu: if m.mtu == 0 { 3 } else { m.mtu },
            rnr_retry_count: m.rnr_retry,
            max_cm_retries: MAX_CM_RETRIES,
            primary: CmPath {
                local_gid,
                remote_gid,
                hop_limit: 64,
                local_ack_timeout: REQ_ACK_TIMEOUT,
                ..CmPath::default()
            },
            private,
            ..CmReq::default()
        };
        let bytes = send_mad(w, m.dst_ip, tid, CmMsg::Req(req));
        if let Some(c) = w.conns.lock().expect("wire").get_mut(&t) {
            await_answer(c, 0x0010, bytes);
        }
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
    let bytes = send_mad(w, to, tid, msg);
    let mut conns = w.conns.lock().expect("wire");
    let Some(c) = conns.get_mut(&t) else { return };
    match m.kind {
        kind::REP => {
            c.rep_sent = true;
            await_answer(c, 0x0013, bytes);
        }
        kind::RTU => c.rtu = bytes,
        kind::DREQ => await_answer(c, 0x0015, bytes),
        _ => {}
    }
}

/// The CA GUID the gateway's MADs carry: the soft device's form with the address in it.
fn guid(ip: [u8; 4]) -> u64 {
    0x0200_5eff_fe00_0000 | u64::from(u32::from_be_bytes(ip) & 0xFF_FFFF)
}

/// A MAD for no connection of this CM: handed to the other CMs of the host when it came from
/// the wire (`fresh`: one of them may have started the connection); whether one took it.
fn elsewhere(d: &[u8], fresh: bool) -> bool {
    fresh && crate::wire_mux::to_others(d) > 0
}

/// A datagram to QP1 from the port (`fresh`), or handed on by another CM of the host: a CM
/// MAD from another host, to its local id.
fn from_wire(w: &Wire, d: &[u8], fresh: bool) {
    let Some((from, pkt)) = crate::wire6::parse_any(d) else { return };
    if pkt.deth.map(|x| x.qkey) != Some(0x8001_0000) {
        return;
    }
    let Ok(mad) = CmMad::parse(pkt.payload) else { return };
    if fresh && w.drops.lock().expect("drops").drops(CmAttr::of(&mad.msg), false) {
        return;
    }
    let tid = mad.tid;
    let mut conns = w.conns.lock().expect("wire");
    let (t, m) = match mad.msg {
        CmMsg::Req(r) => {
            drop(conns);
            return req_from_wire(w, from, tid, r);
        }
        CmMsg::Rep(r) => {
            let Some(c) = conns.get_mut(&r.remote_comm_id) else {
                drop(conns);
                elsewhere(d, fresh);
                return;
            };
            if c.remote_comm_id != 0 {
                // A duplicate (our RTU, or the REP's first copy, was lost or is late): the
                // RTU again once sent, else an MRA (cm_dup_rep_handler).
                let (to, rtu) = (c.remote_ip, c.rtu.clone());
                drop(conns);
                match rtu {
                    Some(bytes) => put(w, to, 0x0014, &bytes),
                    None => {
                        let mra = mra(r.remote_comm_id, r.local_comm_id, 1);
                        send_mad(w, to, tid, CmMsg::Mra(mra));
                    }
                }
                return;
            }
            c.resend = None;
            c.remote_comm_id = r.local_comm_id;
            c.remote_qpn = r.local_qpn;
            let mut m = Msg::new(kind::REP, 0);
            m.qpn = r.local_qpn;
            m.psn = r.starting_psn;
            m.rd_atomic = r.responder_resources;
            m.rnr_retry = r.rnr_retry_count;
            m.src_ip = from;
            m.set_pd(&r.private);
            (r.remote_comm_id, m)
        }
        CmMsg::Rtu(r) => {
            let Some(c) = conns.get_mut(&r.remote_comm_id) else {
                drop(conns);
                elsewhere(d, fresh);
                return;
            };
            if c.resend.take().is_none() {
                // A duplicate RTU: the REP was answered already.
                return;
            }
            (r.remote_comm_id, Msg::new(kind::RTU, 0))
        }
        CmMsg::Rej(r) => {
            let mut m = Msg::new(kind::REJ, 0);
            m.status = i32::from(r.reason);
            m.set_pd(&r.private);
            (r.remote_comm_id, m)
        }
        CmMsg::Dreq(r) => {
            if !conns.contains_key(&r.remote_comm_id) {
                // No such connection here: another CM's of the host, else none (any more:
                // our DREP was lost): a DREP all the same, as ib_cm's cm_issue_drep.
                drop(conns);
                if !fresh || elsewhere(d, fresh) {
                    return;
                }
                let ids = CmIds {
                    local_comm_id: r.remote_comm_id,
                    remote_comm_id: r.local_comm_id,
                    private: Vec::new(),
                };
                send_mad(w, from, tid, CmMsg::Drep(ids));
                return;
            }
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
            return sidr_req_from_wire(w, from, tid, r);
        }
        CmMsg::SidrRep(r) => {
            // Status 0: the service's QP; else refused (as librdmacm reports a SIDR_REP
            // with a status: REJECTED with it).
            let mut m = Msg::new(if r.status == 0 { kind::REP } else { kind::REJ }, 0);
            m.status = i32::from(r.status);
            m.qpn = r.qpn;
            m.qkey = r.qkey;
            m.src_ip = from;
            m.set_pd(&r.private);
            (r.request_id, m)
        }
        CmMsg::Mra(r) => {
            // The peer needs longer: the MRAed message's next try waits its service timeout
            // and a packet life (cm_mra_handler).
            let Some(c) = conns.get_mut(&r.remote_comm_id) else {
                drop(conns);
                elsewhere(d, fresh);
                return;
            };
            let attr = [0x0010, 0x0013][usize::from(r.message_mraed.min(1))];
            if let Some(x) = c.resend.as_mut().filter(|x| x.attr == attr) {
                x.due = Instant::now() + cm_ms(r.service_timeout) + cm_ms(REQ_ACK_TIMEOUT - 1);
            }
            return;
        }
    };
    let Some(c) = conns.get(&t) else {
        drop(conns);
        elsewhere(d, fresh);
        return;
    };
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

/// An MRA of the message `mraed` (0 REQ, 1 REP) of connection `local` (the peer's `remote`).
fn mra(local: u32, remote: u32, mraed: u8) -> CmMra {
    CmMra {
        local_comm_id: local,
        remote_comm_id: remote,
        message_mraed: mraed,
        service_timeout: MRA_SERVICE_TIMEOUT,
        private: Vec::new(),
    }
}

/// A REQ from another host: to the listener of its address and port, or a REJ (invalid
/// service ID, as a CM with no listener there answers). A duplicate of a REQ this side has
/// (its first copy's answer lost, or late) gets an MRA while the listener has not answered,
/// else nothing: the REP's own timer sends it again (cm_dup_req_handler).
fn req_from_wire(w: &Wire, from: [u8; 4], tid: u64, r: CmReq) {
    let dup = w.conns.lock().expect("wire").iter().find_map(|(t, c)| {
        (!c.ud && c.remote_ip == from && c.remote_comm_id == r.local_comm_id)
            .then_some((*t, c.rep_sent))
    });
    if let Some((t, rep_sent)) = dup {
        if !rep_sent {
            send_mad(w, from, tid, CmMsg::Mra(mra(t, r.local_comm_id, 0)));
        }
        return;
    }
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
            // cm_req_handler: the REQ's local CM response timeout and max CM retries.
            timeout: try_len(cm_ms(r.local_cm_response_timeout)),
            retries: r.max_cm_retries,
            resend: None,
            rep_sent: false,
            rtu: None,
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
    m.mtu = r.path_mtu;
    m.ps_ib = u8::from(ib);
    crate::wire6::mark_req(&mut m, from, hdr);
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
    // A copy of a SIDR_REQ whose listener has not answered yet is dropped, as cm_sidr_req_handler
    // drops one it finds among the pending (`cm_insert_remote_sidr`); once answered, the
    // request is forgotten and a later copy asks again.
    let mut conns = w.conns.lock().expect("wire");
    if conns.values().any(|c| c.ud && c.remote_ip == from && c.remote_comm_id == r.request_id) {
        return;
    }
    let t = comm_id();
    let conn = Conn {
        local: None,
        remote_comm_id: r.request_id,
        remote_ip: from,
        remote_qpn: 0,
        tid,
        ud: true,
        service_id: r.service_id,
        timeout: cm_ms(CM_RESPONSE_TIMEOUT),
        retries: 0,
        resend: None,
        rep_sent: false,
        rtu: None,
    };
    conns.insert(t, conn);
    drop(conns);
    let mut m = Msg::new(kind::REQ, tok);
    m.from = u64::from(t);
    m.set_reply(&w.path);
    m.src_ip = src;
    m.src_port = hdr.map_or(0, |h| h.src_port);
    m.dst_ip = dst;
    m.dst_port = port;
    m.ps_ib = u8::from(ib);
    crate::wire6::mark_req(&mut m, from, hdr);
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
