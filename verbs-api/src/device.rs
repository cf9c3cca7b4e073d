//! The handles a program holds: `Context`, `ProtectionDomain`, `MemoryRegion`, `CompletionQueue`,
//! `CompChannel`, `QueuePair`, `SharedReceiveQueue`, `AddressHandle`. Each is a cheap clone of a
//! reference to the backend object and mirrors one libibverbs struct; its methods mirror the calls.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Errno, Error, Result};
use crate::provider::*;
use crate::types::*;

/// A device on the list (`struct ibv_device`).
#[derive(Clone)]
pub struct Device {
    info: DeviceInfo,
    provider: Arc<dyn Provider>,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device").field("info", &self.info).finish()
    }
}

impl Device {
    /// `ibv_get_device_name`.
    pub fn name(&self) -> &str {
        &self.info.name
    }
    /// `ibv_get_device_guid`.
    pub fn guid(&self) -> u64 {
        self.info.node_guid
    }
    /// The backend that owns it (`soft`, `sim`, `hw`).
    pub fn provider(&self) -> &'static str {
        self.info.provider
    }
    /// `ibv_open_device`.
    pub fn open(&self) -> Result<Context> {
        Ok(Context { ops: self.provider.open(&self.info.name)? })
    }
}

/// The devices of every registered provider, and the errors of providers that could list none.
pub fn device_list_detailed() -> (Vec<Device>, Vec<(&'static str, Error)>) {
    let mut devices = Vec::new();
    let mut errors = Vec::new();
    for p in providers() {
        match p.devices() {
            Ok(list) => {
                devices.extend(list.into_iter().map(|info| Device { info, provider: p.clone() }))
            }
            Err(e) => errors.push((p.name(), e)),
        }
    }
    (devices, errors)
}

/// `ibv_get_device_list`: every device of every registered provider. Fails only if there are none,
/// with the providers' reasons ("no RDMA devices: ...").
pub fn device_list() -> Result<Vec<Device>> {
    let (devices, errors) = device_list_detailed();
    if devices.is_empty() {
        let why: Vec<String> = errors.iter().map(|(p, e)| format!("{p}: {e}")).collect();
        let why =
            if why.is_empty() { "no provider is registered".to_string() } else { why.join("; ") };
        return Err(Error::new(Errno::NoDev, format!("no RDMA devices: {why}")));
    }
    Ok(devices)
}

/// Find a device by name among the registered providers, without opening it
/// (`ibv_get_device_list` and a match on `ibv_get_device_name`). The name selects the backend
/// ([`backend_of`]): `softverbs0` is looked up in the `soft` provider, `sim:node0` in `sim`, any
/// other name in `hw`; a provider registered under another name is searched last.
///
/// `ENODEV` when there is no such device, with a message that names it and says why: the
/// devices its backend has, or the backend's own reason for having none (for `hw` on a machine
/// without RDMA: "no RDMA devices: " and libibverbs' reason), or that its backend is not
/// registered or not built.
pub fn find_device(name: &str) -> Result<Device> {
    let providers = providers();
    let backend = backend_of(name);
    if let Some(p) = providers.iter().find(|p| p.name() == backend) {
        let listed = p.devices().map_err(|e| {
            let others = other_devices(&providers, backend);
            Error::new(e.errno, format!("{} (looking for {name:?}{others})", e.message))
        })?;
        if let Some(info) = listed.iter().find(|d| d.name == name) {
            return Ok(Device { info: info.clone(), provider: p.clone() });
        }
        let known: Vec<&str> = listed.iter().map(|d| d.name.as_str()).collect();
        return Err(Error::new(
            Errno::NoDev,
            format!(
                "no {backend} device named {name:?} ({backend} devices: {}{})",
                known.join(", "),
                other_devices(&providers, backend)
            ),
        ));
    }
    // A provider of another name (a program's own backend) may have it.
    for p in &providers {
        if let Ok(listed) = p.devices() {
            if let Some(info) = listed.into_iter().find(|d| d.name == name) {
                return Ok(Device { info, provider: p.clone() });
            }
        }
    }
    let why = match backend {
        "soft" => {
            "the soft backend is not registered (register nic_model::soft::Soft with \
             verbs_api::register_provider)"
        }
        "sim" => {
            "the sim backend is not registered (register the provider of a SimWorld with \
             verbs_api::register_provider)"
        }
        _ if hw_provider().is_none() => {
            "this build has no hw backend for real RDMA devices \
             (build with --features verbs-api/rdma-sys)"
        }
        _ => {
            "the hw backend is not registered (register verbs_api::hw::provider() with \
             verbs_api::register_provider)"
        }
    };
    let others = other_devices(&providers, backend);
    Err(Error::new(Errno::NoDev, format!("no RDMA device named {name:?}: {why}{others}")))
}

/// "; other devices: a, b" listing the devices of the providers other than `backend`, or nothing.
fn other_devices(providers: &[Arc<dyn Provider>], backend: &str) -> String {
    let names: Vec<String> = providers
        .iter()
        .filter(|p| p.name() != backend)
        .filter_map(|p| p.devices().ok())
        .flatten()
        .map(|d| d.name)
        .collect();
    if names.is_empty() {
        String::new()
    } else {
        format!("; other devices: {}", names.join(", "))
    }
}

/// An open device (`struct ibv_context`).
#[derive(Clone)]
pub struct Context {
    ops: Arc<dyn ContextOps>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Context({})", self.ops.device_name())
    }
}

