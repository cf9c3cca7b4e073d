//! Captures of real runs: two `softverbs pingpong` processes over a shared-memory fabric, one
//! capturing with `SOFTVERBS_PCAP` (a name with `{pid}`), the other with `--pcap`. Each file
//! holds both directions of every datagram of its process, valid (ICRC included); both files
//! hold the same datagrams; and Wireshark decodes them as RoCEv2 with the opcodes and PSNs
//! the run used.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nic_model::packet::{parse_datagram, Opcode};
use softverbs_sim::peer::{FabricDir, Peer, Stderr};

mod pcap_check;
use pcap_check::{num, read_pcap, tshark_fields};

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
const DEADLINE: Duration = Duration::from_secs(60);
const ITERS: u32 = 5;

fn spawn(args: &[&str], env: &[(&str, &str)]) -> Peer {
    let mut command = Command::new(BIN);
    command.args(args).env_remove("SOFTVERBS_PCAP");
    for (k, v) in env {
        command.env(k, v);
    }
    let mut peer = Peer::spawn("softverbs", command, Stderr::Capture).expect("starting softverbs");
    peer.close_stdin();
    peer
}

/// Stdout lines of `peer` until it ends (bounded); asserts it succeeded.
fn finish(mut peer: Peer, what: &str) -> Vec<String> {
    let deadline = Instant::now() + DEADLINE;
    let mut lines = Vec::new();
    while let Ok(l) = peer.recv_line(deadline.saturating_duration_since(Instant::now())) {
        lines.push(l);
    }
    let status = peer.wait_exit(deadline.saturating_duration_since(Instant::now()));
    assert!(
        status.as_ref().is_ok_and(|s| s.success()),
        "{what}: {status:?}\nstdout: {lines:?}\nstderr: {}",
        peer.stderr()
    );
    lines
}

/// The PSN of `  local address:  LID 0x0001, QPN 0x000123, PSN 0x1a2b3c, GID ::`.
fn local_psn(lines: &[String]) -> u32 {
    let l = lines.iter().find(|l| l.starts_with("  local address:")).expect("a local address");
    let psn = l.split("PSN ").nth(1).and_then(|r| r.split(',').next()).expect("a PSN");
    num(psn) as u32
}

/// The (opcode, PSN, ICRC) of every datagram in `pcap`, each checked to parse (ICRC included).
fn datagrams(pcap: &Path) -> Vec<(u8, u32, u32, Vec<u8>)> {
    read_pcap(pcap)
        .into_iter()
        .map(|d| {
            let (_, p) = parse_datagram(&d)
                .unwrap_or_else(|e| panic!("{}: a datagram does not parse: {e}", pcap.display()));
            // As Wireshark shows it: the four bytes on the wire, most significant first.
            let icrc = u32::from_be_bytes(d[d.len() - 4..].try_into().unwrap());
            (p.bth.opcode.0, p.bth.psn.value(), icrc, d.clone())
        })
        .collect()
}

