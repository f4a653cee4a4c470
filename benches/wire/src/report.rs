//! `REPORT.md` and its SVG plots from the result JSON files of a side-by-side run.
//!
//! Every figure in the tables is the median over the alternating repetitions of one
//! (workload, system, driver); ratios divide baiji's median by the peer's. Latency curves are
//! pointwise medians of the runs' percentile curves; the throughput plot shows the run with
//! the median throughput.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use baiji::bench::BenchReport;
use plotters::prelude::*;

/// Arguments of `baiji-wire report`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReportArgs {
    /// Directory holding `raw/*.json` (one file per run) and optionally `meta.md`,
    /// `summary.md` and `profile.md`, which are included.
    #[arg(long)]
    results: PathBuf,
    /// Where to write REPORT.md and the SVGs (default: the results directory).
    #[arg(long)]
    out: Option<PathBuf>,
}

type Key = (String, String, String); // workload, system, driver

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

struct Cell<'a> {
    runs: Vec<&'a BenchReport>,
}

impl Cell<'_> {
    fn med(&self, f: impl Fn(&BenchReport) -> f64) -> f64 {
        median(self.runs.iter().map(|r| f(r)).collect())
    }
}

const WORKLOADS: &[(&str, &str)] = &[
    ("a", "(a) latency: paced 1,000 msg/s, 128 B, 1 producer (sync), 1 group"),
    ("b", "(b) throughput: max rate, 128 B, 4 producers, 1 group"),
    ("c", "(c) fan-out: max rate, 1 KiB, 1 producer, 4 groups"),
    ("c1", "(c1) fan-out reference: max rate, 1 KiB, 1 producer, 1 group"),
    ("d", "(d) memory: backlog of 1M × 128 B retained, then consumed"),
];

fn label(k: &Key) -> String {
    format!("{} ({})", k.1, k.2)
}

fn fmt(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x >= 100.0 {
        format!("{:.0}", x)
    } else if x >= 10.0 {
        format!("{:.1}", x)
    } else {
        format!("{:.2}", x)
    }
}

