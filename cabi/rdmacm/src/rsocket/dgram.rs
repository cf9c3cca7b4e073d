//! `SOCK_DGRAM` rsockets: a UD QP of the rsocket's own, softverbs' own datagram format.
//!
//! - A destination address (IP and port) is resolved once with the CM's SIDR (a synchronous
//!   UDP id's `rdma_resolve_addr`, `rdma_resolve_route`, `rdma_connect`: the answer names the
//!   destination rsocket's QP and Q_Key and gives the address handle); a bound rsocket listens
//!   on its id and answers SIDR requests with its QP's number whenever it is called.
//! - Each datagram starts with a [`Hdr`]: the sender's address, which `rrecvfrom` reports; the
//!   receiver keeps an address handle made from the completion (`ibv_init_ah_from_wc`) for
//!   that address, so that replying to it needs no resolution.
//! - Datagrams are unreliable, as UDP's: one that finds no receive posted is dropped (UD).
use std::collections::{HashMap, VecDeque};
use std::ffi::c_int;

use super::verbs::*;
use super::{Sock, State};
use crate::cm_abi::*;
use softverbs_cabi_abi::{
    ibv_ah, ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_grh, ibv_mr, ibv_pd, ibv_qp,
    ibv_qp_attr, ibv_qp_cap, ibv_qp_init_attr, ibv_recv_wr, ibv_send_wr, ibv_sge, ibv_wc,
    SendWrUnion,
};

unsafe extern "C" {
    fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int;
    fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
    fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah;
    fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int;
    fn ibv_init_ah_from_wc(
        c: *mut ibv_context,
        port: u8,
        wc: *mut ibv_wc,
        grh: *mut ibv_grh,
        attr: *mut ibv_ah_attr,
    ) -> c_int;
    fn rdma_get_devices(n: *mut c_int) -> *mut *mut ibv_context;
    fn rdma_free_devices(l: *mut *mut ibv_context);
}

/// What starts every datagram: `"SVRD"` and the sender's socket address.
#[repr(C)]
#[derive(Clone, Copy)]
struct Hdr {
    magic: u32,
    _pad: u32,
    addr: [u8; 32],
}
const MAGIC: u32 = 0x4452_5653;
const HDR: usize = size_of::<Hdr>();
const GRH: usize = 40;
/// The largest datagram payload: a 4096-byte UD message less the header.
pub const MAX_PAYLOAD: usize = 4096 - HDR;
const SLOT: usize = GRH + 4096;
const RQ: u32 = 256;
const SQ: u32 = 64;
const SEND_BIT: u64 = 1 << 63;

/// A destination: its address handle, QP number and Q_Key.
struct Dest {
    ah: *mut ibv_ah,
    qpn: u32,
    qkey: u32,
}

/// The verbs side, made once the device is known.
struct Qp {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cc: *mut ibv_comp_channel,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    rx: Box<[u8]>,
    rx_mr: *mut ibv_mr,
    tx: Box<[u8]>,
    tx_mr: *mut ibv_mr,
    free_tx: Vec<u32>,
    /// Received datagrams not yet read: (slot, length with the header, completion).
    inbox: VecDeque<(u32, usize, ibv_wc)>,
}

/// A datagram rsocket's state.
#[derive(Default)]
pub struct Dgram {
    /// The address `rconnect` fixed, if any.
    pub peer: Option<[u8; 128]>,
    /// This rsocket's own address, sent in each datagram's header.
    me: [u8; 32],
    qp: Option<Box<Qp>>,
    dests: HashMap<[u8; 32], Dest>,
}

/// The 32 bytes naming a socket address (family, port, address; the rest zero).
fn key(addr: *const libc::sockaddr) -> [u8; 32] {
    let mut k = [0u8; 32];
    // SAFETY: the caller's address: a sockaddr_in or sockaddr_in6 by its family.
    unsafe {
        let n = match (*addr).sa_family as c_int {
            libc::AF_INET6 => size_of::<libc::sockaddr_in6>(),
            _ => size_of::<libc::sockaddr_in>(),
        };
        std::ptr::copy_nonoverlapping(addr.cast::<u8>(), k.as_mut_ptr(), n);
    }
    if u16::from_ne_bytes([k[0], k[1]]) as c_int == libc::AF_INET6 {
        k[4..8].fill(0); // sin6_flowinfo
    }
    k
}

