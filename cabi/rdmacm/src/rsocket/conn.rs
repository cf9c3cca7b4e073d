//! A connected stream rsocket's RC queue pair and softverbs' own rsockets protocol over it
//! (docs/c.md, "rsockets"; docs/decisions.md says why it is not rdma-core's):
//!
//! - Each end has a receive ring (`SO_RCVBUF` bytes, registered for remote writes) and a
//!   receive queue of `RDMA_RQSIZE` entries, each with a 64-byte slot; both are advertised in
//!   the connection's private data ([`Hello`]).
//! - Data goes as RDMA WRITE WITH IMMEDIATE into the peer's ring at the next position (the
//!   immediate is the length); control messages ([`Ctrl`]: credits, end of stream, close, an
//!   iomap) go as inline SENDs into the slots. Both consume one receive entry.
//! - Credits: a sender may write while the peer's ring has room (bytes it has sent less the
//!   bytes the peer said it consumed) and while it holds at least two receive entries (the
//!   last is kept for a credit message); every control message carries the receiver's
//!   cumulative consumed bytes and reposted entries, and one is sent alone once half the ring
//!   or half the queue is owed.
use std::collections::VecDeque;
use std::ffi::{c_int, c_void};

use super::verbs::*;
use crate::cm_abi::*;
use softverbs_cabi_abi::{
    ibv_comp_channel, ibv_cq, ibv_mr, ibv_pd, ibv_qp_cap, ibv_qp_init_attr, ibv_recv_wr,
    ibv_send_wr, ibv_sge, ibv_wc, SendWrUnion,
};

/// The private data each end sends in its REQ / REP: `"SVRS"`, the protocol version, and its
/// receive ring and queue.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Hello {
    pub magic: u32,
    pub version: u32,
    pub ring_addr: u64,
    pub ring_rkey: u32,
    pub ring_size: u32,
    pub rq: u32,
    pub _pad: u32,
}
pub const MAGIC: u32 = 0x5352_5653;
pub const VERSION: u32 = 1;

/// A control message (a SEND into a receive slot).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Ctrl {
    pub kind: u32,
    /// Receive entries the sender reposted, in all (wrapping).
    pub reposted: u32,
    /// Ring bytes the sender consumed, in all.
    pub consumed: u64,
    /// For an iomap: the mapping's offset, address, length and rkey.
    pub map_offset: u64,
    pub map_addr: u64,
    pub map_len: u64,
    pub map_rkey: u32,
    pub _pad: u32,
}
const CREDIT: u32 = 1;
/// End of stream: the sender shut down its writing side.
const SHUT_WR: u32 = 2;
/// The sender closed: it neither writes nor reads any more.
const CLOSE: u32 = 3;
const IOMAP: u32 = 4;
const SLOT: usize = 64;
/// The largest single write.
const MAX_XFER: usize = 1 << 16;
/// Send queue entries kept for control messages beyond the data's.
const CTRL_SQ: u32 = 8;
/// wr_id of a control SEND (a data WRITE's is the send buffer's cursor after it, with
/// [`SEND_BIT`]; a receive's is its slot).
const CTRL_WR: u64 = u64::MAX;
const SEND_BIT: u64 = 1 << 63;
/// `IBV_WC_WR_FLUSH_ERR`.
const WC_WR_FLUSH_ERR: c_int = 5;

/// The sizes a connection is made with (the socket's options).
#[derive(Clone, Copy)]
pub struct Sizes {
    pub sndbuf: usize,
    pub rcvbuf: usize,
    pub sq: u32,
    pub rq: u32,
}

/// A mapping the peer made with `riomap`.
#[derive(Clone, Copy)]
pub struct PeerMap {
    pub offset: u64,
    pub addr: u64,
    pub len: u64,
    pub rkey: u32,
}

/// A mapping of ours (`riomap`): its offset, the caller's buffer and its MR.
pub struct MyMap {
    pub offset: u64,
    pub addr: usize,
    pub len: usize,
    pub mr: *mut ibv_mr,
}