impl Context {
    /// Open a device by name on whichever backend the name selects (`ibv_get_device_list` +
    /// `ibv_open_device`): `softverbs0`, `sim:node0`, `mlx5_0`. This is the one way to open a
    /// device by name; the providers must be registered first ([`register_provider`]).
    /// `ENODEV` when there is no such device, explained as by [`find_device`].
    pub fn open(name: &str) -> Result<Context> {
        find_device(name)?.open()
    }
    /// Wrap a backend context.
    pub fn from_ops(ops: Arc<dyn ContextOps>) -> Context {
        Context { ops }
    }
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn ContextOps> {
        &self.ops
    }
    /// The device name.
    pub fn device_name(&self) -> String {
        self.ops.device_name()
    }
    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        self.ops.query_device()
    }
    /// `ibv_query_port`.
    pub fn query_port(&self, port_num: u8) -> Result<PortAttr> {
        self.ops.query_port(port_num)
    }
    /// `ibv_query_gid`.
    pub fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid> {
        self.ops.query_gid(port_num, index)
    }
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        Ok(ProtectionDomain { ops: self.ops.alloc_pd()? })
    }
    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        Ok(CompChannel { ops: self.ops.create_comp_channel()? })
    }
    /// `ibv_create_cq` with room for at least `cqe` completions.
    pub fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompChannel>,
        comp_vector: u32,
    ) -> Result<CompletionQueue> {
        Ok(CompletionQueue { ops: self.ops.create_cq(cqe, channel, comp_vector)? })
    }
    /// `ibv_get_async_event` with a bound; `ETIMEDOUT` if none arrived. (Events need no ack in softverbs'
    /// safe API: `ibv_ack_async_event` is implied when the returned value is dropped.)
    pub fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent> {
        self.ops.get_async_event(timeout)
    }
}

/// A protection domain (`struct ibv_pd`).
#[derive(Clone)]
pub struct ProtectionDomain {
    ops: Arc<dyn PdOps>,
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProtectionDomain")
    }
}

impl ProtectionDomain {
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn PdOps> {
        &self.ops
    }
    /// `ibv_reg_mr` over `len` zeroed bytes that the MR owns for its whole life.
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        Ok(MemoryRegion { ops: self.ops.reg_mr(len, access)? })
    }
    /// `ibv_reg_mr` over caller memory, for FFI.
    ///
    /// # Safety
    /// See [`PdOps::reg_mr_raw`]: the memory must outlive the MR and every WR using it.
    pub unsafe fn reg_mr_raw(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        // SAFETY: the caller upholds the contract documented above.
        Ok(MemoryRegion { ops: unsafe { self.ops.reg_mr_raw(addr, len, access)? } })
    }
    /// `ibv_create_qp`.
    pub fn create_qp(&self, init: &QpInitAttr) -> Result<QueuePair> {
        Ok(QueuePair { ops: self.ops.create_qp(init)? })
    }
    /// `ibv_create_srq`.
    pub fn create_srq(&self, init: &SrqInitAttr) -> Result<SharedReceiveQueue> {
        Ok(SharedReceiveQueue { ops: self.ops.create_srq(init)? })
    }
    /// `ibv_create_ah`.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<AddressHandle> {
        Ok(AddressHandle { ops: self.ops.create_ah(attr)? })
    }
    /// `ibv_dealloc_pd`: `EBUSY` while anything was created from it and is not destroyed.
    pub fn dealloc(self) -> Result<()> {
        self.ops.dealloc()
    }
}

