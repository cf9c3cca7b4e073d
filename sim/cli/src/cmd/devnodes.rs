//! The soft devices where programs look for an RDMA device, for `softverbs run`: a device node
//! `/dev/infiniband/uverbsN` per device and the sysfs files rdma-core, UCX, pyverbs and NCCL
//! read under `/sys/class/infiniband/<dev>` and `/sys/class/infiniband_verbs`, shown to the
//! program alone through a mount namespace of its own (a user namespace too when not root), so
//! that the host's `/dev` and `/sys` stay as they are for every other program
//! (docs/decisions.md, "Device nodes and sysfs in a namespace of the program's own").
//!
//! [`tree`] says what the entries are (pure, tested on its own); [`enter`] makes them visible.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nic_model::engine::{gid_entry, Nic, NicConfig};
use verbs_api::provider::Provider;
use verbs_api::{GidType, LinkLayer, PortState};

/// The network device every GID of a soft port names (`gid_attrs/ndevs/N`, and the one entry
/// of `device/net/`). Soft ports have no kernel network device; `lo` exists in every network
/// namespace, is up and running, and carries 127.0.0.1, which softverbs' librdmacm takes as
/// "any soft port" (docs/decisions.md, "Device nodes and sysfs in a namespace of the program's
/// own", says why not a dummy device with the port's address).
pub const NETDEV: &str = "lo";

/// One entry of the tree shown to the program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// A directory.
    Dir,
    /// A read-only file with this text, as sysfs shows an attribute.
    File(String),
    /// A symbolic link to this target.
    Link(String),
    /// A character device the program may open for reading and writing (`/dev/null` bound
    /// there: `stat` shows a character device, as UCX requires of `/dev/infiniband/uverbsN`).
    CharDev,
}

/// The entries for the soft devices `names` (index = the `N` of `uverbsN`, as softverbs'
/// libibverbs numbers them), parents before children.
pub fn tree(names: &[(String, u64)]) -> Vec<(PathBuf, Node)> {
    tree_on(names, None)
}

/// The network interface the soft devices are RoCE v2 devices on (`--netdev`) and the GID
/// table a port of it has, for sysfs: `gids/N`, `gid_attrs/types/N` and `gid_attrs/ndevs/N`
/// for each entry, the interface as every GID's device, the port's `parent` and `device/net`.
pub struct NetdevGids {
    /// The interface's name.
    pub name: String,
    /// The GID table of a port on it (index by index).
    pub gids: Vec<verbs_api::Gid>,
}

impl NetdevGids {
    /// What a port of `SOFTVERBS_NETDEV` (when set) lists: the table of a port of the
    /// interface's first IPv4 address, which holds its IPv6 addresses too (docs/decisions.md,
    /// "IPv6 between hosts on the UDP wire"). None when it is unset or names no interface
    /// with an IPv4 address (the program's open then says why).
    pub fn from_env() -> Option<NetdevGids> {
        let name = std::env::var("SOFTVERBS_NETDEV").ok().filter(|v| !v.is_empty())?;
        let iface = nic_model::soft::netdev::lookup(&name).ok()?;
        let first = *iface.ipv4.first()?;
        let gids = nic_model::soft::netdev::gid_table(&iface, first, &iface.ipv6);
        Some(NetdevGids { name, gids })
    }
}

