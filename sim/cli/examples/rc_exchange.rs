//! A Rust program on softverbs across two hosts, as `ibv_rc_pingpong` is in C: each side opens
//! a soft device, makes an RC QP and a memory region, and the two exchange their QP's address
//! (LID, QPN, first PSN, GID, in `ibv_rc_pingpong`'s `LLLL:QQQQQQ:PPPPPP:GID` form) and their
//! MR's address and rkey over a TCP connection; then they connect the QPs and move data:
//!
//! 1. each side SENDs a 4 KiB message of its own pattern to the other, which checks every byte;
//! 2. the client RDMA WRITEs 64 KiB into the server's memory, then SENDs with immediate data to
//!    say so; the server checks every byte the WRITE landed.
//!
//! ```text
//! server$ cargo run -p softverbs --example rc_exchange -- --netdev eth0
//! client$ cargo run -p softverbs --example rc_exchange -- --netdev eth0 SERVER_ADDR
//! ```
//!
//! Options: `--netdev IFACE` (the devices are RoCE v2 devices on that interface; without it
//! `SOFTVERBS_NETDEV` or, on one machine, the shared-memory fabric), `-p PORT` (the TCP port of
//! the exchange, 18515 by default), `-g N` (the GID index, by default the first IPv4 one).
//! Prints what it exchanged and "every byte as sent" lines; exits 1 with the reason on error.
//! docs/guide.md ("Across machines") walks through it; sim/cli/tests/netns_apps.rs runs it
//! between two network namespaces.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use nic_model::soft::Soft;
use verbs_api::conn::{self, ConnOpts, Endpoint, PortAddress, QpInfo};
use verbs_api::{
    Mtu, QpCap, QpType, RdmaTarget, RecvWr, SendFlags, SendWr, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};

/// The SEND's size.
const SEND_LEN: usize = 4096;
/// The WRITE's size, and where it lands in the server's MR.
const WRITE_LEN: usize = 65536;
const WRITE_OFF: usize = 2 * SEND_LEN;
/// The MR: a receive buffer, a send buffer, the WRITE's area.
const MR_LEN: usize = WRITE_OFF + WRITE_LEN;
/// Bound on every wait: for the peer's TCP connection, each completion.
const WAIT: Duration = Duration::from_secs(30);

/// The command line.
pub struct Args {
    netdev: Option<String>,
    port: u16,
    gid_idx: Option<u32>,
    server: Option<String>,
}

pub fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args { netdev: None, port: 18515, gid_idx: None, server: None };
    while let Some(w) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match w.as_str() {
            "--netdev" => a.netdev = Some(value("--netdev")?),
            "-p" | "--port" => {
                let v = value("-p")?;
                a.port = v.parse().map_err(|_| format!("-p {v}: not a TCP port number"))?;
            }
            "-g" | "--gid-idx" => {
                let v = value("-g")?;
                a.gid_idx = Some(v.parse().map_err(|_| format!("-g {v}: not a GID index"))?);
            }
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s if a.server.is_none() => a.server = Some(s.to_string()),
            s => return Err(format!("one server address only (got a second: {s})")),
        }
    }
    Ok(a)
}

/// Byte `i` of the message side `side` (0 the server, 1 the client) sends.
fn pattern(side: u8, i: usize) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(side.wrapping_mul(101)) ^ (i >> 8) as u8
}

/// Waits for the endpoint's next completion, which must be a success.
fn next_wc(ep: &Endpoint) -> Result<WorkCompletion, String> {
    let deadline = Instant::now() + WAIT;
    let mut wc = [WorkCompletion::default()];
    loop {
        if ep.cq.poll(&mut wc).map_err(|e| format!("ibv_poll_cq: {e}"))? == 1 {
            if wc[0].status != WcStatus::Success {
                return Err(format!("a completion with status {:?}: {:?}", wc[0].status, wc[0]));
            }
            return Ok(wc[0]);
        }
        if Instant::now() > deadline {
            return Err(format!("no completion within {WAIT:?}"));
        }
        std::thread::yield_now();
    }
}