/// A registered memory region (`struct ibv_mr`).
#[derive(Clone)]
pub struct MemoryRegion {
    ops: Arc<dyn MrOps>,
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MemoryRegion(addr={:#x}, len={}, lkey={:#x}, rkey={:#x})",
            self.addr(),
            self.len(),
            self.lkey(),
            self.rkey()
        )
    }
}

impl MemoryRegion {
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn MrOps> {
        &self.ops
    }
    /// `mr->lkey`.
    pub fn lkey(&self) -> u32 {
        self.ops.lkey()
    }
    /// `mr->rkey`.
    pub fn rkey(&self) -> u32 {
        self.ops.rkey()
    }
    /// `mr->addr`.
    pub fn addr(&self) -> u64 {
        self.ops.addr()
    }
    /// `mr->length`.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    /// Whether the MR is zero bytes long.
    pub fn is_empty(&self) -> bool {
        self.ops.len() == 0
    }
    /// The access flags.
    pub fn access(&self) -> AccessFlags {
        self.ops.access()
    }
    /// An SGE for `length` bytes at `offset` in this MR.
    pub fn sge(&self, offset: usize, length: u32) -> Sge {
        Sge { addr: self.addr() + offset as u64, length, lkey: self.lkey() }
    }
    /// Copy bytes out of the MR.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.ops.read(offset, buf)
    }
    /// Copy `len` bytes out of the MR into a new vector.
    pub fn read_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; len];
        self.ops.read(offset, &mut v)?;
        Ok(v)
    }
    /// Copy bytes into the MR.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.ops.write(offset, data)
    }
    /// Read a native-endian u64 at `offset` (what an atomic on this host sees).
    pub fn read_u64(&self, offset: usize) -> Result<u64> {
        let mut b = [0u8; 8];
        self.ops.read(offset, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }
    /// Write a native-endian u64 at `offset`.
    pub fn write_u64(&self, offset: usize, v: u64) -> Result<()> {
        self.ops.write(offset, &v.to_ne_bytes())
    }
    /// `ibv_dereg_mr`.
    pub fn dereg(self) -> Result<()> {
        self.ops.dereg()
    }
}

/// A completion queue (`struct ibv_cq`).
#[derive(Clone)]
pub struct CompletionQueue {
    ops: Arc<dyn CqOps>,
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CompletionQueue(cqe={})", self.cqe())
    }
}

impl PartialEq for CompletionQueue {
    fn eq(&self, other: &Self) -> bool {
        self.ops.id() == other.ops.id()
    }
}

impl CompletionQueue {
    /// Wrap a backend CQ.
    pub fn from_ops(ops: Arc<dyn CqOps>) -> CompletionQueue {
        CompletionQueue { ops }
    }
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn CqOps> {
        &self.ops
    }
    /// `ibv_poll_cq`: up to `wc.len()` completions, oldest first; returns how many were written.
    pub fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        self.ops.poll(wc)
    }
    /// `ibv_req_notify_cq`: arm the CQ for the next completion (or the next solicited one).
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.ops.req_notify(solicited_only)
    }
    /// `cq->cqe`: the capacity.
    pub fn cqe(&self) -> u32 {
        self.ops.cqe()
    }
    /// `ibv_resize_cq`.
    pub fn resize(&self, cqe: u32) -> Result<()> {
        self.ops.resize(cqe)
    }
    /// `ibv_destroy_cq`: `EBUSY` while a QP uses it.
    pub fn destroy(self) -> Result<()> {
        self.ops.destroy()
    }
    /// Poll until `n` completions have arrived or `timeout` passes (a bounded busy-poll helper;
    /// not a libibverbs call). Returns what arrived, oldest first; `ETIMEDOUT` names how many were missing.
    pub fn poll_n(&self, n: usize, timeout: Duration) -> Result<Vec<WorkCompletion>> {
        let deadline = std::time::Instant::now() + timeout;
        let mut out = Vec::with_capacity(n);
        let mut buf = [WorkCompletion::default(); 16];
        let mut spins = 0u32;
        while out.len() < n {
            let want = (n - out.len()).min(buf.len());
            let got = self.poll(&mut buf[..want])?;
            out.extend_from_slice(&buf[..got]);
            if got == 0 {
                if std::time::Instant::now() >= deadline {
                    return Err(Error::new(
                        Errno::TimedOut,
                        format!(
                            "poll_n: {} of {n} completions arrived within {timeout:?}: {out:?}",
                            out.len()
                        ),
                    ));
                }
                spins += 1;
                if spins > 64 {
                    std::thread::yield_now();
                }
            }
        }
        Ok(out)
    }
}