/// [`tree`] for devices on network interface `netdev` (`softverbs run --netdev`), whose GIDs
/// sysfs then lists as the kernel lists an rxe device's; None: ports of the fabric, whose
/// GIDs are each opening process's own, so that only their types and device (`lo`) are there.
pub fn tree_on(names: &[(String, u64)], netdev: Option<&NetdevGids>) -> Vec<(PathBuf, Node)> {
    let ndev = netdev.map_or(NETDEV, |n| n.name.as_str());
    let mut t: Vec<(PathBuf, Node)> = Vec::new();
    let mut add = |p: String, n: Node| t.push((PathBuf::from(p), n));
    add("/dev/infiniband".into(), Node::Dir);
    for i in 0..names.len() {
        add(format!("/dev/infiniband/uverbs{i}"), Node::CharDev);
    }
    // softverbs' librdmacm is the CM; the node says so to programs that look for it.
    add("/dev/infiniband/rdma_cm".into(), Node::CharDev);
    let verbs = "/sys/class/infiniband_verbs";
    add(verbs.into(), Node::Dir);
    // The uverbs ABI of the kernels rdma-core 44 serves (IB_USER_VERBS_ABI_VERSION).
    add(format!("{verbs}/abi_version"), Node::File("6\n".into()));
    for (i, (name, _)) in names.iter().enumerate() {
        add(format!("{verbs}/uverbs{i}"), Node::Dir);
        add(format!("{verbs}/uverbs{i}/ibdev"), Node::File(format!("{name}\n")));
        add(format!("{verbs}/uverbs{i}/abi_version"), Node::File("1\n".into()));
    }
    let ib = "/sys/class/infiniband";
    add(ib.into(), Node::Dir);
    for (name, guid) in names {
        let d = format!("{ib}/{name}");
        let port = Nic::new(NicConfig::new(name.clone(), 1)).port_attr();
        add(d.clone(), Node::Dir);
        add(format!("{d}/node_type"), Node::File("1: CA\n".into()));
        add(format!("{d}/node_guid"), Node::File(format!("{}\n", guid_text(*guid))));
        add(format!("{d}/sys_image_guid"), Node::File(format!("{}\n", guid_text(*guid))));
        add(format!("{d}/node_desc"), Node::File(format!("softverbs {name}\n")));
        add(format!("{d}/parent"), Node::File(format!("{ndev}\n")));
        add(format!("{d}/device"), Node::Dir);
        add(format!("{d}/device/numa_node"), Node::File("-1\n".into()));
        add(format!("{d}/device/net"), Node::Dir);
        add(format!("{d}/device/net/{ndev}"), Node::Link(format!("/sys/class/net/{ndev}")));
        add(format!("{d}/ports"), Node::Dir);
        let p = format!("{d}/ports/1");
        add(p.clone(), Node::Dir);
        let state = match port.state {
            PortState::Nop => "0: NOP",
            PortState::Down => "1: DOWN",
            PortState::Init => "2: INIT",
            PortState::Armed => "3: ARMED",
            PortState::Active => "4: ACTIVE",
        };
        add(format!("{p}/state"), Node::File(format!("{state}\n")));
        let phys = match port.phys_state {
            5 => "5: LinkUp".to_string(),
            3 => "3: Disabled".to_string(),
            n => format!("{n}: <unknown>"),
        };
        add(format!("{p}/phys_state"), Node::File(format!("{phys}\n")));
        add(
            format!("{p}/rate"),
            Node::File(format!("{}\n", rate_text(port.active_width, port.active_speed))),
        );
        add(format!("{p}/lid"), Node::File(format!("0x{:x}\n", port.lid)));
        add(format!("{p}/sm_lid"), Node::File(format!("0x{:x}\n", port.sm_lid)));
        add(format!("{p}/lid_mask_count"), Node::File(format!("{}\n", port.lmc)));
        add(format!("{p}/sm_sl"), Node::File("0\n".into()));
        add(format!("{p}/cap_mask"), Node::File(format!("0x{:08x}\n", port.port_cap_flags)));
        let layer = match port.link_layer {
            LinkLayer::Ethernet => "Ethernet",
            _ => "InfiniBand",
        };
        add(format!("{p}/link_layer"), Node::File(format!("{layer}\n")));
        add(format!("{p}/pkeys"), Node::Dir);
        add(format!("{p}/pkeys/0"), Node::File("0xffff\n".into()));
        add(format!("{p}/gid_attrs"), Node::Dir);
        add(format!("{p}/gid_attrs/types"), Node::Dir);
        add(format!("{p}/gid_attrs/ndevs"), Node::Dir);
        if let Some(n) = netdev {
            // A port on an interface: its table, as sysfs shows rxe's (`gids/N` in full).
            add(format!("{p}/gids"), Node::Dir);
            for (index, gid) in n.gids.iter().enumerate() {
                add(format!("{p}/gids/{index}"), Node::File(format!("{gid}\n")));
                add(format!("{p}/gid_attrs/types/{index}"), Node::File("RoCE v2\n".into()));
                add(format!("{p}/gid_attrs/ndevs/{index}"), Node::File(format!("{ndev}\n")));
            }
            continue;
        }
        // The GIDs themselves are the opening process's port address (each open takes its
        // own slot on the fabric), so there is no `gids/` here: ibv_query_gid answers them.
        // Their types and network device are the same for every port.
        for index in 0..port.gid_tbl_len {
            let Some((_, ty)) = gid_entry([10, 0, 0, 1], index) else { break };
            let ty = match ty {
                GidType::RoceV2 => "RoCE v2",
                _ => "IB/RoCE v1",
            };
            add(format!("{p}/gid_attrs/types/{index}"), Node::File(format!("{ty}\n")));
            add(format!("{p}/gid_attrs/ndevs/{index}"), Node::File(format!("{NETDEV}\n")));
        }
    }
    t
}

