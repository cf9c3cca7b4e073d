//! The test's side of the verbs pipe: a `verbs-api` backend whose objects are proxies for
//! objects in an `sv-peer verbs` child. Each verb becomes one request line and waits for one
//! reply; dropping a proxy drops the child's object.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use verbs_api::provider::{AhOps, CompChannelOps, ContextOps, CqOps, MrOps, PdOps, QpOps, SrqOps};
use verbs_api::*;

use super::codec::{
    code, malformed, put_ah, put_cap, put_qp_attr, put_recv_wrs, put_send_wr, put_srq_attr,
    take_cap, take_device_attr, take_event, take_gid, take_port_attr, take_qp_attr, take_srq_attr,
    take_wc, unescape, Line, Tokens,
};
use super::{BLOCKING_CAP, REPLY_WAIT};
use crate::Peer;

/// The pipe to one `sv-peer verbs` child, shared by every proxy object.
struct Conn {
    peer: Mutex<Peer>,
    /// The first failure of the pipe; every later call fails at once with it.
    broken: Mutex<Option<String>>,
    /// The CQs by their handle in the child, so `get_cq_event` returns the proxy the test holds.
    cqs: Mutex<BTreeMap<u64, Weak<RemoteCq>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Conn {
    /// Sends one request and returns the fields of its `OK` reply, or its error.
    fn call(&self, line: &Line, wait: Duration) -> Result<String> {
        if let Some(why) = lock(&self.broken).clone() {
            return Err(Error::new(Errno::Io, format!("the verbs peer is unusable: {why}")));
        }
        let mut peer = lock(&self.peer);
        let reply = peer.try_send_line(&line.0).and_then(|()| peer.recv_line(REPLY_WAIT + wait));
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                *lock(&self.broken) = Some(e.clone());
                return Err(Error::new(Errno::Io, e));
            }
        };
        if reply == "OK" {
            return Ok(String::new());
        }
        if let Some(rest) = reply.strip_prefix("OK ") {
            return Ok(rest.to_string());
        }
        if let Some(rest) = reply.strip_prefix("ERR ") {
            let (errno, message) = rest.split_once(' ').unwrap_or((rest, ""));
            let errno = errno.parse().map(Errno::from_code).unwrap_or(Errno::Io);
            return Err(Error::new(errno, unescape(message)));
        }
        Err(malformed(format!("reply {reply:?} to {:?}", line.0)))
    }

    /// Tells the child that the test dropped its last reference to handle `h`.
    fn release(&self, h: u64) {
        let mut l = Line::new("drop");
        l.num(h);
        let _ = self.call(&l, Duration::ZERO);
    }
}

/// One object in the child: dropping it drops the child's handle too.
struct Remote {
    conn: Arc<Conn>,
    h: u64,
}

impl Remote {
    /// A request about this object.
    fn req(&self, verb: &str) -> Line {
        let mut l = Line::new(verb);
        l.num(self.h);
        l
    }
    fn call(&self, l: &Line) -> Result<String> {
        self.conn.call(l, Duration::ZERO)
    }
    fn same_peer(&self, other: &Remote) -> bool {
        Arc::ptr_eq(&self.conn, &other.conn)
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.conn.release(self.h);
    }
}

fn foreign(what: &str) -> Error {
    Error::inval(format!("{what} belongs to another device or backend"))
}

/// A device in an `sv-peer verbs` child, as a [`Context`] of this process.
pub struct RemoteDevice {
    conn: Arc<Conn>,
    context: Context,
}

impl RemoteDevice {
    /// Takes over `peer`, an `sv-peer verbs` child, once it has said `VERBS <device>`.
    pub fn attach(mut peer: Peer) -> std::result::Result<RemoteDevice, String> {
        let hello = peer.recv_line(REPLY_WAIT)?;
        let name = hello
            .strip_prefix("VERBS ")
            .ok_or_else(|| format!("expected VERBS <device> from the verbs peer, got {hello:?}"))?
            .to_string();
        let conn = Arc::new(Conn {
            peer: Mutex::new(peer),
            broken: Mutex::new(None),
            cqs: Mutex::new(BTreeMap::new()),
        });
        let context = Context::from_ops(Arc::new(RemoteContext { conn: conn.clone(), name }));
        Ok(RemoteDevice { conn, context })
    }