/// A completion channel (`struct ibv_comp_channel`).
#[derive(Clone)]
pub struct CompChannel {
    ops: Arc<dyn CompChannelOps>,
}

impl fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CompChannel")
    }
}

impl CompChannel {
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn CompChannelOps> {
        &self.ops
    }
    /// `ibv_get_cq_event`: block until an armed CQ gets a completion, or `timeout` (`ETIMEDOUT`).
    pub fn get_cq_event(&self, timeout: Option<Duration>) -> Result<CompletionQueue> {
        Ok(CompletionQueue { ops: self.ops.get_cq_event(timeout)? })
    }
    /// `ibv_ack_cq_events`.
    pub fn ack_cq_events(&self, cq: &CompletionQueue, nevents: u32) {
        self.ops.ack_cq_events(cq, nevents)
    }
}

/// Attributes to create a QP (`struct ibv_qp_init_attr`).
#[derive(Clone, Debug)]
pub struct QpInitAttr {
    /// `qp_type`.
    pub qp_type: QpType,
    /// `send_cq`.
    pub send_cq: CompletionQueue,
    /// `recv_cq`.
    pub recv_cq: CompletionQueue,
    /// `srq`: receives come from this SRQ instead of the QP's own receive queue.
    pub srq: Option<SharedReceiveQueue>,
    /// `cap`.
    pub cap: QpCap,
    /// `sq_sig_all`: every send WR generates a completion.
    pub sq_sig_all: bool,
}

/// A queue pair (`struct ibv_qp`).
#[derive(Clone)]
pub struct QueuePair {
    ops: Arc<dyn QpOps>,
}

impl fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QueuePair({:?} {:#x})", self.qp_type(), self.qp_num())
    }
}

impl QueuePair {
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn QpOps> {
        &self.ops
    }
    /// `qp->qp_num`.
    pub fn qp_num(&self) -> u32 {
        self.ops.qp_num()
    }
    /// `qp->qp_type`.
    pub fn qp_type(&self) -> QpType {
        self.ops.qp_type()
    }
    /// `ibv_post_send`.
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        self.ops.post_send(wrs)
    }
    /// `ibv_post_recv`.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        self.ops.post_recv(wrs)
    }
    /// `ibv_modify_qp`.
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.ops.modify(attr, mask)
    }
    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<(QpAttr, QpCap)> {
        self.ops.query()
    }
    /// The current state (`ibv_query_qp` with `IBV_QP_STATE`).
    pub fn state(&self) -> Result<QpState> {
        Ok(self.ops.query()?.0.qp_state)
    }
    /// `ibv_destroy_qp`.
    pub fn destroy(self) -> Result<()> {
        self.ops.destroy()
    }
}

/// A shared receive queue (`struct ibv_srq`).
#[derive(Clone)]
pub struct SharedReceiveQueue {
    ops: Arc<dyn SrqOps>,
}

impl fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SharedReceiveQueue")
    }
}

impl SharedReceiveQueue {
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn SrqOps> {
        &self.ops
    }
    /// `ibv_post_srq_recv`.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        self.ops.post_recv(wrs)
    }
    /// `ibv_modify_srq`.
    pub fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        self.ops.modify(attr, mask)
    }
    /// `ibv_query_srq`.
    pub fn query(&self) -> Result<SrqAttr> {
        self.ops.query()
    }
    /// The id async events name it by ([`AsyncElement::Srq`]).
    pub fn id(&self) -> u64 {
        self.ops.id()
    }
    /// `ibv_destroy_srq`.
    pub fn destroy(self) -> Result<()> {
        self.ops.destroy()
    }
}

/// An address handle (`struct ibv_ah`), for UD sends.
#[derive(Clone)]
pub struct AddressHandle {
    ops: Arc<dyn AhOps>,
}

impl fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AddressHandle({:?})", self.ops.attr())
    }
}

impl AddressHandle {
    /// Wrap a backend address handle.
    pub fn from_ops(ops: Arc<dyn AhOps>) -> AddressHandle {
        AddressHandle { ops }
    }
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn AhOps> {
        &self.ops
    }
    /// The address vector.
    pub fn attr(&self) -> AhAttr {
        self.ops.attr()
    }
}
