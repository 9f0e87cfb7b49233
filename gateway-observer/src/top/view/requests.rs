//! Requests: the slowest recent ones with where their time went (socket queue, the gateway's own
//! work, the upstream, writing the response), and the oldest still in flight.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Style},
    text::{Line, Span},
    widgets::{Block, Cell, Row},
};

use super::{WIDE, empty, state, table, titled};
use crate::top::{
    app::{App, Screen},
    format::{count, fit, secs},
    model::SlowRequest,
};

const PHASES: [(&str, Color); 4] =
    [("q", Color::Magenta), ("g", Color::Yellow), ("u", Color::Blue), ("w", Color::Cyan)];

pub fn draw(frame: &mut Frame, app: &App, area: Rect) {
    let in_flight = app.in_flight_rows();
    let flight_height = (in_flight.len().max(1) as u16 + 3).min(area.height / 3).max(3);
    let [slow_area, flight_area] =
        Layout::vertical([Constraint::Min(5), Constraint::Length(flight_height)]).areas(area);
    let wide = area.width >= WIDE;

    let slow = app.request_rows();
    let block = titled("Slowest requests, last 60 s", app, Screen::Requests, slow.len());
    if slow.is_empty() {
        empty(frame, block, "no requests completed in the last 60 s", slow_area);
    } else {
        let rows: Vec<Row<'_>> = slow.iter().map(|r| slow_row(r, wide)).collect();
        let mut header = vec!["TIME", "STAT", "REQUEST", "QUEUE", "GATEWAY", "UPSTRM", "WRITE", "AGO"];
        let mut widths = vec![
            Constraint::Length(6),
            Constraint::Length(4),
            Constraint::Min(14),
            Constraint::Length(6),
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(6),
            Constraint::Length(6),
        ];
        if wide {
            header.extend(["WHERE (q g u w)", "PEER", "PROCESS", "TID"]);
            widths.extend([
                Constraint::Length(20),
                Constraint::Length(21),
                Constraint::Length(15),
                Constraint::Length(7),
            ]);
        }
        let table = table(rows, header, widths, block).highlight_symbol("▶ ");
        frame.render_stateful_widget(table, slow_area, &mut state(app.selected[Screen::Requests.index()]));
    }

    let block = Block::bordered().title(format!(" In flight, oldest first ({}) ", in_flight.len()));
    if in_flight.is_empty() {
        empty(frame, block, "no request in flight", flight_area);
    } else {
        let rows: Vec<Row<'_>> = in_flight
            .iter()
            .map(|(p, r)| {
                let mut cells = vec![
                    Cell::from(secs(r.age_seconds)),
                    Cell::from(format!("{} {}", r.method, r.path)),
                    Cell::from(r.thread_name.clone().unwrap_or_else(|| count(r.thread.map(u64::from)))),
                    Cell::from(secs(r.socket_queue_seconds)),
                    Cell::from(match r.response_started {
                        Some(true) => "writing",
                        Some(false) => "waiting",
                        None => "-",
                    }),
                ];
                if wide {
                    cells.push(Cell::from(format!("{} ({})", p.comm, p.pid)));
                }
                Row::new(cells)
            })
            .collect();
        let mut header = vec!["AGE", "REQUEST", "THREAD", "QUEUE", "RESPONSE"];
        let mut widths = vec![
            Constraint::Length(6),
            Constraint::Min(14),
            Constraint::Length(16),
            Constraint::Length(6),
            Constraint::Length(8),
        ];
        if wide {
            header.push("PROCESS");
            widths.push(Constraint::Length(24));
        }
        frame.render_widget(table(rows, header, widths, block), flight_area);
    }
}

fn slow_row(r: &SlowRequest, wide: bool) -> Row<'_> {
    let b = &r.breakdown;
    let phases = [b.socket_queue_seconds, b.before_upstream_seconds, b.upstream_seconds, b.response_write_seconds];
    let status_style = match r.status {
        Some(s) if s >= 500 => Style::new().fg(Color::Red),
        Some(s) if s >= 400 => Style::new().fg(Color::Yellow),
        None => Style::new().fg(Color::Red),
        _ => Style::new(),
    };
    let mut cells = vec![
        Cell::from(secs(r.duration_seconds)),
        Cell::from(r.status.map_or_else(|| "-".into(), |s| s.to_string())).style(status_style),
        Cell::from(format!("{} {}", r.method, r.path)),
        Cell::from(secs(phases[0])),
        Cell::from(secs(phases[1])),
        Cell::from(secs(phases[2])),
        Cell::from(secs(phases[3])),
        Cell::from(secs(r.age_seconds)),
    ];
    if wide {
        cells.push(Cell::from(breakdown_bar(r, 20)));
        let peer = r.upstream.as_ref().map_or_else(|| "-".into(), |u| u.peer.clone());
        cells.push(Cell::from(peer));
        cells.push(Cell::from(fit(&r.process, 15)));
        cells.push(Cell::from(count(r.thread.map(u64::from))));
    }
    Row::new(cells)
}

/// The request's duration as `width` cells split by phase, each phase in its own colour.
fn breakdown_bar(r: &SlowRequest, width: usize) -> Line<'static> {
    let b = &r.breakdown;
    let phases = [b.socket_queue_seconds, b.before_upstream_seconds, b.upstream_seconds, b.response_write_seconds];
    let total: f64 = r.duration_seconds.unwrap_or_else(|| phases.iter().flatten().sum());
    if total <= 0.0 || !total.is_finite() {
        return Line::raw("-");
    }
    let mut spans = Vec::new();
    let mut used = 0;
    for (value, (letter, color)) in phases.iter().zip(PHASES) {
        let cells = ((value.unwrap_or(0.0) / total) * width as f64).round().max(0.0) as usize;
        let cells = cells.min(width - used);
        used += cells;
        spans.push(Span::styled(letter.repeat(cells), Style::new().fg(Color::Black).bg(color)));
    }
    spans.push(Span::raw("·".repeat(width - used)));
    Line::from(spans)
}
