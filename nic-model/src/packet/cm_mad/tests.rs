use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::packet::{parse_datagram, PcapWriter};

fn mapped(ip: [u8; 4]) -> [u8; 16] {
    Ipv4Addr::from(ip).to_ipv6_mapped().octets()
}

/// A REQ as `rdma_connect` from 10.201.0.2 port 50000 to 10.201.0.1 port 7174 (rping's) makes it.
fn req() -> CmReq {
    let ip = IpCmHeader {
        src_port: 50000,
        src: IpAddr::V4(Ipv4Addr::new(10, 201, 0, 2)),
        dst: IpAddr::V4(Ipv4Addr::new(10, 201, 0, 1)),
    };
    let mut private = ip.to_bytes().to_vec();
    private.extend_from_slice(b"hello");
    CmReq {
        local_comm_id: 0x1122_3344,
        service_id: SERVICE_ID_PS_TCP | 7174,
        local_ca_guid: 0x0200_5eff_fe00_0001,
        local_qkey: 0,
        local_qpn: 0x00_0123,
        responder_resources: 16,
        local_eecn: 0,
        initiator_depth: 16,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport: 0,
        e2e_flow_control: true,
        starting_psn: 0xAB_CDEF,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xFFFF,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        ext_transport: 0,
        primary: CmPath {
            local_gid: mapped([10, 201, 0, 2]),
            remote_gid: mapped([10, 201, 0, 1]),
            flow_label: 0xABCDE,
            packet_rate: 0x11,
            traffic_class: 0,
            hop_limit: 64,
            sl: 3,
            local_ack_timeout: 18,
            ..CmPath::default()
        },
        private,
        ..CmReq::default()
    }
}

fn rep() -> CmRep {
    CmRep {
        local_comm_id: 0x5566_7788,
        remote_comm_id: 0x1122_3344,
        local_qpn: 0x00_0456,
        starting_psn: 0x12_3456,
        responder_resources: 16,
        initiator_depth: 16,
        target_ack_delay: 15,
        failover_accepted: 0,
        e2e_flow_control: true,
        rnr_retry_count: 7,
        srq: false,
        local_ca_guid: 0x0200_5eff_fe00_0002,
        private: b"rep private".to_vec(),
        ..CmRep::default()
    }
}

/// The REQ's fields sit where IBA vol. 1 table 99 (and Linux's ibta_vol1_c12.h) puts them.
#[test]
fn a_req_lays_out_as_the_iba_table_says() {
    let mad = CmMad { tid: 0x0102_0304_0506_0708, msg: CmMsg::Req(req()) }.emit().unwrap();
    assert_eq!(&mad[..4], &[1, 0x07, 2, 0x03], "base version, class CM, version 2, Send");
    assert_eq!(&mad[4..8], &[0; 4], "status and class specific");
    assert_eq!(&mad[8..16], &[1, 2, 3, 4, 5, 6, 7, 8], "transaction ID");
    assert_eq!(&mad[16..20], &[0x00, 0x10, 0, 0], "attribute REQ, reserved");
    assert_eq!(&mad[20..24], &[0; 4], "attribute modifier");
    let d = &mad[24..];
    assert_eq!(&d[0..8], &[0x11, 0x22, 0x33, 0x44, 0, 0, 0, 0]);
    assert_eq!(&d[8..16], &[0, 0, 0, 0, 0x01, 0x06, 0x1C, 0x06], "service ID: PS_TCP | 7174");
    assert_eq!(&d[16..24], &[0x02, 0x00, 0x5e, 0xff, 0xfe, 0, 0, 1]);
    assert_eq!(&d[32..36], &[0x00, 0x01, 0x23, 16], "QPN | responder resources");
    assert_eq!(&d[36..40], &[0, 0, 0, 16], "EECN | initiator depth");
    assert_eq!(d[43], 20 << 3 | 1, "remote CM timeout | RC | flow control");
    assert_eq!(&d[44..48], &[0xAB, 0xCD, 0xEF, 20 << 3 | 7], "PSN | local timeout | retries");
    assert_eq!(&d[48..52], &[0xFF, 0xFF, 0x37, 0xF0], "P_Key, MTU 3 | RNR 7, CM retries 15");
    assert_eq!(&d[52..56], &[0; 4], "LIDs");
    assert_eq!(&d[56..72], &mapped([10, 201, 0, 2]));
    assert_eq!(&d[72..88], &mapped([10, 201, 0, 1]));
    assert_eq!(&d[88..92], &[0xAB, 0xCD, 0xE0, 0x11], "flow label | packet rate");
    assert_eq!(&d[92..96], &[0, 64, 3 << 4, 18 << 3], "TC, hop limit, SL, ACK timeout");
    assert_eq!(&d[96..140], &[0; 44], "no alternate path");
    // The IP CM header: version 0, IPv4, port, then the addresses in their last 4 bytes.
    assert_eq!(&d[140..144], &[0, 0x40, 0xC3, 0x50]);
    assert_eq!(&d[144..160], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 201, 0, 2]);
    assert_eq!(&d[160..176], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 201, 0, 1]);
    assert_eq!(&d[176..181], b"hello");
    assert!(d[181..].iter().all(|&b| b == 0), "private data padded with zeros");
}

