//! `softverbs perf`'s perftest-style tests end to end, as real processes in a quick mode
//! (small `-n`): every one of the eight prints perftest's banner and a table that parses, with
//! sane figures; `-a` gives a row per size; `--json` one object per row; `--plot` an SVG that
//! is well-formed XML; bad flags exit 2 naming the flag.

mod common;

use common::xml::well_formed;
use common::Run;

/// Run `softverbs perf <args>` (see [`common::softverbs`]).
fn perf(args: &[&str]) -> Run {
    let mut all = vec!["perf"];
    all.extend_from_slice(args);
    common::softverbs("perftest", &all)
}

/// The rows under the table header (`#bytes` line) up to the closing rule, split in numbers.
fn rows(stdout: &str) -> Vec<Vec<f64>> {
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with(" #bytes"));
    let header = lines.next().expect("a table header");
    assert!(header.contains("#iterations"), "{header}");
    lines
        .take_while(|l| !l.starts_with("---"))
        .map(|l| {
            l.split_whitespace()
                .map(|x| x.parse::<f64>().unwrap_or_else(|_| panic!("{x:?} in row {l:?}")))
                .collect()
        })
        .collect()
}

/// A bandwidth row in MiB/sec: the message rate is positive, the average is the bytes of that
/// rate (to the table's two decimals: small messages on a loaded machine can print 0.00, as
/// perftest's would), and the peak is at least the average.
fn check_bw_row(r: &[f64], bytes: f64, iters: f64) {
    check_bw_row_in(r, bytes, iters, 1_048_576.0);
}

/// [`check_bw_row`] for a unit of `unit` bytes a second.
fn check_bw_row_in(r: &[f64], bytes: f64, iters: f64, unit: f64) {
    assert_eq!(r.len(), 5, "{r:?}");
    assert_eq!((r[0], r[1]), (bytes, iters), "{r:?}");
    assert!(r[4] > 0.0, "message rate positive: {r:?}");
    let want = bytes * r[4] * 1e6 / unit;
    // The rate is printed to 10^-6 Mpps (0.5 messages a second either way), the bandwidths to
    // 0.01.
    let slack = bytes * 0.5 / unit + 0.006 + want * 0.002;
    assert!((r[3] - want).abs() <= slack, "the average is bytes x message rate ({want}): {r:?}");
    assert!(r[3] > 0.0 || want < 0.005, "a positive average unless it rounds to 0.00: {r:?}");
    assert!(r[2] >= r[3] - 0.01, "the peak is at least the average: {r:?}");
}

fn check_lat_row(r: &[f64], bytes: f64, iters: f64) {
    assert_eq!(r.len(), 9, "{r:?}");
    assert_eq!((r[0], r[1]), (bytes, iters), "{r:?}");
    let (min, max, typ, avg) = (r[2], r[3], r[4], r[5]);
    assert!(min > 0.0, "{r:?}");
    assert!(min <= typ && typ <= max, "t_min <= t_typical <= t_max: {r:?}");
    assert!(min <= avg && avg <= max, "t_avg within: {r:?}");
    assert!(typ <= r[7] && r[7] <= r[8] && r[8] <= max, "percentiles ordered: {r:?}");
}

