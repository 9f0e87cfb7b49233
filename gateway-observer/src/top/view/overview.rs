//! The first screen: one row per target process (rate, latency, in-flight, CPU, the busiest event
//! loop, open alerts), the open alerts underneath, and the selected process's trends.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Cell, Paragraph, Row},
};

use super::{WIDE, alert_state_style, empty, share_color, state, table, titled};
use crate::top::{
    app::{App, Screen},
    format::{bar, fit, pct, rate, secs, spark},
};

pub fn draw(frame: &mut Frame, app: &App, area: Rect) {
    let open: Vec<_> = app.alert_rows().into_iter().filter(|a| a.is_open()).collect();
    let rows = app.process_rows();
    // The process list as tall as it needs, the alerts at least a third: the rest to the alerts.
    let trends_height = if area.height >= 16 { 4 } else { 0 };
    let alerts_min = (open.len().max(1) as u16 + 2).min((area.height / 3).max(3));
    let list_height =
        (rows.len() as u16).saturating_add(3).max(5).min(area.height.saturating_sub(alerts_min + trends_height));
    let [list, middle, trends] =
        Layout::vertical([Constraint::Length(list_height), Constraint::Min(0), Constraint::Length(trends_height)])
            .areas(area);
    // Tall terminals: the alerts as tall as they need (up to half), the busiest event loops below.
    let loops_count = app.data.snapshot.event_loops.len() as u16;
    let (alerts_area, loops_area) = if middle.height >= 14 && loops_count > 0 {
        let alerts_height = (open.len().max(1) as u16 + 2).clamp(3, middle.height / 2);
        let [a, l] = Layout::vertical([Constraint::Length(alerts_height), Constraint::Min(0)]).areas(middle);
        (a, Some(l))
    } else {
        (middle, None)
    };

    let block = titled("Processes", app, Screen::Overview, rows.len());
    if rows.is_empty() {
        let message = if app.filter.is_empty() {
            "no targets: the daemon sees no target process yet (run it with --target)"
        } else {
            "no process matches the filter (Esc clears it)"
        };
        empty(frame, block, message, list);
    } else {
        let wide = area.width >= WIDE;
        let trend_width = 16;
        let table_rows: Vec<Row<'_>> = rows
            .iter()
            .map(|r| {
                let inbound = r.process.map(|p| &p.inbound);
                let mut cells = vec![
                    Cell::from(r.comm.to_owned()),
                    Cell::from(r.pid.to_string()),
                    Cell::from(rate(inbound.and_then(|w| w.per_second))),
                    Cell::from(secs(inbound.and_then(|w| w.p50_seconds))),
                    Cell::from(secs(inbound.and_then(|w| w.p99_seconds))),
                    Cell::from(r.process.and_then(|p| p.in_flight).map_or_else(|| "-".into(), |n| n.to_string())),
                ];
                if wide {
                    cells.push(Cell::from(
                        r.process.and_then(|p| p.cpu).map_or_else(|| "-".into(), |c| format!("{c:.2}")),
                    ));
                }
                cells.push(Cell::from(Line::from(vec![
                    Span::styled(bar(r.loop_max.unwrap_or(0.0), 5), Style::new().fg(share_color(r.loop_max))),
                    Span::raw(format!(" {:>4}", pct(r.loop_max))),
                ])));
                let alerts = if r.open_alerts > 0 { format!("{} ●", r.open_alerts) } else { "0".into() };
                let alert_style = if r.open_alerts > 0 { alert_state_style("firing") } else { Style::new() };
                cells.push(Cell::from(alerts).style(alert_style));
                if wide {
                    let h = app.history.get(&r.pid);
                    cells.push(Cell::from(h.map_or_else(String::new, |h| spark(h.per_second.iter(), trend_width))));
                    cells.push(Cell::from(h.map_or_else(String::new, |h| spark(h.p99_seconds.iter(), trend_width))));
                }
                Row::new(cells)
            })
            .collect();
        let mut header = vec!["PROCESS", "PID", "REQ/S", "P50", "P99", "IN-FL"];
        let mut widths = vec![
            Constraint::Min(12),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(6),
            Constraint::Length(5),
        ];
        if wide {
            header.push("CPU");
            widths.push(Constraint::Length(5));
        }
        header.extend(["LOOP MAX", "ALERTS"]);
        widths.extend([Constraint::Length(10), Constraint::Length(6)]);
        if wide {
            header.extend(["REQ/S TREND", "P99 TREND"]);
            widths.extend([Constraint::Length(trend_width as u16), Constraint::Length(trend_width as u16)]);
        }
        let table = table(table_rows, header, widths, block).highlight_symbol("▶ ");
        frame.render_stateful_widget(table, list, &mut state(app.selected[Screen::Overview.index()]));
    }

    let block = Block::bordered().title(format!(" Open alerts ({}) · 5 for details ", open.len()));
    if open.is_empty() {
        empty(frame, block, "no alerts", alerts_area);
    } else {
        let width = usize::from(alerts_area.width.saturating_sub(2));
        let lines: Vec<Line<'_>> = open
            .iter()
            .map(|a| {
                let head = format!("{:<8} {} {} ", a.state, a.kind(), a.subject);
                let rest = format!("{} · {}", a.process.comm, a.summary);
                Line::from(vec![
                    Span::styled(fit(&head, width), alert_state_style(&a.state)),
                    Span::raw(fit(&rest, width.saturating_sub(head.chars().count()))),
                ])
            })
            .collect();
        frame.render_widget(Paragraph::new(lines).block(block), alerts_area);
    }

    if let Some(loops_area) = loops_area {
        draw_busiest_loops(frame, app, loops_area);
    }
    if trends.height > 0 {
        draw_trends(frame, app, trends);
    }
}

