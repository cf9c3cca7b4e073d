//! What a lab run left to grade from, beyond its output: the packets of its captures (which
//! opcodes, and every request that named remote memory with the NAK that refused it) and the
//! journal of its memory regions and QPs (the `softverbs::objects` lines the library writes
//! under `SOFTVERBS_LOG`), from which a refused access is told apart: the sender's own key, a
//! stale key, a key nobody registered, a missing access flag, a range outside the region, a
//! misaligned atomic.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::Path;

use nic_model::packet::{self, AethKind, NakCode};

/// The `SOFTVERBS_LOG` filter under which the library journals its objects and says why it
/// refused a call.
pub const JOURNAL_FILTER: &str = "warn,softverbs::objects=debug";
/// What starts a journal line's message.
const JOURNAL_MARK: &str = "softverbs::objects: ";
/// What starts the message of a call the library refused.
const REFUSED_MARK: &str = "WARN softverbs_ibverbs: ";

/// A request that named remote memory (a RETH or an AtomicETH), as it was on the wire.
struct Access {
    /// When it was first seen (wall clock, ns).
    at: u128,
    /// The processes whose captures hold it: its sender and its responder.
    pids: HashSet<u32>,
    src: IpAddr,
    dst: IpAddr,
    dest_qp: u32,
    psn: u32,
    /// The opcode's name (`RC FETCH ADD`).
    op: &'static str,
    atomic: bool,
    read: bool,
    rkey: u32,
    va: u64,
    len: u64,
}

/// A NAK that ended a request.
struct Nak {
    at: u128,
    src: IpAddr,
    dst: IpAddr,
    psn: u32,
    code: NakCode,
}

/// The packets of a run.
#[derive(Default)]
pub struct Wire {
    /// Each opcode's name and how many distinct packets carried it.
    pub ops: HashMap<String, usize>,
    /// Each distinct RC SEND ONLY: when it was first seen (wall clock, ns) and its sender, in
    /// order of time (lab 11's ping-pong).
    pub sends: Vec<(u128, IpAddr)>,
    accesses: Vec<Access>,
    naks: Vec<Nak>,
}

/// One memory region's life, from the journal.
struct MrLife {
    pid: u32,
    key: u32,
    addr: u64,
    len: u64,
    access: u32,
    reg_at: u128,
    dereg_at: Option<u128>,
}

/// The memory regions and QPs the run's processes made.
#[derive(Default)]
pub struct Journal {
    mrs: Vec<MrLife>,
    /// Each QP number and the process that made it.
    qps: HashMap<u32, u32>,
    /// The calls the library refused, each with its reason, in order.
    pub refused: Vec<String>,
}