/// Every one of the eight tests, as `ib_*` prints it: the banner's title and fields, the
/// address lines, one row that parses with sane figures.
#[test]
fn all_eight_tests_print_perftests_banner_and_a_sane_row() {
    let tests = [
        ("send_lat", "Send Latency Test", 2.0),
        ("send_bw", "Send BW Test", 65536.0),
        ("write_lat", "RDMA_Write Latency Test", 2.0),
        ("write_bw", "RDMA_Write BW Test", 65536.0),
        ("read_lat", "RDMA_Read Latency Test", 2.0),
        ("read_bw", "RDMA_Read BW Test", 65536.0),
        ("atomic_lat", "Atomic FETCH_AND_ADD Latency Test", 8.0),
        ("atomic_bw", "Atomic FETCH_AND_ADD BW Test", 8.0),
    ];
    for (test, title, bytes) in tests {
        let r = perf(&[test, "-n", "40"]);
        assert!(r.status.success(), "{test}: {}\n{}", r.stdout, r.stderr);
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(lines[1].trim(), title, "{test}");
        for field in [
            " Dual-port       : OFF",
            " Number of qps   : 1",
            " Connection type : RC",
            " TX depth        : ",
            " Mtu             : 4096[B]",
            " Link type       : Ethernet",
            // By default the port's first IPv4 GID (`::ffff:10.0.0.N`), as perftest picks one.
            " GID index       : 1",
        ] {
            assert!(
                lines.iter().any(|l| l.starts_with(field)),
                "{test}: no {field:?}\n{}",
                r.stdout
            );
        }
        let inline = lines.iter().any(|l| l.starts_with(" Max inline data : "));
        let reads = lines.iter().any(|l| l.starts_with(" Outstand reads  : "));
        assert_eq!(
            (inline, reads),
            (
                test.starts_with("send") || test.starts_with("write"),
                !(test.starts_with("send") || test.starts_with("write"))
            ),
            "{test}"
        );
        // What produced the figures: a SEND as packets, a WRITE, READ or atomic by direct reach.
        let path =
            lines.iter().find(|l| l.starts_with(" Data path       : ")).expect("a data path");
        assert_eq!(path.contains("direct reach"), !test.starts_with("send"), "{test}: {path}");
        let local = lines.iter().find(|l| l.starts_with(" local address: LID ")).expect("local");
        assert!(lines.iter().any(|l| l.starts_with(" remote address: LID ")), "{test}");
        assert!(local.contains(" QPN 0x") && local.contains(" PSN 0x1000"), "{local}");
        assert_eq!(
            local.contains(" RKey 0x") && local.contains(" VAddr 0x"),
            test.starts_with("write") || test.starts_with("read"),
            "{local}"
        );
        assert_eq!(local.contains(" OUT 0x04"), test.starts_with("read"), "{local}");
        let gids: Vec<&&str> = lines.iter().filter(|l| l.starts_with(" GID: ")).collect();
        assert_eq!(gids.len(), 2, "{test}");
        for g in gids {
            assert!(g.starts_with(" GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:00:"), "{g}");
        }
        let rows = rows(&r.stdout);
        assert_eq!(rows.len(), 1, "{test}: {}", r.stdout);
        if test.ends_with("_bw") {
            assert!(r.stdout.contains("BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"));
            check_bw_row(&rows[0], bytes, 40.0);
        } else {
            assert!(r.stdout.contains("t_typical[usec]"));
            check_lat_row(&rows[0], bytes, 40.0);
        }
    }
}

