//! One process: its request summary, its event loops with utilization bars (and the alert on
//! each, if any), and its thread groups' state mix when the daemon reports them.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Style},
    text::{Line, Span},
    widgets::{Block, Cell, Paragraph, Row},
};

use super::{WIDE, alert_state_style, empty, share_color, state, table, titled};
use crate::top::{
    app::{App, Screen},
    format::{bar, count, pct, rate, secs},
    model::{Listener, ThreadGroup},
};

pub fn draw(frame: &mut Frame, app: &App, area: Rect) {
    let Some(pid) = app.focus_pid() else {
        empty(
            frame,
            Block::bordered().title(" Process "),
            "no process: pick one on the overview and press Enter",
            area,
        );
        return;
    };
    let groups = app.group_rows();
    let groups_height = if groups.is_empty() { 3 } else { (groups.len() as u16 + 3).min(area.height / 2) };
    let [summary, loops_area, groups_area] =
        Layout::vertical([Constraint::Length(6), Constraint::Min(4), Constraint::Length(groups_height)]).areas(area);

    let process = app.focus_process();
    let comm = process
        .map(|p| p.comm.as_str())
        .or_else(|| app.data.snapshot.event_loops.iter().find(|l| l.pid == pid).map(|l| l.comm.as_str()))
        .unwrap_or("?");
    let drilled = if app.focus.is_some() { " · esc back " } else { " · from the overview's selection " };
    let block = Block::bordered().title(format!(" {comm} ({pid}){drilled}"));
    let side = |name: &str, w: Option<&crate::top::model::Window>| {
        Line::raw(format!(
            "{name} {:>7}/s  p50 {:>6}  p90 {:>6}  p99 {:>6}  max {:>6}  refused {}",
            rate(w.and_then(|w| w.per_second)),
            secs(w.and_then(|w| w.p50_seconds)),
            secs(w.and_then(|w| w.p90_seconds)),
            secs(w.and_then(|w| w.p99_seconds)),
            secs(w.and_then(|w| w.max_seconds)),
            count(w.and_then(|w| w.refused)),
        ))
    };
    let open = app.data.alerts.iter().filter(|a| a.is_open() && a.process.pid == pid).count();
    let lines = vec![
        side("inbound ", process.map(|p| &p.inbound)),
        side("upstream", process.map(|p| &p.outbound)),
        Line::raw(format!(
            "in-flight {}  cpu {}  open alerts {open}",
            count(process.and_then(|p| p.in_flight)),
            process.and_then(|p| p.cpu).map_or_else(|| "-".into(), |c| format!("{c:.2}")),
        )),
        listeners_line(process.map_or(&[], |p| p.listeners.as_slice())),
    ];
    frame.render_widget(Paragraph::new(lines).block(block), summary);

    let loops = app.loop_rows();
    let block = titled("Event loops", app, Screen::Process, loops.len());
    if loops.is_empty() {
        empty(frame, block, "no event loops found in this process (threads idling in epoll/poll/select)", loops_area);
    } else {
        let bar_width =
            usize::from(loops_area.width.saturating_sub(if loops_area.width >= WIDE { 70 } else { 52 })).clamp(4, 60);
        let rows: Vec<Row<'_>> = loops
            .iter()
            .map(|l| {
                let alert = app
                    .data
                    .alerts
                    .iter()
                    .filter(|a| a.is_open() && a.process.pid == l.pid && a.subject == l.thread)
                    .min_by_key(|a| a.state_rank());
                let (alert_text, alert_style) =
                    alert.map_or((String::new(), Style::new()), |a| (a.kind().to_owned(), alert_state_style(&a.state)));
                Row::new(vec![
                    Cell::from(l.thread.clone()),
                    Cell::from(l.tid.map_or_else(|| "-".into(), |t| t.to_string())),
                    Cell::from(Line::from(vec![
                        Span::styled(
                            bar(l.utilization.unwrap_or(0.0), bar_width),
                            Style::new().fg(share_color(l.utilization)),
                        ),
                        Span::raw(format!(" {:>4}", pct(l.utilization))),
                    ])),
                    Cell::from(alert_text).style(alert_style),
                ])
            })
            .collect();
        let widths = vec![
            Constraint::Min(12),
            Constraint::Length(7),
            Constraint::Length(bar_width as u16 + 5),
            Constraint::Min(16),
        ];
        let table = table(rows, vec!["THREAD", "TID", "UTILIZATION", "ALERT"], widths, block).highlight_symbol("▶ ");
        frame.render_stateful_widget(table, loops_area, &mut state(app.selected[Screen::Process.index()]));
    }

    let block = Block::bordered().title(format!(" Thread groups ({}) ", groups.len()));
    if groups.is_empty() {
        empty(frame, block, "thread groups: not in this daemon's snapshot", groups_area);
    } else {
        let rows: Vec<Row<'_>> = groups.iter().map(|g| group_row(g)).collect();
        let header = vec!["GROUP", "THREADS", "RUN", "RUNQ", "BLOCKED", "IDLE", "STATE MIX", "BLOCKED IN"];
        let widths = vec![
            Constraint::Min(14),
            Constraint::Length(7),
            Constraint::Length(4),
            Constraint::Length(4),
            Constraint::Length(7),
            Constraint::Length(4),
            Constraint::Length(12),
            Constraint::Min(10),
        ];
        frame.render_widget(table(rows, header, widths, block), groups_area);
    }
}

