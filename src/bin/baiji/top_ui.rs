//! `baiji top`: the terminal screen over [`baiji::top`] (ratatui on crossterm). It samples the
//! cluster every `--interval-ms`, draws brokers, topics and groups, and quits on `q`, Esc or
//! Ctrl-C. The data and the rows come from the library (`baiji::top::sample` and `view`); this
//! file only draws them.

use std::io;
use std::time::{Duration, Instant};

use baiji::top::{self, Sample, View};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyModifiers};
use ratatui::crossterm::terminal::{self, EnterAlternateScreen, LeaveAlternateScreen};
use ratatui::crossterm::ExecutableCommand;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table};
use ratatui::{DefaultTerminal, Frame};

/// `baiji top` flags.
#[derive(Debug, clap::Args)]
pub(crate) struct TopArgs {
    /// Name server to ask for the cluster's brokers (host:port).
    #[arg(long, default_value = "127.0.0.1:9876")]
    namesrv: String,
    /// Milliseconds between two samples.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Bound for each connection and request, milliseconds.
    #[arg(long, default_value_t = 3000)]
    timeout_ms: u64,
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn opt<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map_or_else(|| "-".to_string(), f)
}

fn rate(v: Option<f64>) -> String {
    opt(v, |r| format!("{r:.1}/s"))
}

fn header<'a>(cells: &[&'a str]) -> Row<'a> {
    Row::new(cells.iter().map(|c| Cell::from(*c)))
        .style(Style::default().add_modifier(Modifier::BOLD | Modifier::REVERSED))
}

fn draw(f: &mut Frame<'_>, namesrv: &str, status: &str, v: &View) {
    let [title, brokers, topics, groups] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(v.brokers.len() as u16 + 3),
        Constraint::Percentage(50),
        Constraint::Percentage(50),
    ])
    .areas(f.area());
    f.render_widget(
        Paragraph::new(Line::from(format!("baiji top  namesrv {namesrv}  {status}  (q to quit)"))),
        title,
    );
    let rows = v.brokers.iter().map(|b| {
        let mem = opt(b.memory, |(used, budget)| {
            let pct = if budget == 0 { 0.0 } else { used as f64 * 100.0 / budget as f64 };
            format!("{} / {} ({pct:.1}%)", bytes(used), bytes(budget))
        });
        Row::new(vec![
            b.cluster.clone(),
            b.name.clone(),
            b.addr.clone(),
            b.version.clone(),
            rate(b.in_tps),
            rate(b.out_tps),
            mem,
            opt(b.evicted, |n| n.to_string()),
            opt(b.refused, |n| n.to_string()),
            b.error.clone().unwrap_or_default(),
        ])
    });
    let t = Table::new(
        rows,
        [
            Constraint::Length(16),
            Constraint::Length(12),
            Constraint::Length(21),
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(28),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Fill(1),
        ],
    )
    .header(header(&[
        "CLUSTER",
        "BROKER",
        "ADDR",
        "VERSION",
        "IN",
        "OUT",
        "MEMORY USED",
        "EVICTED",
        "REFUSED",
        "ERROR",
    ]))
    .block(Block::default().borders(Borders::ALL).title(" brokers "));
    f.render_widget(t, brokers);

    let rows = v.topics.iter().map(|t| {
        Row::new(vec![
            t.topic.clone(),
            t.broker.clone(),
            t.queues.to_string(),
            t.retained.to_string(),
            rate(t.in_rate),
        ])
    });
    let t = Table::new(
        rows,
        [
            Constraint::Fill(1),
            Constraint::Length(12),
            Constraint::Length(7),
            Constraint::Length(12),
            Constraint::Length(12),
        ],
    )
    .header(header(&["TOPIC", "BROKER", "QUEUES", "RETAINED", "IN"]))
    .block(Block::default().borders(Borders::ALL).title(" topics "));
    f.render_widget(t, topics);

    let rows = v.groups.iter().map(|g| {
        Row::new(vec![
            g.group.clone(),
            g.broker.clone(),
            rate(g.out_rate),
            g.lag.to_string(),
            opt(g.held_bytes, bytes),
            opt(g.dropped, |n| n.to_string()),
        ])
    });
    let t = Table::new(
        rows,
        [
            Constraint::Fill(1),
            Constraint::Length(12),
            Constraint::Length(12),
            Constraint::Length(10),
            Constraint::Length(12),
            Constraint::Length(9),
        ],
    )
    .header(header(&["GROUP", "BROKER", "OUT", "LAG", "HELD", "DROPPED"]))
    .block(Block::default().borders(Borders::ALL).title(" consumer groups "));
    f.render_widget(t, groups);
}

/// Waits up to `d` for a key; `true` if it asks to quit.
fn quit_within(d: Duration) -> io::Result<bool> {
    let until = Instant::now() + d;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || !event::poll(left)? {
            return Ok(false);
        }
        if let Event::Key(k) = event::read()? {
            let ctrl_c =
                k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
            if ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
                return Ok(true);
            }
        }
    }
}

async fn run_loop(term: &mut DefaultTerminal, args: &TopArgs) -> io::Result<()> {
    let start = Instant::now();
    let timeout = Duration::from_millis(args.timeout_ms.max(1));
    let interval = Duration::from_millis(args.interval_ms.max(100));
    let mut prev: Option<Sample> = None;
    let mut view = View::default();
    loop {
        let began = Instant::now();
        let at = start.elapsed().as_millis() as u64;
        let status = match top::sample(&args.namesrv, timeout, at).await {
            Ok(cur) => {
                view = top::view(prev.as_ref(), &cur);
                prev = Some(cur);
                format!(
                    "{} brokers, {} topics, {} groups",
                    view.brokers.len(),
                    view.topics.len(),
                    view.groups.len()
                )
            }
            Err(e) => format!("cannot sample: {e}"),
        };
        term.draw(|f| draw(f, &args.namesrv, &status, &view))?;
        if quit_within(interval.saturating_sub(began.elapsed()))? {
            return Ok(());
        }
    }
}

/// Runs the screen until the user quits.
pub(crate) fn run(args: &TopArgs) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    terminal::enable_raw_mode()?;
    io::stdout().execute(EnterAlternateScreen)?;
    let result = ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(io::stdout()))
        .and_then(|mut term| rt.block_on(run_loop(&mut term, args)));
    let _ = io::stdout().execute(LeaveAlternateScreen);
    let _ = terminal::disable_raw_mode();
    result
}
