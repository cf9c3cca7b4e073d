//! The verbs objects of a device whose NIC is the engine: context, PD, MR, CQ, QP, SRQ and
//! address handle, written once for every backend that runs a [`Nic`] — the soft backend (real
//! time, a NIC thread) and the simulator (virtual time, a world that moves when stepped).
//!
//! A backend supplies a [`Host`]: where its device's engine lives, what time it is, what
//! happens around the verbs that put work on the wire, and its completion channels and async
//! events, the only verbs whose blocking differs between real and virtual time. Each handle
//! names its engine object by the engine's number and reaches the engine through its host; a
//! handle owns its object and destroys it once, by the explicit verb or else when dropped.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use verbs_api::provider::{
    AhOps, CompChannelOps, ContextOps, CqOps, MrOps, MwOps, PdOps, QpOps, SrqOps,
};
use verbs_api::{
    AccessFlags, AhAttr, AsyncEvent, CompChannel, CompletionQueue, DeviceAttr, Errno, Error, Gid,
    GidEntry, MrAdvice, MwType, PortAttr, PortState, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpType,
    RecvWr, Result, SendWr, SrqAttr, SrqAttrMask, SrqInitAttr, WorkCompletion,
};

use crate::cost::{self, CopyAt};
use crate::engine::mr::MrMemory;
use crate::engine::{check_ah, Membership, Nic, Now, GID_TBL_LEN};

