//! Upstream peers per process: connections, requests waiting for an answer and for how long,
//! and retransmits and one-way flows when the daemon reports them.

use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    style::{Color, Style},
    text::{Line, Span},
    widgets::{Cell, Row},
};

use super::{WIDE, empty, state, table, titled};
use crate::top::{
    app::{App, Screen},
    format::{bar, count, secs},
};

pub fn draw(frame: &mut Frame, app: &App, area: Rect) {
    let rows = app.upstream_rows();
    let block = titled("Upstreams", app, Screen::Upstreams, rows.len());
    if rows.is_empty() {
        empty(frame, block, "no upstream connections seen", area);
        return;
    }
    let wide = area.width >= WIDE;
    let oldest_max = rows.iter().filter_map(|(_, u)| u.oldest_age_seconds).fold(0.0_f64, f64::max);
    let table_rows: Vec<Row<'_>> = rows
        .iter()
        .map(|(p, u)| {
            let age = u.oldest_age_seconds;
            // An answer older than a second is what an on-call looks for.
            let age_style = if age.unwrap_or(0.0) >= 1.0 { Style::new().fg(Color::Red) } else { Style::new() };
            let mut cells = vec![
                Cell::from(u.peer.clone()),
                Cell::from(count(u.connections)),
                Cell::from(count(u.outstanding)),
                Cell::from(secs(age)).style(age_style),
                Cell::from(count(u.retransmits)),
                Cell::from(count(u.one_way)),
                Cell::from(if wide { format!("{} ({})", p.comm, p.pid) } else { p.comm.clone() }),
            ];
            if wide {
                let share = if oldest_max > 0.0 { age.unwrap_or(0.0) / oldest_max } else { 0.0 };
                cells.insert(4, Cell::from(Line::from(Span::styled(bar(share, 16), age_style))));
            }
            Row::new(cells)
        })
        .collect();
    let mut header = vec!["PEER", "CONNS", "WAITING", "OLDEST", "RETRANS", "ONE-WAY", "PROCESS"];
    let mut widths = vec![
        Constraint::Length(21),
        Constraint::Length(5),
        Constraint::Length(7),
        Constraint::Length(6),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Min(10),
    ];
    if wide {
        header.insert(4, "OLDEST (relative)");
        widths.insert(4, Constraint::Length(17));
    }
    let table = table(table_rows, header, widths, block).highlight_symbol("▶ ");
    frame.render_stateful_widget(table, area, &mut state(app.selected[Screen::Upstreams.index()]));
}