pub(crate) fn write(args: &ReportArgs) -> Result<(), String> {
    let out = args.out.clone().unwrap_or_else(|| args.results.clone());
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut runs: Vec<BenchReport> = Vec::new();
    let raw = args.results.join("raw");
    let dir = std::fs::read_dir(&raw).map_err(|e| format!("{}: {e}", raw.display()))?;
    let mut files: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    for f in files.iter().filter(|f| f.extension().is_some_and(|e| e == "json")) {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        match serde_json::from_str::<BenchReport>(&text) {
            Ok(r) => runs.push(r),
            Err(e) => eprintln!("skipping {}: {e}", f.display()),
        }
    }
    let mut cells: BTreeMap<Key, Cell<'_>> = BTreeMap::new();
    for r in &runs {
        cells
            .entry((r.workload.clone(), r.system.clone(), r.driver.clone()))
            .or_insert_with(|| Cell { runs: Vec::new() })
            .runs
            .push(r);
    }
    let mut md = String::new();
    let _ = writeln!(md, "# baiji over the wire: side-by-side benchmark\n");
    if let Ok(meta) = std::fs::read_to_string(args.results.join("meta.md")) {
        let _ = writeln!(md, "{meta}\n");
    }
    // The reader's conclusions (targets met or missed), written after looking at the run.
    if let Ok(summary) = std::fs::read_to_string(args.results.join("summary.md")) {
        let _ = writeln!(md, "{summary}\n");
    }
    let _ = writeln!(
        md,
        "All figures are **medians over the alternating repetitions** (the *n* column); latencies in µs. \
         *send* = send round trip (request written → acknowledgement read); *e2e* = producer stamp → consumer receipt; \
         *tcp* = a loopback TCP round trip of the same size measured by the same process just before the run, at the workload's rate (paced workloads: every round trip starts from idle threads, as a paced message does) — the floor; *tcp burst* = the same round trip back to back (hot threads). \
         *clean* = runs in which every group received every acknowledged message exactly once and in queue order.\n"
    );
    for (w, title) in WORKLOADS {
        let keys: Vec<&Key> = cells.keys().filter(|k| k.0 == *w).collect();
        if keys.is_empty() {
            continue;
        }
        let _ = writeln!(md, "## {title}\n");
        if *w == "d" {
            let _ = writeln!(md, "| system (driver) | n | sent msg/s | consumed msg/s | RSS idle MiB | RSS full MiB | bytes/retained msg | RSS after MiB | after/idle | clean |");
            let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
            for k in &keys {
                let c = &cells[*k];
                let b = |f: fn(&baiji::bench::ProcReport) -> f64| {
                    c.med(|r| r.broker.as_ref().map_or(f64::NAN, f))
                };
                let idle = b(|p| p.rss_idle_kb as f64);
                let after = b(|p| p.rss_after_kb as f64);
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} |",
                    label(k),
                    c.runs.len(),
                    fmt(c.med(|r| r.sent_per_s)),
                    fmt(c.med(|r| r.received_per_s)),
                    fmt(idle / 1024.0),
                    fmt(b(|p| p.rss_full_kb.map_or(f64::NAN, |x| x as f64)) / 1024.0),
                    fmt(b(|p| p.bytes_per_retained_msg.unwrap_or(f64::NAN))),
                    fmt(after / 1024.0),
                    fmt(c.med(|r| r.broker.as_ref().map_or(f64::NAN, |p| p.rss_after_kb as f64
                        / p.rss_idle_kb.max(1) as f64))),
                    c.runs.iter().filter(|r| r.clean).count(),
                    c.runs.len()
                );
            }
            let _ = writeln!(md);
            plot_rss(&out, &cells, &keys)?;
            let _ = writeln!(md, "![broker RSS over time](rss_d.svg)\n");
            continue;
        }
        let _ = writeln!(md, "| system (driver) | n | send p50 | send p90 | send p99 | send p99.9 | e2e p50 | e2e p90 | e2e p99 | e2e p99.9 | tcp p50 | tcp burst p50 | sent msg/s | recv msg/s/group | broker CPU µs/msg | clean |");
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for k in &keys {
            let c = &cells[*k];
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} |",
                label(k),
                c.runs.len(),
                fmt(c.med(|r| r.send_rtt.p50)),
                fmt(c.med(|r| r.send_rtt.p90)),
                fmt(c.med(|r| r.send_rtt.p99)),
                fmt(c.med(|r| r.send_rtt.p999)),
                fmt(c.med(|r| r.e2e.p50)),
                fmt(c.med(|r| r.e2e.p90)),
                fmt(c.med(|r| r.e2e.p99)),
                fmt(c.med(|r| r.e2e.p999)),
                fmt(c.med(|r| r.tcp_rtt.p50)),
                fmt(c.med(|r| r.tcp_rtt_burst.p50)),
                fmt(c.med(|r| r.sent_per_s)),
                fmt(c.med(|r| r.received_per_s)),
                fmt(c.med(|r| r.broker.as_ref().map_or(f64::NAN, |b| b.cpu_us_per_msg))),
                c.runs.iter().filter(|r| r.clean).count(),
                c.runs.len()
            );
        }
        let _ = writeln!(md);
        ratios(&mut md, &cells, w);
        plot_latency(&out, &cells, &keys, w)?;
        plot_throughput(&out, &cells, &keys, w)?;
        let _ = writeln!(md, "![latency percentiles, workload {w}](latency_{w}.svg)\n");
        let _ = writeln!(md, "![throughput over time, workload {w}](throughput_{w}.svg)\n");
    }
    if let Ok(p) = std::fs::read_to_string(args.results.join("profile.md")) {
        let _ = writeln!(md, "{p}\n");
    }
    let _ = writeln!(md, "## Every run\n");
    let _ = writeln!(md, "| workload | system | driver | send p50 | send p99 | e2e p50 | e2e p99 | tcp p50 | sent msg/s | errors | lost | dup | ooo |");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &runs {
        let sum = |f: fn(&baiji::bench::GroupReport) -> u64| r.groups.iter().map(f).sum::<u64>();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.workload,
            r.system,
            r.driver,
            fmt(r.send_rtt.p50),
            fmt(r.send_rtt.p99),
            fmt(r.e2e.p50),
            fmt(r.e2e.p99),
            fmt(r.tcp_rtt.p50),
            fmt(r.sent_per_s),
            r.send_errors,
            sum(|g| g.lost),
            sum(|g| g.duplicated),
            sum(|g| g.out_of_order)
        );
    }
    let path = out.join("REPORT.md");
    std::fs::write(&path, md).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// baiji's medians divided by each peer's, per driver of baiji.
