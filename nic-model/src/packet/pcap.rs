//! pcap capture files of RoCEv2 traffic (LINKTYPE_ETHERNET), which Wireshark decodes as
//! "RRoCE". The softverbs wire carries bare IP datagrams; this adds the Ethernet II header.

use std::io::{self, Write};

/// The pcap magic number for nanosecond-resolution timestamps.
const MAGIC_NS: u32 = 0xa1b2_3c4d;
/// Link-layer header type: Ethernet.
const LINKTYPE_ETHERNET: u32 = 1;
/// The largest record written; longer frames are truncated in the file (original length kept).
const SNAPLEN: u32 = 65535;
/// Bytes of an Ethernet II header.
const ETHERNET_LEN: usize = 14;
/// EtherType of IPv4.
const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
/// EtherType of IPv6.
const ETHERTYPE_IPV6: [u8; 2] = [0x86, 0xdd];

/// Writes a pcap file: one Ethernet-framed record per RoCEv2 datagram.
pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Start a capture on `w`: writes the global header (nanosecond magic 0xa1b23c4d, version
    /// 2.4, snaplen 65535, LINKTYPE_ETHERNET).
    pub fn new(mut w: W) -> io::Result<Self> {
        let mut header = [0u8; 24];
        header[0..4].copy_from_slice(&MAGIC_NS.to_le_bytes());
        header[4..6].copy_from_slice(&2u16.to_le_bytes());
        header[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone 0, sigfigs 0.
        header[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        header[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        w.write_all(&header)?;
        Ok(PcapWriter { out: w })
    }

    /// Append one IPv4 or IPv6 datagram seen at `time_ns` (nanoseconds since the epoch of the
    /// run), wrapped in Ethernet II (EtherType 0x0800 or 0x86dd). MACs are 02:00:a:b:c:d for
    /// IPv4 address a.b.c.d (locally administered), and over IPv6 the MACs whose EUI-64 the
    /// addresses end with (the same ones for softverbs' link-local GIDs), so flows are
    /// readable at the link layer too.
    pub fn write_datagram(&mut self, time_ns: u64, datagram: &[u8]) -> io::Result<()> {
        let frame_len = ETHERNET_LEN + datagram.len();
        let orig_len = u32::try_from(frame_len).unwrap_or(u32::MAX);
        let incl_len = orig_len.min(SNAPLEN);
        let secs = u32::try_from(time_ns / 1_000_000_000).unwrap_or(u32::MAX);
        // Below 10^9, so the cast is exact.
        let nanos = (time_ns % 1_000_000_000) as u32;

        let mut record = [0u8; 16 + ETHERNET_LEN];
        record[0..4].copy_from_slice(&secs.to_le_bytes());
        record[4..8].copy_from_slice(&nanos.to_le_bytes());
        record[8..12].copy_from_slice(&incl_len.to_le_bytes());
        record[12..16].copy_from_slice(&orig_len.to_le_bytes());
        if datagram.first().is_some_and(|b| b >> 4 == 6) {
            // The MAC whose EUI-64 is an address's interface id (its last 8 bytes).
            let mac = |at: usize| {
                let i = datagram.get(at..at + 8).unwrap_or(&[0; 8]);
                [i[0] ^ 0x02, i[1], i[2], i[5], i[6], i[7]]
            };
            record[16..22].copy_from_slice(&mac(32));
            record[22..28].copy_from_slice(&mac(16));
            record[28..30].copy_from_slice(&ETHERTYPE_IPV6);
        } else {
            let ip_addr = |at: usize| datagram.get(at..at + 4).unwrap_or(&[0; 4]);
            record[16..18].copy_from_slice(&[0x02, 0x00]);
            record[18..22].copy_from_slice(ip_addr(16));
            record[22..24].copy_from_slice(&[0x02, 0x00]);
            record[24..28].copy_from_slice(ip_addr(12));
            record[28..30].copy_from_slice(&ETHERTYPE_IPV4);
        }
        self.out.write_all(&record)?;

        let kept = (incl_len as usize).saturating_sub(ETHERNET_LEN).min(datagram.len());
        self.out.write_all(datagram.get(..kept).unwrap_or(datagram))
    }

    /// Append one whole Ethernet frame seen at `time_ns`, as it is (no FCS): a frame that is
    /// not an IP datagram, such as the MAC control frame of a PFC pause (EtherType 0x8808),
    /// which the simulator's switches send.
    pub fn write_frame(&mut self, time_ns: u64, frame: &[u8]) -> io::Result<()> {
        let orig_len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let incl_len = orig_len.min(SNAPLEN);
        let secs = u32::try_from(time_ns / 1_000_000_000).unwrap_or(u32::MAX);
        let mut record = [0u8; 16];
        record[0..4].copy_from_slice(&secs.to_le_bytes());
        // Below 10^9, so the cast is exact.
        record[4..8].copy_from_slice(&((time_ns % 1_000_000_000) as u32).to_le_bytes());
        record[8..12].copy_from_slice(&incl_len.to_le_bytes());
        record[12..16].copy_from_slice(&orig_len.to_le_bytes());
        self.out.write_all(&record)?;
        self.out.write_all(&frame[..incl_len as usize])
    }

    /// Flush the underlying writer (records written so far reach the file).
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flush and return the underlying writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{emit_datagram, Bth, IpUdp, Opcode, Packet};
    use super::*;

    fn le32(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn header_and_one_record() {
        let ip = IpUdp { src: [10, 0, 0, 1], dst: [10, 0, 0, 2], ..IpUdp::default() };
        let bth = Bth { opcode: Opcode::RC_SEND_ONLY, dest_qp: 0x11, ..Bth::default() };
        let mut datagram = Vec::new();
        emit_datagram(&ip, &Packet::new(bth, b"bye!"), &mut datagram).unwrap();

        let mut pcap = PcapWriter::new(Vec::new()).unwrap();
        pcap.write_datagram(3_000_000_123, &datagram).unwrap();
        let file = pcap.into_inner().unwrap();

        assert_eq!(file.len(), 24 + 16 + 14 + datagram.len());
        assert_eq!(le32(&file, 0), 0xa1b2_3c4d);
        assert_eq!(file[4..8], [2, 0, 4, 0]);
        assert_eq!(le32(&file, 16), 65535);
        assert_eq!(le32(&file, 20), 1);

        let rec = &file[24..];
        assert_eq!(le32(rec, 0), 3);
        assert_eq!(le32(rec, 4), 123);
        assert_eq!(le32(rec, 8) as usize, 14 + datagram.len());
        assert_eq!(le32(rec, 12) as usize, 14 + datagram.len());
        let frame = &rec[16..];
        assert_eq!(frame[0..6], [0x02, 0x00, 10, 0, 0, 2], "destination MAC");
        assert_eq!(frame[6..12], [0x02, 0x00, 10, 0, 0, 1], "source MAC");
        assert_eq!(frame[12..14], [0x08, 0x00]);
        assert_eq!(&frame[14..], &datagram[..]);
    }

    #[test]
    fn oversized_records_are_cut_at_the_snaplen() {
        let mut pcap = PcapWriter::new(Vec::new()).unwrap();
        pcap.write_datagram(0, &vec![0x45; 65535]).unwrap();
        pcap.write_datagram(1, &[1, 2, 3]).unwrap();
        let file = pcap.into_inner().unwrap();
        let rec = &file[24..];
        assert_eq!(le32(rec, 8), 65535);
        assert_eq!(le32(rec, 12), 65535 + 14);
        let next = &rec[16 + 65535..];
        assert_eq!(le32(next, 4), 1);
        assert_eq!(le32(next, 8), 17);
        assert_eq!(next[16..22], [0x02, 0x00, 0, 0, 0, 0], "no address in a runt datagram");
        assert_eq!(next.len(), 16 + 17);
    }
}