/// A GUID as sysfs writes it: four groups of four hex digits.
fn guid_text(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        g >> 48,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

/// A port's `rate` as the kernel writes it (`rate_show`): lanes × lane speed, and the width
/// and speed names.
fn rate_text(width: u8, speed: u8) -> String {
    let lanes = match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 0,
    };
    let (tenths, name) = match speed {
        1 => (25, " SDR"),
        2 => (50, " DDR"),
        4 => (100, " QDR"),
        8 => (100, " FDR10"),
        16 => (140, " FDR"),
        32 => (250, " EDR"),
        64 => (500, " HDR"),
        128 => (1000, " NDR"),
        _ => (25, ""),
    };
    let r = lanes * tenths;
    let frac = if r % 10 == 0 { String::new() } else { format!(".{}", r % 10) };
    format!("{}{frac} Gb/sec ({lanes}X{name})", r / 10)
}

/// The soft devices of this environment (`SOFTVERBS_DEVICES`), with their node GUIDs, as
/// softverbs' libibverbs lists them; listing opens nothing and starts no thread.
pub fn soft_devices() -> Result<Vec<(String, u64)>, String> {
    let soft = nic_model::soft::Soft::loopback();
    let list = soft.devices().map_err(|e| e.to_string())?;
    Ok(list.into_iter().map(|d| (d.name, d.node_guid)).collect())
}

/// Whether the tree is already there (a `softverbs run` inside another, or a host that shows
/// them): then [`enter`] has nothing to do.
pub fn present(tree: &[(PathBuf, Node)]) -> bool {
    tree.iter().all(|(p, _)| std::fs::symlink_metadata(p).is_ok())
}

/// Show `tree` to this process and what it executes: a mount namespace of its own (and, unless
/// root, a user namespace mapping the caller's uid and gid to themselves), the host's mounts
/// kept from seeing it (slave propagation), and a tmpfs over each directory the tree adds to,
/// holding the directory's entries bound back beside the new ones. Entries that exist are left
/// as they are. Must be called while the process has one thread (`unshare` refuses a user
/// namespace to a threaded process). An error says which step failed and whether the process
/// still sees the host's `/dev` and `/sys` as before ([`EnterError`]).
pub fn enter(tree: &[(PathBuf, Node)]) -> Result<(), EnterError> {
    // SAFETY: plain system calls with no pointers.
    let (uid, gid, euid) = unsafe { (libc::getuid(), libc::getgid(), libc::geteuid()) };
    // Root makes a mount namespace alone and keeps its privileges in it; a user also needs a
    // user namespace, and so does root where it lacks CAP_SYS_ADMIN (a container).
    // SAFETY: unshare takes no pointers; on failure nothing changed.
    let alone = euid == 0 && unsafe { libc::unshare(libc::CLONE_NEWNS) } == 0;
    if !alone {
        // SAFETY: as above.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
            let e = io::Error::last_os_error();
            let why = match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::ENOSPC) | Some(libc::EUSERS) => {
                    " (user namespaces are disabled or exhausted here: see \
                     /proc/sys/kernel/unprivileged_userns_clone and \
                     /proc/sys/user/max_user_namespaces)"
                }
                Some(libc::EINVAL) => " (the process has more than one thread)",
                _ => "",
            };
            return Err(EnterError::Unavailable(format!("unshare: {e}{why}")));
        }
        // Past this point there is no way back to the parent namespace: a failure is fatal
        // for `softverbs run` (the caller's uid would otherwise read as the overflow uid).
        let w = |f: &str, s: String| {
            std::fs::write(f, s).map_err(|e| EnterError::Fatal(format!("cannot write {f}: {e}")))
        };
        w("/proc/self/setgroups", "deny".into())?;
        w("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        w("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    }
    // Opened in the new namespace: a bind mount's source must be one of its mounts.
    let null = std::fs::File::open("/dev/null")
        .map_err(|e| EnterError::Undone(format!("cannot open /dev/null: {e}")))?;
    let mut m = Mounts { made: Vec::new(), ours: Vec::new(), null };
    // The host must not see the mounts that follow, and later host mounts still reach here.
    mount(None, Path::new("/"), None, libc::MS_REC | libc::MS_SLAVE, None)
        .map_err(|e| EnterError::Undone(format!("cannot make / a slave mount: {e}")))?;
    match m.populate(tree) {
        Ok(()) => Ok(()),
        Err(e) => {
            m.undo();
            Err(EnterError::Undone(e))
        }
    }
}