/// The endpoint's next `n` completions, in any order: one of each opcode of `want`.
fn wait_wcs(ep: &Endpoint, want: &[WcOpcode]) -> Result<Vec<WorkCompletion>, String> {
    let mut got: Vec<WorkCompletion> = Vec::new();
    for _ in want {
        got.push(next_wc(ep)?);
    }
    let mut ops: Vec<WcOpcode> = got.iter().map(|w| w.opcode).collect();
    let mut wanted = want.to_vec();
    ops.sort_by_key(|o| *o as u8);
    wanted.sort_by_key(|o| *o as u8);
    if ops != wanted {
        return Err(format!("completions {ops:?}, wanted {wanted:?}"));
    }
    Ok(got)
}

/// A GID as `ibv_rc_pingpong` prints it: `::ffff:a.b.c.d` for an IPv4 one.
fn gid_text(q: &QpInfo) -> String {
    match q.gid.to_ipv4() {
        Some(v4) => format!("::ffff:{}", std::net::Ipv4Addr::from(v4)),
        None => q.gid.to_string(),
    }
}

/// One line to the peer, and one back.
fn swap_line(sock: &mut BufReader<TcpStream>, line: &str) -> Result<String, String> {
    writeln!(sock.get_mut(), "{line}").map_err(|e| format!("sending to the peer: {e}"))?;
    let mut back = String::new();
    match sock.read_line(&mut back) {
        Ok(0) => Err("the peer closed the connection".into()),
        Ok(_) => Ok(back.trim_end().to_string()),
        Err(e) => Err(format!("reading from the peer: {e}")),
    }
}

