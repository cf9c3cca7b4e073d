//! What the capture tests share: reading back a pcap file this project wrote, and asking
//! Wireshark (`tshark`) what it decodes there.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The datagrams of a pcap file this project wrote (nanosecond pcap, Ethernet framing).
pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let file = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert!(file.len() >= 24, "{}: no pcap header", path.display());
    assert_eq!(&file[0..4], &0xa1b2_3c4du32.to_le_bytes());
    let mut at = 24;
    let mut out = Vec::new();
    while at < file.len() {
        let incl = u32::from_le_bytes(file[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(file[at + 16 + 14..at + 16 + incl].to_vec());
        at += 16 + incl;
    }
    out
}

fn tshark() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("tshark")).find(|p| p.is_file())
}

/// A number as tshark prints a field: decimal or `0x` hex.
pub fn num(s: &str) -> u64 {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => s.parse().unwrap_or_else(|_| panic!("not a number: {s:?}")),
    }
}

/// The `fields` of every packet of `pcap` as tshark decodes it (UDP port 4791 as RoCEv2), one
/// row per packet; None (after saying why on stderr) when tshark is not installed, unless
/// `SOFTVERBS_REQUIRE_TSHARK=1`, which makes that a failure. Fails when tshark fails or
/// reports a malformed packet.
pub fn tshark_fields(test: &str, pcap: &Path, fields: &[&str]) -> Option<Vec<Vec<String>>> {
    let Some(tshark) = tshark() else {
        if std::env::var("SOFTVERBS_REQUIRE_TSHARK").as_deref() == Ok("1") {
            panic!("SOFTVERBS_REQUIRE_TSHARK=1 but tshark is not on PATH: install it (apt-get install tshark)");
        }
        eprintln!("{test}: skipped the tshark check: tshark is not on PATH (set SOFTVERBS_REQUIRE_TSHARK=1 to make this an error)");
        return None;
    };
    let mut cmd = Command::new(tshark);
    cmd.arg("-r").arg(pcap);
    cmd.args(["-d", "udp.port==4791,infiniband"]);
    cmd.args(["--disable-protocol", "rpcordma", "--disable-protocol", "nvme-rdma"]);
    cmd.args(["--disable-protocol", "smb_direct", "--disable-protocol", "iser"]);
    cmd.args(["-T", "fields"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark runs");
    assert!(out.status.success(), "tshark failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("Malformed"), "tshark found malformed packets:\n{text}");
    Some(text.lines().map(|l| l.split('\t').map(str::to_string).collect()).collect())
}