/// `-a` sweeps 2 B to 8 MiB, one row each, as perftest; `--plot` draws them into an SVG that
/// is well-formed XML with labelled axes and one point per size; `--json` gives one object per
/// row with its units in the field names.
#[test]
fn an_all_sizes_sweep_gives_a_row_per_size_a_plot_and_json() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let svg = dir.path().join("write_bw.svg");
    // -u 20: a debug build moving 8 MiB on a loaded machine can take longer than perftest's
    // default ACK timeout (67 ms).
    let r = perf(&["write-bw", "-a", "-n", "20", "-u", "20", "--plot", svg.to_str().unwrap()]);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let rows = rows(&r.stdout);
    let sizes: Vec<f64> = rows.iter().map(|r| r[0]).collect();
    let want: Vec<f64> = (1..=23).map(|e| f64::from(1u32 << e)).collect();
    assert_eq!(sizes, want);
    for (row, &b) in rows.iter().zip(&want) {
        check_bw_row(row, b, 20.0);
    }
    let text = std::fs::read_to_string(&svg).expect("the plot was written");
    assert_eq!(well_formed(&text), Ok("svg".to_string()), "{text}");
    assert!(text.contains("message size [bytes] (log2 scale)"), "x axis labelled");
    assert!(text.contains("BW average [MiB/sec]"), "y axis labelled with its unit");
    assert_eq!(text.matches("<circle").count(), 23, "one point per size");

    let lat_svg = dir.path().join("send_lat.svg");
    let r = perf(&[
        "send_lat",
        "-a",
        "-n",
        "10",
        "-u",
        "20",
        "--json",
        "--plot",
        lat_svg.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 23, "one JSON object per size and nothing else: {}", r.stdout);
    for (l, &b) in lines.iter().zip(&want) {
        assert!(
            l.starts_with("{\"test\":\"send_lat\",\"connection\":\"RC\",") && l.ends_with('}'),
            "{l}"
        );
        assert!(l.contains(&format!("\"bytes\":{b},\"iterations\":10,")), "{l}");
        let num = |k: &str| -> f64 {
            let at = l.find(&format!("\"{k}\":")).unwrap_or_else(|| panic!("{k} in {l}"));
            let v = &l[at + k.len() + 3..];
            v[..v.find([',', '}']).unwrap()].parse().unwrap()
        };
        let (min, typ, max) = (num("t_min_usec"), num("t_typical_usec"), num("t_max_usec"));
        assert!(0.0 < min && min <= typ && typ <= max, "{l}");
        for k in ["t_avg_usec", "t_stdev_usec", "p99_usec", "p99_9_usec"] {
            assert!(num(k) >= 0.0, "{l}");
        }
    }
    let text = std::fs::read_to_string(&lat_svg).expect("the latency plot was written");
    assert_eq!(well_formed(&text), Ok("svg".to_string()), "{text}");
    assert!(text.contains("t_typical [usec]"), "a latency test plots latency");
    for plot in [&svg, &lat_svg] {
        common::xml::renders(plot).unwrap_or_else(|e| panic!("{e}"));
    }

    let r = perf(&["read_bw", "-s", "4096", "-n", "20", "--json", "--report_gbits"]);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    let l = r.stdout.trim();
    assert!(
        l.starts_with("{\"test\":\"read_bw\",\"connection\":\"RC\",\"bytes\":4096,\"iterations\":20,\"bw_peak_gbit_per_sec\":"),
        "{l}"
    );
    assert!(
        l.contains(",\"bw_average_gbit_per_sec\":") && l.contains(",\"msg_rate_mpps\":"),
        "{l}"
    );
    assert_eq!(l.lines().count(), 1, "{l}");
}