/// What a backend provides so that the objects of this module can run its devices.
pub trait Host: Send + Sync + Sized + 'static {
    /// `ibv_get_device_name`.
    fn device_name(&self) -> String;
    /// Whether `other` is the same device (objects of two devices never mix).
    fn same_device(&self, other: &Self) -> bool;
    /// Run `f` on this device's engine: a verb that changes only the engine's state.
    fn with_nic<R>(&self, f: impl FnOnce(&mut Nic) -> R) -> R;
    /// Run `f` on this device's engine at the time now, for a verb that may give the engine
    /// work for the wire (`ibv_post_send`, `ibv_modify_qp`); the host then moves that work
    /// along as its NIC would (the soft backend transmits at once).
    /// The time is lazy ([`Now`]): a host with a real clock reads it only if the verb arms a
    /// timer.
    fn with_nic_now<R>(&self, f: impl FnOnce(&mut Nic, &mut Now<'_>) -> R) -> R;
    /// `ibv_poll_cq` on the engine's CQ `cq` (the soft backend lends the NIC the caller's CPU
    /// first when the CQ is short).
    fn poll_cq(&self, cq: u32, wc: &mut [WorkCompletion]) -> Result<usize>;
    /// The id a handle of the engine's CQ or SRQ `engine_id` reports (`CqOps::id`,
    /// `SrqOps::id`), which async events name it by: unique among the host's devices.
    fn handle_id(&self, engine_id: u32) -> u64;
    /// `ibv_create_comp_channel`.
    fn create_comp_channel(self: &Arc<Self>) -> Result<Arc<dyn CompChannelOps>>;
    /// Have the engine's CQ `cq_id` notify `channel` (`ibv_create_cq` with a channel); an
    /// error if the channel is not one of this host's.
    fn bind_cq(&self, cq_id: u32, cq: Weak<EngineCq<Self>>, channel: &CompChannel) -> Result<()>;
    /// The CQ `cq_id` is gone (destroyed, or its handle dropped): forget its channel, and
    /// drop the events of it the channel holds (the kernel purges them). Called again for a
    /// CQ already forgotten, it does nothing.
    fn unbind_cq(&self, cq_id: u32);
    /// The program arms the engine's CQ `cq_id` (`ibv_req_notify_cq`, called just before the
    /// engine arms it): it means to wait for the event, perhaps in `poll`/`epoll` on the
    /// channel's fd, calling no verb. A host whose progress the program's calls drive keeps
    /// it running until the event is delivered. Nothing by default.
    fn cq_armed(&self, _cq_id: u32) {}
    /// `ibv_get_async_event`, with every CQ and SRQ named by [`Host::handle_id`].
    fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent>;
    /// The I/O virtual address (`mr->addr`, what SGEs and peers name its first byte by) of a
    /// new MR over `memory` that the MR owns (`ibv_reg_mr` without a program address). By
    /// default the memory's own address, as `ibv_reg_mr` gives; a host whose wire bytes must
    /// not depend on the heap (the simulator) chooses its own, as `ibv_reg_mr_iova2` allows.
    /// MRs over program memory (`reg_mr_raw`) always use the program's address.
    fn owned_mr_iova(&self, memory: &MrMemory) -> u64 {
        memory.addr()
    }
    /// Whether the host's port went down for good (the soft backend's corrupted inbox):
    /// `ibv_query_port` then says `PORT_DOWN`. A host whose port never fails says false.
    fn port_down(&self) -> bool {
        false
    }
    /// The memory of a new MR that owns it (`ibv_reg_mr` without a program address): zeroed
    /// heap memory by default; the soft backend takes it from its reach arena, where peers'
    /// NICs can reach it (`engine::reach`).
    fn mr_memory(&self, len: usize) -> Result<Arc<MrMemory>> {
        MrMemory::allocate(len)
    }
    /// The memory of a new MR over the program's `len` bytes at `addr` with `access`
    /// (`ibv_reg_mr` of a program's buffer): refused as the kernel refuses what it cannot pin
    /// (`umem::check_pinnable`), else, by default, the program's pointer. The soft backend
    /// moves the pages onto shared memory (`crate::pinned`), so they stay the NIC's until
    /// `ibv_dereg_mr` and peers can reach them.
    ///
    /// # Safety
    /// As [`PdOps::reg_mr_raw`]: memory that is not moved must stay mapped as long as the MR.
    unsafe fn raw_mr_memory(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<Arc<MrMemory>> {
        crate::umem::check_pinnable(addr as u64, len, access)?;
        // SAFETY: the caller's promise.
        Ok(unsafe { MrMemory::borrow_raw(addr, len) })
    }
    /// The MR `key` was registered: a host that lets peers reach its memory publishes it.
    fn mr_registered(
        &self,
        _key: u32,
        _pd: u32,
        _access: AccessFlags,
        _iova: u64,
        _memory: &MrMemory,
    ) {
    }
    /// Which multicast groups the host's port receives changed ([`Membership`]): a host
    /// whose fabric routes multicast by a registry of members (the soft one) joins or leaves
    /// there. Nothing by default.
    fn mcast_membership(&self, _gid: &Gid, _change: Membership) {}
    /// The MR `key` is about to be deregistered: a host that published it withdraws it, and
    /// returns once no peer uses it any more.
    fn mr_withdrawn(&self, _key: u32) {}
    /// Whether this process inherited the device's handles from the one that opened it (a
    /// child of `fork()`): dropping or destroying a handle then leaves the owner's object
    /// alone, as `ibv_fork_init` promises (nothing the child does with inherited verbs
    /// objects disturbs the parent). Asked only when a handle goes, never on the data path.
    fn inherited(&self) -> bool {
        false
    }
}

fn foreign(what: &str) -> Error {
    Error::inval(format!("{what} belongs to another device or backend"))
}

/// An engine object that a handle owns and destroys once: by the explicit verb (which may
/// fail, e.g. `EBUSY`, and leave it alive) or else when the handle is dropped.
#[derive(Default)]
struct Owned(AtomicBool);

impl Owned {
    /// The explicit destroy verb: runs `destroy` unless the object is already gone. In a
    /// process that inherited the handle (`Host::inherited`: a fork child) only the handle
    /// goes; the owner's object stays.
    fn destroy<H: Host>(
        &self,
        host: &H,
        verb: &str,
        noun: &str,
        destroy: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if self.0.load(Ordering::Acquire) {
            return Err(Error::inval(format!("{verb}: the {noun} was already destroyed")));
        }
        if !host.inherited() {
            destroy()?;
        }
        self.0.store(true, Ordering::Release);
        Ok(())
    }

    /// On drop: runs `destroy` unless the explicit verb did, or the handle was inherited.
    fn drop_with<H: Host>(&self, host: &H, destroy: impl FnOnce()) {
        if !self.0.swap(true, Ordering::AcqRel) && !host.inherited() {
            destroy();
        }
    }
}

// ---------------- context ----------------

/// A device context (`struct ibv_context`) of a host's device.
pub struct EngineContext<H: Host> {
    host: Arc<H>,
}

impl<H: Host> EngineContext<H> {
    /// A context of `host`'s device.
    pub fn new(host: Arc<H>) -> EngineContext<H> {
        EngineContext { host }
    }

    /// Its host.
    pub fn host(&self) -> &Arc<H> {
        &self.host
    }
}

fn only_port_1(verb: &str, port_num: u8) -> Result<()> {
    match port_num {
        1 => Ok(()),
        _ => Err(Error::inval(format!(
            "{verb}: port {port_num} does not exist (the device has port 1)"
        ))),
    }
}

/// An index past the GID table is `EINVAL`, as on rxe (the kernel's table ends there).
fn gid_index_in_table(verb: &str, index: u32) -> Result<()> {
    if index >= GID_TBL_LEN {
        return Err(Error::inval(format!(
            "{verb}: GID index {index} is past port 1's GID table (gid_tbl_len {GID_TBL_LEN})"
        )));
    }
    Ok(())
}

impl<H: Host> ContextOps for EngineContext<H> {
    fn device_name(&self) -> String {
        self.host.device_name()
    }
    fn query_device(&self) -> Result<DeviceAttr> {
        Ok(self.host.with_nic(|n| n.device_attr()))
    }
    fn query_port(&self, port_num: u8) -> Result<PortAttr> {
        only_port_1("ibv_query_port", port_num)?;
        let mut attr = self.host.with_nic(|n| n.port_attr());
        if self.host.port_down() {
            // As rxe reports a port whose link is down: DOWN, physical state Disabled.
            attr.state = PortState::Down;
            attr.phys_state = 3;
        }
        Ok(attr)
    }
    fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid> {
        only_port_1("ibv_query_gid", port_num)?;
        gid_index_in_table("ibv_query_gid", index)?;
        Ok(self.host.with_nic(|n| n.config().gid_entry(index)).map_or(Gid::default(), |e| e.0))
    }
    fn query_gid_entry(&self, port_num: u8, index: u32) -> Result<GidEntry> {
        only_port_1("ibv_query_gid_ex", port_num)?;
        gid_index_in_table("ibv_query_gid_ex", index)?;
        let found = self.host.with_nic(|n| {
            let c = n.config();
            c.gid_entry(index).map(|e| (e, c.netdev.as_ref().map_or(0, |d| d.ifindex)))
        });
        let Some(((gid, gid_type), ndev_ifindex)) = found else {
            return Err(Error::new(
                Errno::NoData,
                format!("ibv_query_gid_ex: GID index {index} of port 1 is empty"),
            ));
        };
        // A port on a network interface: its index, as rxe's GIDs name their netdev; else 0
        // (the C library names `lo`).
        Ok(GidEntry { gid, gid_index: index, port_num: 1, gid_type, ndev_ifindex })
    }
    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>> {
        let id = self.host.with_nic(|n| n.alloc_pd())?;
        Ok(Arc::new(EnginePd {
            host: self.host.clone(),
            id,
            ahs: Arc::new(()),
            owned: Owned::default(),
        }))
    }
    fn create_comp_channel(&self) -> Result<Arc<dyn CompChannelOps>> {
        self.host.create_comp_channel()
    }
    fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompChannel>,
        _comp_vector: u32,
    ) -> Result<Arc<dyn CqOps>> {
        let id = self.host.with_nic(|n| n.create_cq(cqe))?;
        let cq = Arc::new(EngineCq {
            host: self.host.clone(),
            id,
            cqe: AtomicU32::new(cqe),
            owned: Owned::default(),
        });
        if let Some(ch) = channel {
            // On error the new handle is dropped here, which destroys the engine's CQ.
            self.host.bind_cq(id, Arc::downgrade(&cq), ch)?;
        }
        Ok(cq)
    }
    fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent> {
        self.host.get_async_event(timeout)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

// ---------------- PD and MR ----------------

/// A protection domain (`struct ibv_pd`).
pub struct EnginePd<H: Host> {
    host: Arc<H>,
    id: u32,
    /// Held by each of the PD's address handles (which the engine does not know), so that the
    /// PD is `EBUSY` while one lives.
    ahs: Arc<()>,
    owned: Owned,
}

impl<H: Host> EnginePd<H> {
    fn register(
        &self,
        memory: Arc<MrMemory>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Arc<dyn MrOps>> {
        let key = self.host.with_nic(|n| n.reg_mr(self.id, memory.clone(), iova, access))?;
        self.host.mr_registered(key, self.id, access, iova, &memory);
        Ok(Arc::new(EngineMr {
            host: self.host.clone(),
            key,
            iova,
            memory,
            access,
            owned: Owned::default(),
        }))
    }

    /// The engine's number of a CQ or SRQ handle of this PD's device.
    fn engine_id<T: Any>(
        &self,
        ops: &dyn Any,
        what: &str,
        of: impl Fn(&T) -> (&Arc<H>, u32),
    ) -> Result<u32> {
        let obj = ops.downcast_ref::<T>().ok_or_else(|| foreign(what))?;
        let (host, id) = of(obj);
        match host.same_device(&self.host) {
            true => Ok(id),
            false => Err(foreign(what)),
        }
    }
}

impl<H: Host> PdOps for EnginePd<H> {
    fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<Arc<dyn MrOps>> {
        let memory = self.host.mr_memory(len)?;
        let iova = self.host.owned_mr_iova(&memory);
        self.register(memory, iova, access)
    }
    unsafe fn reg_mr_raw(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<Arc<dyn MrOps>> {
        // As the kernel pins: every page mapped as the access needs (EFAULT), length 0
        // refused (EINVAL); so no peer's WRITE can fault in this process's NIC. The soft
        // host moves the pages onto shared memory (crate::pinned).
        // SAFETY: the caller guarantees the memory outlives the MR (PdOps::reg_mr_raw contract).
        let memory = unsafe { self.host.raw_mr_memory(addr, len, access)? };
        self.register(memory, addr as u64, access)
    }
    fn reg_mr_on_demand(
        &self,
        addr: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<Arc<dyn MrOps>> {
        // As rxe_odp_mr_init_user: nothing pinned, nothing need be mapped yet (crate::odp).
        self.register(MrMemory::on_demand(addr, len), addr, access)
    }
    fn advise_mr(&self, advice: MrAdvice, flush: bool, sges: &[verbs_api::Sge]) -> Result<()> {
        let write = advice == MrAdvice::PrefetchWrite;
        let ranges = self.host.with_nic(|n| n.odp_ranges(self.id, flush, sges))?;
        // NO_FAULT maps only pages already present: nothing for this NIC to do, which never
        // keeps a mapping of its own. A prefetch without IBV_ADVISE_MR_FLAG_FLUSH is
        // best-effort (rxe queues it and ignores its failure).
        if advice != MrAdvice::PrefetchNoFault {
            for (addr, len) in ranges {
                match crate::odp::populate(addr, len, write) {
                    Err(e) if flush => return Err(e),
                    _ => {}
                }
            }
        }
        Ok(())
    }
    fn create_qp(&self, init: &QpInitAttr) -> Result<Arc<dyn QpOps>> {
        let cq_of = |cq: &CompletionQueue, what| {
            self.engine_id(cq.ops().as_any(), what, |c: &EngineCq<H>| (&c.host, c.id))
        };
        let send_cq = cq_of(&init.send_cq, "ibv_create_qp: send_cq")?;
        let recv_cq = cq_of(&init.recv_cq, "ibv_create_qp: recv_cq")?;
        let srq = match &init.srq {
            None => None,
            Some(q) => Some(self.engine_id(
                q.ops().as_any(),
                "ibv_create_qp: srq",
                |s: &EngineSrq<H>| (&s.host, s.id),
            )?),
        };
        // A QP on an SRQ has no receive queue of its own: ibv_create_qp ignores max_recv_wr
        // and max_recv_sge then, and the QP reports none.
        let mut asked = init.cap;
        if srq.is_some() {
            (asked.max_recv_wr, asked.max_recv_sge) = (0, 0);
        }
        let (qpn, cap) = self.host.with_nic(|n| -> Result<(u32, QpCap)> {
            let (qpn, mut cap) =
                n.create_qp(self.id, init.qp_type, send_cq, recv_cq, asked, init.sq_sig_all)?;
            if srq.is_some() {
                (cap.max_recv_wr, cap.max_recv_sge) = (0, 0);
            }
            if let Some(id) = srq {
                if let Err(e) = n.attach_srq(qpn, id) {
                    let _ = n.destroy_qp(qpn);
                    return Err(e);
                }
            }
            Ok((qpn, cap))
        })?;
        Ok(Arc::new(EngineQp {
            host: self.host.clone(),
            qpn,
            qp_type: init.qp_type,
            cap,
            _cqs: (init.send_cq.clone(), init.recv_cq.clone()),
            owned: Owned::default(),
        }))
    }
    fn create_srq(&self, init: &SrqInitAttr) -> Result<Arc<dyn SrqOps>> {
        let id = self
            .host
            .with_nic(|n| n.create_srq(self.id, init.max_wr, init.max_sge, init.srq_limit))?;
        Ok(Arc::new(EngineSrq { host: self.host.clone(), id, owned: Owned::default() }))
    }
    fn create_ah(&self, attr: &AhAttr) -> Result<Arc<dyn AhOps>> {
        self.host.with_nic(|n| check_ah(n.config().ip(), n.config().netdev.as_deref(), attr))?;
        Ok(Arc::new(EngineAh { attr: *attr, _pd: self.ahs.clone() }))
    }
    fn alloc_mw(&self, ty: MwType) -> Result<Arc<dyn MwOps>> {
        let rkey = self.host.with_nic(|n| n.alloc_mw(self.id, ty))?;
        let rkey = AtomicU32::new(rkey);
        Ok(Arc::new(EngineMw { host: self.host.clone(), rkey, ty, owned: Owned::default() }))
    }
    fn dealloc(&self) -> Result<()> {
        self.owned.destroy(&*self.host, "ibv_dealloc_pd", "PD", || {
            let ahs = Arc::strong_count(&self.ahs) - 1;
            if ahs > 0 {
                return Err(Error::busy(format!(
                    "ibv_dealloc_pd: PD {} still has {ahs} address handle(s)",
                    self.id
                )));
            }
            self.host.with_nic(|n| n.dealloc_pd(self.id))
        })
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl<H: Host> Drop for EnginePd<H> {
    fn drop(&mut self) {
        self.owned.drop_with(&*self.host, || {
            let _ = self.host.with_nic(|n| n.dealloc_pd(self.id));
        });
    }
}

/// A memory region (`struct ibv_mr`): lkey = rkey, its iova, and memory the handle keeps alive.
pub struct EngineMr<H: Host> {
    host: Arc<H>,
    key: u32,
    iova: u64,
    memory: Arc<MrMemory>,
    access: AccessFlags,
    owned: Owned,
}

impl<H: Host> MrOps for EngineMr<H> {
    fn lkey(&self) -> u32 {
        self.key
    }
    fn rkey(&self) -> u32 {
        self.key
    }
    fn addr(&self) -> u64 {
        self.iova
    }
    fn len(&self) -> usize {
        self.memory.len()
    }
    fn access(&self) -> AccessFlags {
        self.access
    }
    fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.memory.read(offset, buf)?;
        cost::copied(CopyAt::Program, buf.len());
        Ok(())
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.memory.write(offset, data)?;
        cost::copied(CopyAt::Program, data.len());
        Ok(())
    }
    fn dereg(&self) -> Result<()> {
        self.owned.destroy(&*self.host, "ibv_dereg_mr", "MR", || {
            self.host.with_nic(|n| n.check_no_windows(self.key))?;
            self.host.mr_withdrawn(self.key);
            self.host.with_nic(|n| n.dereg_mr(self.key))
        })
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl<H: Host> Drop for EngineMr<H> {
    fn drop(&mut self) {
        self.owned.drop_with(&*self.host, || {
            self.host.mr_withdrawn(self.key);
            let _ = self.host.with_nic(|n| n.dereg_mr(self.key));
        });
    }
}

/// A memory window (`struct ibv_mw`): its rkey, which a bind changes, and its type.
pub struct EngineMw<H: Host> {
    host: Arc<H>,
    rkey: AtomicU32,
    ty: MwType,
    owned: Owned,
}

impl<H: Host> MwOps for EngineMw<H> {
    fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Acquire)
    }
    fn set_rkey(&self, rkey: u32) {
        self.rkey.store(rkey, Ordering::Release);
    }
    fn mw_type(&self) -> MwType {
        self.ty
    }
    fn dealloc(&self) -> Result<()> {
        self.owned.destroy(&*self.host, "ibv_dealloc_mw", "MW", || {
            self.host.with_nic(|n| n.dealloc_mw(self.rkey()))
        })
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl<H: Host> Drop for EngineMw<H> {
    fn drop(&mut self) {
        self.owned.drop_with(&*self.host, || {
            let _ = self.host.with_nic(|n| n.dealloc_mw(self.rkey()));
        });
    }
}

// ---------------- CQ ----------------

/// A completion queue (`struct ibv_cq`).
pub struct EngineCq<H: Host> {
    host: Arc<H>,
    id: u32,
    cqe: AtomicU32,
    owned: Owned,
}

impl<H: Host> CqOps for EngineCq<H> {
    fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        self.host.poll_cq(self.id, wc)
    }
    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.host.cq_armed(self.id);
        self.host.with_nic(|n| n.req_notify_cq(self.id, solicited_only))
    }
    fn cqe(&self) -> u32 {
        self.cqe.load(Ordering::Relaxed)
    }
    fn resize(&self, cqe: u32) -> Result<()> {
        self.host.with_nic(|n| n.resize_cq(self.id, cqe))?;
        self.cqe.store(cqe, Ordering::Relaxed);
        Ok(())
    }
    fn destroy(&self) -> Result<()> {
        self.owned.destroy(&*self.host, "ibv_destroy_cq", "CQ", || {
            self.host.with_nic(|n| n.destroy_cq(self.id))?;
            self.host.unbind_cq(self.id);
            Ok(())
        })
    }
    fn id(&self) -> u64 {
        self.host.handle_id(self.id)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl<H: Host> Drop for EngineCq<H> {
    fn drop(&mut self) {
        self.owned.drop_with(&*self.host, || {
            let _ = self.host.with_nic(|n| n.destroy_cq(self.id));
            self.host.unbind_cq(self.id);
        });
    }
}

// ---------------- QP ----------------

/// A queue pair (`struct ibv_qp`); it keeps its CQs alive.
pub struct EngineQp<H: Host> {
    host: Arc<H>,
    qpn: u32,
    qp_type: QpType,
    cap: QpCap,
    _cqs: (CompletionQueue, CompletionQueue),
    owned: Owned,
}

impl<H: Host> QpOps for EngineQp<H> {
    fn qp_num(&self) -> u32 {
        self.qpn
    }
    fn qp_type(&self) -> QpType {
        self.qp_type
    }
    fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        self.host.with_nic_now(|n, now| n.post_send_at(now, self.qpn, wrs))
    }
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        self.host.with_nic(|n| n.post_recv(self.qpn, wrs))
    }
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.host.with_nic_now(|n, now| n.modify_qp(now.get(), self.qpn, attr, mask))
    }
    fn query(&self) -> Result<(QpAttr, QpCap)> {
        let (a, _) = self.host.with_nic(|n| n.query_qp(self.qpn))?;
        Ok((a, self.cap))
    }
    fn destroy(&self) -> Result<()> {
        self.owned.destroy(&*self.host, "ibv_destroy_qp", "QP", || {
            self.leave_groups();
            self.host.with_nic(|n| n.destroy_qp(self.qpn))
        })
    }
    fn attach_mcast(&self, gid: &Gid, _lid: u16) -> Result<()> {
        let change = self.host.with_nic(|n| n.attach_mcast(self.qpn, *gid))?;
        self.host.mcast_membership(gid, change);
        Ok(())
    }
    fn detach_mcast(&self, gid: &Gid, _lid: u16) -> Result<()> {
        let change = self.host.with_nic(|n| n.detach_mcast(self.qpn, *gid))?;
        self.host.mcast_membership(gid, change);
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl<H: Host> EngineQp<H> {
    /// Detaches the QP from every multicast group before it goes (the kernel detaches a
    /// destroyed QP's groups; softverbs does not refuse the destroy with `EBUSY`).
    fn leave_groups(&self) {
        for gid in self.host.with_nic(|n| n.mcast_groups_of(self.qpn)) {
            let _ = self.detach_mcast(&gid, 0);
        }
    }
}

impl<H: Host> Drop for EngineQp<H> {
    fn drop(&mut self) {
        self.owned.drop_with(&*self.host, || {
            self.leave_groups();
            let _ = self.host.with_nic(|n| n.destroy_qp(self.qpn));
        });
    }
}

// ---------------- SRQ and address handles ----------------

/// A shared receive queue (`struct ibv_srq`).
pub struct EngineSrq<H: Host> {
    host: Arc<H>,
    id: u32,
    owned: Owned,
}

impl<H: Host> SrqOps for EngineSrq<H> {
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        self.host.with_nic(|n| n.post_srq_recv(self.id, wrs))
    }
    fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        let max_wr = mask.contains(SrqAttrMask::MAX_WR).then_some(attr.max_wr);
        let limit = mask.contains(SrqAttrMask::LIMIT).then_some(attr.srq_limit);
        self.host.with_nic(|n| n.modify_srq(self.id, max_wr, limit))
    }
    fn query(&self) -> Result<SrqAttr> {
        let (max_wr, max_sge, srq_limit) = self.host.with_nic(|n| n.query_srq(self.id))?;
        Ok(SrqAttr { max_wr, max_sge, srq_limit })
    }
    fn destroy(&self) -> Result<()> {
        self.owned.destroy(&*self.host, "ibv_destroy_srq", "SRQ", || {
            self.host.with_nic(|n| n.destroy_srq(self.id))
        })
    }
    fn id(&self) -> u64 {
        self.host.handle_id(self.id)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl<H: Host> Drop for EngineSrq<H> {
    fn drop(&mut self) {
        self.owned.drop_with(&*self.host, || {
            let _ = self.host.with_nic(|n| n.destroy_srq(self.id));
        });
    }
}

/// An address handle (`struct ibv_ah`): the checked attributes a UD send is addressed with.
/// It keeps its PD busy (`ibv_dealloc_pd` is `EBUSY`) until it is dropped (`ibv_destroy_ah`).
pub struct EngineAh {
    attr: AhAttr,
    _pd: Arc<()>,
}

impl AhOps for EngineAh {
    fn attr(&self) -> AhAttr {
        self.attr
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
