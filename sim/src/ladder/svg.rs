//! A packet ladder as a standalone SVG file, written by hand: a `<title>`, one lifeline per
//! node, one `<g class="pkt">` per packet (an arrow with an arrowhead and its label, or a
//! crossed arrow when dropped), marks for completions, timers and RNR waits, and a legend.
//! Browsers and image viewers show it as it is; nothing is loaded from elsewhere.

use std::fmt::Write;

use super::model::{Event, Ladder, MarkKind};
use super::text::format_time;

/// How many rows an SVG ladder draws before it elides the middle of the run.
pub const DEFAULT_ROWS: usize = 400;

const ROW: usize = 26;
const TOP: usize = 86;
const LEFT: usize = 190;
/// The rightmost lifeline of a two-node ladder; more nodes widen the drawing so that each gap
/// between lifelines keeps room for a label.
const RIGHT: usize = 950;
/// The room a label needs between two lifelines.
const GAP: usize = 330;

/// `s` with XML's five special characters escaped, for text and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c => o.push(c),
        }
    }
    o
}

/// The right end of the lifelines for `n` of them.
fn right(n: usize) -> usize {
    RIGHT.max(LEFT + GAP * n.saturating_sub(1))
}

fn lane_x(n: usize) -> Vec<usize> {
    let right = right(n);
    match n {
        0 => Vec::new(),
        1 => vec![(LEFT + right) / 2],
        _ => (0..n).map(|k| LEFT + k * (right - LEFT) / (n - 1)).collect(),
    }
}