/// One connected stream's verbs objects and protocol state.
pub struct Conn {
    pub id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    pub cc: *mut ibv_comp_channel,
    cq: *mut ibv_cq,
    rx: Box<[u8]>,
    rx_mr: *mut ibv_mr,
    tx: Box<[u8]>,
    tx_mr: *mut ibv_mr,
    ring: usize,
    rq: u32,
    sq: u32,
    // The peer's ring and queue.
    peer_ring: u64,
    peer_rkey: u32,
    peer_ring_size: u64,
    peer_rq: u32,
    // Sending.
    sent: u64,
    peer_consumed: u64,
    rq_used: u32,
    peer_reposted: u32,
    sq_busy: u32,
    tx_head: u64,
    tx_tail: u64,
    // Receiving.
    arrived: u64,
    consumed: u64,
    told_consumed: u64,
    reposted: u32,
    told_reposted: u32,
    /// The peer ended its stream (SHUT_WR, CLOSE or a DISCONNECTED event).
    pub peer_eof: bool,
    /// The peer closed or disconnected: writing to it fails with ECONNRESET.
    pub peer_gone: bool,
    /// A completion failed (the QP is in error): the errno to report.
    pub broken: c_int,
    pub shut_wr: bool,
    pub shut_rd: bool,
    fin_queued: Option<u32>,
    fin_sent: bool,
    maps_queued: VecDeque<Ctrl>,
    pub peer_maps: Vec<PeerMap>,
    pub my_maps: Vec<MyMap>,
}

impl Conn {
    /// Make the QP (on `id`, whose route is resolved) and its CQ, channel, rings, and post the
    /// receives: a connection ready to be connected or accepted with [`Conn::hello`].
    pub fn new(id: *mut rdma_cm_id, s: Sizes) -> Result<Box<Conn>, c_int> {
        // SAFETY: the caller's live id with a device.
        let ctx = unsafe { (*id).verbs };
        if ctx.is_null() {
            return Err(libc::ENODEV);
        }
        let ring = s.rcvbuf;
        let mut c = Box::new(Conn {
            id,
            pd: std::ptr::null_mut(),
            cc: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            rx: vec![0u8; ring + s.rq as usize * SLOT].into_boxed_slice(),
            rx_mr: std::ptr::null_mut(),
            tx: vec![0u8; s.sndbuf].into_boxed_slice(),
            tx_mr: std::ptr::null_mut(),
            ring,
            rq: s.rq,
            sq: s.sq,
            peer_ring: 0,
            peer_rkey: 0,
            peer_ring_size: 0,
            peer_rq: 0,
            sent: 0,
            peer_consumed: 0,
            rq_used: 0,
            peer_reposted: 0,
            sq_busy: 0,
            tx_head: 0,
            tx_tail: 0,
            arrived: 0,
            consumed: 0,
            told_consumed: 0,
            reposted: 0,
            told_reposted: 0,
            peer_eof: false,
            peer_gone: false,
            broken: 0,
            shut_wr: false,
            shut_rd: false,
            fin_queued: None,
            fin_sent: false,
            maps_queued: VecDeque::new(),
            peer_maps: Vec::new(),
            my_maps: Vec::new(),
        });
        // SAFETY: verbs calls on the id's device; each object is freed by Drop if a later
        // one fails.
        unsafe {
            c.pd = ibv_alloc_pd(ctx);
            if c.pd.is_null() {
                return Err(errno());
            }
            c.cc = ibv_create_comp_channel(ctx);
            if c.cc.is_null() {
                return Err(errno());
            }
            set_nonblocking((*c.cc).fd);
            let cqe = (s.sq + CTRL_SQ + s.rq) as c_int;
            c.cq = ibv_create_cq(ctx, cqe, std::ptr::null_mut(), c.cc, 0);
            if c.cq.is_null() {
                return Err(errno());
            }
            let (rxp, rxl) = (c.rx.as_mut_ptr().cast::<c_void>(), c.rx.len());
            c.rx_mr = ibv_reg_mr(c.pd, rxp, rxl, ACCESS_RW);
            let (txp, txl) = (c.tx.as_mut_ptr().cast::<c_void>(), c.tx.len());
            c.tx_mr = ibv_reg_mr(c.pd, txp, txl, ACCESS_RW);
            if c.rx_mr.is_null() || c.tx_mr.is_null() {
                return Err(errno());
            }
            let mut attr = ibv_qp_init_attr {
                qp_context: std::ptr::null_mut(),
                send_cq: c.cq,
                recv_cq: c.cq,
                srq: std::ptr::null_mut(),
                cap: ibv_qp_cap {
                    max_send_wr: s.sq + CTRL_SQ,
                    max_recv_wr: s.rq,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: SLOT as u32,
                },
                qp_type: 2, // IBV_QPT_RC
                sq_sig_all: 1,
            };
            if rdma_create_qp(id, c.pd, &mut attr) != 0 {
                return Err(errno());
            }
        }
        for slot in 0..c.rq {
            let r = c.post_slot(slot);
            if r != 0 {
                return Err(r);
            }
        }
        Ok(c)
    }

