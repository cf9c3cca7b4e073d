//! A packet ladder in the terminal: Unicode box drawing, at most [`WIDTH`] columns, one row per
//! packet or mark; a long run keeps its first and last rows and says how many packets it left
//! out in between.

use super::model::{Event, Ladder, MarkKind};

/// The widest line the terminal ladder draws.
pub const WIDTH: usize = 100;
/// The time column: right-aligned, then one space.
const TIME_COL: usize = 11;
/// How many rows a terminal ladder shows before it elides the middle of the run.
pub const DEFAULT_ROWS: usize = 80;

/// Where each lifeline is drawn, by column.
fn lane_columns(n: usize) -> Vec<usize> {
    let (left, right) = (TIME_COL + 3, WIDTH - 3);
    match n {
        0 => Vec::new(),
        1 => vec![(left + right) / 2],
        _ => (0..n).map(|k| left + k * (right - left) / (n - 1)).collect(),
    }
}

/// A time as the ladder's first column shows it.
pub fn format_time(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{:.3} µs", ns as f64 / 1e3)
    } else {
        format!("{:.3} ms", ns as f64 / 1e6)
    }
}

/// One row of cells, with the lifelines drawn.
fn blank(cols: &[usize], waiting: &[bool]) -> Vec<char> {
    let mut row = vec![' '; WIDTH];
    for (k, &x) in cols.iter().enumerate() {
        row[x] = if waiting.get(k).copied().unwrap_or(false) { '┊' } else { '│' };
    }
    row
}

/// Write `s` into `row` from column `at`, no further than column `end` (exclusive), cutting it
/// with an ellipsis if it does not fit.
fn put(row: &mut [char], at: usize, end: usize, s: &str) {
    let room = end.saturating_sub(at);
    let n = s.chars().count();
    let cut: Vec<char> = if n <= room {
        s.chars().collect()
    } else if room > 0 {
        s.chars().take(room - 1).chain(['…']).collect()
    } else {
        Vec::new()
    };
    for (i, c) in cut.into_iter().enumerate() {
        row[at + i] = c;
    }
}

fn finish(mut row: Vec<char>, time: Option<u64>) -> String {
    if let Some(t) = time {
        let s = format!("{:>w$}", format_time(t), w = TIME_COL - 1);
        put(&mut row, 0, TIME_COL - 1, &s);
    }
    row.into_iter().collect::<String>().trim_end().to_string()
}

/// The row of one event.
fn event_row(l: &Ladder, e: &Event, cols: &[usize], waiting: &[bool]) -> String {
    let mut row = blank(cols, waiting);
    match e {
        Event::Packet(p) => {
            let (xa, xb) = (cols[p.from], cols[p.to]);
            let right = xb > xa;
            let (lo, hi) = if right { (xa, xb) } else { (xb, xa) };
            let label = format!(" {} ", p.label());
            // A dropped packet's arrow stops two thirds of the way, crossed out, with its cause
            // just past the cross.
            let stop = match (p.dropped.is_some(), right) {
                (true, true) => xa + (xb - xa) * 2 / 3,
                (true, false) => xa - (xa - xb) * 2 / 3,
                (false, true) => hi - 1,
                (false, false) => lo + 1,
            };
            row[xa] = if right { '├' } else { '┤' };
            if right {
                row[xa + 1..stop].fill('─');
            } else {
                row[stop + 1..xa].fill('─');
            }
            match p.dropped {
                Some(why) => {
                    row[stop] = '✕';
                    if right {
                        put(&mut row, stop + 1, hi, &format!(" {why}"));
                        put(&mut row, xa + 2, stop - 1, &label);
                    } else {
                        let text = format!("{why} ");
                        let n = text.chars().count().min(stop - xb - 1);
                        put(&mut row, stop - n, stop, &text);
                        put(&mut row, stop + 2, xa - 1, &label);
                    }
                }
                None => {
                    row[stop] = if right { '►' } else { '◄' };
                    put(&mut row, lo + 2, hi - 2, &label);
                }
            }
            finish(row, p.time_ns)
        }
        Event::Mark(m) => {
            let x = cols[m.lane];
            row[x] = match m.kind {
                MarkKind::Completion => '●',
                MarkKind::Timer => '◆',
                MarkKind::RnrWait => '┊',
                MarkKind::Note => '»',
            };
            let last = m.lane + 1 == l.lanes.len() && l.lanes.len() > 1;
            if last {
                let text = format!("{} ", m.label);
                let n = text.chars().count().min(x - cols[m.lane - 1] - 1);
                put(&mut row, x - n, x, &text);
            } else {
                let end = cols.get(m.lane + 1).copied().unwrap_or(WIDTH);
                put(&mut row, x + 2, end - 1, &m.label);
            }
            finish(row, m.time_ns)
        }
    }
}