pub fn run(a: &Args) -> Result<(), String> {
    let soft = match &a.netdev {
        Some(iface) => Soft::netdev(iface),
        None => Soft::shared_memory(None).map_err(|e| e.to_string())?,
    };
    let ctx = soft.open("softverbs0").map_err(|e| format!("opening softverbs0: {e}"))?;
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        ..QpCap::default()
    };
    let ep = Endpoint::new(&ctx, QpType::Rc, cap, 16, MR_LEN).map_err(|e| e.to_string())?;
    let addr = PortAddress::of(&ctx, a.gid_idx).map_err(|e| e.to_string())?;
    let psn = (std::process::id().wrapping_mul(2_654_435_761) >> 8) & 0xFF_FFFF;
    let me = addr.qp_info(&ep.qp, psn);
    let side: u8 = u8::from(a.server.is_some());
    // The exchange: QP address, then the MR's address and rkey.
    let stream = match &a.server {
        Some(host) => TcpStream::connect((host.as_str(), a.port))
            .map_err(|e| format!("connecting to {host}:{}: {e}", a.port))?,
        None => {
            let l = TcpListener::bind(("0.0.0.0", a.port))
                .map_err(|e| format!("listening on TCP port {}: {e}", a.port))?;
            println!("waiting for a client on TCP port {}", a.port);
            l.accept().map_err(|e| format!("accepting the client: {e}"))?.0
        }
    };
    stream.set_read_timeout(Some(WAIT)).map_err(|e| e.to_string())?;
    let mut sock = BufReader::new(stream);
    let line =
        swap_line(&mut sock, &format!("{} {:x} {:x}", me.to_wire(), ep.mr.addr(), ep.mr.rkey()))?;
    let mut words = line.split(' ');
    let peer = words.next().and_then(QpInfo::from_wire);
    let raddr = words.next().and_then(|w| u64::from_str_radix(w, 16).ok());
    let rkey = words.next().and_then(|w| u32::from_str_radix(w, 16).ok());
    let (Some(peer), Some(raddr), Some(rkey)) = (peer, raddr, rkey) else {
        return Err(format!("the peer's address line does not parse: {line:?}"));
    };
    println!("local:  QPN {:#08x}, PSN {:#08x}, GID {}", me.qpn, me.psn, gid_text(&me));
    println!("remote: QPN {:#08x}, PSN {:#08x}, GID {}", peer.qpn, peer.psn, gid_text(&peer));
    let opts = addr
        .conn_opts(ConnOpts { mtu: Mtu::Mtu1024, ..ConnOpts::default() })
        .map_err(|e| e.to_string())?;
    conn::connect(&ep.qp, psn, &peer, &opts).map_err(|e| format!("connecting the QP: {e}"))?;
    // Two receives (the SEND, the client's WRITE's notice), posted before the peer may send.
    for id in [1, 2] {
        let sge = [ep.mr.sge(0, SEND_LEN as u32)];
        ep.qp.post_recv(&[RecvWr { wr_id: id, sg_list: &sge }]).map_err(|e| e.to_string())?;
    }
    // Both QPs are ready before either sends.
    swap_line(&mut sock, "ready")?;

    // 1. The SENDs, both ways.
    let mine: Vec<u8> = (0..SEND_LEN).map(|i| pattern(side, i)).collect();
    ep.mr.write(SEND_LEN, &mine).map_err(|e| e.to_string())?;
    let sge = [ep.mr.sge(SEND_LEN, SEND_LEN as u32)];
    let send = SendWr {
        wr_id: 10,
        sg_list: &sge,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
        ..Default::default()
    };
    ep.qp.post_send(&[send]).map_err(|e| e.to_string())?;
    let wcs = wait_wcs(&ep, &[WcOpcode::Send, WcOpcode::Recv])?;
    let recv = wcs.iter().find(|w| w.opcode == WcOpcode::Recv).copied().unwrap_or_default();
    let mut buf = vec![0u8; SEND_LEN];
    ep.mr.read(0, &mut buf).map_err(|e| e.to_string())?;
    let theirs: Vec<u8> = (0..SEND_LEN).map(|i| pattern(1 - side, i)).collect();
    if recv.byte_len as usize != SEND_LEN || buf != theirs {
        let bad = buf.iter().zip(&theirs).position(|(a, b)| a != b);
        return Err(format!(
            "the peer's SEND: {} bytes, first wrong byte at {bad:?}",
            recv.byte_len
        ));
    }
    println!("SEND: every byte of the peer's {SEND_LEN} bytes as sent");
    swap_line(&mut sock, "sent")?;

    // 2. The client's WRITE into the server's memory, announced by a SEND with immediate.
    let data: Vec<u8> = (0..WRITE_LEN).map(|i| pattern(2, i)).collect();
    if side == 1 {
        ep.mr.write(WRITE_OFF, &data).map_err(|e| e.to_string())?;
        let sge = [ep.mr.sge(WRITE_OFF, WRITE_LEN as u32)];
        let write = SendWr {
            wr_id: 20,
            sg_list: &sge,
            opcode: WrOpcode::RdmaWrite,
            send_flags: SendFlags::SIGNALED,
            rdma: RdmaTarget { remote_addr: raddr + WRITE_OFF as u64, rkey },
            ..Default::default()
        };
        let notice = SendWr {
            wr_id: 21,
            opcode: WrOpcode::SendWithImm,
            imm_data: 0x5752_4954,
            send_flags: SendFlags::SIGNALED,
            ..Default::default()
        };
        ep.qp.post_send(&[write, notice]).map_err(|e| e.to_string())?;
        wait_wcs(&ep, &[WcOpcode::RdmaWrite, WcOpcode::Send])?;
        println!(
            "RDMA WRITE: {WRITE_LEN} bytes into the server's memory, then a SEND with immediate"
        );
    } else {
        let wc = wait_wcs(&ep, &[WcOpcode::Recv])?[0];
        if wc.imm_data != 0x5752_4954 {
            return Err(format!("the notice's immediate data is {:#x}", wc.imm_data));
        }
        let mut landed = vec![0u8; WRITE_LEN];
        ep.mr.read(WRITE_OFF, &mut landed).map_err(|e| e.to_string())?;
        if landed != data {
            let bad = landed.iter().zip(&data).position(|(a, b)| a != b);
            return Err(format!("the client's WRITE: first wrong byte at {bad:?}"));
        }
        println!("RDMA WRITE: every byte of the client's {WRITE_LEN} bytes as sent");
    }
    // Neither side destroys its QP before the other is done with it.
    swap_line(&mut sock, "done")?;
    println!("done");
    Ok(())
}

fn main() {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rc_exchange: {e}\nusage: rc_exchange [--netdev IFACE] [-p PORT] [-g GID_INDEX] [SERVER_ADDR]");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("rc_exchange: {e}");
        std::process::exit(1);
    }
}