    /// The private data advertising this end's ring and queue.
    pub fn hello(&self) -> Hello {
        Hello {
            magic: MAGIC,
            version: VERSION,
            ring_addr: self.rx.as_ptr() as u64,
            // SAFETY: registered in new.
            ring_rkey: unsafe { (*self.rx_mr).rkey },
            ring_size: self.ring as u32,
            rq: self.rq,
            _pad: 0,
        }
    }

    /// Take the peer's [`Hello`] (from its REQ or REP private data); false if it is not one.
    pub fn set_peer(&mut self, data: *const c_void, len: usize) -> bool {
        let Some(h) = read_hello(data, len) else { return false };
        self.peer_ring = h.ring_addr;
        self.peer_rkey = h.ring_rkey;
        self.peer_ring_size = h.ring_size as u64;
        self.peer_rq = h.rq;
        true
    }

    fn post_slot(&mut self, slot: u32) -> c_int {
        let off = self.ring + slot as usize * SLOT;
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
        // SAFETY: the id's QP, made in new.
        unsafe { post_recv((*self.id).qp, &mut wr) }
    }

    /// Receive entries of the peer's that this end may still use.
    fn credits(&self) -> u32 {
        self.peer_rq.wrapping_add(self.peer_reposted).wrapping_sub(self.rq_used)
    }

    /// Poll the CQ empty, then send what control messages are due. The number of completions.
    pub fn progress(&mut self) -> usize {
        let mut wc = [ibv_wc::default(); 32];
        let mut total = 0;
        loop {
            // SAFETY: our CQ.
            let n = unsafe { poll_cq(self.cq, &mut wc) };
            if n <= 0 {
                break;
            }
            for w in &wc[..n as usize] {
                self.complete(w);
            }
            total += n as usize;
        }
        self.send_due();
        total
    }

    fn complete(&mut self, w: &ibv_wc) {
        if w.wr_id & SEND_BIT != 0 {
            // A send-side completion (told by its wr_id: a failed one's opcode is undefined).
            self.sq_busy = self.sq_busy.saturating_sub(1);
            if w.wr_id != CTRL_WR {
                self.tx_tail = self.tx_tail.max(w.wr_id & !SEND_BIT);
            }
        }
        if w.status != 0 {
            // A flushed request (the QP went to ERR at a disconnect) ends the connection
            // after everything completed before it, which stays readable; any other failure
            // breaks it.
            if w.status != WC_WR_FLUSH_ERR && self.broken == 0 {
                self.broken = libc::ECONNRESET;
            }
            self.peer_eof = true;
            self.peer_gone = true;
            return;
        }
        match w.opcode {
            WC_RECV_IMM => {
                self.arrived += u32::from_be(w.imm_data) as u64;
                self.repost(w.wr_id as u32);
            }
            WC_RECV => {
                let off = self.ring + w.wr_id as usize * SLOT;
                // SAFETY: a slot of ours, holding the Ctrl the peer sent (64 bytes, aligned
                // reads avoided).
                let c: Ctrl = unsafe { std::ptr::read_unaligned(self.rx[off..].as_ptr().cast()) };
                self.peer_reposted = c.reposted;
                self.peer_consumed = self.peer_consumed.max(c.consumed);
                match c.kind {
                    SHUT_WR => self.peer_eof = true,
                    CLOSE => {
                        self.peer_eof = true;
                        self.peer_gone = true;
                    }
                    IOMAP => {
                        self.peer_maps.retain(|m| m.offset != c.map_offset);
                        self.peer_maps.push(PeerMap {
                            offset: c.map_offset,
                            addr: c.map_addr,
                            len: c.map_len,
                            rkey: c.map_rkey,
                        });
                    }
                    _ => {}
                }
                self.repost(w.wr_id as u32);
            }
            _ => {}
        }
    }