/// The flags that change the run: `-q` QPs, `-c UC`, `--report_gbits`, `-A`, `-D`, `-e`,
/// `-m`, `-I`, `-x`, `-t`.
#[test]
fn perftests_flags_shape_the_run() {
    let r = perf(&[
        "write_bw",
        "-q",
        "2",
        "-c",
        "UC",
        "--report_gbits",
        "-n",
        "30",
        "-t",
        "16",
        "-m",
        "1024",
        "-s",
        "4096",
    ]);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains(" Number of qps   : 2"), "{}", r.stdout);
    assert!(r.stdout.contains(" Connection type : UC"));
    assert!(r.stdout.contains(" TX depth        : 16"));
    assert!(r.stdout.contains(" Mtu             : 1024[B]"));
    assert!(r.stdout.contains("BW peak[Gb/sec]    BW average[Gb/sec]"));
    assert_eq!(r.stdout.matches(" local address: ").count(), 2);
    // perftest counts every QP's iterations.
    check_bw_row_in(&rows(&r.stdout)[0], 4096.0, 60.0, 125_000_000.0);

    // -x 0: the port's IPv6 link-local GID (fe80::…), shown as perftest shows GIDs.
    let r = perf(&["atomic_lat", "-A", "CMP_AND_SWAP", "-n", "20", "-e", "-x", "0"]);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains(" GID index       : 0\n"), "{}", r.stdout);
    let gids: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with(" GID: ")).collect();
    assert_eq!(gids.len(), 2, "{}", r.stdout);
    for g in gids {
        assert!(g.starts_with(" GID: 254:128:00:00:00:00:00:00:"), "{g}");
    }
    assert!(r.stdout.contains("Atomic CMP_AND_SWAP Latency Test"));
    assert!(r.stdout.contains(" Test with events. Using softverbs0_comp0"));
    check_lat_row(&rows(&r.stdout)[0], 8.0, 20.0);

    let r = perf(&["send_bw", "-D", "0.5", "-s", "64", "-I", "0", "-e"]);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains(" Max inline data : 0[B]"));
    let row = &rows(&r.stdout)[0];
    assert_eq!(row[0], 64.0);
    assert!(row[1] > 0.0 && row[3] > 0.0, "{row:?}");
    assert_eq!(row[2], 0.0, "no peak in a duration run, as perftest");

    // UD: one packet per message, so an -a sweep stops at the path MTU; each QP of -q gets
    // an address line and a GID line.
    let r = perf(&["send_bw", "-c", "UD", "-a", "-n", "20", "-q", "2", "-m", "2048"]);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains(" Connection type : UD"));
    assert_eq!(r.stdout.matches(" GID: ").count(), 4, "{}", r.stdout);
    let ud_rows = rows(&r.stdout);
    let sizes: Vec<f64> = ud_rows.iter().map(|r| r[0]).collect();
    assert_eq!(sizes, (1..=11).map(|e| f64::from(1u32 << e)).collect::<Vec<_>>());
    for row in &ud_rows {
        check_bw_row(row, row[0], 40.0);
    }
    let r = perf(&["send_lat", "-c", "UD", "-n", "20", "-s", "1024"]);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    check_lat_row(&rows(&r.stdout)[0], 1024.0, 20.0);

    // Ping-pongs for a duration: the server answers until the client stops.
    for test in ["send_lat", "write_lat"] {
        let r = perf(&[test, "-D", "0.5", "-c", "UC"]);
        assert!(r.status.success(), "{test}: {}\n{}", r.stdout, r.stderr);
        let row = &rows(&r.stdout)[0];
        assert!(row.len() == 4 && row[1] > 0.0 && row[2] > 0.0 && row[3] > 0.0, "{row:?}");
        // tps counts round trips; t_avg is half of one.
        let rtt_us = 1e6 / row[3];
        assert!((row[2] * 2.0 - rtt_us).abs() <= rtt_us * 0.05 + 0.02, "{test}: {row:?}");
    }

    let r = perf(&["read_lat", "-D", "0.5"]);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains(" #bytes        #iterations       t_avg[usec]    tps average"));
    let row = &rows(&r.stdout)[0];
    assert!(row.len() == 4 && row[1] > 0.0 && row[2] > 0.0 && row[3] > 0.0, "{row:?}");
}

/// Bad flags exit 2 naming the flag, before any server process is started; a size beyond the
/// device's limit names the limit.
#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["read_bw", "-c", "UC"], "-c UC"),
        (&["write_lat", "-c", "UD"], "-c UD"),
        (&["send_bw", "-c", "UD", "-s", "8192"], "path MTU (4096 bytes"),
        (&["atomic_lat", "-s", "16"], "-s 16"),
        (&["write_bw", "-e"], "-e"),
        (&["send_lat", "-q", "2"], "-q 2"),
        (&["write_bw", "-m", "1000"], "-m 1000"),
        (&["write_bw", "-x", "99"], "-x 99"),
        (&["write_bw", "-x", "2"], "-x 2: GID index 2 of port 1 is empty"),
        (&["write_bw", "-I", "100000"], "max_inline_data"),
        (&["read_lat", "-I", "8"], "-I 8"),
        (&["write_bw", "-s", "2000000000"], "max_msg_sz"),
        (&["send_bw", "--plot", "x.svg"], "--plot"),
        (&["send_bw", "-n", "2"], "--iters"),
        (&["write_bw", "-n", "100000000", "-q", "2"], "-n 100000000"),
        (&["send_bw", "-A", "SWAP"], "--atomic_type"),
        (&["write_bw", "--bogus"], "--bogus"),
        (&["write_bw", "-u", "40"], "--qp-timeout"),
    ];
    for (args, needle) in cases {
        let r = perf(args);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {}\n{}", r.stdout, r.stderr);
        assert!(r.stderr.contains(needle), "{args:?}: stderr names {needle:?}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
    }
}
