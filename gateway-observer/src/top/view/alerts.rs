//! Alerts: every alert the daemon lists (firing first), and the selected one's summary and
//! evidence as `key: value` lines. Side by side when the terminal is wide, stacked otherwise.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Cell, Paragraph, Row, Wrap},
};

use super::{alert_state_style, empty, state, table, titled};
use crate::top::{
    app::{App, Screen},
    format::clock,
    model::{Alert, evidence_lines},
};

/// Side by side from this width.
const SIDE_BY_SIDE: u16 = 160;

pub fn draw(frame: &mut Frame, app: &App, area: Rect) {
    let rows = app.alert_rows();
    let block = titled("Alerts", app, Screen::Alerts, rows.len());
    if rows.is_empty() {
        let message = if app.filter.is_empty() {
            "no alerts: nothing pending, firing or resolved in the last 10 minutes"
        } else {
            "no alert matches the filter (Esc clears it)"
        };
        empty(frame, block, message, area);
        return;
    }
    let (list_area, evidence_area) = if area.width >= SIDE_BY_SIDE {
        let [l, e] = Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area);
        (l, e)
    } else {
        let list_height = (rows.len() as u16 + 3).min(area.height / 2).max(4);
        let [l, e] = Layout::vertical([Constraint::Length(list_height), Constraint::Min(3)]).areas(area);
        (l, e)
    };
    let table_rows: Vec<Row<'_>> = rows
        .iter()
        .map(|a| {
            Row::new(vec![
                Cell::from(a.state.clone()).style(alert_state_style(&a.state)),
                Cell::from(a.kind.clone()),
                Cell::from(a.subject.clone()),
                Cell::from(format!("{} ({})", a.process.comm, a.process.pid)),
                Cell::from(clock(a.since.as_deref())),
            ])
        })
        .collect();
    let widths = vec![
        Constraint::Length(8),
        Constraint::Length(18),
        Constraint::Min(12),
        Constraint::Length(22),
        Constraint::Length(8),
    ];
    let table =
        table(table_rows, vec!["STATE", "KIND", "SUBJECT", "PROCESS", "SINCE"], widths, block).highlight_symbol("▶ ");
    let selected = app.selected[Screen::Alerts.index()];
    frame.render_stateful_widget(table, list_area, &mut state(selected));
    if let Some(alert) = rows.get(selected) {
        draw_evidence(frame, alert, evidence_area);
    }
}

fn draw_evidence(frame: &mut Frame, alert: &Alert, area: Rect) {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let mut lines = vec![Line::from(vec![
        Span::styled(format!("{} ", alert.state), alert_state_style(&alert.state)),
        Span::styled(format!("{} {}: ", alert.kind, alert.subject), bold),
        Span::raw(alert.summary.clone()),
    ])];
    let times = match alert.resolved_at.as_deref() {
        Some(t) => format!("since {} UTC, resolved {} UTC", clock(alert.since.as_deref()), clock(Some(t))),
        None => format!("since {} UTC", clock(alert.since.as_deref())),
    };
    lines.push(Line::styled(times, Style::new().add_modifier(Modifier::DIM)));
    for (key, value) in evidence_lines(&alert.evidence) {
        lines.push(if key.is_empty() {
            Line::raw(format!("    {value}"))
        } else if value.is_empty() {
            Line::styled(format!("{key}:"), bold)
        } else {
            Line::from(vec![Span::styled(format!("{key}: "), bold), Span::raw(value)])
        });
    }
    let block = Block::bordered().title(format!(" Evidence: {} ", alert.id));
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }).block(block), area);
}
