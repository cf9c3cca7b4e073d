//! The Traditional Chinese of the lines that carry the run's own numbers (PIDs, QPNs, PSNs,
//! times, addresses): `softverbs demo`'s and its failure drills'; and of `softverbs learn`'s
//! list of lessons. Each is a template, English
//! with a `{}` where the run puts a value, and its 繁體中文 with `{0}`, `{1}`, ... naming those
//! values in the English order (Chinese often puts them in another). A line matches a template
//! when it has the template's words around the values; the values are copied as printed.
//! `sim/cli/tests/zh_tw.rs` holds these to what the runs print: every template must match a
//! line some run prints (a reworded English line fails there instead of silently losing its
//! Chinese), and no run's zh-TW output may keep an English sentence.

/// English template → 繁體中文 template.
pub(super) const ZH_TW: &[(&str, &str)] = &[
    // `softverbs learn`'s list of lessons (each line whole: the name is a command word).
    (
        "softverbs learn CONCEPT: the primer's RDMA concepts, each measured against TCP in the same run.",
        "softverbs learn CONCEPT：入門教材的 RDMA 概念，每一個都在同一次執行中與 TCP 對照量測。",
    ),
    (
        "zero-copy  who copies a message's bytes: the program, the NIC, the kernel (RDMA WRITE vs TCP)",
        "zero-copy  誰複製訊息的位元組：程式、網卡、核心（RDMA WRITE 對 TCP）",
    ),
    (
        "bypass     system calls and context switches per message: RDMA's data path vs TCP's",
        "bypass     每則訊息的系統呼叫與上下文切換：RDMA 的資料路徑對 TCP 的",
    ),
    (
        "one-sided  the target's CPU while data arrives by RDMA WRITE and READ, then by TCP",
        "one-sided  資料經由 RDMA WRITE 與 READ、再經由 TCP 到達時，目標端的 CPU",
    ),
    (
        "messages   three SENDs give three completions; three TCP writes arrive as reads return",
        "messages   三個 SEND 得到三個完成；三次 TCP 寫入則依 read 回傳的方式到達",
    ),
    (
        "sge        one message gathered from three buffers, scattered into two; max_sge + 1",
        "sge        一則訊息從三個緩衝區收集、分散到兩個；以及 max_sge + 1",
    ),
    (
        "vs-tcp     latency, bandwidth, CPU, system calls and copies over a range of sizes",
        "vs-tcp     一系列大小下的延遲、頻寬、CPU、系統呼叫與複製",
    ),
    (
        "qp-states  a QP walked RESET -> INIT -> RTR -> RTS, a missing attribute, ERR's flush, RESET",
        "qp-states  QP 走過 RESET -> INIT -> RTR -> RTS、缺少的屬性、ERR 的清空、RESET",
    ),
    (
        "mr         keys and access flags: a WRITE the NIC refuses on the wire, a deregistered rkey",
        "mr         金鑰與存取旗標：網卡在線路上拒絕的 WRITE、已取消註冊的 rkey",
    ),
    (
        "Each lesson runs two processes on the soft backend; qp-states and mr, two devices of one process (docs/learn/README.md).",
        "每堂課都在 soft 後端上執行兩個行程；qp-states 與 mr 則是一個行程中的兩個裝置（docs/learn/README.md）。",
    ),
    (
        "The book of the lessons, drills and labs: docs/learn/ and docs/zh-TW/; `softverbs book --out DIR` builds it as a site.",
        "課程、故障演練與實作練習的書：docs/learn/ 與 docs/zh-TW/；`softverbs book --out DIR` 把它建成網站。",
    ),
    // The demo: who is who.
    (
        "softverbs demo: two NICs in one process: the initiator on {}, the target on {}, joined by the in-process wire.",
        "softverbs demo：一個行程裡的兩張網卡：發起端在 {0}，目標端在 {1}，以行程內的線路相連。",
    ),
    (
        "This process (pid {}) is the initiator, on {}. A second process (pid {}) is the target,",
        "本行程（pid {0}）是發起端，在 {1} 上。第二個行程（pid {2}）是目標端，",
    ),
    (
        "on its own {}: each process has its own NIC, as each host of a cluster does. Their ports",
        "在它自己的 {0} 上：每個行程都有自己的網卡，就像叢集裡的每台主機。它們的埠",
    ),
    ("meet on the shared-memory fabric {}.", "在共享記憶體 fabric {0} 上相接。"),
    (
        "initiator: {} port {}, LID {}, GID {}; RC QP {}, first PSN {}",
        "發起端：{0} 埠 {1}，LID {2}，GID {3}；RC QP {4}，第一個 PSN {5}",
    ),
    (
        "target:    {} port {}, LID {}, GID {}; RC QP {}, first PSN {}",
        "目標端：  {0} 埠 {1}，LID {2}，GID {3}；RC QP {4}，第一個 PSN {5}",
    ),
    (
        "{} bytes registered at {} with rkey {}, open to remote READ, WRITE and atomics",
        "{0} 位元組註冊於 {1}，rkey {2}，開放遠端 READ、WRITE 與原子操作",
    ),
    (
        "Port {} is a RoCE v2 port (Ethernet link layer, LID {}): a peer is addressed by a GID, an",
        "埠 {0} 是 RoCE v2 埠（乙太網路鏈結層，LID {1}）：對端以 GID 定址，GID 是",
    ),
    (
        "IP address of the port, named by its index in the port's GID table:",
        "該埠的一個 IP 位址，以它在埠的 GID 表中的索引指稱：",
    ),
    ("GID[{}]: {}   <- this side sends from it", "GID[{0}]: {1}   <- 這一端從它送出"),
    (
        "GID index {}: {}, RoCE v2, IPv4 — the entry ib_write_bw would pick (the first IPv4 GID).",
        "GID 索引 {0}：{1}，RoCE v2，IPv4——ib_write_bw 會選的那一項（第一個 IPv4 GID）。",
    ),
    (
        "Each QP's address vector carries a GRH: the peer's GID as dgid, this index as sgid_index.",
        "每個 QP 的位址向量都帶著 GRH：對端的 GID 作為 dgid，這個索引作為 sgid_index。",
    ),
    (
        "RESET -> INIT -> RTR -> RTS towards the other, with path MTU {} bytes, addressed by GID (sgid_index {}).",
        "RESET -> INIT -> RTR -> RTS，path MTU {0} 位元組，以 GID 定址（sgid_index {1}）。",
    ),
    // The demo: each operation's result.
    ("{} us from ibv_post_send to the completion", "從 ibv_post_send 到完成：{0} us"),
    ("bytes that landed here: \"{}\"", "落在這裡的位元組：\"{0}\""),
    ("target memory [recv buffer]: {}", "目標端記憶體 [接收緩衝區]：{0}"),
    ("target memory [atomic counter]: {}", "目標端記憶體 [原子計數器]：{0}"),
    (
        "original value returned: {}; it matched {}, so the counter now holds {}",
        "傳回的原值：{0}；它等於 {1}，所以計數器現在是 {2}",
    ),
    ("value before the add: {}, so the counter is now {}", "加之前的值：{0}，所以計數器現在是 {1}"),
    (
        "target memory [+{}, {} B written by RDMA WRITE]: starts \"{}\", all {} bytes as sent",
        "目標端記憶體 [+{0}，RDMA WRITE 寫入的 {1} B]：開頭是 \"{2}\"，全部 {3} 位元組與送出的相同",
    ),
    (
        "target CPU while its program slept in read(): its program thread {}; its emulated NIC thread ({}) {}, the work a real NIC does in silicon",
        "目標端程式在 read() 中睡眠時的 CPU：程式執行緒 {0}；模擬網卡執行緒（{1}）{2}，也就是真實網卡在晶片裡做的工作",
    ),
    (
        "operation                              data  packets out/in  datagram bytes        time",
        "操作                                   資料     封包 出/入      資料包位元組        時間",
    ),
    // The demo: the note under the measurements, one line for one line.
    (
        "Single samples, so they vary from run to run. The first operation ({} us) is",
        "單次樣本，所以每次執行都不同。第一個操作（{0} us）是",
    ),
    (
        "the cold one: once the connection was set up, the target's NIC thread stood by, asleep",
        "冷的那一次：連線建立後，目標端的網卡執行緒待命並睡著，",
    ),
    (
        "for up to its standby interval ({} us by default, SOFTVERBS_STANDBY_US) in case the",
        "最長到它的待命間隔（預設 {0} us，SOFTVERBS_STANDBY_US），以防",
    ),
    (
        "target program called in again; the program blocked in read() instead, so the NIC thread",
        "目標端程式再次呼叫進來；但程式改為阻塞在 read() 中，所以網卡執行緒",
    ),
    (
        "took over only when that interval ended (the first datagram also mapped the target's",
        "要到那段間隔結束才接手（第一個資料包也映射了目標端的",
    ),
    (
        "inbox). Warm, the NIC thread spins {} us after its last work, then parks on its",
        "收件匣）。熱的時候，網卡執行緒在最後一次工作後自旋 {0} us，然後停在它的",
    ),
    (
        "doorbell, which the sender rings: the RDMA READ again took {} us. On a busy",
        "門鈴上，由送出端按響：再一次的 RDMA READ 花了 {0} us。在忙碌的",
    ),
    (
        "machine the scheduler can add milliseconds. Latency and bandwidth measured properly:",
        "機器上，排程器可能再多加幾毫秒。正確量測的延遲與頻寬：",
    ),
    // The drills: the set-up.
    (
        "softverbs demo --break {}: a failure on purpose, and what shows it.",
        "softverbs demo --break {0}：故意弄壞一件事，以及是什麼顯示了它。",
    ),
    (
        "initiator: {}, RC QP {}; target: its own {} in pid {}, RC QP {}",
        "發起端：{0}，RC QP {1}；目標端：行程 {3} 中它自己的 {2}，RC QP {4}",
    ),
    (
        "the target posted {} receive(s) of {} bytes; its memory region: {} bytes at {}, rkey {}",
        "目標端掛了 {0} 個 {1} 位元組的接收請求；它的記憶體區域：{2} 位元組，位於 {3}，rkey {4}",
    ),
    (
        "retry attributes: timeout {} ({}), retry_cnt {}, rnr_retry {}, target min_rnr_timer {} ({})",
        "重試屬性：timeout {0}（{1}），retry_cnt {2}，rnr_retry {3}，目標端 min_rnr_timer {4}（{5}）",
    ),
    // The drills: the wire.
    (
        "{} ms of silence: the local ACK timeout (timeout {} = {} ms) fired; retry {} of retry_cnt {}",
        "{0} ms 的沉默：本地 ACK 逾時（timeout {1} = {2} ms）觸發；retry_cnt {4} 次中的第 {3} 次重試",
    ),
    (
        "RNR retry {} (rnr_retry {}): PSN {} again, {} ms after the RNR NAK",
        "第 {0} 次 RNR 重試（rnr_retry {1}）：再送 PSN {2}，在 RNR NAK 之後 {3} ms",
    ),
    (
        "RNR NAK: receiver not ready, no receive posted (syndrome {}); wait at least {} us (timer {}), then retry",
        "RNR NAK：接收端未就緒，沒有掛好的接收請求（syndrome {0}）；至少等待 {1} us（timer {2}），然後重試",
    ),
    (
        "RNR NAK: receiver not ready, no receive posted (syndrome {}); no RNR retry left (rnr_retry {}): no wait, the QP goes to IBV_QPS_ERR and the SEND completes with IBV_WC_RNR_RETRY_EXC_ERR",
        "RNR NAK：接收端未就緒，沒有掛好的接收請求（syndrome {0}）；已沒有 RNR 重試次數（rnr_retry {1}）：不等待，QP 進入 IBV_QPS_ERR，該 SEND 以 IBV_WC_RNR_RETRY_EXC_ERR 完成",
    ),
    (
        "NAK: remote access error (syndrome {}) for PSN {}",
        "NAK：遠端存取錯誤（syndrome {0}），PSN {1}",
    ),
    ("NAK: invalid request (syndrome {}) for PSN {}", "NAK：無效的請求（syndrome {0}），PSN {1}"),
    ("NAK: PSN sequence error (syndrome {}) for PSN {}", "NAK：PSN 順序錯誤（syndrome {0}），PSN {1}"),
    (
        "NAK: remote operational error (syndrome {}) for PSN {}",
        "NAK：遠端操作錯誤（syndrome {0}），PSN {1}",
    ),
    (
        "the SEND behind reached the target while it still expected PSN {}, which it refused with the RNR NAK (a refused request is not taken, so the next PSN is out of order): the target NAKs it once, naming the PSN it expects; the initiator's QP is already in IBV_QPS_ERR and ignores it",
        "後面那個 SEND 到達目標端時，它仍在等 PSN {0}，也就是它以 RNR NAK 拒絕的那個（被拒絕的請求不算收下，所以下一個 PSN 是亂序的）：目標端對它 NAK 一次，指明它期待的 PSN；發起端的 QP 已在 IBV_QPS_ERR，不理會它",
    ),
    (
        "the SEND behind reached the target while it still expected PSN {}, which it refused with the RNR NAK (a refused request is not taken, so the next PSN is out of order): the target NAKs it once, naming the PSN it expects; the initiator resends from that PSN after its RNR wait",
        "後面那個 SEND 到達目標端時，它仍在等 PSN {0}，也就是它以 RNR NAK 拒絕的那個（被拒絕的請求不算收下，所以下一個 PSN 是亂序的）：目標端對它 NAK 一次，指明它期待的 PSN；發起端在 RNR 等待之後從那個 PSN 重送",
    ),
    // The drills: completions, events and what became of the QPs.
    ("The initiator's completions ({} after the post):", "發起端的完成（送出後 {0}）："),
    ("initiator CQ: wr_id={}", "發起端 CQ：wr_id={0}"),
    ("target CQ: wr_id={}", "目標端 CQ：wr_id={0}"),
    (
        "{} work request(s) behind the failed one flushed (IBV_WC_WR_FLUSH_ERR): the QP is in error, nothing behind the failure completes.",
        "失敗者後面的 {0} 個工作請求被清空（IBV_WC_WR_FLUSH_ERR）：QP 處於錯誤狀態，失敗之後的都不會完成。",
    ),
    ("target async event: {} on {}", "目標端非同步事件：{0}，發生在 {1}"),
    ("initiator QP {} state: {}", "發起端 QP {0} 的狀態：{1}"),
    ("target QP {} state: {}", "目標端 QP {0} 的狀態：{1}"),
    ("target QP {}: destroyed; its NIC answered nothing", "目標端 QP {0}：已銷毀；它的網卡什麼都沒回答"),
    (
        "target ibv_poll_cq: EIO: ibv_poll_cq: CQ overrun: {} completion(s) were lost because the CQ of {} entries was full",
        "目標端 ibv_poll_cq：EIO：ibv_poll_cq：CQ 溢位：{1} 個項目的 CQ 已滿，因此遺失了 {0} 個完成",
    ),
    (
        "ibv_modify_qp({}) failed: EINVAL (errno {}): ibv_modify_qp: IBV_QP_AV: port {} is RoCE (Ethernet link layer): an address vector needs a GRH with a GID (is_global, dgid, sgid_index); a LID names no port there",
        "ibv_modify_qp({0}) 失敗：EINVAL（errno {1}）：ibv_modify_qp: IBV_QP_AV：埠 {2} 是 RoCE（乙太網路鏈結層）：位址向量需要帶 GID 的 GRH（is_global、dgid、sgid_index）；在那裡 LID 不指向任何埠",
    ),
    (
        "the QP stays in IBV_QPS_INIT; nothing was sent (no packet without a path).",
        "QP 停在 IBV_QPS_INIT；什麼都沒送出（沒有路徑就沒有封包）。",
    ),
    (
        "with is_global {}, dgid {} and sgid_index {}: ibv_modify_qp succeeded, QP in IBV_QPS_RTR.",
        "is_global {0}、dgid {1}、sgid_index {2}：ibv_modify_qp 成功，QP 在 IBV_QPS_RTR。",
    ),
];