/// The ladder as an SVG document; past `max_rows` rows, the middle of the run is one row that
/// says how many packets it stands for.
pub fn render(l: &Ladder, max_rows: usize) -> String {
    let xs = lane_x(l.lanes.len());
    let (right, width) = (right(l.lanes.len()), right(l.lanes.len()) + 90);
    let n = l.events.len();
    let max_rows = max_rows.max(2);
    let (head, tail) = if n > max_rows { (max_rows / 2, max_rows - max_rows / 2) } else { (n, 0) };
    let gaps = l.time_gaps();
    let spacing: usize = (0..head).chain(n - tail..n).map(|i| gaps[i].0).sum();
    let rows = head + tail + usize::from(tail > 0) + spacing;
    let bottom = TOP + rows * ROW + 10;
    let height = bottom + 60;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="monospace" font-size="12">"#
    );
    let _ = writeln!(s, "<title>{}</title>", escape(&l.title));
    s.push_str(concat!(
        "<defs>\n",
        r##"<marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#222"/></marker>"##,
        "\n",
        r##"<marker id="nak" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#c03030"/></marker>"##,
        "\n</defs>\n",
        "<style>.req{stroke:#222} .resp{stroke:#2050a0} .nak{stroke:#c03030} ",
        ".drop{stroke:#c03030;stroke-dasharray:4 3} .life{stroke:#888} ",
        ".rnr{stroke:#e08000;stroke-width:3;stroke-dasharray:3 3} .time{fill:#666} ",
        ".cqe{fill:#208040} .timer{fill:#e08000} .rnrwait{fill:white;stroke:#e08000;stroke-width:2} ",
        ".note{fill:#777}</style>\n",
    ));
    let _ = writeln!(s, r#"<rect width="{width}" height="{height}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="22" font-size="15" font-weight="bold">{}</text>"#,
        escape(&l.title)
    );
    let _ =
        writeln!(s, r#"<text class="time" x="{}" y="60" text-anchor="end">time</text>"#, LEFT - 80);
    for (k, name) in l.lanes.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="60" text-anchor="middle" font-weight="bold">{}</text>"#,
            xs[k],
            escape(name)
        );
        let _ = writeln!(
            s,
            r#"<line class="life" x1="{x}" y1="68" x2="{x}" y2="{bottom}"/>"#,
            x = xs[k]
        );
    }
    let waiting = l.rnr_waiting();
    let mut row = 0;
    let draw = |s: &mut String, i: usize, row: usize| {
        let y = TOP + row * ROW;
        for (k, &w) in waiting[i].iter().enumerate() {
            if w {
                let _ = writeln!(
                    s,
                    r#"<line class="rnr" x1="{x}" y1="{}" x2="{x}" y2="{}"/>"#,
                    y - ROW / 2,
                    y + ROW / 2,
                    x = xs[k]
                );
            }
        }
        event(s, l, &l.events[i], &xs, y);
    };
    // With a time scale, a gap's blank rows, labelled with its length.
    let gap = |s: &mut String, i: usize, row: &mut usize| {
        let (rows, dt) = gaps[i];
        if rows > 0 {
            let _ = writeln!(
                s,
                r#"<text class="time" x="{}" y="{}" text-anchor="end" font-style="italic">+{}</text>"#,
                LEFT - 80,
                TOP + (*row + rows / 2) * ROW + 4,
                escape(&format_time(dt))
            );
            *row += rows;
        }
    };
    for i in 0..head {
        gap(&mut s, i, &mut row);
        draw(&mut s, i, row);
        row += 1;
    }
    if tail > 0 {
        let skipped = &l.events[head..n - tail];
        let packets = skipped.iter().filter(|e| matches!(e, Event::Packet(_))).count();
        let marks = skipped.len() - packets;
        let text = if marks > 0 {
            format!("… {packets} packets, {marks} marks …")
        } else {
            format!("… {packets} packets …")
        };
        let _ = writeln!(
            s,
            r#"<text class="elided" x="{}" y="{}" text-anchor="middle" font-style="italic">{}</text>"#,
            (LEFT + right) / 2,
            TOP + row * ROW + 4,
            escape(&text)
        );
        row += 1;
        for i in n - tail..n {
            gap(&mut s, i, &mut row);
            draw(&mut s, i, row);
            row += 1;
        }
    }
    for (i, line) in [
        "arrows: packets (black: request, blue: response, red: NAK); dashed and crossed: dropped",
        "green dot: completion written; orange diamond: timer fired (local ACK timeout or RNR timer)",
        "orange square: RNR wait begins (the NAK's timer), orange dashes: waiting; grey triangle: note",
    ]
    .iter()
    .enumerate()
    {
        let _ = writeln!(
            s,
            r##"<text x="10" y="{}" fill="#444">{}</text>"##,
            bottom + 24 + 16 * i,
            escape(line)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn event(s: &mut String, l: &Ladder, e: &Event, xs: &[usize], y: usize) {
    let time = |t: Option<u64>| t.map(format_time).unwrap_or_default();
    match e {
        Event::Packet(p) => {
            let label = p.label();
            let (x1, x2) = (xs[p.from] as i64, xs[p.to] as i64);
            let class = match p.response {
                Some(super::model::Response::Nak(_)) | Some(super::model::Response::RnrNak(_)) => {
                    "nak"
                }
                Some(_) => "resp",
                None if (0x0d..=0x12).contains(&p.opcode) => "resp",
                None => "req",
            };
            let _ = writeln!(s, r#"<g class="pkt" data-psn="{:#08x}">"#, p.psn);
            let title = match p.dropped {
                Some(why) => format!("{label} ({why}) {}", time(p.time_ns)),
                None => format!("{label} {}", time(p.time_ns)),
            };
            let _ = writeln!(s, "<title>{}</title>", escape(title.trim_end()));
            let _ = writeln!(
                s,
                r#"<text class="time" x="{}" y="{}" text-anchor="end">{}</text>"#,
                LEFT - 80,
                y + 4,
                escape(&time(p.time_ns))
            );
            let (y1, y2) = (y as i64 - 6, y as i64 + 6);
            match p.dropped {
                Some(why) => {
                    let xm = (x1 + x2) / 2;
                    let ym = (y1 + y2) / 2;
                    let _ = writeln!(
                        s,
                        r#"<line class="drop" x1="{x1}" y1="{y1}" x2="{xm}" y2="{ym}"/>"#
                    );
                    let _ = writeln!(
                        s,
                        r##"<path d="M{},{} l12,12 M{},{} l-12,12" stroke="#c03030" stroke-width="2"/>"##,
                        xm - 6,
                        ym - 6,
                        xm + 6,
                        ym - 6
                    );
                    let (tx, anchor) = if x2 > x1 { (x1 + 10, "start") } else { (x1 - 10, "end") };
                    let _ = writeln!(
                        s,
                        r##"<text x="{tx}" y="{}" text-anchor="{anchor}" fill="#c03030">{}</text>"##,
                        y1 - 3,
                        escape(&format!("{label} ({why})"))
                    );
                }
                None => {
                    let marker = if class == "nak" { "nak" } else { "arrow" };
                    let _ = writeln!(
                        s,
                        r#"<line class="{class}" x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" marker-end="url(#{marker})"/>"#
                    );
                    let _ = writeln!(
                        s,
                        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                        (x1 + x2) / 2,
                        y1 - 3,
                        escape(&label)
                    );
                }
            }
            s.push_str("</g>\n");
        }
        Event::Mark(m) => {
            let x = xs[m.lane];
            let last = m.lane + 1 == l.lanes.len() && l.lanes.len() > 1;
            let (tx, anchor) = if last { (x - 10, "end") } else { (x + 10, "start") };
            let (class, shape) = match m.kind {
                MarkKind::Completion => ("cqe", format!(r#"<circle cx="{x}" cy="{y}" r="5"/>"#)),
                MarkKind::Timer => {
                    ("timer", format!(r#"<path d="M{x},{} l6,6 l-6,6 l-6,-6 z"/>"#, y as i64 - 6))
                }
                MarkKind::RnrWait => (
                    "rnrwait",
                    format!(r#"<rect x="{}" y="{}" width="10" height="10"/>"#, x - 5, y as i64 - 5),
                ),
                MarkKind::Note => {
                    ("note", format!(r#"<path d="M{},{} l9,5 l-9,5 z"/>"#, x - 4, y as i64 - 5))
                }
            };
            let _ = writeln!(s, r#"<g class="mark {class}">{shape}"#);
            let _ = writeln!(
                s,
                r#"<text class="time" x="{}" y="{}" text-anchor="end">{}</text>"#,
                LEFT - 80,
                y + 4,
                escape(&time(m.time_ns))
            );
            let _ = writeln!(
                s,
                r#"<text x="{tx}" y="{}" text-anchor="{anchor}">{}</text></g>"#,
                y + 4,
                escape(&m.label)
            );
        }
    }
}
