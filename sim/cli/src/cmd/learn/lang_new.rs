//! English lines the lessons gained with issue #32 (honest lessons) whose Traditional Chinese
//! is still to be written: kept here, in one place, so that the zh-TW translator moves each
//! into `lang.rs`'s table with its translation. Until then `--lang zh-TW` prints each marked
//! `[待翻譯]` ("to be translated") before its English, so a missing translation shows
//! instead of passing for done.

/// English line → the line `--lang zh-TW` prints until it is translated.
pub(super) const ZH_TW: &[(&str, &str)] = &[
    (
        "RDMA here travels as packets through the emulated NICs (direct reach off, so that the packets and copies can be counted).",
        "[待翻譯] RDMA here travels as packets through the emulated NICs (direct reach off, so that the packets and copies can be counted).",
    ),
    (
        "Takeaway: SGEs let one work request read and write scattered memory with no copy by the program or the kernel (here the emulated NIC copies with the CPU; a real NIC by DMA); their number per request is bounded by max_sge.",
        "[待翻譯] Takeaway: SGEs let one work request read and write scattered memory with no copy by the program or the kernel (here the emulated NIC copies with the CPU; a real NIC by DMA); their number per request is bounded by max_sge.",
    ),
    (
        "Laptop figures say nothing about RDMA hardware's. The published column is not measured here:",
        "[待翻譯] Laptop figures say nothing about RDMA hardware's. The published column is not measured here:",
    ),
    (
        "docs/learn/vs-tcp.md cites it), and it is what the RDMA column would be compared with on hardware.",
        "[待翻譯] docs/learn/vs-tcp.md cites it), and it is what the RDMA column would be compared with on hardware.",
    ),
    (
        "and puts the packets on a wire. RDMA WRITEs travel here as packets (direct reach off),",
        "[待翻譯] and puts the packets on a wire. RDMA WRITEs travel here as packets (direct reach off),",
    ),
    (
        "so the packets and copies can be counted; softverbs perf write_bw measures the direct",
        "[待翻譯] so the packets and copies can be counted; softverbs perf write_bw measures the direct",
    ),
    (
        "copy into the peer's memory instead. TCP over loopback never leaves the kernel either.",
        "[待翻譯] copy into the peer's memory instead. TCP over loopback never leaves the kernel either.",
    ),
];