    /// The child's device.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        lock(&self.conn.peer).pid()
    }

    /// SIGKILLs the child (to test what a test sees when its peer dies).
    pub fn kill(&self) {
        lock(&self.conn.peer).kill();
    }

    /// Ends the session: says `BYE` (the child drops every object and its device) and waits at
    /// most `timeout` for it to exit 0. Panics, with the child's stderr, if it does not.
    pub fn close(self, timeout: Duration) {
        let RemoteDevice { conn, context } = self;
        drop(context);
        if let Err(e) = conn.call(&Line::new("BYE"), Duration::ZERO) {
            panic!("closing the verbs peer: {e}");
        }
        let mut peer = lock(&conn.peer);
        peer.wait_success(timeout);
        peer.assert_exited();
    }
}

struct RemoteContext {
    conn: Arc<Conn>,
    name: String,
}

impl RemoteContext {
    fn call(&self, l: &Line, wait: Duration) -> Result<String> {
        self.conn.call(l, wait)
    }
    fn remote(&self, h: u64) -> Remote {
        Remote { conn: self.conn.clone(), h }
    }
}

impl ContextOps for RemoteContext {
    fn device_name(&self) -> String {
        self.name.clone()
    }
    fn query_device(&self) -> Result<DeviceAttr> {
        let r = self.call(&Line::new("query_device"), Duration::ZERO)?;
        let mut t = Tokens::new(&r);
        let d = take_device_attr(&mut t)?;
        t.end()?;
        Ok(d)
    }
    fn query_port(&self, port_num: u8) -> Result<PortAttr> {
        let mut l = Line::new("query_port");
        l.num(port_num);
        let r = self.call(&l, Duration::ZERO)?;
        let mut t = Tokens::new(&r);
        let p = take_port_attr(&mut t)?;
        t.end()?;
        Ok(p)
    }
    fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid> {
        let mut l = Line::new("query_gid");
        l.num(port_num).num(index);
        let r = self.call(&l, Duration::ZERO)?;
        take_gid(&mut Tokens::new(&r))
    }
    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>> {
        let r = self.call(&Line::new("alloc_pd"), Duration::ZERO)?;
        let h = Tokens::new(&r).num("handle")?;
        Ok(Arc::new(RemotePd { r: self.remote(h) }))
    }
    fn create_comp_channel(&self) -> Result<Arc<dyn CompChannelOps>> {
        let r = self.call(&Line::new("create_comp_channel"), Duration::ZERO)?;
        let h = Tokens::new(&r).num("handle")?;
        Ok(Arc::new(RemoteChannel { r: self.remote(h) }))
    }
    fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompChannel>,
        comp_vector: u32,
    ) -> Result<Arc<dyn CqOps>> {
        let ch = match channel {
            None => 0,
            Some(c) => {
                let c = c
                    .ops()
                    .as_any()
                    .downcast_ref::<RemoteChannel>()
                    .filter(|c| Arc::ptr_eq(&c.r.conn, &self.conn))
                    .ok_or_else(|| foreign("the completion channel"))?;
                c.r.h
            }
        };
        let mut l = Line::new("create_cq");
        l.num(cqe).num(ch).num(comp_vector);
        let r = self.call(&l, Duration::ZERO)?;
        let mut t = Tokens::new(&r);
        let (h, cqe, id) = (t.num("handle")?, t.num("cqe")?, t.num("id")?);
        let cq = Arc::new(RemoteCq { r: self.remote(h), cqe: AtomicU32::new(cqe), id });
        lock(&self.conn.cqs).insert(h, Arc::downgrade(&cq));
        Ok(cq)
    }
    fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent> {
        let timeout = timeout.unwrap_or(BLOCKING_CAP);
        let mut l = Line::new("get_async_event");
        l.opt_duration(Some(timeout));
        let r = self.call(&l, timeout)?;
        take_event(&mut Tokens::new(&r))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct RemotePd {
    r: Remote,
}

impl PdOps for RemotePd {
    fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<Arc<dyn MrOps>> {
        let mut l = self.r.req("reg_mr");
        l.num(len as u64).num(access.bits());
        let r = self.r.call(&l)?;
        let mut t = Tokens::new(&r);
        Ok(Arc::new(RemoteMr {
            r: Remote { conn: self.r.conn.clone(), h: t.num("handle")? },
            lkey: t.num("lkey")?,
            rkey: t.num("rkey")?,
            addr: t.num("addr")?,
            len: t.num("len")?,
            access,
        }))
    }
    unsafe fn reg_mr_raw(
        &self,
        _addr: *mut u8,
        _len: usize,
        _access: AccessFlags,
    ) -> Result<Arc<dyn MrOps>> {
        Err(Error::new(
            Errno::NotSup,
            "ibv_reg_mr: a device in another process cannot register this process's memory",
        ))
    }
    fn create_qp(&self, init: &QpInitAttr) -> Result<Arc<dyn QpOps>> {
        let cq_of = |cq: &CompletionQueue, what: &str| -> Result<u64> {
            cq.ops()
                .as_any()
                .downcast_ref::<RemoteCq>()
                .filter(|c| c.r.same_peer(&self.r))
                .map(|c| c.r.h)
                .ok_or_else(|| foreign(what))
        };
        let srq = match &init.srq {
            None => 0,
            Some(s) => s
                .ops()
                .as_any()
                .downcast_ref::<RemoteSrq>()
                .filter(|s| s.r.same_peer(&self.r))
                .map(|s| s.r.h)
                .ok_or_else(|| foreign("ibv_create_qp: srq"))?,
        };
        let mut l = self.r.req("create_qp");
        l.num(code(init.qp_type))
            .num(cq_of(&init.send_cq, "ibv_create_qp: send_cq")?)
            .num(cq_of(&init.recv_cq, "ibv_create_qp: recv_cq")?)
            .num(srq);
        put_cap(&mut l, &init.cap);
        l.flag(init.sq_sig_all);
        let r = self.r.call(&l)?;
        let mut t = Tokens::new(&r);
        Ok(Arc::new(RemoteQp {
            r: Remote { conn: self.r.conn.clone(), h: t.num("handle")? },
            qpn: t.num("qp_num")?,
            qp_type: init.qp_type,
        }))
    }
    fn create_srq(&self, init: &SrqInitAttr) -> Result<Arc<dyn SrqOps>> {
        let mut l = self.r.req("create_srq");
        l.num(init.max_wr).num(init.max_sge).num(init.srq_limit);
        let r = self.r.call(&l)?;
        let mut t = Tokens::new(&r);
        Ok(Arc::new(RemoteSrq {
            r: Remote { conn: self.r.conn.clone(), h: t.num("handle")? },
            id: t.num("id")?,
        }))
    }
    fn create_ah(&self, attr: &AhAttr) -> Result<Arc<dyn AhOps>> {
        let mut l = self.r.req("create_ah");
        put_ah(&mut l, attr);
        let r = self.r.call(&l)?;
        let h = Tokens::new(&r).num("handle")?;
        Ok(Arc::new(RemoteAh { r: Remote { conn: self.r.conn.clone(), h }, attr: *attr }))
    }
    fn dealloc(&self) -> Result<()> {
        self.r.call(&self.r.req("dealloc_pd")).map(drop)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct RemoteMr {
    r: Remote,
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: usize,
    access: AccessFlags,
}

impl MrOps for RemoteMr {
    fn lkey(&self) -> u32 {
        self.lkey
    }
    fn rkey(&self) -> u32 {
        self.rkey
    }
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn access(&self) -> AccessFlags {
        self.access
    }
    fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        let mut l = self.r.req("mr_read");
        l.num(offset as u64).num(buf.len() as u64);
        let r = self.r.call(&l)?;
        let got = Tokens::new(&r).bytes("data")?;
        if got.len() != buf.len() {
            return Err(malformed(format!("asked for {} bytes, got {}", buf.len(), got.len())));
        }
        buf.copy_from_slice(&got);
        Ok(())
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let mut l = self.r.req("mr_write");
        l.num(offset as u64).bytes(data);
        self.r.call(&l).map(drop)
    }
    fn dereg(&self) -> Result<()> {
        self.r.call(&self.r.req("dereg_mr")).map(drop)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct RemoteCq {
    r: Remote,
    cqe: AtomicU32,
    id: u64,
}

impl CqOps for RemoteCq {
    fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        let mut l = self.r.req("poll_cq");
        l.num(wc.len() as u64);
        let r = self.r.call(&l)?;
        let mut t = Tokens::new(&r);
        let n: usize = t.num("count")?;
        if n > wc.len() {
            return Err(malformed(format!("{n} completions for room for {}", wc.len())));
        }
        for slot in &mut wc[..n] {
            *slot = take_wc(&mut t)?;
        }
        t.end()?;
        Ok(n)
    }
    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        let mut l = self.r.req("req_notify_cq");
        l.flag(solicited_only);
        self.r.call(&l).map(drop)
    }
    fn cqe(&self) -> u32 {
        self.cqe.load(Ordering::Relaxed)
    }
    fn resize(&self, cqe: u32) -> Result<()> {
        let mut l = self.r.req("resize_cq");
        l.num(cqe);
        let r = self.r.call(&l)?;
        self.cqe.store(Tokens::new(&r).num("cqe")?, Ordering::Relaxed);
        Ok(())
    }
    fn destroy(&self) -> Result<()> {
        self.r.call(&self.r.req("destroy_cq")).map(drop)
    }
    fn id(&self) -> u64 {
        self.id
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct RemoteChannel {
    r: Remote,
}

impl CompChannelOps for RemoteChannel {
    fn get_cq_event(&self, timeout: Option<Duration>) -> Result<Arc<dyn CqOps>> {
        let timeout = timeout.unwrap_or(BLOCKING_CAP);
        let mut l = self.r.req("get_cq_event");
        l.opt_duration(Some(timeout));
        let r = self.r.conn.call(&l, timeout)?;
        let h: u64 = Tokens::new(&r).num("cq handle")?;
        let cq = lock(&self.r.conn.cqs).get(&h).and_then(Weak::upgrade);
        match cq {
            Some(cq) => Ok(cq),
            None => Err(Error::new(
                Errno::Io,
                format!("ibv_get_cq_event: the event names CQ handle {h}, which is gone"),
            )),
        }
    }
    fn ack_cq_events(&self, cq: &CompletionQueue, nevents: u32) {
        let Some(c) = cq.ops().as_any().downcast_ref::<RemoteCq>() else { return };
        let mut l = self.r.req("ack_cq_events");
        l.num(c.r.h).num(nevents);
        let _ = self.r.call(&l);
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct RemoteQp {
    r: Remote,
    qpn: u32,
    qp_type: QpType,
}

impl QpOps for RemoteQp {
    fn qp_num(&self) -> u32 {
        self.qpn
    }
    fn qp_type(&self) -> QpType {
        self.qp_type
    }
    fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        let mut l = self.r.req("post_send");
        l.num(wrs.len() as u64);
        for (i, w) in wrs.iter().enumerate() {
            let ah = match &w.ud {
                None => 0,
                Some(u) => {
                    u.ah.ops()
                        .as_any()
                        .downcast_ref::<RemoteAh>()
                        .filter(|a| a.r.same_peer(&self.r))
                        .map(|a| a.r.h)
                        .ok_or_else(|| foreign(&format!("ibv_post_send: wr[{i}].ud.ah")))?
                }
            };
            put_send_wr(&mut l, w, ah);
        }
        self.r.call(&l).map(drop)
    }
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        let mut l = self.r.req("post_recv");
        put_recv_wrs(&mut l, wrs);
        self.r.call(&l).map(drop)
    }
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let mut l = self.r.req("modify_qp");
        put_qp_attr(&mut l, attr);
        l.num(mask.bits());
        self.r.call(&l).map(drop)
    }
    fn query(&self) -> Result<(QpAttr, QpCap)> {
        let r = self.r.call(&self.r.req("query_qp"))?;
        let mut t = Tokens::new(&r);
        let a = take_qp_attr(&mut t)?;
        let c = take_cap(&mut t)?;
        t.end()?;
        Ok((a, c))
    }
    fn destroy(&self) -> Result<()> {
        self.r.call(&self.r.req("destroy_qp")).map(drop)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct RemoteSrq {
    r: Remote,
    id: u64,
}

impl SrqOps for RemoteSrq {
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        let mut l = self.r.req("post_srq_recv");
        put_recv_wrs(&mut l, wrs);
        self.r.call(&l).map(drop)
    }
    fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        let mut l = self.r.req("modify_srq");
        put_srq_attr(&mut l, attr);
        l.num(mask.bits());
        self.r.call(&l).map(drop)
    }
    fn query(&self) -> Result<SrqAttr> {
        let r = self.r.call(&self.r.req("query_srq"))?;
        take_srq_attr(&mut Tokens::new(&r))
    }
    fn destroy(&self) -> Result<()> {
        self.r.call(&self.r.req("destroy_srq")).map(drop)
    }
    fn id(&self) -> u64 {
        self.id
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct RemoteAh {
    r: Remote,
    attr: AhAttr,
}

impl AhOps for RemoteAh {
    fn attr(&self) -> AhAttr {
        self.attr
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