#[test]
fn pingpong_processes_capture_both_directions_and_wireshark_decodes_them() {
    let fabric = FabricDir::create(&format!("softverbs-pcap-real-{}", std::process::id()))
        .expect("creating the fabric directory");
    let dir = fabric.path().join("captures");
    std::fs::create_dir_all(&dir).unwrap();
    let fabric_arg = fabric.path().to_str().unwrap().to_string();
    let common = ["--fabric", &fabric_arg, "--timeout", "20", "-n", "5", "-s", "64", "-g", "1"];

    let server_template = dir.join("server-{pid}.pcap");
    let mut server = spawn(
        &[&["pingpong", "-p", "0", "--accept-timeout", "60"], &common[..]].concat(),
        &[("SOFTVERBS_PCAP", server_template.to_str().unwrap())],
    );
    let server_pid = server.pid().expect("a process");
    let mut s_early = Vec::new();
    let line = loop {
        let l = server.recv_line(DEADLINE).expect("the server listens");
        if l.trim_start().starts_with("listening on TCP port") {
            break l;
        }
        s_early.push(l);
    };
    let port = line.rsplit(' ').next().unwrap().to_string();
    let client_pcap = dir.join("client.pcap");
    let client = spawn(
        &[
            &["pingpong", "-p", &port, "localhost", "--connect-timeout", "30"][..],
            &common[..],
            &["--pcap", client_pcap.to_str().unwrap()],
        ]
        .concat(),
        &[],
    );
    let c_out = finish(client, "the pingpong client");
    let s_out = [s_early, finish(server, "the pingpong server")].concat();
    let (c_psn, s_psn) = (local_psn(&c_out), local_psn(&s_out));

    let server_pcap = dir.join(format!("server-{server_pid}.pcap"));
    let c = datagrams(&client_pcap);
    let s = datagrams(&server_pcap);
    // Each process saw both directions: the same datagrams, byte for byte.
    let bag = |v: &[(u8, u32, u32, Vec<u8>)]| {
        let mut m = BTreeMap::new();
        for d in v {
            *m.entry(d.3.clone()).or_insert(0) += 1;
        }
        m
    };
    assert_eq!(bag(&c), bag(&s), "the two captures hold different datagrams");
    // Each side's SENDs, in PSN order from the PSN it announced; ACKs for them.
    // A SEND resent after its ACK timer ran out (on a machine loaded enough that the peer's
    // NIC thread did not run for the 67 ms of the pingpong's ACK timeout) is the same
    // request again, as RC sends it: a resend follows its first copy at once, so the
    // sequence, resends folded, is every PSN once, in order.
    let sends_from = |psn: u32| -> Vec<u32> {
        let mut v: Vec<u32> = c
            .iter()
            .filter(|d| d.0 == Opcode::RC_SEND_ONLY.0 && d.1.wrapping_sub(psn) & 0xff_ffff < 1000)
            .map(|d| d.1)
            .collect();
        v.dedup();
        v
    };
    let want = |psn: u32| (0..ITERS).map(|i| (psn + i) & 0xff_ffff).collect::<Vec<_>>();
    assert_eq!(sends_from(c_psn), want(c_psn), "the client's SENDs");
    assert_eq!(sends_from(s_psn), want(s_psn), "the server's SENDs");
    assert!(c.iter().any(|d| d.0 == Opcode::RC_ACKNOWLEDGE.0), "no ACK captured");
    // Opcodes are SEND ONLY and ACKNOWLEDGE only (pingpong's exchange of small messages).
    let ops: Vec<u8> = c.iter().map(|d| d.0).collect();
    assert!(
        ops.iter().all(|&o| o == Opcode::RC_SEND_ONLY.0 || o == Opcode::RC_ACKNOWLEDGE.0),
        "{ops:?}"
    );

    // Wireshark sees the same opcodes, PSNs and ICRCs.
    let fields = ["infiniband.bth.opcode", "infiniband.bth.psn", "infiniband.invariant.crc"];
    for (pcap, ours) in [(&client_pcap, &c), (&server_pcap, &s)] {
        let Some(rows) = tshark_fields("pcap_real", pcap, &fields) else { return };
        let seen: Vec<(u8, u32, u32)> = rows
            .iter()
            .map(|r| {
                assert_eq!(r.len(), 3, "{}: not decoded as RoCEv2: {r:?}", pcap.display());
                (num(&r[0]) as u8, num(&r[1]) as u32, num(&r[2]) as u32)
            })
            .collect();
        let want: Vec<(u8, u32, u32)> = ours.iter().map(|d| (d.0, d.1, d.2)).collect();
        assert_eq!(seen, want, "{}: tshark disagrees", pcap.display());
    }
}

#[test]
fn demo_in_process_captures_each_datagram_of_its_two_nics_once() {
    let fabric = FabricDir::create(&format!("softverbs-pcap-demo-{}", std::process::id()))
        .expect("creating the fabric directory");
    let pcap = fabric.path().join("demo.pcap");
    let demo = spawn(
        &["demo", "--in-process", "--pcap", pcap.to_str().unwrap()],
        &[("SOFTVERBS_FABRIC", fabric.path().to_str().unwrap())],
    );
    finish(demo, "the demo");
    let d = datagrams(&pcap);
    let mut bytes: Vec<&Vec<u8>> = d.iter().map(|d| &d.3).collect();
    bytes.sort();
    bytes.dedup();
    assert_eq!(bytes.len(), d.len(), "a datagram between the process's own NICs recorded twice");
    let ops: std::collections::BTreeSet<u8> = d.iter().map(|d| d.0).collect();
    for op in [
        Opcode::RC_SEND_ONLY,
        Opcode::RC_RDMA_WRITE_FIRST,
        Opcode::RC_RDMA_READ_REQUEST,
        Opcode::RC_COMPARE_SWAP,
        Opcode::RC_FETCH_ADD,
        Opcode::RC_ATOMIC_ACKNOWLEDGE,
        Opcode::RC_ACKNOWLEDGE,
    ] {
        assert!(ops.contains(&op.0), "opcode {:#04x} missing from {ops:?}", op.0);
    }
    let fields = ["infiniband.bth.opcode", "infiniband.bth.psn"];
    let Some(rows) = tshark_fields("pcap_real", &pcap, &fields) else { return };
    let seen: Vec<(u8, u32)> = rows.iter().map(|r| (num(&r[0]) as u8, num(&r[1]) as u32)).collect();
    let want: Vec<(u8, u32)> = d.iter().map(|d| (d.0, d.1)).collect();
    assert_eq!(seen, want, "tshark disagrees");
}