#[test]
fn a_rep_lays_out_as_the_iba_table_says() {
    let mad = CmMad { tid: 9, msg: CmMsg::Rep(rep()) }.emit().unwrap();
    assert_eq!(&mad[16..18], &[0x00, 0x13]);
    let d = &mad[24..];
    assert_eq!(&d[0..8], &[0x55, 0x66, 0x77, 0x88, 0x11, 0x22, 0x33, 0x44]);
    assert_eq!(&d[12..16], &[0x00, 0x04, 0x56, 0]);
    assert_eq!(&d[20..24], &[0x12, 0x34, 0x56, 0]);
    assert_eq!(&d[24..28], &[16, 16, 15 << 3 | 1, 7 << 5]);
    assert_eq!(&d[28..36], &[0x02, 0x00, 0x5e, 0xff, 0xfe, 0, 0, 2]);
    assert_eq!(&d[36..47], b"rep private");
}

fn every_message() -> Vec<CmMsg> {
    let ids = |l, r, p: &[u8]| CmIds { local_comm_id: l, remote_comm_id: r, private: p.to_vec() };
    vec![
        CmMsg::Req(req()),
        CmMsg::Mra(CmMra {
            local_comm_id: 7,
            remote_comm_id: 8,
            message_mraed: 1,
            service_timeout: 21,
            private: vec![1, 2, 3],
        }),
        CmMsg::Rej(CmRej {
            local_comm_id: 0x5566_7788,
            remote_comm_id: 0x1122_3344,
            message_rejected: 0,
            reject_info_len: 0,
            reason: 28,
            ari: vec![],
            private: b"no".to_vec(),
        }),
        CmMsg::Rep(rep()),
        CmMsg::Rtu(ids(0x1122_3344, 0x5566_7788, b"")),
        CmMsg::Dreq(CmDreq {
            local_comm_id: 0x1122_3344,
            remote_comm_id: 0x5566_7788,
            remote_qpn: 0x456,
            private: vec![],
        }),
        CmMsg::Drep(ids(0x5566_7788, 0x1122_3344, b"bye")),
        CmMsg::SidrReq(SidrReq {
            request_id: 0xCAFE,
            pkey: 0xFFFF,
            service_id: SERVICE_ID_PS_UDP | 7174,
            private: req().private,
        }),
        CmMsg::SidrRep(SidrRep {
            request_id: 0xCAFE,
            status: 0,
            add_info_len: 0,
            qpn: 0x789,
            service_id: SERVICE_ID_PS_UDP | 7174,
            qkey: 0x0123_4567,
            add_info: vec![],
            private: vec![9; 136],
        }),
    ]
}

/// Private data comes back at the message's full length: pad what was sent to compare.
fn padded(mut msg: CmMsg) -> CmMsg {
    let fill = |v: &mut Vec<u8>, n: usize| v.resize(n, 0);
    let n = msg.attr().private_data().1;
    match &mut msg {
        CmMsg::Req(m) => fill(&mut m.private, n),
        CmMsg::Mra(m) => fill(&mut m.private, n),
        CmMsg::Rej(m) => {
            fill(&mut m.private, n);
            fill(&mut m.ari, 72);
        }
        CmMsg::Rep(m) => fill(&mut m.private, n),
        CmMsg::Rtu(m) | CmMsg::Drep(m) => fill(&mut m.private, n),
        CmMsg::Dreq(m) => fill(&mut m.private, n),
        CmMsg::SidrReq(m) => fill(&mut m.private, n),
        CmMsg::SidrRep(m) => {
            fill(&mut m.private, n);
            fill(&mut m.add_info, 72);
        }
    }
    msg
}