impl Qp {
    fn new(ctx: *mut ibv_context) -> Result<Box<Qp>, c_int> {
        let mut q = Box::new(Qp {
            ctx,
            pd: std::ptr::null_mut(),
            cc: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            qp: std::ptr::null_mut(),
            rx: vec![0u8; RQ as usize * SLOT].into_boxed_slice(),
            rx_mr: std::ptr::null_mut(),
            tx: vec![0u8; SQ as usize * (HDR + MAX_PAYLOAD)].into_boxed_slice(),
            tx_mr: std::ptr::null_mut(),
            free_tx: (0..SQ).collect(),
            inbox: VecDeque::new(),
        });
        // SAFETY: verbs calls on the device; Drop frees what was made.
        unsafe {
            q.pd = ibv_alloc_pd(ctx);
            q.cc = if q.pd.is_null() { q.cc } else { ibv_create_comp_channel(ctx) };
            if q.cc.is_null() {
                return Err(errno());
            }
            set_nonblocking((*q.cc).fd);
            q.cq = ibv_create_cq(ctx, (RQ + SQ) as c_int, std::ptr::null_mut(), q.cc, 0);
            if q.cq.is_null() {
                return Err(errno());
            }
            q.rx_mr = ibv_reg_mr(q.pd, q.rx.as_mut_ptr().cast(), q.rx.len(), ACCESS_RW);
            q.tx_mr = ibv_reg_mr(q.pd, q.tx.as_mut_ptr().cast(), q.tx.len(), ACCESS_RW);
            if q.rx_mr.is_null() || q.tx_mr.is_null() {
                return Err(errno());
            }
            let mut init = ibv_qp_init_attr {
                qp_context: std::ptr::null_mut(),
                send_cq: q.cq,
                recv_cq: q.cq,
                srq: std::ptr::null_mut(),
                cap: ibv_qp_cap {
                    max_send_wr: SQ,
                    max_recv_wr: RQ,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qp_type: 4, // IBV_QPT_UD
                sq_sig_all: 1,
            };
            q.qp = ibv_create_qp(q.pd, &mut init);
            if q.qp.is_null() {
                return Err(errno());
            }
            let mut a =
                ibv_qp_attr { qp_state: 1, port_num: 1, qkey: RDMA_UDP_QKEY, ..Default::default() };
            // INIT: STATE | PKEY_INDEX | PORT | QKEY; RTR: STATE; RTS: STATE | SQ_PSN.
            let mut r = ibv_modify_qp(q.qp, &mut a, 1 | 16 | 32 | 64);
            a.qp_state = 2;
            r |= ibv_modify_qp(q.qp, &mut a, 1);
            a.qp_state = 3;
            a.sq_psn = 0;
            r |= ibv_modify_qp(q.qp, &mut a, 1 | 65536);
            if r != 0 {
                return Err(libc::EINVAL);
            }
        }
        for s in 0..RQ {
            if q.post(s) != 0 {
                return Err(libc::ENOMEM);
            }
        }
        Ok(q)
    }

    fn post(&mut self, slot: u32) -> c_int {
        let off = slot as usize * SLOT;
        let mut sge = ibv_sge {
            addr: self.rx[off..].as_ptr() as u64,
            length: SLOT as u32,
            // SAFETY: registered in new.
            lkey: unsafe { (*self.rx_mr).lkey },
        };
        let mut wr = ibv_recv_wr {
            wr_id: slot as u64,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        // SAFETY: our QP.
        unsafe { post_recv(self.qp, &mut wr) }
    }

    fn progress(&mut self) -> usize {
        let mut wc = [ibv_wc::default(); 32];
        let mut total = 0;
        loop {
            // SAFETY: our CQ.
            let n = unsafe { poll_cq(self.cq, &mut wc) };
            if n <= 0 {
                return total;
            }
            for w in &wc[..n as usize] {
                if w.wr_id & SEND_BIT != 0 {
                    self.free_tx.push((w.wr_id & !SEND_BIT) as u32);
                } else if w.status == 0 && w.byte_len as usize >= GRH + HDR {
                    self.inbox.push_back((w.wr_id as u32, w.byte_len as usize - GRH, *w));
                } else {
                    self.post(w.wr_id as u32);
                }
            }
            total += n as usize;
        }
    }

    fn arm(&mut self) -> bool {
        // SAFETY: our CQ.
        unsafe { req_notify(self.cq) };
        self.progress() > 0
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: what new made (NULL skipped), the QP before its CQ.
        unsafe {
            if !self.qp.is_null() {
                ibv_destroy_qp(self.qp);
            }
            release(&[self.rx_mr, self.tx_mr], self.cq, self.cc, self.pd);
        }
    }
}

impl Dgram {
    /// The descriptors `rpoll` sleeps on for it (its CQ armed).
    pub fn sleep_fds(&mut self, fd: c_int) -> Vec<c_int> {
        match self.qp.as_mut() {
            Some(q) => {
                if q.arm() {
                    return Vec::new();
                }
                // SAFETY: our channel.
                vec![unsafe { (*q.cc).fd }, fd]
            }
            None => vec![fd],
        }
    }

    /// Read the completion channel's events.
    pub fn take_cq_event(&mut self) {
        if let Some(q) = self.qp.as_mut() {
            // SAFETY: our channel, made non-blocking in Qp::new.
            unsafe { drain_cq_events(q.cc) }
        }
    }

    /// The QP, made on `ctx` if there is none yet.
    fn qp_on(&mut self, ctx: *mut ibv_context) -> Result<&mut Qp, c_int> {
        if self.qp.is_none() {
            self.qp = Some(Qp::new(ctx)?);
        }
        Ok(self.qp.as_mut().expect("made"))
    }
}

/// The first soft device (for an rsocket bound to no particular address).
fn first_device() -> *mut ibv_context {
    let mut n = 0;
    // SAFETY: this library's list, freed here.
    unsafe {
        let l = rdma_get_devices(&mut n);
        if l.is_null() {
            return std::ptr::null_mut();
        }
        let c = if n > 0 { *l } else { std::ptr::null_mut() };
        rdma_free_devices(l);
        c
    }
}

/// After `rbind`: the QP on the bound address's device, and the id listening for SIDR.
pub fn bound(s: &mut Sock) -> c_int {
    // SAFETY: our bound id.
    let (ctx, me) = unsafe { ((*s.id).verbs, key((*s.id).route.addr.src.as_ptr().cast())) };
    let ctx = if ctx.is_null() { first_device() } else { ctx };
    let d = s.dgram.as_mut().expect("dgram");
    d.me = me;
    if let Err(e) = d.qp_on(ctx) {
        return err(e);
    }
    // SAFETY: our bound id.
    if unsafe { rdma_listen(s.id, 64) } != 0 {
        return -1;
    }
    s.state = State::Listening;
    0
}

/// Answer the SIDR requests waiting on the rsocket's channel with its QP.
fn answer(s: &mut Sock) {
    loop {
        let mut e = std::ptr::null_mut();
        // SAFETY: our non-blocking channel; the request's id is answered and destroyed.
        unsafe {
            if rdma_get_cm_event(s.ch, &mut e) != 0 {
                return;
            }
            let (kind, id) = ((*e).event, (*e).id);
            rdma_ack_cm_event(e);
            if kind != ev::CONNECT_REQUEST {
                continue;
            }
            let qpn = s.dgram.as_ref().and_then(|d| d.qp.as_ref()).map_or(0, |q| (*q.qp).qp_num);
            let mut p: rdma_conn_param = std::mem::zeroed();
            p.qp_num = qpn;
            if qpn == 0 {
                rdma_reject(id, std::ptr::null(), 0);
            } else {
                rdma_accept(id, &mut p);
            }
            rdma_destroy_id(id);
        }
    }
}

/// The destination for `addr`, resolved with SIDR if it is new.
fn resolve(s: &mut Sock, addr: *const libc::sockaddr) -> Result<[u8; 32], c_int> {
    let k = key(addr);
    let d = s.dgram.as_mut().expect("dgram");
    if d.dests.contains_key(&k) {
        return Ok(k);
    }
    let mut id = std::ptr::null_mut();
    // SAFETY: a synchronous UDP id of ours (each call waits for its event), destroyed here.
    unsafe {
        if rdma_create_id(std::ptr::null_mut(), &mut id, std::ptr::null_mut(), RDMA_PS_UDP) != 0 {
            return Err(errno());
        }
        let r = (|| {
            if rdma_resolve_addr(id, std::ptr::null_mut(), addr.cast_mut(), 2000) != 0
                || rdma_resolve_route(id, 2000) != 0
            {
                return Err(errno());
            }
            if d.qp.is_none() {
                d.me = key((*id).route.addr.src.as_ptr().cast());
            }
            let q = d.qp_on((*id).verbs)?;
            let mut p: rdma_conn_param = std::mem::zeroed();
            if rdma_connect(id, &mut p) != 0 || (*id).event.is_null() {
                return Err(libc::ECONNREFUSED);
            }
            let ud = (*(*id).event).param.ud;
            if (*(*id).event).event != ev::ESTABLISHED {
                return Err(libc::ECONNREFUSED);
            }
            let mut ah_attr = ud.ah_attr;
            let ah = ibv_create_ah(q.pd, &mut ah_attr);
            if ah.is_null() {
                return Err(errno());
            }
            d.dests.insert(k, Dest { ah, qpn: ud.qp_num, qkey: ud.qkey });
            Ok(k)
        })();
        rdma_destroy_id(id);
        r
    }
}

/// `rconnect`: fix the destination (resolved now).
pub fn connect(s: &mut Sock, addr: *const libc::sockaddr) -> c_int {
    match resolve(s, addr) {
        Ok(_) => {
            let mut a = [0u8; 128];
            a[..32].copy_from_slice(&key(addr));
            s.dgram.as_mut().expect("dgram").peer = Some(a);
            0
        }
        Err(e) => err(e),
    }
}

/// `rsendto` / `rsend`: one datagram to `dst` (or the connected address).
pub fn send(s: &mut Sock, buf: &[u8], flags: c_int, dst: *const libc::sockaddr) -> isize {
    if buf.len() > MAX_PAYLOAD {
        return err(libc::EMSGSIZE) as isize;
    }
    let peer = s.dgram.as_ref().expect("dgram").peer;
    let k = if !dst.is_null() {
        match resolve(s, dst) {
            Ok(k) => k,
            Err(e) => return err(e) as isize,
        }
    } else if let Some(p) = peer {
        let mut k = [0u8; 32];
        k.copy_from_slice(&p[..32]);
        k
    } else {
        return err(libc::EDESTADDRREQ) as isize;
    };
    let nb = s.nonblock || flags & libc::MSG_DONTWAIT != 0;
    loop {
        let d = s.dgram.as_mut().expect("dgram");
        let me = d.me;
        let Some(q) = d.qp.as_mut() else { return err(libc::ENOTCONN) as isize };
        q.progress();
        if let Some(slot) = q.free_tx.pop() {
            let dest = &d.dests[&k];
            let off = slot as usize * (HDR + MAX_PAYLOAD);
            let h = Hdr { magic: MAGIC, _pad: 0, addr: me };
            // SAFETY: a Hdr is plain bytes.
            let hb = unsafe { std::slice::from_raw_parts((&h as *const Hdr).cast::<u8>(), HDR) };
            q.tx[off..off + HDR].copy_from_slice(hb);
            q.tx[off + HDR..off + HDR + buf.len()].copy_from_slice(buf);
            let mut sge = ibv_sge {
                addr: q.tx[off..].as_ptr() as u64,
                length: (HDR + buf.len()) as u32,
                // SAFETY: registered.
                lkey: unsafe { (*q.tx_mr).lkey },
            };
            let mut wr = ibv_send_wr {
                wr_id: slot as u64 | SEND_BIT,
                next: std::ptr::null_mut(),
                sg_list: &mut sge,
                num_sge: 1,
                opcode: WR_SEND,
                send_flags: SEND_SIGNALED,
                imm_data: 0,
                wr: SendWrUnion {
                    w0: dest.ah as u64,
                    w1: dest.qpn as u64 | (dest.qkey as u64) << 32,
                    w2: 0,
                    w3: 0,
                },
                xrc_remote_srqn: 0,
                tail: [0; 6],
            };
            // SAFETY: our QP; the staged bytes stay until the completion.
            if unsafe { post_send(q.qp, &mut wr) } != 0 {
                q.free_tx.push(slot);
                return err(libc::EIO) as isize;
            }
            return buf.len() as isize;
        }
        if nb {
            return err(libc::EAGAIN) as isize;
        }
        wait(s, 1000);
    }
}

/// Sleep until the CQ or the CM channel has something (SIDR requests are answered).
fn wait(s: &mut Sock, ms: c_int) {
    let fd = s.fd;
    let fds = s.dgram.as_mut().expect("dgram").sleep_fds(fd);
    if fds.is_empty() {
        return;
    }
    let mut p: Vec<libc::pollfd> =
        fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    // SAFETY: our array.
    unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
    s.dgram.as_mut().expect("dgram").take_cq_event();
    answer(s);
}

/// `rrecvfrom` / `rrecv`: the next datagram (truncated to `buf`), its sender's address.
pub fn recv(
    s: &mut Sock,
    buf: &mut [u8],
    flags: c_int,
    src: *mut libc::sockaddr,
    srclen: *mut u32,
) -> isize {
    let nb = s.nonblock || flags & libc::MSG_DONTWAIT != 0;
    loop {
        let d = s.dgram.as_mut().expect("dgram");
        let Some(q) = d.qp.as_mut() else {
            if nb {
                return err(libc::EAGAIN) as isize;
            }
            wait(s, 1000);
            continue;
        };
        q.progress();
        if let Some((slot, len, mut wc)) = q.inbox.pop_front() {
            let off = slot as usize * SLOT;
            // SAFETY: the slot holds a datagram at least a Hdr long after the GRH.
            let h: Hdr = unsafe { std::ptr::read_unaligned(q.rx[off + GRH..].as_ptr().cast()) };
            let n = (len - HDR).min(buf.len());
            buf[..n].copy_from_slice(&q.rx[off + GRH + HDR..off + GRH + HDR + n]);
            if h.magic == MAGIC && !d.dests.contains_key(&h.addr) {
                let mut attr = ibv_ah_attr::default();
                // SAFETY: the completion and the slot's GRH; an AH on our PD.
                let ah = unsafe {
                    let grh = q.rx[off..].as_mut_ptr().cast::<ibv_grh>();
                    if ibv_init_ah_from_wc(q.ctx, 1, &mut wc, grh, &mut attr) == 0 {
                        ibv_create_ah(q.pd, &mut attr)
                    } else {
                        std::ptr::null_mut()
                    }
                };
                if !ah.is_null() {
                    d.dests.insert(h.addr, Dest { ah, qpn: wc.src_qp, qkey: RDMA_UDP_QKEY });
                }
            }
            q.post(slot);
            if !src.is_null() && !srclen.is_null() {
                let mut ss = [0u8; 128];
                ss[..32].copy_from_slice(&h.addr);
                // SAFETY: the caller's buffer.
                unsafe { super::opts::copy_addr(&ss, src, srclen) };
            }
            return n as isize;
        }
        answer(s);
        if nb {
            return err(libc::EAGAIN) as isize;
        }
        wait(s, 1000);
    }
}

/// What `rpoll` reports: POLLIN with a datagram waiting, POLLOUT with a send buffer free.
pub fn revents(s: &mut Sock) -> i16 {
    answer(s);
    let d = s.dgram.as_mut().expect("dgram");
    let Some(q) = d.qp.as_mut() else { return libc::POLLOUT };
    q.progress();
    let mut r = 0;
    if !q.inbox.is_empty() {
        r |= libc::POLLIN;
    }
    if !q.free_tx.is_empty() {
        r |= libc::POLLOUT;
    }
    r
}

/// Release its address handles and QP.
pub fn destroy(s: &mut Sock) {
    if let Some(mut d) = s.dgram.take() {
        for (_, dest) in d.dests.drain() {
            // SAFETY: made by resolve or recv.
            unsafe { ibv_destroy_ah(dest.ah) };
        }
        d.qp = None;
    }
}
