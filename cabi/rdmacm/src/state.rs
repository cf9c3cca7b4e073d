//! What the exported calls share: the soft devices of this process with their IP addresses,
//! the ids by token, the CM's control messages and where they are sent (a Unix datagram socket
//! per event channel in `$SOFTVERBS_FABRIC/cm/`, and a symlink per listening address naming
//! the channel and id that listen there: docs/decisions.md, "The CM's rendezvous").
use std::collections::HashMap;
use std::ffi::c_int;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::cm_abi::rdma_event_channel;
pub use crate::cm_state::CmState;
use softverbs_cabi_abi::{ibv_context, ibv_device, ibv_gid, ibv_port_attr};

unsafe extern "C" {
    fn ibv_get_device_list(n: *mut c_int) -> *mut *mut ibv_device;
    fn ibv_open_device(d: *mut ibv_device) -> *mut ibv_context;
    fn ibv_query_gid(c: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid) -> c_int;
    fn ibv_query_port(c: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int;
}

/// The path MTU a REQ offers (`enum ibv_mtu`, 1 = 256 … 5 = 4096): on a network interface
/// (`SOFTVERBS_NETDEV`) port 1's `active_mtu` of device `ctx`, as the kernel's CM takes it
/// from its path record (on RoCE, from the netdev's MTU, as the port's); on the shared-memory
/// fabric, and when it cannot be read, 3 (1024), as before.
pub fn port_mtu(ctx: *mut ibv_context) -> u8 {
    let mut a = ibv_port_attr::default();
    // SAFETY: an open context or NULL (refused), and our attribute struct.
    let netdev = std::env::var_os("SOFTVERBS_NETDEV").is_some_and(|v| !v.is_empty());
    let ok = netdev && !ctx.is_null() && unsafe { ibv_query_port(ctx, 1, &mut a) } == 0;
    match u8::try_from(a.active_mtu) {
        Ok(m @ 1..=5) if ok => m,
        _ => 3,
    }
}

/// The path MTU (`enum ibv_mtu`) the CM gives an id's QP at RTR: the REQ's (the active side's
/// port MTU), 1024 when none was set.
pub fn path_mtu(st: &St) -> c_int {
    c_int::from(if st.path_mtu == 0 { 3 } else { st.path_mtu })
}

/// A soft device opened for the CM, with its port's IPv4 address (GID index 1).
#[derive(Clone, Copy)]
pub struct Dev {
    pub ip: [u8; 4],
    pub ctx: *mut ibv_context,
}
// SAFETY: an ibv_context of softverbs' libibverbs is usable from any thread.
unsafe impl Send for Dev {}
// SAFETY: as above.
unsafe impl Sync for Dev {}

/// The soft devices, opened once per process (as librdmacm opens each device once and shares
/// the context among its ids).
pub fn devices() -> &'static [Dev] {
    static DEVS: OnceLock<Vec<Dev>> = OnceLock::new();
    DEVS.get_or_init(|| {
        let mut n = 0;
        // SAFETY: our libibverbs' list, kept for the process.
        let list = unsafe { ibv_get_device_list(&mut n) };
        let mut out = Vec::new();
        for i in 0..n.max(0) as usize {
            // SAFETY: list has n entries.
            let ctx = unsafe { ibv_open_device(*list.add(i)) };
            if ctx.is_null() {
                continue;
            }
            let mut g = ibv_gid::default();
            // SAFETY: ctx is open; g is ours.
            if unsafe { ibv_query_gid(ctx, 1, 1, &mut g) } == 0 && g.raw[10..12] == [0xff, 0xff] {
                out.push(Dev { ip: [g.raw[12], g.raw[13], g.raw[14], g.raw[15]], ctx });
            }
        }
        out
    })
}

/// The device whose port has address `ip`.
pub fn dev_of_ip(ip: [u8; 4]) -> Option<Dev> {
    devices().iter().copied().find(|d| d.ip == ip)
}

/// Whether `ip` is a loopback address (`127.x.y.z`): it reaches whichever process listens on the
/// port, as with rxe on `lo`, since each process's soft ports get their addresses when it opens
/// them (docs/c.md, "Connection manager").
pub fn is_loopback(ip: [u8; 4]) -> bool {
    ip[0] == 127
}