/// The ladder as terminal lines: the title, the lifelines' names, one row per event (the middle
/// elided past `max_rows` rows), and a legend.
pub fn render(l: &Ladder, max_rows: usize) -> Vec<String> {
    let cols = lane_columns(l.lanes.len());
    let mut out = vec![l.title.clone()];
    let mut names = vec![' '; WIDTH];
    for (k, name) in l.lanes.iter().enumerate() {
        let n = name.chars().count();
        let at = cols[k].saturating_sub(n / 2).min(WIDTH - n.min(WIDTH));
        put(&mut names, at, WIDTH, name);
    }
    out.push(names.into_iter().collect::<String>().trim_end().to_string());
    let mut top = vec![' '; WIDTH];
    for &x in &cols {
        top[x] = '┬';
    }
    out.push(top.iter().collect::<String>().trim_end().to_string());
    let waiting = l.rnr_waiting();
    let n = l.events.len();
    let (head, tail) = if n > max_rows.max(2) {
        (max_rows.max(2) / 2, max_rows.max(2) - max_rows.max(2) / 2)
    } else {
        (n, 0)
    };
    let gaps = l.time_gaps();
    // With a time scale, the blank rows a gap stands for, the first saying how long it was.
    let spaced = |out: &mut Vec<String>, i: usize| {
        let (rows, dt) = gaps[i];
        for r in 0..rows {
            let mut row = blank(&cols, &waiting[i]);
            if r == 0 {
                put(
                    &mut row,
                    0,
                    TIME_COL - 1,
                    &format!("{:>w$}", format!("+{}", format_time(dt)), w = TIME_COL - 1),
                );
            }
            out.push(finish(row, None));
        }
    };
    for (i, e) in l.events.iter().enumerate().take(head) {
        spaced(&mut out, i);
        out.push(event_row(l, e, &cols, &waiting[i]));
    }
    if tail > 0 {
        let skipped = &l.events[head..n - tail];
        let packets = skipped.iter().filter(|e| matches!(e, Event::Packet(_))).count();
        let marks = skipped.len() - packets;
        let mut text = format!(" … {packets} packets … ");
        if marks > 0 {
            text = format!(" … {packets} packets, {marks} marks … ");
        }
        let mut row = blank(&cols, &waiting[head]);
        let w = text.chars().count();
        put(&mut row, (WIDTH - w) / 2, WIDTH, &text);
        out.push(finish(row, None));
        for (i, e) in l.events.iter().enumerate().skip(n - tail) {
            spaced(&mut out, i);
            out.push(event_row(l, e, &cols, &waiting[i]));
        }
    }
    let mut bottom = vec![' '; WIDTH];
    for &x in &cols {
        bottom[x] = '┴';
    }
    out.push(bottom.iter().collect::<String>().trim_end().to_string());
    out.push(
        "► packet  ✕ dropped  ● completion written  ◆ timer fired  ┊ RNR wait (begins at the NAK)  » note"
            .to_string(),
    );
    if l.lanes.len() > 4 {
        out.push(format!(
            "{} lifelines share {WIDTH} columns, so labels are cut short: --svg FILE draws them in full",
            l.lanes.len()
        ));
    }
    out
}