/// Each listening port with its accept queue and the connections whose requests wait unread (red).
fn listeners_line(listeners: &[Listener]) -> Line<'static> {
    let mut spans = vec![Span::raw("listening")];
    if listeners.is_empty() {
        spans.push(Span::raw(" -"));
    }
    for l in listeners {
        spans.push(Span::raw(format!("  :{} accept queue {}", l.port, count(l.accept_queue))));
        if l.waiting.unwrap_or(0) > 0 {
            let waiting = format!(", {} waiting unread up to {}", count(l.waiting), secs(l.oldest_unread_seconds));
            spans.push(Span::styled(waiting, Style::new().fg(Color::Red)));
        }
    }
    Line::from(spans)
}

/// Running (green), runnable (yellow), blocked (red), idle (gray) as one 12-cell stacked bar.
fn group_row(g: &ThreadGroup) -> Row<'_> {
    const WIDTH: u64 = 12;
    let parts =
        [(g.running, Color::Green), (g.runnable, Color::Yellow), (g.blocked, Color::Red), (g.idle, Color::DarkGray)];
    let total: u64 = parts.iter().map(|(n, _)| n.unwrap_or(0)).sum();
    let mut spans = Vec::new();
    let mut used = 0;
    for (n, color) in parts {
        let cells = if total == 0 { 0 } else { (n.unwrap_or(0) * WIDTH).div_ceil(total).min(WIDTH - used) };
        used += cells;
        spans.push(Span::styled("█".repeat(cells as usize), Style::new().fg(color)));
    }
    let mut reasons: Vec<(&String, &f64)> = g.blocked_seconds_by_reason.iter().collect();
    reasons.sort_by(|a, b| b.1.total_cmp(a.1));
    let blocked_in: Vec<String> = reasons.iter().take(2).map(|(r, s)| format!("{r} {}", secs(Some(**s)))).collect();
    Row::new(vec![
        Cell::from(g.name.clone()),
        Cell::from(count(g.threads)),
        Cell::from(count(g.running)),
        Cell::from(count(g.runnable)),
        Cell::from(count(g.blocked)),
        Cell::from(count(g.idle)),
        Cell::from(Line::from(spans)),
        Cell::from(if blocked_in.is_empty() { "-".into() } else { blocked_in.join(", ") }),
    ])
}