/// Why [`enter`] did not show the tree.
#[derive(Debug)]
pub enum EnterError {
    /// No namespace could be made (user namespaces disabled, a threaded process): nothing
    /// changed.
    Unavailable(String),
    /// A step failed and what was mounted before it was taken away: the process sees the
    /// host's `/dev` and `/sys`, from a mount namespace of its own.
    Undone(String),
    /// A step failed inside a new user namespace, where the process cannot go on as the
    /// caller (its uid not mapped).
    Fatal(String),
}

/// The mounts [`enter`] made and the directories it may write in.
struct Mounts {
    /// The tmpfs mounts made, in order.
    made: Vec<PathBuf>,
    /// Directories that are this process's own (a tmpfs made here, or a directory in one).
    ours: Vec<PathBuf>,
    /// `/dev/null`, bound where a character device goes.
    null: std::fs::File,
}

impl Mounts {
    fn populate(&mut self, tree: &[(PathBuf, Node)]) -> Result<(), String> {
        for (path, node) in tree {
            if std::fs::symlink_metadata(path).is_ok() {
                continue;
            }
            let parent = path.parent().unwrap_or(Path::new("/"));
            self.writable(parent)?;
            let fail = |e: io::Error| format!("cannot make {}: {e}", path.display());
            match node {
                Node::Dir => {
                    std::fs::create_dir(path).map_err(fail)?;
                    self.ours.push(path.clone());
                }
                Node::File(text) => {
                    std::fs::write(path, text).map_err(fail)?;
                    set_mode(path, 0o444).map_err(fail)?;
                }
                Node::Link(target) => std::os::unix::fs::symlink(target, path).map_err(fail)?,
                Node::CharDev => {
                    std::fs::write(path, b"").map_err(fail)?;
                    let src = fd_path(&self.null);
                    mount(Some(&src), path, None, libc::MS_BIND, None).map_err(fail)?;
                }
            }
        }
        // What was made stays as made: read-only, as /dev/infiniband and sysfs are to users.
        for dir in &self.made {
            let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID;
            mount(None, dir, None, flags, None)
                .map_err(|e| format!("cannot make {} read-only: {e}", dir.display()))?;
        }
        Ok(())
    }