/// The values of `text` where `template` has a `{}`, if `text` is the template's words around
/// them (each value at least one character).
pub fn matches(template: &str, text: &str) -> Option<Vec<String>> {
    let pieces: Vec<&str> = template.split("{}").collect();
    let rest = text.strip_prefix(pieces[0])?;
    let (last, middle) = pieces[1..].split_last().map_or((None, &[][..]), |(l, m)| (Some(*l), m));
    let Some(last) = last else {
        // No value: the whole line.
        return rest.is_empty().then(Vec::new);
    };
    let mut values = Vec::new();
    let mut rest = rest;
    for piece in middle {
        // The value ends where the next words begin (at least one character on).
        let at = rest.get(1..)?.find(piece)? + 1;
        values.push(rest[..at].to_string());
        rest = &rest[at + piece.len()..];
    }
    let value = rest.strip_suffix(last)?;
    if value.is_empty() {
        return None;
    }
    values.push(value.to_string());
    Some(values)
}

/// `text` in 繁體中文 by the first template it matches.
pub fn translate(text: &str) -> Option<String> {
    // The lessons' templates first: some are more specific than the demo's (an error
    // completion's `initiator CQ: wr_id={} (opcode, ...)`).
    super::lang_lessons::LIVE.iter().chain(ZH_TW).find_map(|(en, zh)| {
        let values = matches(en, text)?;
        let mut out = (*zh).to_string();
        for (i, v) in values.iter().enumerate() {
            out = out.replace(&format!("{{{i}}}"), v);
        }
        Some(out)
    })
}