fn ratios(md: &mut String, cells: &BTreeMap<Key, Cell<'_>>, w: &str) {
    let baiji: Vec<&Key> = cells.keys().filter(|k| k.0 == w && k.1 == "baiji").collect();
    let peers: Vec<&Key> = cells.keys().filter(|k| k.0 == w && k.1 != "baiji").collect();
    if baiji.is_empty() || peers.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "Ratios baiji / peer (below 1 = baiji lower; for msg/s above 1 = baiji higher):\n"
    );
    let _ = writeln!(md, "| baiji (driver) / peer (driver) | send p50 | send p99 | e2e p50 | e2e p99 | sent msg/s | broker CPU/msg |");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for b in &baiji {
        for p in &peers {
            let (cb, cp) = (&cells[*b], &cells[*p]);
            let r = |f: fn(&BenchReport) -> f64| fmt(cb.med(f) / cp.med(f));
            let _ = writeln!(
                md,
                "| baiji ({}) / {} | {} | {} | {} | {} | {} | {} |",
                b.2,
                label(p),
                r(|x| x.send_rtt.p50),
                r(|x| x.send_rtt.p99),
                r(|x| x.e2e.p50),
                r(|x| x.e2e.p99),
                r(|x| x.sent_per_s),
                r(|x| x.broker.as_ref().map_or(f64::NAN, |b| b.cpu_us_per_msg))
            );
        }
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "baiji against the TCP floor of its own runs (medians over the runs):\n");
    let _ = writeln!(md, "| baiji (driver) | send p50 / tcp p50 | e2e p50 / tcp p50 | send p50 / tcp burst p50 | e2e p50 / tcp burst p50 |");
    let _ = writeln!(md, "|---|---|---|---|---|");
    for b in &baiji {
        let c = &cells[*b];
        let (send, e2e) = (c.med(|x| x.send_rtt.p50), c.med(|x| x.e2e.p50));
        let (tcp, burst) = (c.med(|x| x.tcp_rtt.p50), c.med(|x| x.tcp_rtt_burst.p50));
        let _ = writeln!(
            md,
            "| baiji ({}) | {} | {} | {} | {} |",
            b.2,
            fmt(send / tcp),
            fmt(e2e / tcp),
            fmt(send / burst),
            fmt(e2e / burst)
        );
    }
    let _ = writeln!(md);
}

fn palette(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    C[i % C.len()]
}

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("plot: {e:?}")
}

/// Pointwise median of the runs' percentile curves.
fn median_curve(
    runs: &[&BenchReport],
    pick: fn(&BenchReport) -> &baiji::bench::Percentiles,
) -> Vec<(f64, f64)> {
    let n = runs.iter().map(|r| pick(r).curve.len()).min().unwrap_or(0);
    (0..n)
        .map(|i| {
            let p = pick(runs[0]).curve[i].0;
            let x = -(1.0 - p / 100.0).max(1e-6).log10();
            (x, median(runs.iter().map(|r| pick(r).curve[i].1).collect()))
        })
        .collect()
}