    /// Makes `dir` a directory this process may add to: its own already, or, if it exists,
    /// covered by a tmpfs holding its entries bound back; if not, made in its parent so.
    fn writable(&mut self, dir: &Path) -> Result<(), String> {
        if self.ours.iter().any(|o| o == dir) {
            return Ok(());
        }
        if std::fs::symlink_metadata(dir).is_ok() {
            return self.cover(dir);
        }
        let parent = dir.parent().unwrap_or(Path::new("/"));
        self.writable(parent)?;
        std::fs::create_dir(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        self.ours.push(dir.to_path_buf());
        Ok(())
    }

    /// Covers the existing directory `dir` with a tmpfs and binds each of its entries back
    /// (directories with the mounts below them, so `/dev/shm` and `/dev/pts` stay as they
    /// are), symbolic links made again.
    fn cover(&mut self, dir: &Path) -> Result<(), String> {
        let fail = |what: &str, e: io::Error| format!("cannot {what} {}: {e}", dir.display());
        let old = std::fs::File::open(dir).map_err(|e| fail("open", e))?;
        let old_path = fd_path(&old);
        let mut entries = Vec::new();
        for e in std::fs::read_dir(dir).map_err(|e| fail("list", e))? {
            let e = e.map_err(|e| fail("list", e))?;
            let ty = e.file_type().map_err(|e| fail("list", e))?;
            entries.push((e.file_name(), ty));
        }
        mount(Some(Path::new("tmpfs")), dir, Some("tmpfs"), libc::MS_NOSUID, Some("mode=0755"))
            .map_err(|e| fail("mount a tmpfs on", e))?;
        self.made.push(dir.to_path_buf());
        self.ours.push(dir.to_path_buf());
        // SAFETY: umask takes and returns a plain mode.
        let mask = unsafe { libc::umask(0) };
        let r = (|| {
            for (name, ty) in &entries {
                let src = old_path.join(name);
                let dst = dir.join(name);
                let fail = |e: io::Error| format!("cannot bind {} back: {e}", dst.display());
                // An entry removed since it was listed (a pty, a lock) is left out.
                let gone = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
                if ty.is_symlink() {
                    match std::fs::read_link(&src) {
                        Ok(target) => std::os::unix::fs::symlink(target, &dst).map_err(fail)?,
                        Err(e) if gone(&e) => {}
                        Err(e) => return Err(fail(e)),
                    }
                    continue;
                }
                if ty.is_dir() {
                    std::fs::create_dir(&dst).map_err(fail)?;
                } else {
                    std::fs::write(&dst, b"").map_err(fail)?;
                }
                match mount(Some(&src), &dst, None, libc::MS_BIND | libc::MS_REC, None) {
                    Ok(()) => {}
                    Err(e) if gone(&e) => {
                        let _ = if ty.is_dir() {
                            std::fs::remove_dir(&dst)
                        } else {
                            std::fs::remove_file(&dst)
                        };
                    }
                    Err(e) => return Err(fail(e)),
                }
            }
            Ok(())
        })();
        // SAFETY: as above.
        unsafe { libc::umask(mask) };
        r
    }

    /// Takes the tmpfs mounts away again, newest first, with what was bound in them.
    fn undo(&mut self) {
        for dir in self.made.drain(..).rev() {
            if let Ok(c) = CString::new(dir.as_os_str().as_bytes()) {
                // SAFETY: `c` is a NUL-terminated path that outlives the call.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
    }
}

/// The `/proc/self/fd/N` path of an open file, which names the file itself even where a mount
/// now covers its path.
fn fd_path(f: &std::fs::File) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// `mount(2)`.
fn mount(
    src: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let c = |s: &OsStr| CString::new(s.as_bytes()).map_err(|_| io::ErrorKind::InvalidInput);
    let src = src.map(|s| c(s.as_os_str())).transpose()?;
    let target = c(target.as_os_str())?;
    let fstype = fstype.map(|s| c(OsStr::new(s))).transpose()?;
    let data = data.map(|s| c(OsStr::new(s))).transpose()?;
    let p = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: every pointer is NULL or a NUL-terminated string that outlives the call.
    let r = unsafe {
        libc::mount(p(&src), target.as_ptr(), p(&fstype), flags, p(&data) as *const libc::c_void)
    };
    match r {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_reads_as_the_kernel_writes_it() {
        assert_eq!(rate_text(2, 32), "100 Gb/sec (4X EDR)");
        assert_eq!(rate_text(1, 1), "2.5 Gb/sec (1X SDR)");
        assert_eq!(rate_text(8, 16), "168 Gb/sec (12X FDR)");
    }

    /// On a network interface, sysfs lists the port's GIDs (the IPv6 ones too) as the
    /// kernel lists rxe's, each of the interface.
    #[test]
    fn on_an_interface_the_tree_lists_every_gid_of_the_interface() {
        use verbs_api::Gid;
        let ll: [u8; 16] = "fe80::1".parse::<std::net::Ipv6Addr>().unwrap().octets();
        let g: [u8; 16] = "fd31::1".parse::<std::net::Ipv6Addr>().unwrap().octets();
        let gids = vec![Gid(ll), Gid::from_ipv4([10, 231, 0, 1]), Gid(g)];
        let n = NetdevGids { name: "veth7".into(), gids };
        let t = tree_on(&[("softverbs0".into(), 1)], Some(&n));
        let get = |p: &str| t.iter().find(|(q, _)| q == Path::new(p)).map(|(_, n)| n.clone());
        let f = |s: &str| Some(Node::File(s.to_string()));
        let p = "/sys/class/infiniband/softverbs0/ports/1";
        assert_eq!(get(&format!("{p}/gids/0")), f("fe80:0000:0000:0000:0000:0000:0000:0001\n"));
        assert_eq!(get(&format!("{p}/gids/1")), f("0000:0000:0000:0000:0000:ffff:0ae7:0001\n"));
        assert_eq!(get(&format!("{p}/gids/2")), f("fd31:0000:0000:0000:0000:0000:0000:0001\n"));
        assert_eq!(get(&format!("{p}/gids/3")), None);
        assert_eq!(get(&format!("{p}/gid_attrs/types/2")), f("RoCE v2\n"));
        assert_eq!(get(&format!("{p}/gid_attrs/ndevs/2")), f("veth7\n"));
        assert_eq!(get("/sys/class/infiniband/softverbs0/parent"), f("veth7\n"));
        assert_eq!(
            get("/sys/class/infiniband/softverbs0/device/net/veth7"),
            Some(Node::Link("/sys/class/net/veth7".into()))
        );
    }

    #[test]
    fn the_tree_names_each_device_its_node_port_and_gid_attributes() {
        let t = tree(&[("softverbs0".into(), 0x0200_5eff_fe00_0000), ("softverbs1".into(), 1)]);
        let get = |p: &str| t.iter().find(|(q, _)| q == Path::new(p)).map(|(_, n)| n.clone());
        assert_eq!(get("/dev/infiniband/uverbs0"), Some(Node::CharDev));
        assert_eq!(get("/dev/infiniband/uverbs1"), Some(Node::CharDev));
        assert_eq!(get("/dev/infiniband/uverbs2"), None);
        let f = |s: &str| Some(Node::File(s.to_string()));
        assert_eq!(get("/sys/class/infiniband_verbs/uverbs1/ibdev"), f("softverbs1\n"));
        let p = "/sys/class/infiniband/softverbs0/ports/1";
        assert_eq!(get(&format!("{p}/state")), f("4: ACTIVE\n"));
        assert_eq!(get(&format!("{p}/phys_state")), f("5: LinkUp\n"));
        assert_eq!(get(&format!("{p}/link_layer")), f("Ethernet\n"));
        assert_eq!(get(&format!("{p}/rate")), f("100 Gb/sec (4X EDR)\n"));
        assert_eq!(get(&format!("{p}/gid_attrs/types/0")), f("RoCE v2\n"));
        assert_eq!(get(&format!("{p}/gid_attrs/types/1")), f("RoCE v2\n"));
        assert_eq!(get(&format!("{p}/gid_attrs/ndevs/1")), f("lo\n"));
        assert_eq!(get(&format!("{p}/gid_attrs/ndevs/2")), None);
        assert_eq!(get("/sys/class/infiniband/softverbs0/node_guid"), f("0200:5eff:fe00:0000\n"));
        assert_eq!(
            get("/sys/class/infiniband/softverbs1/device/net/lo"),
            Some(Node::Link("/sys/class/net/lo".into()))
        );
        // Parents come before their children.
        for (i, (path, _)) in t.iter().enumerate() {
            if let Some(parent) = path.parent().filter(|p| t.iter().any(|(q, _)| q == p)) {
                let at = t.iter().position(|(q, _)| q == parent).expect("listed");
                assert!(at < i, "{} is listed after {}", parent.display(), path.display());
            }
        }
    }
}
