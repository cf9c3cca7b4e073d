//! The language of the lessons' explanatory lines (`--lang en|zh-TW`): one message table,
//! English line → Traditional Chinese line, applied line by line as the output passes, so the
//! lessons keep printing English and a run stays live. Only lines found in the table change:
//! wire lines, verbs names, measured lines and the `RESULT` line are never in it. Nothing here
//! names a lesson, so `softverbs demo` can wrap its output the same way.

use std::io::{self, Write};

/// A language the explanatory lines can be printed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Lang {
    /// English, as the lessons are written.
    #[default]
    En,
    /// Traditional Chinese as written in Taiwan (繁體中文).
    ZhTw,
}

/// The `--lang` values, in the order the error names them.
pub const CHOICES: [&str; 2] = ["en", "zh-TW"];

/// Parses `--lang`; an unknown value's error names the choices (clap makes it exit 2).
pub fn parse(s: &str) -> Result<Lang, String> {
    match s {
        "en" => Ok(Lang::En),
        "zh-TW" => Ok(Lang::ZhTw),
        _ => Err(format!("no language {s:?}; the choices are {}", CHOICES.join(", "))),
    }
}

/// English line (without its indentation) → 繁體中文. Each paragraph keeps its number of lines,
/// so a translated paragraph reads in order however the lesson cut it.
const ZH_TW: &[(&str, &str)] = &[
    ("What to watch:", "要注意什麼："),
    (
        "The live run (two processes on the soft backend, and a TCP connection between the same two):",
        "即時執行（soft 後端上的兩個行程，以及同樣兩個行程之間的一條 TCP 連線）：",
    ),
    ("Measured in this run:", "本次執行的量測："),
    ("What is emulated:", "哪些是模擬的："),
    ("Try:", "試試看："),
    // messages: what to watch.
    (
        "An RDMA SEND is a message: the receiver gets one completion per SEND, and its byte_len",
        "RDMA 的 SEND 是一則訊息：接收端每個 SEND 得到一個完成，其 byte_len",
    ),
    (
        "is the SEND's length, however the bytes were cut into packets. TCP is a stream: the",
        "就是該 SEND 的長度，不論位元組被切成幾個封包。TCP 是位元組流：",
    ),
    (
        "receiver's read() returns whatever has arrived, joined or split as it happens.",
        "接收端的 read() 回傳當下已到達的資料，可能被合併，也可能被切開。",
    ),
    // messages: what is emulated.
    (
        "The target's NIC is a thread of the target process; it put each SEND into the next",
        "目標端的網卡是目標行程中的一個執行緒；它把每個 SEND 放進下一個",
    ),
    (
        "posted receive and wrote one completion per message, as a real NIC does in silicon.",
        "已掛好的接收請求，每則訊息寫一個完成，就像真實網卡在晶片中做的一樣。",
    ),
    (
        "The TCP bytes went through the kernel's loopback; how read() cuts them depends on timing.",
        "TCP 的位元組經過核心的 loopback；read() 怎麼切它們取決於時機。",
    ),
    // The takeaways, one per lesson.
    (
        "Takeaway: RDMA takes the programs and the kernel out of the copying; with TCP the kernel copies every byte in and out.",
        "重點：RDMA 讓程式與核心都不必複製資料；TCP 則由核心把每個位元組複製進來、再複製出去。",
    ),
    (
        "Takeaway: RDMA's data path makes no system call; TCP's makes at least two per message, and sleeps in read().",
        "重點：RDMA 的資料路徑不做系統呼叫；TCP 每則訊息至少兩次，而且會在 read() 中睡眠。",
    ),
    (
        "Takeaway: one-sided operations move data without the target program: its CPU stays with its own work.",
        "重點：單邊操作搬移資料時不需要目標端程式：它的 CPU 留給自己的工作。",
    ),
    (
        "Takeaway: with RDMA the receiver sees the sender's messages; with TCP it must find their ends itself.",
        "重點：RDMA 的接收端看到的是傳送端的訊息；TCP 的接收端必須自己找出訊息的結尾。",
    ),
    (
        "Takeaway: SGEs let one work request read and write scattered memory with no copy by the program; their number per request is bounded by max_sge.",
        "重點：SGE 讓一個工作請求讀寫分散的記憶體，程式不必複製；每個請求的 SGE 數量受 max_sge 限制。",
    ),
    (
        "Takeaway: RDMA's data path needs no system call and no copy by the program or the kernel; what it costs here is the emulated NIC's.",
        "重點：RDMA 的資料路徑不需要系統呼叫，程式與核心也不必複製；這裡的成本屬於模擬網卡。",
    ),
];

/// `line` in `lang`: its translation, indentation kept, or the line itself.
pub fn line(lang: Lang, line: &str) -> String {
    let text = line.trim_start();
    let indent = &line[..line.len() - text.len()];
    match lang {
        Lang::En => line.to_string(),
        Lang::ZhTw => match ZH_TW.iter().find(|(en, _)| *en == text) {
            Some((_, zh)) => format!("{indent}{zh}"),
            None => line.to_string(),
        },
    }
}

/// A writer that translates each whole line written through it (a line is written when its
/// `\n` arrives; [`Translating::finish`] writes a last unterminated one).
pub struct Translating<'a> {
    inner: &'a mut dyn Write,
    lang: Lang,
    pending: Vec<u8>,
}

impl<'a> Translating<'a> {
    /// Wraps `inner`, translating into `lang`.
    pub fn new(inner: &'a mut dyn Write, lang: Lang) -> Self {
        Translating { inner, lang, pending: Vec::new() }
    }

    /// Writes what is left of an unterminated last line, and flushes.
    pub fn finish(mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            let rest = String::from_utf8_lossy(&self.pending).into_owned();
            self.inner.write_all(line(self.lang, &rest).as_bytes())?;
            self.pending.clear();
        }
        self.inner.flush()
    }
}

impl Write for Translating<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let l: Vec<u8> = self.pending.drain(..=end).collect();
            let text = String::from_utf8_lossy(&l[..end]);
            writeln!(self.inner, "{}", line(self.lang, &text))?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_translate_with_their_indent_and_others_pass_unchanged() {
        assert_eq!(line(Lang::ZhTw, "  Try:"), "  試試看：");
        assert_eq!(line(Lang::En, "Try:"), "Try:");
        let wire = "    target CQ: receive completion 1: byte_len 10";
        assert_eq!(line(Lang::ZhTw, wire), wire);
        assert!(parse("xx").unwrap_err().contains("en, zh-TW"));
        let mut out = Vec::new();
        let mut t = Translating::new(&mut out, Lang::ZhTw);
        t.write_all(b"What to ").unwrap();
        t.write_all(b"watch:\nRESULT a=1").unwrap();
        t.finish().unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "要注意什麼：\nRESULT a=1");
    }
}