#[test]
fn every_message_parses_back_to_what_was_emitted() {
    for (i, msg) in every_message().into_iter().enumerate() {
        let mad = CmMad { tid: 100 + i as u64, msg: msg.clone() };
        let bytes = mad.emit().unwrap();
        assert_eq!(u16::from_be_bytes([bytes[16], bytes[17]]), msg.attr() as u16);
        let back = CmMad::parse(&bytes).unwrap();
        assert_eq!(back, CmMad { tid: 100 + i as u64, msg: padded(msg) });
        assert_eq!(back.emit().unwrap(), bytes, "re-emits byte for byte");
    }
}

#[test]
fn private_data_and_message_offsets_fill_the_232_bytes() {
    for msg in every_message() {
        let (o, n) = msg.attr().private_data();
        assert_eq!(o + n, CM_DATA_LEN, "{:?}", msg.attr());
    }
}

#[test]
fn bad_mads_are_errors_that_say_what_is_wrong() {
    let good = CmMad { tid: 1, msg: CmMsg::Req(req()) }.emit().unwrap();
    assert_eq!(CmMad::parse(&good[..255]), Err(MadError::Length(255)));
    let mut sa = good;
    sa[1] = 0x03;
    let e = CmMad::parse(&sa).unwrap_err();
    assert_eq!(e, MadError::NotCm { class: 3, version: 2, method: 3 });
    assert!(e.to_string().contains("not a CM MAD: class 0x03"), "{e}");
    let mut odd = good;
    odd[17] = 0x19;
    assert_eq!(CmMad::parse(&odd), Err(MadError::UnknownAttr(0x0019)));
    let mut long = req();
    long.private = vec![0; 93];
    let e = CmMad { tid: 1, msg: CmMsg::Req(long) }.emit().unwrap_err();
    assert_eq!(e.to_string(), "93 bytes of private data: a Req holds 92");
    assert_eq!(IpCmHeader::parse(&[0; 36]), Err(MadError::BadIpHeader(0)));
    assert_eq!(IpCmHeader::parse(&[0; 35]), Err(MadError::Length(35)));
}

#[test]
fn the_ip_header_round_trips_v4_and_v6() {
    let h = IpCmHeader::parse(&req().private).unwrap();
    assert_eq!(h.src_port, 50000);
    assert_eq!(h.src, IpAddr::V4(Ipv4Addr::new(10, 201, 0, 2)));
    assert_eq!(h.dst, IpAddr::V4(Ipv4Addr::new(10, 201, 0, 1)));
    let v6 = IpCmHeader { src_port: 1, src: "fe80::1".parse().unwrap(), dst: h.dst };
    let b = v6.to_bytes();
    assert_eq!(b[1], 0x60);
    let back = IpCmHeader::parse(&b).unwrap();
    assert_eq!(back.src, v6.src);
    assert_eq!(back.dst, IpAddr::V6(Ipv4Addr::new(10, 201, 0, 1).to_ipv6_mapped()));
}

fn gsi_ip(src: [u8; 4], dst: [u8; 4]) -> IpUdp {
    IpUdp { src, dst, src_port: 4791, tos: 0, ttl: 64, ident: 0, dont_fragment: true }
}

#[test]
fn a_gsi_datagram_is_a_ud_send_to_qp1_with_the_gsi_qkey() {
    let mad = CmMad { tid: 5, msg: CmMsg::Req(req()) }.emit().unwrap();
    let mut out = Vec::new();
    emit_gsi_datagram(&gsi_ip([10, 201, 0, 2], [10, 201, 0, 1]), 0x12, &mad, &mut out).unwrap();
    let (ip, pkt) = parse_datagram(&out).unwrap();
    assert_eq!((ip.src, ip.dst), ([10, 201, 0, 2], [10, 201, 0, 1]));
    assert_eq!(pkt.bth.opcode, Opcode::UD_SEND_ONLY);
    assert_eq!((pkt.bth.dest_qp, pkt.bth.pkey, pkt.bth.psn.value()), (1, 0xFFFF, 0x12));
    assert_eq!(pkt.deth, Some(Deth { qkey: 0x8001_0000, src_qp: 1 }));
    assert_eq!(pkt.payload, &mad[..]);
}