/// The English templates, for the test that holds them to what the runs print.
pub fn templates() -> impl Iterator<Item = &'static str> {
    super::lang_lessons::LIVE.iter().chain(ZH_TW).map(|(en, _)| *en)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_takes_the_values_around_its_words() {
        assert_eq!(
            matches(
                "RNR retry {} (rnr_retry {}): PSN {} again",
                "RNR retry 2 (rnr_retry 7): PSN 0x001000 again"
            ),
            Some(vec!["2".into(), "7".into(), "0x001000".into()])
        );
        assert_eq!(matches("a {} b", "a  b"), None, "a value is never empty");
        assert_eq!(matches("target CQ: wr_id={}", "target CQ: wr_id=1"), Some(vec!["1".into()]));
        assert_eq!(matches("no values", "no values"), Some(vec![]));
        assert_eq!(matches("no values", "no values here"), None);
        assert_eq!(
            translate(
                "initiator: softverbs0, RC QP 0x1; target: its own softverbs0 in pid 42, RC QP 0x2"
            )
            .as_deref(),
            Some("發起端：softverbs0，RC QP 0x1；目標端：行程 42 中它自己的 softverbs0，RC QP 0x2")
        );
        // Every Chinese template uses each of its English template's values once.
        for (en, zh) in super::super::lang_lessons::LIVE.iter().chain(ZH_TW) {
            let n = en.matches("{}").count();
            for i in 0..n {
                assert_eq!(zh.matches(&format!("{{{i}}}")).count(), 1, "{en}");
            }
            assert!(!zh.contains(&format!("{{{n}}}")), "{en}");
        }
    }
}