/// The process that made channel socket `path` (`ch-PID-N`).
pub fn channel_pid(path: &Path) -> Option<i32> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    name.strip_prefix("ch-")?.split('-').next()?.parse().ok()
}

/// Whether the process that made channel socket `path` (`ch-PID-N`) is alive.
pub fn channel_alive(path: &Path) -> bool {
    let pid = channel_pid(path);
    // SAFETY: signal 0 only checks that the process exists.
    pid.is_some_and(|p| unsafe { libc::kill(p, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
        && path.exists()
}

/// What a listening name says, read once.
pub enum Named {
    /// A live listener: its channel socket and id token.
    Listener(PathBuf, u64),
    /// A closed listener's name whose process is alive (it may listen again).
    Closed,
    /// Nothing (no name, or its process is gone).
    Nothing,
}

/// What the listening name `name` says now, from one read of it: a REQ's fate must not come
/// from two reads (a listener closed at the first and live again at the second would look
/// like no listener at all; that race rejected perftest -R's second connection).
pub fn named(name: &Path) -> Named {
    let Ok(t) = std::fs::read_link(name) else { return Named::Nothing };
    let t = t.to_string_lossy().into_owned();
    let Some((p, tok)) = t.rsplit_once('#') else { return Named::Nothing };
    let p = PathBuf::from(p);
    match tok.parse::<u64>() {
        // Token 0: the name of a listener that was destroyed (`close_listener`).
        Ok(0) if channel_alive(&p) => Named::Closed,
        Ok(tok) if tok != 0 && channel_alive(&p) => Named::Listener(p, tok),
        _ => Named::Nothing,
    }
}

/// The live listener registered as `name`: its channel socket and id token.
pub fn listener_at(name: &Path) -> Option<(PathBuf, u64)> {
    match named(name) {
        Named::Listener(p, tok) => Some((p, tok)),
        _ => None,
    }
}

/// Release the listening name `name` of a listener on channel socket `chan`: it stays as a
/// closed listener's name (token 0) until this process next waits for CM events
/// ([`release_closed_listeners`]), destroys the channel or ends, so that a REQ which comes
/// while the process is between two listens on the port (perftest `-R`) waits for what the
/// process does next instead of being rejected (docs/decisions.md, "The CM's clock").
pub fn close_listener(name: &Path, chan: &Path) {
    if replace_link(&format!("{}#0", chan.display()), name).is_err() {
        let _ = std::fs::remove_file(name);
        return;
    }
    closed_names().lock().expect("closed names").push(name.to_path_buf());
}

/// The listening names this process closed and has not released yet.
fn closed_names() -> &'static Mutex<Vec<PathBuf>> {
    static CLOSED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    &CLOSED
}

/// This process waits for CM events (`rdma_get_cm_event`) without listening again on the ports
/// whose listeners it closed: those names go, and a REQ held for one of them is REJECTED
/// (status 8, no listener), as the kernel's CM answers a REQ for a port nobody listens on.
/// A name another process has taken since (a live listener, or its own closed name) is left.
pub fn release_closed_listeners() {
    let names = std::mem::take(&mut *closed_names().lock().expect("closed names"));
    let mine = format!("{}/ch-{}-", cm_dir().display(), std::process::id());
    for name in names {
        let ours = |p: &Path| {
            std::fs::read_link(p).is_ok_and(|t| {
                let t = t.to_string_lossy();
                t.starts_with(&mine) && t.ends_with("#0")
            })
        };
        if !ours(&name) {
            continue;
        }
        // Moved aside in one step, then looked at: what another process put there between the
        // look and the move goes back.
        let aside = cm_dir().join(format!(".gone-{}-{}", std::process::id(), token()));
        if std::fs::rename(&name, &aside).is_ok() {
            if ours(&aside) {
                let _ = std::fs::remove_file(&aside);
            } else {
                let _ = std::fs::rename(&aside, &name);
            }
        }
    }
}

/// Point the name `name` at `target` in one step (a new link renamed over the old one), so
/// that a process looking the name up never finds it missing: a connect in that moment would
/// be rejected.
pub fn replace_link(target: &str, name: &Path) -> std::io::Result<()> {
    let tmp = cm_dir().join(format!(".link-{}-{}", std::process::id(), token()));
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, name).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Whether `ip` is a softverbs port address (`10.0.x.y`, x.y a fabric slot).
pub fn is_fabric_ip(ip: [u8; 4]) -> bool {
    ip[0] == 10 && ip[1] == 0 && (ip[2] != 0 || ip[3] != 0)
}

/// The directory of the CM's sockets and listening names.
pub fn cm_dir() -> PathBuf {
    let base = std::env::var_os("SOFTVERBS_FABRIC").map(PathBuf::from).unwrap_or_else(|| {
        std::env::temp_dir().join(format!("softverbs-{}", unsafe { libc::getuid() }))
    });
    let d = base.join("cm");
    let _ = std::fs::create_dir_all(&d);
    d
}

/// The name under which `ip:port` listens: `a.b.c.d:port`, with `.ib` after it in the port
/// space `RDMA_PS_IB` (`ib`), whose ports are not those of `RDMA_PS_TCP`, as the kernel keeps a
/// port table per port space.
pub fn listen_name(ip: [u8; 4], port: u16, ib: bool) -> PathBuf {
    let ps = if ib { ".ib" } else { "" };
    cm_dir().join(format!("{}.{}.{}.{}:{port}{ps}", ip[0], ip[1], ip[2], ip[3]))
}

/// Whether `id` is in the port space `RDMA_PS_IB`.
pub fn ps_ib(id: &Id) -> bool {
    id.c.ps == crate::cm_abi::RDMA_PS_IB
}

/// Whether `id` makes UD QPs and connects by SIDR (`RDMA_PS_UDP`, `RDMA_PS_IPOIB`, or an
/// `RDMA_PS_IB` id whose QP type is UD), as librdmacm and the kernel's CM decide by the id's
/// QP type (`ucma_is_ud_qp`).
pub fn is_ud(id: &Id) -> bool {
    id.c.qp_type == UD_QPT
}

/// `IBV_QPT_UD`.
pub const UD_QPT: c_int = 4;

/// An event channel: its C struct first, then the socket that is its `fd`.
#[repr(C)]
pub struct Channel {
    pub c: rdma_event_channel,
    pub sock: UnixDatagram,
    pub path: PathBuf,
}

impl Drop for Channel {
    fn drop(&mut self) {
        // The listening names that still name this channel (closed listeners', or listeners
        // the program did not destroy) go with it.
        let mine = format!("{}#", self.path.display());
        for e in std::fs::read_dir(cm_dir()).into_iter().flatten().flatten() {
            let target = std::fs::read_link(e.path()).ok();
            if target.is_some_and(|t| t.to_string_lossy().starts_with(&mine)) {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A fresh token (ids and channels).
pub fn token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Make a channel bound at a fresh name in the CM directory.
pub fn new_channel() -> std::io::Result<Box<Channel>> {
    let dir = cm_dir();
    // Sockets left by processes that exited without destroying their channels.
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let p = e.path();
            let ch = e.file_name().to_string_lossy().starts_with("ch-");
            if ch && !channel_alive(&p) {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
    let path = dir.join(format!("ch-{}-{}", std::process::id(), token()));
    let _ = std::fs::remove_file(&path);
    let sock = UnixDatagram::bind(&path)?;
    use std::os::fd::AsRawFd;
    let fd = sock.as_raw_fd();
    Ok(Box::new(Channel { c: rdma_event_channel { fd }, sock, path }))
}

/// A new channel ([`new_channel`]), non-blocking if asked, registered and handed to C; or
/// NULL with errno set and a line saying why (for `rdma_create_event_channel` and the
/// channels of synchronous ids).
pub fn channel_for_c(nonblocking: bool) -> *mut rdma_event_channel {
    let made = new_channel().and_then(|c| c.sock.set_nonblocking(nonblocking).map(|()| c));
    match made {
        Ok(c) => {
            let p = Box::into_raw(c);
            channels().lock().expect("channels").insert(p as usize);
            p.cast()
        }
        Err(e) => {
            eprintln!(
                "librdmacm (softverbs): cannot make an event channel in {}: {e}",
                cm_dir().display()
            );
            fail(e.raw_os_error().unwrap_or(libc::EIO));
            std::ptr::null_mut()
        }
    }
}

/// The kinds of control message.
pub mod kind {
    /// An event made by this process for one of its own ids (resolution, a refused connect).
    pub const LOCAL: u32 = 1;
    pub const REQ: u32 = 2;
    pub const REP: u32 = 3;
    pub const RTU: u32 = 4;
    pub const REJ: u32 = 5;
    pub const DREQ: u32 = 6;
    pub const DREP: u32 = 7;
    /// The peer's process died (sent by `watch`): read, it becomes what the dead process's
    /// kernel would have sent for the id's state then (DREQ once established, else a REJ).
    pub const GONE: u32 = 8;
    /// A multicast join of one of this process's ids (mcast.rs): MULTICAST_JOIN with the
    /// group in `dst_ip` and the join's context in `from`.
    pub const JOIN: u32 = 9;
}

/// A control message, sent as its bytes (both ends are this library).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Msg {
    pub kind: u32,
    pub event: i32,
    pub status: i32,
    pub qpn: u32,
    pub psn: u32,
    pub qkey: u32,
    pub to: u64,
    pub from: u64,
    pub src_ip: [u8; 4],
    pub dst_ip: [u8; 4],
    pub src_port: u16,
    pub dst_port: u16,
    pub pd_len: u32,
    pub rd_atomic: u8,
    pub rnr_retry: u8,
    /// 1 when the REQ comes from an IPv6 id (v6.rs), with its scope id.
    pub v6: u8,
    /// 1 when the REQ is for a port of the port space `RDMA_PS_IB` ([`listen_name`]).
    pub ps_ib: u8,
    /// The path MTU a REQ offers (`enum ibv_mtu`; 0: 1024).
    pub mtu: u8,
    pub scope: [u8; 4],
    /// The ECE (`ibv_ece`'s vendor_id, options) a REQ or REP carries, as the kernel's CM
    /// carries it in its messages (more.rs).
    pub ece: [u32; 2],
    /// A REQ from an IPv6 peer on another host (wire6.rs): its address and the one it was
    /// sent to (all zero otherwise).
    pub src6: [u8; 16],
    pub dst6: [u8; 16],
    pub reply: [u8; 108],
    pub pd: [u8; 256],
}

impl Msg {
    /// An empty message of `kind` to the id `to`.
    pub fn new(kind: u32, to: u64) -> Msg {
        // SAFETY: every field is plain data, all-zero valid.
        let mut m: Msg = unsafe { std::mem::zeroed() };
        m.kind = kind;
        m.to = to;
        m
    }
    /// Set the private data (at most 256 bytes; longer is cut as the caller checked).
    pub fn set_pd(&mut self, pd: &[u8]) {
        let n = pd.len().min(256);
        self.pd[..n].copy_from_slice(&pd[..n]);
        self.pd_len = n as u32;
    }
    /// Set where replies go.
    pub fn set_reply(&mut self, p: &Path) {
        let b = p.as_os_str().as_encoded_bytes();
        let n = b.len().min(107);
        self.reply[..n].copy_from_slice(&b[..n]);
    }
    /// Where replies go.
    pub fn reply_path(&self) -> PathBuf {
        let n = self.reply.iter().position(|&b| b == 0).unwrap_or(108);
        PathBuf::from(String::from_utf8_lossy(&self.reply[..n]).into_owned())
    }
    /// The message's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: Msg is repr(C) plain data.
        unsafe { std::slice::from_raw_parts((self as *const Msg).cast(), size_of::<Msg>()) }
    }
    /// A message from received bytes (None for a runt).
    pub fn from_bytes(b: &[u8]) -> Option<Msg> {
        (b.len() == size_of::<Msg>())
            // SAFETY: the length is right and every bit pattern is a valid Msg.
            .then(|| unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<Msg>()) })
    }
}

/// What sends a message to a peer on another host, if `to` is its socket (the CM across
/// hosts sets it when it starts: wire.rs).
static REMOTE: OnceLock<fn(&Path, &Msg) -> bool> = OnceLock::new();

/// Send the messages to a peer on another host with `f` (true: `to` was its socket, sent).
pub fn set_remote_sender(f: fn(&Path, &Msg) -> bool) {
    let _ = REMOTE.set(f);
}

/// Send `m` from channel `ch` to the socket at `to`, never blocking (a full queue keeps it in
/// this process's outbox, sent in order: outbox.rs); false if nobody is there.
pub fn send(ch: &Channel, to: &Path, m: &Msg) -> bool {
    // To a peer on another host: a MAD, sent now (wire.rs, once it runs).
    if REMOTE.get().is_some_and(|remote| remote(to, m)) {
        return true;
    }
    crate::outbox::send(&ch.sock, to, m.bytes())
}

/// Every live id by token, as the address of its box.
pub fn ids() -> &'static Mutex<HashMap<u64, usize>> {
    static IDS: OnceLock<Mutex<HashMap<u64, usize>>> = OnceLock::new();
    IDS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Every live event channel, as the address of its box.
pub fn channels() -> &'static Mutex<std::collections::HashSet<usize>> {
    static CHS: OnceLock<Mutex<std::collections::HashSet<usize>>> = OnceLock::new();
    CHS.get_or_init(|| Mutex::new(std::collections::HashSet::new()))
}

/// A free port number for an id that binds to port 0 (the ephemeral range, as the kernel picks).
pub fn ephemeral_port() -> u16 {
    let n = (std::process::id() as u64).wrapping_mul(7919).wrapping_add(token());
    32768 + (n % 28000) as u16
}

/// An id: its C struct first (a pointer to it is a pointer to the box), then what the CM keeps.
#[repr(C)]
pub struct Id {
    pub c: crate::cm_abi::rdma_cm_id,
    pub token: u64,
    pub st: Mutex<St>,
    /// Events of this id handed out and not yet acknowledged, and messages for it being
    /// handled: `rdma_destroy_id` waits until none is left before it frees the id, as
    /// librdmacm's waits for the id's events to be acknowledged (another thread may be reading
    /// `event->id` meanwhile).
    pub busy: std::sync::atomic::AtomicU32,
}

/// The CM state of an id.
#[derive(Default)]
pub struct St {
    /// Local address and port (port 0 until bound or resolved).
    pub src: ([u8; 4], u16),
    /// Remote address and port, once resolved or requested.
    pub dst: ([u8; 4], u16),
    /// The listening name this id holds (removed on destroy).
    pub listen: Option<PathBuf>,
    /// The peer's reply socket and id token, once a REQ or REP came.
    pub peer: Option<(PathBuf, u64)>,
    pub peer_qpn: u32,
    pub peer_psn: u32,
    pub my_psn: u32,
    /// The REQ's responder resources / initiator depth (for an accept without parameters).
    pub req_rd_atomic: u8,
    pub rnr_retry: u8,
    /// Where the id is in its life (resolved, connecting, established, disconnected).
    pub state: CmState,
    /// Nothing more to watch: the peer's process was found dead and a DREQ or REJ sent on its
    /// behalf (`watch`), or the connection attempt was rejected. Not a CM state: the watcher's
    /// own mark, so that it reports a dead peer once (the kernel's CM learns of one by
    /// timeouts, and has no such state).
    pub peer_gone: bool,
    /// The channel socket the REQ went to, until the REP comes (its process is watched).
    pub req_to: Option<PathBuf>,
    /// `rdma_set_local_ece`'s vendor_id and options (0, 0: none), sent in the REQ or REP.
    pub local_ece: [u32; 2],
    /// The ECE the peer's REQ or REP carried (`rdma_get_remote_ece`).
    pub remote_ece: [u32; 2],
    /// `rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)`'s local ACK timeout for the QP's RTS
    /// (None: the CM's own, 17).
    pub ack_timeout: Option<u8>,
    /// The connection's path MTU (`enum ibv_mtu`; 0: 1024, [`path_mtu`]).
    pub path_mtu: u8,
    /// This side sent its DREQ (`rdma_disconnect`): the IB CM's DREQ_SENT.
    pub dreq_sent: bool,
    /// The peer's DREQ came and is not answered yet (the IB CM's DREQ_RCVD): where the DREP
    /// goes (reply socket, peer token) once the program calls `rdma_disconnect` or
    /// `rdma_destroy_id`, as the kernel's CM sends it then (`rdma_disconnect`'s
    /// `ib_send_cm_drep`, `cm_destroy_id`), not when the DREQ comes.
    pub drep_to: Option<(PathBuf, u64)>,
    /// The id has its own name, a link to its channel's socket, given to its peer to reply to
    /// (home.rs): `rdma_migrate_id` re-points it.
    pub named: bool,
}

/// The local ACK timeout (`ibv_qp_attr.timeout`) the CM gives a connected QP at RTS: the one
/// set with `rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)`, else the kernel's CM's for a RoCE
/// path: its packet life time (16) + 1, 4.096 µs * 2^17 = 0.54 s a try. (14, 67 ms, let a
/// process starved of CPU on a loaded laptop fail its peer's RDMA READs with "retry exceeded".)
pub fn ack_timeout(st: &St) -> u8 {
    st.ack_timeout.unwrap_or(17)
}

/// The id behind a C pointer, if it is one of ours and alive.
pub fn id_ref<'a>(p: *mut crate::cm_abi::rdma_cm_id) -> Option<&'a Id> {
    if p.is_null() {
        return None;
    }
    let live = ids().lock().ok()?.values().any(|&a| a == p as usize);
    // SAFETY: p is a live Id box (registered until rdma_destroy_id).
    live.then(|| unsafe { &*(p as *const Id) })
}

/// The channel behind an id's `channel`.
pub fn channel_of(id: &Id) -> &Channel {
    // SAFETY: every id is made on a live channel (rdma_destroy_event_channel with ids left is
    // the caller's error, as in librdmacm); the C struct is the channel box's first field.
    unsafe { &*(id.c.channel as *const Channel) }
}

/// Queue a local event for `id` on its own channel.
pub fn post_local(id: &Id, event: i32, status: i32) {
    let ch = channel_of(id);
    let mut m = Msg::new(kind::LOCAL, id.token);
    m.event = event;
    m.status = status;
    send(ch, &ch.path, &m);
}

/// Set the thread's errno and return -1, librdmacm's failure convention.
pub fn fail(errno: c_int) -> c_int {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() = errno };
    -1
}

/// An IPv4 address and port from a `sockaddr` (IPv4, or IPv6 v4-mapped); None otherwise.
pub fn read_sockaddr(sa: *const libc::sockaddr) -> Option<([u8; 4], u16)> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller's sockaddr, read by its family.
    unsafe {
        match (*sa).sa_family as c_int {
            libc::AF_INET => {
                let s = &*(sa as *const libc::sockaddr_in);
                Some((s.sin_addr.s_addr.to_ne_bytes(), u16::from_be(s.sin_port)))
            }
            libc::AF_INET6 => {
                let s = &*(sa as *const libc::sockaddr_in6);
                let a = s.sin6_addr.s6_addr;
                let v4 = a[..10].iter().all(|&b| b == 0) && a[10..12] == [0xff, 0xff];
                let any = a.iter().all(|&b| b == 0);
                (v4 || any).then(|| ([a[12], a[13], a[14], a[15]], u16::from_be(s.sin6_port)))
            }
            _ => None,
        }
    }
}

