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
                Cell::from(a.kind().to_owned()),
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
        Span::styled(format!("{} {}: ", alert.kind(), alert.subject), bold),
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

#[cfg(test)]
mod tests {
    use ratatui::{Terminal, backend::TestBackend};

    use crate::top::{
        app::{App, Screen, Update},
        model::Data,
    };

    /// The evidence pane's lines for the first alert of the recorded blocked gateway, drawn at 100x50
    /// (stacked layout), without the border and trailing blanks.
    fn evidence_pane() -> Vec<String> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/top");
        let read = |name: &str| std::fs::read_to_string(format!("{dir}/{name}")).expect("fixture");
        let data = Data::parse(&read("blocked_snapshot.json"), &read("blocked_alerts.json")).expect("parses");
        let mut app = App::new("127.0.0.1:9");
        app.apply(Update::Data(Box::new(data)));
        app.screen = Screen::Alerts;
        let mut terminal = Terminal::new(TestBackend::new(100, 50)).expect("terminal");
        terminal.draw(|frame| super::super::draw(frame, &app)).expect("drawn");
        let buffer = terminal.backend().buffer();
        let rows: Vec<String> = (0..buffer.area.height)
            .map(|y| (0..buffer.area.width).map(|x| buffer[(x, y)].symbol()).collect::<String>())
            .collect();
        let start = rows.iter().position(|r| r.contains(" Evidence: ")).expect("evidence pane");
        rows[start + 1..]
            .iter()
            .take_while(|r| !r.starts_with('└'))
            .map(|r| r.trim_start_matches('│').trim_end().trim_end_matches('│').trim_end().to_owned())
            .collect()
    }

    #[test]
    fn a_recorded_blocked_loop_shows_its_stack_after_the_headline() {
        // As `top` drew it when it read evidence as untyped JSON: the headline keys, the stack one
        // frame a line, then every other key in name order (`futex_uaddr`: an older daemon's).
        let expected = [
            "since 02:18:02 UTC",
            "reason: socket",
            "syscall: recvfrom",
            "blocked_share: 0.8654",
            "longest_block_seconds: 0.1033",
            "stack:",
            "    recv+0x64 (libc.so.6)",
            "blocked_seconds: 4.3247",
            "blocked_seconds_by_reason.socket: 4.3247",
            "blocks_over_event_threshold: 44",
            "blocks_over_single_threshold: 44",
            "futex_uaddr: -",
            "refusals: 0",
            "requests.completed: 654",
            "requests.delayed_in_socket: 11",
            "requests.delayed_threshold_seconds: 0.01",
            "requests.in_flight: 8",
            "requests.max_socket_queue_seconds: 0.1997",
            "requests.oldest_in_flight_seconds: 0.3177",
            "requests.window_seconds: 5",
            "single_block_threshold_seconds: 0.05",
            "thread: gw-worker-0",
            "tid: 9281",
            "window_seconds: 4.9972",
        ];
        let pane = evidence_pane();
        let shown: Vec<&str> = pane.iter().map(String::as_str).skip_while(|l| !l.starts_with("since ")).collect();
        let shown: Vec<&str> = shown.into_iter().take_while(|l| !l.is_empty()).collect();
        assert_eq!(shown, expected);
    }
}