fn tshark() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("tshark")).find(|p| p.is_file())
}

/// tshark's rows for `fields` of every frame in `pcap`, `_ws.malformed` last.
fn tshark_rows(tshark: &Path, pcap: &Path, fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new(tshark);
    cmd.arg("-r").arg(pcap).args(["-d", "udp.port==4791,infiniband", "-T", "fields"]);
    for f in fields.iter().chain(&["_ws.malformed"]) {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark runs");
    assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let rows: Vec<Vec<String>> =
        text.lines().map(|l| l.split('\t').map(str::to_string).collect()).collect();
    for r in &rows {
        assert_eq!(r.last().map(String::as_str), Some(""), "malformed frame:\n{text}");
    }
    rows
}

/// An independent decoder agrees: tshark's InfiniBand dissector reads every CM message's
/// fields as they were set, and finds no frame malformed.
#[test]
fn tshark_decodes_the_cm_mads_as_infiniband_cm() {
    let Some(tshark) = tshark() else {
        assert_ne!(
            std::env::var("SOFTVERBS_REQUIRE_TSHARK").as_deref(),
            Ok("1"),
            "SOFTVERBS_REQUIRE_TSHARK=1 but tshark is not on PATH"
        );
        eprintln!("skipped: tshark is not on PATH (SOFTVERBS_REQUIRE_TSHARK=1 makes it an error)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("softverbs-cm-mad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("cm.pcap");
    {
        let mut w = PcapWriter::new(std::fs::File::create(&pcap).unwrap()).unwrap();
        let mut out = Vec::new();
        for (i, msg) in every_message().into_iter().enumerate() {
            let mad = CmMad { tid: 0x1000 + i as u64, msg }.emit().unwrap();
            emit_gsi_datagram(&gsi_ip([10, 201, 0, 2], [10, 201, 0, 1]), i as u32, &mad, &mut out)
                .unwrap();
            w.write_datagram(i as u64 * 1000, &out).unwrap();
        }
    }
    let rows = tshark_rows(
        &tshark,
        &pcap,
        &[
            "infiniband.bth.destqp",
            "infiniband.deth.q_key",
            "infiniband.mad.mgmtclass",
            "infiniband.mad.attributeid",
            "infiniband.mad.transactionid",
            "infiniband.cm.req.serviceid",
            "infiniband.cm.req.localqpn",
            "infiniband.cm.req.startpsn",
            "infiniband.cm.req.pppmtu",
            "infiniband.cm.req.ip_cm.sport",
            "infiniband.cm.req.ip_cm.sip4",
            "infiniband.cm.req.ip_cm.dip4",
            "infiniband.cm.rep.localqpn",
            "infiniband.cm.rep.startpsn",
            "infiniband.cm.rep.remotecommid",
            "infiniband.cm.rtu.localcommid",
            "infiniband.cm.rej.reason",
            "infiniband.cm.dreq.remotecommid",
            "infiniband.cm.drsp.localcommid",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    let num = |s: &str| -> u64 {
        let s = s.trim();
        s.strip_prefix("0x")
            .map_or_else(|| s.parse().unwrap(), |h| u64::from_str_radix(h, 16).unwrap())
    };
    assert_eq!(rows.len(), 9, "{rows:?}");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(num(&r[0]), 1, "frame {i}: to QP1");
        assert_eq!(num(&r[1]), 0x8001_0000, "frame {i}: the GSI Q_Key");
        assert_eq!(num(&r[2]), 7, "frame {i}: class CM");
        assert_eq!(num(&r[3]), 0x10 + i as u64, "frame {i}: attribute");
        assert_eq!(num(&r[4]), 0x1000 + i as u64, "frame {i}: transaction ID");
    }
    let req = &rows[0];
    assert_eq!(num(&req[5]), SERVICE_ID_PS_TCP | 7174);
    assert_eq!((num(&req[6]), num(&req[7]), num(&req[8])), (0x123, 0xAB_CDEF, 3));
    assert_eq!(num(&req[9]), 50000);
    assert_eq!((req[10].as_str(), req[11].as_str()), ("10.201.0.2", "10.201.0.1"));
    let rep = &rows[3];
    assert_eq!((num(&rep[12]), num(&rep[13]), num(&rep[14])), (0x456, 0x12_3456, 0x1122_3344));
    assert_eq!(num(&rows[4][15]), 0x1122_3344, "RTU");
    assert_eq!(num(&rows[2][16]), 28, "REJ reason: consumer reject");
    assert_eq!(num(&rows[5][17]), 0x5566_7788, "DREQ");
    assert_eq!(num(&rows[6][18]), 0x5566_7788, "DREP");
}

/// A REQ between IPv6 addresses, as rdma_cm's cma.c writes one for an `AF_INET6` id over RoCE
/// (the CM across hosts over IPv6): the primary path's GIDs are the IPv6 addresses, and the
/// IP CM header says version 6 with the whole 16 bytes of each address.
#[test]
fn a_req_between_ipv6_addresses_carries_them_in_its_path_and_ip_header() {
    let src: std::net::Ipv6Addr = "fd32::2".parse().unwrap();
    let dst: std::net::Ipv6Addr = "fd32::1".parse().unwrap();
    let hdr = IpCmHeader { src_port: 50000, src: src.into(), dst: dst.into() };
    let mut private = hdr.to_bytes().to_vec();
    private.extend_from_slice(b"hello");
    let mut r = req();
    r.primary.local_gid = src.octets();
    r.primary.remote_gid = dst.octets();
    r.private = private;
    let mad = CmMad { tid: 1, msg: CmMsg::Req(r.clone()) }.emit().unwrap();
    let d = &mad[24..];
    assert_eq!(&d[56..72], &src.octets(), "primary local GID");
    assert_eq!(&d[72..88], &dst.octets(), "primary remote GID");
    assert_eq!(&d[140..144], &[0, 0x60, 0xC3, 0x50], "version 0, IPv6, port 50000");
    assert_eq!(&d[144..160], &src.octets());
    assert_eq!(&d[160..176], &dst.octets());
    assert_eq!(&d[176..181], b"hello");
    let CmMsg::Req(back) = CmMad::parse(&mad).unwrap().msg else { panic!("not a REQ") };
    assert_eq!((back.primary.local_gid, back.primary.remote_gid), (src.octets(), dst.octets()));
    let h = IpCmHeader::parse(&back.private).unwrap();
    assert_eq!((h.src_port, h.src, h.dst), (50000, IpAddr::V6(src), IpAddr::V6(dst)));
}

/// The same MAD over IPv6: a UD SEND to QP1 with the GSI Q_Key, its ICRC over the IPv6
/// headers (a receiver that rebuilds them from the addresses and ports checks it).
#[test]
fn a_gsi_datagram_over_ipv6_is_the_same_send_with_its_icrc_over_ipv6() {
    let mad = CmMad { tid: 5, msg: CmMsg::Rtu(CmIds::default()) }.emit().unwrap();
    let src: std::net::Ipv6Addr = "fd32::2".parse().unwrap();
    let dst: std::net::Ipv6Addr = "fd32::1".parse().unwrap();
    let ip = Ip6Udp { src: src.octets(), dst: dst.octets(), src_port: 40000, ..Ip6Udp::default() };
    let mut out = Vec::new();
    emit_gsi_datagram6(&ip, 0x12, &mad, &mut out).unwrap();
    assert_eq!(out[0] >> 4, 6);
    let (back, pkt) = crate::packet::parse_datagram6(&out).expect("the ICRC checks");
    assert_eq!((back.src, back.dst, back.src_port), (ip.src, ip.dst, 40000));
    assert_eq!(pkt.bth.opcode, Opcode::UD_SEND_ONLY);
    assert_eq!((pkt.bth.dest_qp, pkt.bth.pkey, pkt.bth.psn.value()), (1, 0xFFFF, 0x12));
    assert_eq!(pkt.deth, Some(Deth { qkey: 0x8001_0000, src_qp: 1 }));
    assert_eq!(pkt.payload, &mad[..]);
    let mut other = out.clone();
    other[40] ^= 1; // another UDP source port: the ICRC no longer holds
    assert!(crate::packet::parse_datagram6(&other).is_err());
}
