//! Drawing `top`: a header (daemon, connection, pause), the screen tabs, one screen, and a footer
//! with the keys. Reads [`App`] only; rows come from the same `App` functions the keys use, so the
//! highlighted row is the selected one. Works from 80x24 up: wider terminals get more columns,
//! taller ones more rows.

mod alerts;
mod overview;
mod process;
mod requests;
mod upstreams;

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Clear, Paragraph, Row, Table, TableState},
};

use super::{
    app::{App, Link, Screen},
    format::fit,
};

/// Wider than this, screens add columns.
const WIDE: u16 = 110;

pub fn draw(frame: &mut Frame, app: &App) {
    let [header, tabs, body, footer] =
        Layout::vertical([Constraint::Length(1), Constraint::Length(1), Constraint::Min(0), Constraint::Length(1)])
            .areas(frame.area());
    frame.render_widget(header_line(app, header.width), header);
    frame.render_widget(tab_line(app), tabs);
    if let Some(message) = no_data_message(app) {
        frame.render_widget(Paragraph::new(message).block(Block::bordered()), body);
    } else {
        match app.screen {
            Screen::Overview => overview::draw(frame, app, body),
            Screen::Process => process::draw(frame, app, body),
            Screen::Requests => requests::draw(frame, app, body),
            Screen::Upstreams => upstreams::draw(frame, app, body),
            Screen::Alerts => alerts::draw(frame, app, body),
        }
    }
    frame.render_widget(footer_line(app), footer);
    if app.help {
        help(frame, frame.area());
    }
}

/// Until the first snapshot arrives there is nothing to draw but the connection's state.
fn no_data_message(app: &App) -> Option<String> {
    if app.refreshes > 0 {
        return None;
    }
    Some(match &app.link {
        Link::Down { error, .. } => format!("disconnected, retrying: {error}"),
        _ => format!("connecting to {}…", app.endpoint),
    })
}

fn header_line(app: &App, width: u16) -> Line<'static> {
    let snap = &app.data.snapshot;
    let mut spans =
        vec![Span::styled(" gateway-observer top ", Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED))];
    match &app.link {
        Link::Up => spans.push(Span::styled(" ● connected ", Style::new().fg(Color::Green))),
        Link::Connecting => spans.push(Span::styled(" ○ connecting ", Style::new().fg(Color::Yellow))),
        Link::Down { error, .. } => {
            spans.push(Span::styled(
                " ✗ disconnected, retrying ",
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            ));
            spans.push(Span::styled(format!("({error}) "), Style::new().fg(Color::Red)));
        }
    }
    if app.paused {
        spans.push(Span::styled(" PAUSED ", Style::new().fg(Color::Black).bg(Color::Yellow)));
    }
    let targets = snap.targets.map_or_else(|| "-".into(), |t| t.to_string());
    let threads = snap.threads.map_or_else(|| "-".into(), |t| t.to_string());
    spans.push(Span::raw(format!(" {targets} targets, {threads} threads ")));
    let used: usize = spans.iter().map(|s| s.content.chars().count()).sum();
    if used + app.endpoint.len() + 2 <= usize::from(width) {
        spans.push(Span::styled(format!(" {}", app.endpoint), Style::new().fg(Color::DarkGray)));
    }
    Line::from(spans)
}

fn tab_line(app: &App) -> Line<'static> {
    let open = app.open_alerts();
    let spans = Screen::ALL.iter().enumerate().map(|(i, s)| {
        let mut title = format!(" {} {} ", i + 1, s.title());
        if *s == Screen::Alerts && open > 0 {
            title = format!(" {} {} ({open}) ", i + 1, s.title());
        }
        let style = if *s == app.screen {
            Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD)
        } else if *s == Screen::Alerts && open > 0 {
            Style::new().fg(Color::Red)
        } else {
            Style::new()
        };
        Span::styled(title, style)
    });
    Line::from(spans.collect::<Vec<_>>())
}

const KEYS: [(&str, &str); 9] = [
    ("q", "quit"),
    ("?", "help"),
    ("↑↓", "move"),
    ("⏎", "drill"),
    ("esc", "back"),
    ("tab", "screen"),
    ("s", "sort"),
    ("/", "filter"),
    ("p", "pause"),
];

fn footer_line(app: &App) -> Line<'static> {
    if let Some(text) = &app.editing {
        return Line::from(vec![
            Span::styled(format!("/{text}▏"), Style::new().add_modifier(Modifier::BOLD)),
            Span::styled("  ⏎ apply  esc cancel", Style::new().fg(Color::DarkGray)),
        ]);
    }
    let mut spans = Vec::new();
    for (key, label) in KEYS {
        spans.push(Span::styled(key, Style::new().add_modifier(Modifier::REVERSED)));
        spans.push(Span::raw(format!(" {label} ")));
    }
    Line::from(spans)
}

fn help(frame: &mut Frame, area: Rect) {
    let lines = [
        "↑↓ / j k     move the selection (PgUp PgDn, g G: ends)",
        "Enter        drill into the selected process or alert's process",
        "Esc          back from a drill-down; else clear the filter",
        "Tab / 1-5    switch screen: overview, process, requests,",
        "             upstreams, alerts",
        "s            cycle the sort key of this screen",
        "/            filter rows (type, Enter apply, Esc cancel)",
        "p            pause: keep the shown data, hold new data",
        "q / Ctrl-C   quit",
        "",
        "any key closes this help",
    ];
    let width = (lines.iter().map(|l| l.chars().count()).max().unwrap_or(0) as u16 + 4).min(area.width);
    let height = (lines.len() as u16 + 2).min(area.height);
    let popup = area.centered(Constraint::Length(width), Constraint::Length(height));
    frame.render_widget(Clear, popup);
    let text: Vec<Line<'_>> = lines.iter().map(|l| Line::raw(*l)).collect();
    frame.render_widget(Paragraph::new(text).block(Block::bordered().title(" keys ")), popup);
}

/// A block titled with the list's name, its sort key and the active filter.
fn titled(name: &str, app: &App, screen: Screen, shown: usize) -> Block<'static> {
    let mut title = format!(" {name} ({shown}) · sort: {} ", app.sort_key(screen));
    if !app.filter.is_empty() {
        title.push_str(&format!("· filter: {} ", app.filter));
    }
    Block::bordered().title(title)
}

/// A table with the common look: bold header, reversed selected row.
fn table<'a>(rows: Vec<Row<'a>>, header: Vec<&'a str>, widths: Vec<Constraint>, block: Block<'a>) -> Table<'a> {
    Table::new(rows, widths)
        .header(Row::new(header).style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .block(block)
}

fn state(selected: usize) -> TableState {
    TableState::default().with_selected(Some(selected))
}

/// A message in a bordered block, where a list would be.
fn empty(frame: &mut Frame, block: Block<'_>, message: &str, area: Rect) {
    let text = fit(message, usize::from(area.width.saturating_sub(2)));
    frame.render_widget(Paragraph::new(text).style(Style::new().fg(Color::DarkGray)).block(block), area);
}

/// Red from 80 %, yellow from 50 %.
fn share_color(share: Option<f64>) -> Color {
    match share.unwrap_or(0.0) {
        s if s >= 0.8 => Color::Red,
        s if s >= 0.5 => Color::Yellow,
        _ => Color::Green,
    }
}

fn alert_state_style(state: &str) -> Style {
    match state {
        "firing" => Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        "pending" => Style::new().fg(Color::Yellow),
        _ => Style::new().fg(Color::DarkGray),
    }
}