fn plot_latency(
    out: &Path,
    cells: &BTreeMap<Key, Cell<'_>>,
    keys: &[&Key],
    w: &str,
) -> Result<(), String> {
    let path = out.join(format!("latency_{w}.svg"));
    let root = SVGBackend::new(&path, (960, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut series = Vec::new();
    for k in keys {
        let runs = &cells[*k].runs;
        series.push((format!("{} send", label(k)), median_curve(runs, |r| &r.send_rtt), false));
        series.push((format!("{} e2e", label(k)), median_curve(runs, |r| &r.e2e), true));
    }
    let ys = series.iter().flat_map(|s| s.1.iter().map(|p| p.1)).filter(|y| *y > 0.0);
    let (lo, hi) = ys.fold((f64::MAX, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    if hi <= 0.0 {
        return Ok(());
    }
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "workload {w}: latency by percentile (solid: send round trip, dashed: end-to-end)"
            ),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..5f64, ((lo * 0.8).max(1.0)..hi * 1.3).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("µs (log)")
        .x_labels(6)
        .x_label_formatter(&|x| {
            let p = 100.0 * (1.0 - 10f64.powf(-x));
            if p < 1.0 {
                "0".into()
            } else {
                format!("{:.*}", (x.round() as usize).saturating_sub(2), p)
            }
        })
        .draw()
        .map_err(err)?;
    for (i, (name, pts, dashed)) in series.into_iter().enumerate() {
        let color = palette(i / 2);
        let style = color.stroke_width(if dashed { 1 } else { 2 });
        let pts: Vec<(f64, f64)> = pts.into_iter().filter(|p| p.1 > 0.0).collect();
        if dashed {
            chart
                .draw_series(DashedLineSeries::new(pts, 6, 4, style))
                .map_err(err)?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(1))
                });
        } else {
            chart.draw_series(LineSeries::new(pts, style)).map_err(err)?.label(name).legend(
                move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)),
            );
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// The samples up to the last second anything was sent or received, plus one.
fn active(r: &BenchReport) -> &[baiji::bench::SecondSample] {
    let last = r.series.iter().rposition(|s| s.sent > 0 || s.received > 0).map_or(0, |i| i + 2);
    &r.series[..last.min(r.series.len())]
}

/// The run whose throughput is the median of its cell.
fn median_run<'a>(runs: &[&'a BenchReport]) -> &'a BenchReport {
    let mut v: Vec<&BenchReport> = runs.to_vec();
    v.sort_by(|a, b| a.sent_per_s.total_cmp(&b.sent_per_s));
    v[v.len() / 2]
}

fn plot_throughput(
    out: &Path,
    cells: &BTreeMap<Key, Cell<'_>>,
    keys: &[&Key],
    w: &str,
) -> Result<(), String> {
    let path = out.join(format!("throughput_{w}.svg"));
    let root = SVGBackend::new(&path, (960, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let picked: Vec<(&Key, &BenchReport)> =
        keys.iter().map(|k| (*k, median_run(&cells[*k].runs))).collect();
    let tmax =
        picked.iter().flat_map(|(_, r)| active(r).iter().map(|s| s.t)).fold(1.0f64, f64::max);
    let ymax = picked
        .iter()
        .flat_map(|(_, r)| active(r).iter().map(|s| s.sent.max(s.received) as f64))
        .fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("workload {w}: messages per second (solid: acknowledged sends, dashed: deliveries, all groups)"), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..tmax, 0f64..ymax * 1.1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the first send (warm-up included)")
        .y_desc("msg/s")
        .draw()
        .map_err(err)?;
    for (i, (k, r)) in picked.into_iter().enumerate() {
        let color = palette(i);
        chart
            .draw_series(LineSeries::new(
                active(r).iter().map(|s| (s.t, s.sent as f64)),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(label(k))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(DashedLineSeries::new(
                active(r).iter().map(|s| (s.t, s.received as f64)),
                6,
                4,
                color.stroke_width(1),
            ))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

fn plot_rss(out: &Path, cells: &BTreeMap<Key, Cell<'_>>, keys: &[&Key]) -> Result<(), String> {
    let path = out.join("rss_d.svg");
    let root = SVGBackend::new(&path, (960, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let picked: Vec<(&Key, &BenchReport)> =
        keys.iter().map(|k| (*k, median_run(&cells[*k].runs))).collect();
    let tmax = picked.iter().flat_map(|(_, r)| r.series.iter().map(|s| s.t)).fold(1.0f64, f64::max);
    let ymax = picked
        .iter()
        .flat_map(|(_, r)| r.series.iter().filter_map(|s| s.rss_kb).map(|x| x as f64 / 1024.0))
        .fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "workload d: broker RSS while 1M messages are sent, then consumed",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..tmax, 0f64..ymax * 1.1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the first send")
        .y_desc("RSS MiB")
        .draw()
        .map_err(err)?;
    for (i, (k, r)) in picked.into_iter().enumerate() {
        let color = palette(i);
        chart
            .draw_series(LineSeries::new(
                r.series.iter().filter_map(|s| s.rss_kb.map(|x| (s.t, x as f64 / 1024.0))),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(label(k))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}