fn num(v: &str) -> Option<u128> {
    match v.strip_prefix("0x") {
        Some(h) => u128::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

impl Journal {
    /// The journal in `stderr`, and `stderr` without its lines.
    pub fn split(stderr: &str) -> (Journal, String) {
        let mut j = Journal::default();
        let mut rest = String::new();
        for line in stderr.lines() {
            if let Some(i) = line.find(REFUSED_MARK) {
                let msg = &line[i + REFUSED_MARK.len()..];
                let msg = msg.find(" verb=").map_or(msg, |e| &msg[..e]);
                j.refused.push(msg.to_string());
                continue;
            }
            let Some(i) = line.find(JOURNAL_MARK) else {
                rest.push_str(line);
                rest.push('\n');
                continue;
            };
            let msg = &line[i + JOURNAL_MARK.len()..];
            let mut words = msg.split_whitespace();
            let verb = words.next().unwrap_or("");
            let f: HashMap<&str, u128> = words
                .filter_map(|w| w.split_once('='))
                .filter_map(|(k, v)| Some((k, num(v)?)))
                .collect();
            let get = |k: &str| f.get(k).copied().unwrap_or(0);
            match verb {
                "reg_mr" => j.mrs.push(MrLife {
                    pid: get("pid") as u32,
                    key: get("key") as u32,
                    addr: get("addr") as u64,
                    len: get("length") as u64,
                    access: get("access") as u32,
                    reg_at: get("at"),
                    dereg_at: None,
                }),
                "dereg_mr" => {
                    let (pid, key) = (get("pid") as u32, get("key") as u32);
                    if let Some(m) = j
                        .mrs
                        .iter_mut()
                        .rev()
                        .find(|m| m.pid == pid && m.key == key && m.dereg_at.is_none())
                    {
                        m.dereg_at = Some(get("at"));
                    }
                }
                "create_qp" => {
                    j.qps.insert(get("qpn") as u32, get("pid") as u32);
                }
                _ => {}
            }
        }
        (j, rest)
    }
}

/// The packets of every capture in `dir` (`cap-PID.pcap`). Each process records what it sends
/// and what it receives, so one packet is in two files; and a retransmission (the same bytes
/// again, which a busy machine's timers cause now and then) is the same packet to the lab:
/// each distinct datagram counts once.
pub fn read(dir: &Path) -> Wire {
    // Each datagram's bytes: when it was first seen, and in which processes' captures.
    let mut seen: HashMap<Vec<u8>, (u128, HashSet<u32>)> = HashMap::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix("cap-")
            .and_then(|r| r.strip_suffix(".pcap"))
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let Ok(file) = std::fs::read(entry.path()) else { continue };
        // The magic says whether the fraction of a second is in µs or ns.
        let nanos = file.get(..4) == Some(&[0x4d, 0x3c, 0xb2, 0xa1]);
        let word =
            |at: usize| u32::from_le_bytes(file[at..at + 4].try_into().unwrap_or([0; 4])) as u128;
        let mut at = 24;
        while at + 16 <= file.len() {
            let ts = word(at) * 1_000_000_000 + word(at + 4) * if nanos { 1 } else { 1000 };
            let incl = word(at + 8) as usize;
            let end = (at + 16 + incl).min(file.len());
            // Past the record header, the 14-byte Ethernet header: the IP datagram.
            if at + 16 + 14 <= end {
                let e =
                    seen.entry(file[at + 16 + 14..end].to_vec()).or_insert((ts, HashSet::new()));
                e.0 = e.0.min(ts);
                e.1.insert(pid);
            }
            at = end;
        }
    }
    let mut w = Wire::default();
    // One packet: who sent it to whom, for which QP, at which PSN, with which opcode (a
    // retransmission may differ in bytes the lab does not care about).
    let mut packets = HashSet::new();
    for (bytes, (at, pids)) in &seen {
        let Ok((src, dst, p)) = packet::parse_any_datagram(bytes) else { continue };
        let name = p.bth.opcode.info().map_or("?", |i| i.name);
        let (qp, psn) = (p.bth.dest_qp, p.bth.psn.value());
        if !packets.insert((src, dst, qp, psn, name)) {
            continue;
        }
        *w.ops.entry(name.to_string()).or_default() += 1;
        if name == "RC SEND ONLY" {
            w.sends.push((*at, src));
        }
        let target = match (p.reth, p.atomic_eth) {
            (Some(r), _) => Some((false, r.rkey, r.va, u64::from(r.dma_len))),
            (None, Some(a)) => Some((true, a.rkey, a.va, 8)),
            _ => None,
        };
        if let Some((atomic, rkey, va, len)) = target {
            let read = name.contains("READ");
            let pids = pids.clone();
            w.accesses.push(Access {
                at: *at,
                pids,
                src,
                dst,
                dest_qp: qp,
                psn,
                op: name,
                atomic,
                read,
                rkey,
                va,
                len,
            });
        }
        if let Some(AethKind::Nak(code)) = p.aeth.map(|a| a.kind()) {
            w.naks.push(Nak { at: *at, src, dst, psn, code });
        }
    }
    w.naks.sort_by_key(|n| n.at);
    w.sends.sort();
    w
}

/// The `IBV_ACCESS_*` flags in `access`, joined by `|`.
fn flag_names(access: u32) -> String {
    let names: Vec<&str> = [
        (1, "IBV_ACCESS_LOCAL_WRITE"),
        (2, "IBV_ACCESS_REMOTE_WRITE"),
        (4, "IBV_ACCESS_REMOTE_READ"),
        (8, "IBV_ACCESS_REMOTE_ATOMIC"),
    ]
    .into_iter()
    .filter(|(bit, _)| access & bit != 0)
    .map(|(_, n)| n)
    .collect();
    match names.is_empty() {
        true => "0".into(),
        false => names.join(" | "),
    }
}

impl Wire {
    /// What the first NAK that refused an access says went wrong, from its request and the
    /// journal: None when no access was refused.
    pub fn refused_access(&self, j: &Journal) -> Option<String> {
        self.naks.iter().find_map(|nak| {
            let r = self
                .accesses
                .iter()
                .filter(|r| r.psn == nak.psn && r.src == nak.dst && r.dst == nak.src)
                .filter(|r| r.at <= nak.at)
                .max_by_key(|r| r.at)?;
            match nak.code {
                NakCode::InvalidRequest => Some(invalid_request(r)),
                NakCode::RemoteAccessError => Some(access_error(r, j)),
                _ => None,
            }
        })
    }
}

fn invalid_request(r: &Access) -> String {
    let op = r.op;
    if r.atomic && !r.va.is_multiple_of(8) {
        return format!(
            "the responder answered the {op} with a NAK (invalid request): its remote_addr \
             {:#x} is not 8-byte aligned ({} bytes past a multiple of 8); an atomic acts on one \
             aligned 8-byte word, so wr.wr.atomic.remote_addr must be a multiple of 8 (the \
             peer's address plus 0, 8, 16, ...)",
            r.va,
            r.va % 8
        );
    }
    format!(
        "the responder answered the {op} with a NAK (invalid request): an RDMA READ or atomic \
         needs the responder's QP to accept one (max_dest_rd_atomic of at least 1 in \
         ibv_modify_qp to RTR, max_rd_atomic on the requester's move to RTS)"
    )
}

fn access_error(r: &Access, j: &Journal) -> String {
    let (op, k) = (r.op, r.rkey);
    let (need, verb) = match (r.atomic, r.read) {
        (true, _) => (8, "an atomic"),
        (_, true) => (4, "an RDMA READ"),
        _ => (2, "an RDMA WRITE"),
    };
    let head = format!(
        "the responder answered the {op} with a NAK (remote access error) for rkey {k:#x} at \
         address {:#x}",
        r.va
    );
    if j.mrs.is_empty() {
        return format!(
            "{head}: the rkey and address must be the peer's (sent to you as peer.rkey and \
             peer.addr), its region registered with the IBV_ACCESS_REMOTE_* flag {verb} needs"
        );
    }
    let responder = j.qps.get(&r.dest_qp).copied();
    let live = |m: &&MrLife| m.reg_at <= r.at && m.dereg_at.is_none_or(|d| d > r.at);
    let theirs: Vec<String> = j
        .mrs
        .iter()
        .filter(|m| Some(m.pid) == responder)
        .filter(live)
        .map(|m| format!("{:#x}", m.key))
        .collect();
    let theirs = match theirs.is_empty() {
        true => "none was registered then".to_string(),
        false => format!("its region's rkey was {}", theirs.join(", ")),
    };
    let named = j.mrs.iter().filter(|m| m.key == k && m.reg_at <= r.at);
    let mine = named.clone().find(|m| Some(m.pid) == responder);
    let other = named.clone().find(|m| Some(m.pid) != responder);
    if let Some(m) = mine {
        if m.dereg_at.is_some_and(|d| d <= r.at) {
            return format!(
                "{head}: that is a stale key, of a memory region the responder had \
                 deregistered (ibv_dereg_mr) before the request came ({theirs}); a key dies \
                 with its region and a new registration gets a new key, so send the key of \
                 the region as it is registered when the peer uses it, and deregister only \
                 after the peer is done"
            );
        }
        if m.access & need == 0 {
            let flag = flag_names(need);
            return format!(
                "{head}: the key is the responder's, but its region was registered with access \
                 {}, without {flag}, which {verb} needs: add {flag} to the access flags of the \
                 responder's ibv_reg_mr",
                flag_names(m.access)
            );
        }
        if r.va < m.addr || r.va + r.len > m.addr + m.len {
            return format!(
                "{head}: the key is the responder's, but the {} bytes at {:#x} are not inside \
                 its region [{:#x}, {:#x}): the remote address is the peer's address (peer.addr) \
                 plus an offset that keeps the access inside the {} bytes it registered",
                r.len,
                r.va,
                m.addr,
                m.addr + m.len,
                m.len
            );
        }
        return format!(
            "{head}: the key, the address and the region's flags are right, so the responder's \
             QP refused: its qp_access_flags (set in ibv_modify_qp to INIT) must include {}",
            flag_names(need)
        );
    }
    if let Some(m) = other {
        if r.pids.contains(&m.pid) {
            return format!(
                "{head}: {k:#x} is the requester's own memory region's key (its mr->rkey), not \
                 the responder's ({theirs}); keys are made by the side that registers, so use \
                 the rkey the peer sent you (peer.rkey)"
            );
        }
        return format!(
            "{head}: {k:#x} is the key of another process's region, not the responder's \
             ({theirs}): use the rkey this QP's peer sent you (peer.rkey)"
        );
    }
    format!(
        "{head}: no process registered a region with that key ({theirs}): use the rkey the \
         peer sent you (peer.rkey), unchanged"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
2026-12-06T05:43:54Z DEBUG softverbs::objects: reg_mr pid=10 key=0x1234 addr=0x1000 length=4096 access=0x1 at=100
2026-12-06T05:43:54Z DEBUG softverbs::objects: create_qp pid=10 qpn=0x77
2026-12-06T05:43:54Z DEBUG softverbs::objects: reg_mr pid=20 key=0x5678 addr=0x9000 length=4096 access=0x9 at=110
2026-12-06T05:43:54Z DEBUG softverbs::objects: dereg_mr pid=20 key=0x5678 at=150
2026-12-06T05:43:54Z DEBUG softverbs::objects: reg_mr pid=20 key=0x5791 addr=0x9000 length=4096 access=0x1 at=160
2026-12-06T05:43:54Z DEBUG softverbs::objects: create_qp pid=20 qpn=0x88
my own line
2026-12-06T05:43:55Z  WARN softverbs_ibverbs: ibv_post_send: wr[0] (wr_id 0): bad verb=\"ibv_post_send\" errno=22
";

    fn fetch_add(rkey: u32, va: u64, at: u128) -> Access {
        let ip: IpAddr = [10, 0, 0, 1].into();
        Access {
            at,
            pids: [10, 20].into_iter().collect(),
            src: ip,
            dst: ip,
            dest_qp: 0x88,
            psn: 1,
            op: "RC FETCH ADD",
            atomic: true,
            read: false,
            rkey,
            va,
            len: 8,
        }
    }

    #[test]
    fn the_journal_is_read_and_taken_out_of_stderr() {
        let (j, rest) = Journal::split(LOG);
        assert_eq!(rest, "my own line\n");
        assert_eq!(j.mrs.len(), 3);
        assert_eq!(j.mrs[1].dereg_at, Some(150));
        assert_eq!(j.qps.get(&0x88), Some(&20));
        assert_eq!(j.refused, ["ibv_post_send: wr[0] (wr_id 0): bad"]);
    }

    #[test]
    fn each_refused_access_is_told_by_its_key() {
        let (j, _) = Journal::split(LOG);
        // The requester's own key (pid 10 sent it, and registered 0x1234).
        let own = access_error(&fetch_add(0x1234, 0x9000, 200), &j);
        assert!(own.contains("is the requester's own memory region's key"), "{own}");
        assert!(own.contains("its region's rkey was 0x5791"), "{own}");
        // The responder's key of a region deregistered before the request.
        let stale = access_error(&fetch_add(0x5678, 0x9000, 200), &j);
        assert!(stale.contains("that is a stale key"), "{stale}");
        // The same key while it was live: the flag is there, the range is not.
        let out = access_error(&fetch_add(0x5678, 0xa000, 120), &j);
        assert!(out.contains("are not inside its region [0x9000, 0xa000)"), "{out}");
        // The live key whose region lacks REMOTE_ATOMIC.
        let flag = access_error(&fetch_add(0x5791, 0x9000, 200), &j);
        assert!(flag.contains("without IBV_ACCESS_REMOTE_ATOMIC, which an atomic needs"), "{flag}");
        // A key nobody registered.
        let none = access_error(&fetch_add(0xdead, 0x9000, 200), &j);
        assert!(none.contains("no process registered a region with that key"), "{none}");
        // Misaligned.
        let odd = invalid_request(&fetch_add(0x5791, 0x9004, 200));
        assert!(odd.contains("is not 8-byte aligned (4 bytes past a multiple of 8)"), "{odd}");
    }
}