/// RoCE v2 over IPv6, as `ibv_rc_pingpong -g 0` runs it on rxe: two `pingpong` processes
/// address each other by their link-local GIDs (index 0). The capture holds IPv6 frames
/// (EtherType 0x86dd) only, from one link-local GID to the other, each whose ICRC checks as
/// the golden IPv6 frame's does in the packet tests (`parse_datagram6`); and Wireshark
/// decodes them as RoCEv2 over IPv6.
#[test]
fn pingpong_over_the_link_local_gids_sends_ipv6_frames() {
    let fabric = FabricDir::create(&format!("softverbs-pcap-v6-{}", std::process::id()))
        .expect("creating the fabric directory");
    let fabric_arg = fabric.path().to_str().unwrap().to_string();
    let common = ["--fabric", &fabric_arg, "--timeout", "20", "-n", "5", "-s", "64", "-g", "0"];
    let mut server =
        spawn(&[&["pingpong", "-p", "0", "--accept-timeout", "60"], &common[..]].concat(), &[]);
    let mut s_early = Vec::new();
    let line = loop {
        let l = server.recv_line(DEADLINE).expect("the server listens");
        if l.trim_start().starts_with("listening on TCP port") {
            break l;
        }
        s_early.push(l);
    };
    let port = line.rsplit(' ').next().unwrap().to_string();
    let pcap = fabric.path().join("client-v6.pcap");
    let client = spawn(
        &[
            &["pingpong", "-p", &port, "localhost", "--connect-timeout", "30"][..],
            &common[..],
            &["--pcap", pcap.to_str().unwrap()],
        ]
        .concat(),
        &[],
    );
    let c_out = finish(client, "the pingpong client");
    let s_out = [s_early, finish(server, "the pingpong server")].concat();
    // Each side announced its link-local GID.
    let gid_of = |out: &[String]| -> std::net::Ipv6Addr {
        let l = out.iter().find(|l| l.starts_with("  local address:")).expect("an address");
        l.rsplit(' ').next().unwrap().parse().expect("a GID")
    };
    let (c_gid, s_gid) = (gid_of(&c_out), gid_of(&s_out));
    assert!(c_gid.segments()[0] == 0xfe80 && s_gid.segments()[0] == 0xfe80, "{c_gid} {s_gid}");

    let file = std::fs::read(&pcap).expect("the capture");
    let frames = read_pcap(&pcap);
    assert!(frames.len() >= 2 * ITERS as usize, "{} frames", frames.len());
    // EtherType of each record (the 2 bytes before its datagram).
    let mut at = 24;
    while at < file.len() {
        let incl = u32::from_le_bytes(file[at + 8..at + 12].try_into().unwrap()) as usize;
        assert_eq!(file[at + 16 + 12..at + 16 + 14], [0x86, 0xdd], "an IPv6 frame");
        at += 16 + incl;
    }
    // Each SEND once (a resend after an ACK timeout on a loaded machine is the same
    // (source, PSN) again, counted once).
    let mut sends = std::collections::BTreeSet::new();
    for d in &frames {
        let (ip, p) = nic_model::packet::parse_datagram6(d).expect("a valid RoCEv2 IPv6 datagram");
        let (src, dst) = (std::net::Ipv6Addr::from(ip.src), std::net::Ipv6Addr::from(ip.dst));
        assert!((src, dst) == (c_gid, s_gid) || (src, dst) == (s_gid, c_gid), "{src} -> {dst}");
        if p.bth.opcode == Opcode::RC_SEND_ONLY {
            sends.insert((src, p.bth.psn.value()));
        }
    }
    assert_eq!(sends.len(), 2 * ITERS as usize, "each side's SENDs");
    let fields = ["ipv6.src", "ipv6.dst", "infiniband.bth.opcode", "infiniband.invariant.crc"];
    let Some(rows) = tshark_fields("pcap_real", &pcap, &fields) else { return };
    assert_eq!(rows.len(), frames.len());
    for (r, d) in rows.iter().zip(&frames) {
        assert_eq!(r.len(), 4, "not decoded as RoCEv2 over IPv6: {r:?}");
        let icrc = u32::from_be_bytes(d[d.len() - 4..].try_into().unwrap());
        assert_eq!((num(&r[2]) as u8, num(&r[3]) as u32), (d[48], icrc), "{r:?}");
    }
}
