//! WQE contents: scatter/gather lists and inline data read back as they were posted.

use super::*;

#[test]
fn an_sg_list_reads_back_as_posted_whatever_its_length() {
    let s = |i: u64| Sge { addr: 0x1000 * i, length: i as u32, lkey: 7 };
    for n in 0..4u64 {
        let posted: Vec<Sge> = (1..=n).map(s).collect();
        let list = qp::SgList::from(&posted[..]);
        assert_eq!(&list[..], &posted[..], "{n} SGEs");
        assert_eq!(matches!(list, qp::SgList::One(_)), n == 1, "one SGE is kept inline");
    }
    assert!(qp::SgList::default().is_empty());
}

#[test]
fn inline_data_reads_back_as_posted_whatever_its_length() {
    for len in [0, 1, 8, qp::INLINE_IN_WQE - 1, qp::INLINE_IN_WQE, qp::INLINE_IN_WQE + 1, 256] {
        let posted = pattern(len, 3);
        let copied = qp::InlineData::from(&posted[..]);
        assert_eq!(&copied[..], &posted[..], "{len} bytes");
        let in_wqe = matches!(copied, qp::InlineData::InWqe { .. });
        assert_eq!(in_wqe, len <= qp::INLINE_IN_WQE, "{len} bytes: kept in the WQE or not");
        let filled = qp::InlineData::filled(len, |buf| -> Result<()> {
            assert_eq!(buf.len(), len, "the buffer to fill is exactly the length asked for");
            assert!(buf.iter().all(|&b| b == 0), "and starts zeroed");
            buf.copy_from_slice(&posted);
            Ok(())
        })
        .unwrap();
        assert_eq!(&filled[..], &posted[..], "{len} bytes, filled");
        let failed = qp::InlineData::filled(len, |_| Err(Error::inval("no")));
        assert_eq!(failed.map(|_| ()).unwrap_err().message, "no", "a failed fill is an error");
    }
}