    fn repost(&mut self, slot: u32) {
        if self.post_slot(slot) == 0 {
            self.reposted = self.reposted.wrapping_add(1);
        } else {
            // The QP is in ERR (disconnected): the connection ends here.
            self.peer_eof = true;
            self.peer_gone = true;
        }
    }

    /// Send the queued iomaps, end of stream, and a credit message if one is owed.
    fn send_due(&mut self) {
        if self.broken != 0 || self.peer_gone {
            return;
        }
        while self.credits() >= 2 && self.sq_busy < self.sq + CTRL_SQ {
            let Some(m) = self.maps_queued.pop_front() else { break };
            self.send_ctrl(m);
        }
        if let Some(kind) = self.fin_queued {
            if self.maps_queued.is_empty()
                && self.credits() >= 1
                && self.sq_busy < self.sq + CTRL_SQ
            {
                self.fin_queued = None;
                self.fin_sent = true;
                self.send_ctrl(Ctrl { kind, ..Ctrl::default() });
            }
        }
        let owed_rq = self.reposted.wrapping_sub(self.told_reposted) >= self.rq / 2;
        let owed_ring = (self.consumed - self.told_consumed) as usize >= self.ring / 2;
        if (owed_rq || owed_ring)
            && !self.fin_sent
            && self.credits() >= 1
            && self.sq_busy < self.sq + CTRL_SQ
        {
            self.send_ctrl(Ctrl { kind: CREDIT, ..Ctrl::default() });
        }
    }

    fn send_ctrl(&mut self, mut c: Ctrl) {
        c.reposted = self.reposted;
        c.consumed = self.consumed;
        let mut sge =
            ibv_sge { addr: (&c as *const Ctrl) as u64, length: size_of::<Ctrl>() as u32, lkey: 0 };
        let mut wr = send_wr(CTRL_WR, &mut sge, WR_SEND, SEND_SIGNALED | SEND_INLINE);
        // SAFETY: our QP; the inline data is copied at the post.
        let r = unsafe { post_send((*self.id).qp, &mut wr) };
        if r != 0 {
            // As a failed repost: the QP is in ERR.
            self.peer_eof = true;
            self.peer_gone = true;
            return;
        }
        self.sq_busy += 1;
        self.rq_used = self.rq_used.wrapping_add(1);
        self.told_reposted = self.reposted;
        self.told_consumed = self.consumed;
    }

    /// Bytes readable now.
    pub fn readable(&self) -> usize {
        (self.arrived - self.consumed) as usize
    }

    /// Copy up to `out.len()` readable bytes out of the ring (`peek`: without consuming them).
    pub fn read(&mut self, out: &mut [u8], peek: bool) -> usize {
        let n = out.len().min(self.readable());
        let mut done = 0;
        let mut pos = (self.consumed % self.ring as u64) as usize;
        while done < n {
            let k = (n - done).min(self.ring - pos);
            out[done..done + k].copy_from_slice(&self.rx[pos..pos + k]);
            done += k;
            pos = (pos + k) % self.ring;
        }
        if !peek {
            self.consumed += n as u64;
            self.send_due();
        }
        n
    }