/// Event loops of every process, the busiest first, with the alert on each.
fn draw_busiest_loops(frame: &mut Frame, app: &App, area: Rect) {
    let mut loops: Vec<_> = app.data.snapshot.event_loops.iter().collect();
    loops.sort_by(|a, b| b.utilization.unwrap_or(-1.0).total_cmp(&a.utilization.unwrap_or(-1.0)));
    let bar_width = 20;
    let rows: Vec<Row<'_>> = loops
        .iter()
        .take(usize::from(area.height.saturating_sub(3)))
        .map(|l| {
            let alert = app
                .data
                .alerts
                .iter()
                .filter(|a| a.is_open() && a.process.pid == l.pid && a.subject == l.thread)
                .min_by_key(|a| a.state_rank());
            let (text, style) = alert.map_or((String::new(), Style::new()), |a| {
                (format!("{} ({})", a.kind(), a.state), alert_state_style(&a.state))
            });
            Row::new(vec![
                Cell::from(l.thread.clone()),
                Cell::from(format!("{} ({})", l.comm, l.pid)),
                Cell::from(Line::from(vec![
                    Span::styled(
                        bar(l.utilization.unwrap_or(0.0), bar_width),
                        Style::new().fg(share_color(l.utilization)),
                    ),
                    Span::raw(format!(" {:>4}", pct(l.utilization))),
                ])),
                Cell::from(text).style(style),
            ])
        })
        .collect();
    let widths = vec![
        Constraint::Length(18),
        Constraint::Length(24),
        Constraint::Length(bar_width as u16 + 5),
        Constraint::Min(10),
    ];
    let block = Block::bordered().title(format!(" Busiest event loops ({}) · 2 for the process view ", loops.len()));
    frame.render_widget(table(rows, vec!["THREAD", "PROCESS", "UTILIZATION", "ALERT"], widths, block), area);
}

/// Inbound req/s and p99 of the selected process over the last refreshes.
fn draw_trends(frame: &mut Frame, app: &App, area: Rect) {
    let rows = app.process_rows();
    let Some(row) = rows.get(app.selected[Screen::Overview.index()]) else {
        frame.render_widget(Block::bordered().title(" Trends "), area);
        return;
    };
    let block = Block::bordered().title(format!(" Trends: {} ({}) ", row.comm, row.pid));
    let width = usize::from(area.width.saturating_sub(20));
    let lines = match app.history.get(&row.pid) {
        Some(h) => vec![
            Line::from(vec![
                Span::styled("req/s ", Style::new().add_modifier(Modifier::BOLD)),
                Span::raw(format!("{:>8} ", rate(h.per_second.back().copied()))),
                Span::raw(spark(h.per_second.iter(), width)),
            ]),
            Line::from(vec![
                Span::styled("p99   ", Style::new().add_modifier(Modifier::BOLD)),
                Span::raw(format!("{:>8} ", secs(h.p99_seconds.back().copied()))),
                Span::raw(spark(h.p99_seconds.iter(), width)),
            ]),
        ],
        None => vec![Line::raw("no requests seen for this process")],
    };
    frame.render_widget(Paragraph::new(lines).block(block), area);
}