/// Write an IPv4 `sockaddr_in` into a `sockaddr_storage`-sized field.
pub fn write_sockaddr(out: &mut [u8; 128], ip: [u8; 4], port: u16) {
    // SAFETY: all-zero is a valid sockaddr_in.
    let mut s: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    s.sin_family = libc::AF_INET as libc::sa_family_t;
    s.sin_port = port.to_be();
    s.sin_addr.s_addr = u32::from_ne_bytes(ip);
    out.fill(0);
    // SAFETY: sockaddr_in is 16 bytes of plain data.
    let b =
        unsafe { std::slice::from_raw_parts((&s as *const libc::sockaddr_in).cast::<u8>(), 16) };
    out[..16].copy_from_slice(b);
}

/// The IPv4-mapped GID of `ip`.
pub fn gid_of(ip: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    g
}

/// Print why a call failed (`librdmacm (softverbs): ...` on stderr) only when `SOFTVERBS_LOG` or
/// `RUST_LOG` is set: for failures that programs provoke on purpose (a bind to a host address
/// that is not a soft port's), where the kernel's librdmacm prints nothing.
pub fn log_reason(why: std::fmt::Arguments) {
    static ON: OnceLock<bool> = OnceLock::new();
    let on = *ON.get_or_init(|| {
        std::env::var_os("SOFTVERBS_LOG").is_some() || std::env::var_os("RUST_LOG").is_some()
    });
    if on {
        eprintln!("librdmacm (softverbs): {why}");
    }
}