    /// Whether a data write could be posted now.
    pub fn writable(&self) -> bool {
        self.broken == 0
            && !self.peer_gone
            && self.credits() >= 2
            && self.sq_busy < self.sq
            && self.sent - self.peer_consumed < self.peer_ring_size
            && self.tx_head - self.tx_tail < self.tx.len() as u64
    }

    /// Copy `n` bytes into the send buffer; its address, or None if there is no room.
    fn stage(&mut self, data: &[u8]) -> Option<(u64, u64)> {
        let len = self.tx.len() as u64;
        let free = len - (self.tx_head - self.tx_tail);
        let pos = (self.tx_head % len) as usize;
        let n = data.len().min(free as usize).min(self.tx.len() - pos);
        if n == 0 {
            return None;
        }
        self.tx[pos..pos + n].copy_from_slice(&data[..n]);
        self.tx_head += n as u64;
        Some((self.tx[pos..].as_ptr() as u64, n as u64))
    }

    /// Post as much of `data` as credits and buffers allow; the bytes taken.
    pub fn write(&mut self, data: &[u8]) -> usize {
        let mut done = 0;
        while done < data.len() && self.writable() {
            let used = self.sent - self.peer_consumed;
            let pos = self.sent % self.peer_ring_size;
            let n = (data.len() - done)
                .min((self.peer_ring_size - used) as usize)
                .min((self.peer_ring_size - pos) as usize)
                .min(MAX_XFER);
            let Some((addr, n)) = self.stage(&data[done..done + n]) else { break };
            let remote = self.peer_ring + pos;
            if !self.post_write(addr, n, remote, self.peer_rkey, Some(n as u32)) {
                break;
            }
            self.sent += n;
            self.rq_used = self.rq_used.wrapping_add(1);
            done += n as usize;
        }
        done
    }

    fn post_write(&mut self, addr: u64, n: u64, remote: u64, rkey: u32, imm: Option<u32>) -> bool {
        // SAFETY: registered in new.
        let mut sge = ibv_sge { addr, length: n as u32, lkey: unsafe { (*self.tx_mr).lkey } };
        let op = if imm.is_some() { WR_WRITE_IMM } else { WR_WRITE };
        let mut wr = send_wr(self.tx_head | SEND_BIT, &mut sge, op, SEND_SIGNALED);
        wr.imm_data = imm.unwrap_or(0).to_be();
        wr.wr = SendWrUnion { w0: remote, w1: rkey as u64, w2: 0, w3: 0 };
        // SAFETY: our QP; the staged bytes stay until the completion.
        if unsafe { post_send((*self.id).qp, &mut wr) } != 0 {
            self.broken = libc::ECONNRESET;
            return false;
        }
        self.sq_busy += 1;
        true
    }

    /// `riowrite`: post as much of `data` as buffers allow to the peer's mapping at `offset`;
    /// the bytes taken, or Err(EINVAL) if the peer mapped nothing there (yet).
    pub fn iowrite(&mut self, data: &[u8], offset: u64) -> Result<usize, c_int> {
        let Some(m) = self
            .peer_maps
            .iter()
            .copied()
            .find(|m| offset >= m.offset && offset < m.offset + m.len)
        else {
            return Err(libc::EINVAL);
        };
        let mut done = 0;
        while done < data.len() && self.broken == 0 && !self.peer_gone && self.sq_busy < self.sq {
            let at = offset + done as u64;
            if at >= m.offset + m.len {
                break;
            }
            let n = (data.len() - done).min((m.offset + m.len - at) as usize).min(MAX_XFER);
            let Some((addr, n)) = self.stage(&data[done..done + n]) else { break };
            if !self.post_write(addr, n, m.addr + (at - m.offset), m.rkey, None) {
                break;
            }
            done += n as usize;
        }
        Ok(done)
    }

    /// Register the caller's `buf` for the peer's writes at `offset` and queue the message
    /// telling the peer.
    pub fn iomap(&mut self, buf: *mut c_void, len: usize, offset: u64) -> Result<(), c_int> {
        // SAFETY: the caller's buffer, registered on our PD.
        let mr = unsafe { ibv_reg_mr(self.pd, buf, len, ACCESS_RW) };
        if mr.is_null() {
            return Err(errno());
        }
        self.my_maps.push(MyMap { offset, addr: buf as usize, len, mr });
        self.maps_queued.push_back(Ctrl {
            kind: IOMAP,
            map_offset: offset,
            map_addr: buf as u64,
            map_len: len as u64,
            // SAFETY: just registered.
            map_rkey: unsafe { (*mr).rkey },
            ..Ctrl::default()
        });
        self.send_due();
        Ok(())
    }

    /// `riounmap`: deregister the mapping of `buf`; false if there is none.
    pub fn iounmap(&mut self, buf: *mut c_void, len: usize) -> bool {
        let Some(i) = self.my_maps.iter().position(|m| m.addr == buf as usize && m.len == len)
        else {
            return false;
        };
        let m = self.my_maps.remove(i);
        // SAFETY: registered by iomap.
        unsafe { ibv_dereg_mr(m.mr) };
        true
    }

    /// Queue the end of this end's stream (SHUT_WR) or its close.
    pub fn end(&mut self, close: bool) {
        if !self.fin_sent {
            let kind = if close { CLOSE } else { SHUT_WR };
            if self.fin_queued != Some(CLOSE) {
                self.fin_queued = Some(kind);
            }
        }
        self.send_due();
    }

    /// Nothing of ours is still on the wire (every posted send completed) and no end of
    /// stream waits for a credit.
    pub fn drained(&self) -> bool {
        self.sq_busy == 0 && self.fin_queued.is_none() && self.maps_queued.is_empty()
    }

    /// Arm the CQ's notification; true if completions came meanwhile (do not sleep).
    pub fn arm(&mut self) -> bool {
        // SAFETY: our CQ.
        unsafe { req_notify(self.cq) };
        self.progress() > 0
    }

    /// Read and acknowledge the completion channel's events, if any are there.
    pub fn take_cq_event(&mut self) {
        // SAFETY: our channel, made non-blocking in new.
        unsafe { drain_cq_events(self.cc) }
    }

    /// The completion channel's descriptor.
    pub fn cc_fd(&self) -> c_int {
        // SAFETY: ours.
        unsafe { (*self.cc).fd }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // SAFETY: the objects made in new (NULL ones skipped), the QP before its CQ.
        unsafe {
            if !(*self.id).qp.is_null() {
                rdma_destroy_qp(self.id);
            }
            for m in self.my_maps.drain(..) {
                ibv_dereg_mr(m.mr);
            }
            release(&[self.rx_mr, self.tx_mr], self.cq, self.cc, self.pd);
        }
    }
}

/// A signaled send work request of one SGE.
fn send_wr(wr_id: u64, sge: &mut ibv_sge, opcode: c_int, flags: u32) -> ibv_send_wr {
    ibv_send_wr {
        wr_id,
        next: std::ptr::null_mut(),
        sg_list: sge,
        num_sge: 1,
        opcode,
        send_flags: flags,
        imm_data: 0,
        wr: SendWrUnion { w0: 0, w1: 0, w2: 0, w3: 0 },
        xrc_remote_srqn: 0,
        tail: [0; 6],
    }
}

/// The [`Hello`] in a peer's private data, if that is one.
pub fn read_hello(data: *const c_void, len: usize) -> Option<Hello> {
    if data.is_null() || len < size_of::<Hello>() {
        return None;
    }
    // SAFETY: the event's private data, at least a Hello long.
    let h: Hello = unsafe { std::ptr::read_unaligned(data.cast()) };
    (h.magic == MAGIC && h.version == VERSION && h.ring_size > 0 && h.rq >= 2).then_some(h)
}
