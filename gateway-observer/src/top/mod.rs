//! `gateway-observer top`: the live view. It reads the running daemon's local API
//! (`/api/v1/snapshot`, `/api/v1/alerts`), so it needs no privileges and loads no eBPF.
//!
//! One owner: the main thread holds the [`app::App`] state and the terminal; a fetcher thread
//! sends each refresh (or the reason it failed) over a channel. `app` is pure state, `view/` draws
//! it, `client` speaks HTTP, `model` is the tolerant JSON shape, `once` is `--once`. Nothing is
//! printed while the alternate screen is up: errors go to the header, and the terminal is
//! restored on `q`, on SIGINT/SIGTERM/SIGHUP and on panic; `lifeline` ends it when the terminal
//! goes away.

pub mod app;
pub mod client;
pub mod format;
pub mod lifeline;
pub mod model;
pub mod once;
pub mod rows;
pub mod view;

use std::{
    io::IsTerminal as _,
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use crossterm::{
    cursor,
    event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers},
    execute,
    terminal::{self, EnterAlternateScreen, LeaveAlternateScreen},
};
use ratatui::{Terminal, backend::CrosstermBackend};

use self::{
    app::{App, Key, Update},
    client::{ClientError, Endpoint},
};

/// `--format` of `top --once`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Json,
    Text,
}

#[derive(Debug, thiserror::Error)]
pub enum TopError {
    /// The daemon could not be read (bad URL, down, not our API).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Setting up, drawing to or restoring the terminal failed.
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
    /// The interactive view was asked for without a terminal.
    #[error("stdout is not a terminal: use --once for scripts")]
    NotATerminal,
    /// `--once` could not write its output.
    #[error("cannot write to stdout: {0}")]
    Output(std::io::Error),
    /// The terminal hung up or closed while the view was up.
    #[error("the terminal went away")]
    TerminalGone,
}

/// How long one fetch may take before it counts as a failure.
fn fetch_timeout(interval: Duration) -> Duration {
    interval.clamp(Duration::from_secs(1), Duration::from_secs(5))
}

/// `top --once`: one fetch, printed to stdout.
pub fn once(connect: &str, format: Format) -> Result<(), TopError> {
    let endpoint = Endpoint::parse(connect)?;
    let timeout = Duration::from_secs(5);
    let out = match format {
        Format::Json => {
            let (snapshot, alerts) = endpoint.fetch_raw(timeout)?;
            crate::printable::json_text(once::json(snapshot, alerts))
        }
        Format::Text => once::text(&endpoint.fetch(timeout)?),
    };
    // A reader that went away (`| head`) is no error: there is nobody left to tell.
    crate::cli::output::line(out.trim_end()).map_err(TopError::Output)?;
    Ok(())
}

/// True while the terminal is in raw mode on the alternate screen.
static TERMINAL_TAKEN: AtomicBool = AtomicBool::new(false);

/// Puts the terminal back: cursor shown, main screen, cooked mode. Safe to call more than once,
/// and from the panic hook.
fn restore_terminal() {
    if TERMINAL_TAKEN.swap(false, Ordering::SeqCst) {
        let _ = terminal::disable_raw_mode();
        let _ = execute!(std::io::stdout(), LeaveAlternateScreen, cursor::Show);
    }
}

/// The terminal in raw mode on the alternate screen, restored on drop.
struct TerminalGuard {
    terminal: Terminal<CrosstermBackend<std::io::Stdout>>,
}

impl TerminalGuard {
    fn enter() -> std::io::Result<TerminalGuard> {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_terminal();
            previous(info);
        }));
        TERMINAL_TAKEN.store(true, Ordering::SeqCst);
        let result = (|| {
            terminal::enable_raw_mode()?;
            execute!(std::io::stdout(), EnterAlternateScreen, cursor::Hide)?;
            Terminal::new(CrosstermBackend::new(std::io::stdout()))
        })();
        match result {
            Ok(terminal) => Ok(TerminalGuard { terminal }),
            Err(err) => {
                restore_terminal();
                Err(err)
            }
        }
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// The terminal's key as `top` understands it.
fn key(event: KeyEvent) -> Option<Key> {
    if !matches!(event.kind, KeyEventKind::Press | KeyEventKind::Repeat) {
        return None;
    }
    if event.modifiers.contains(KeyModifiers::CONTROL) {
        return matches!(event.code, KeyCode::Char('c' | 'd')).then_some(Key::Interrupt);
    }
    Some(match event.code {
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Home => Key::Home,
        KeyCode::End => Key::End,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Tab => Key::Tab,
        KeyCode::BackTab => Key::BackTab,
        KeyCode::Backspace => Key::Backspace,
        KeyCode::Char(c) => Key::Char(c),
        _ => return None,
    })
}

/// Fetches every `interval` until `stop` is dropped, sending each result.
fn fetcher(endpoint: Endpoint, interval: Duration, updates: mpsc::Sender<Update>, stop: mpsc::Receiver<()>) {
    let timeout = fetch_timeout(interval);
    loop {
        let started = Instant::now();
        let update = match endpoint.fetch(timeout) {
            Ok(data) => Update::Data(Box::new(data)),
            Err(err) => Update::Failed(err.to_string()),
        };
        if updates.send(update).is_err() {
            return;
        }
        let wait = interval.saturating_sub(started.elapsed());
        if !matches!(stop.recv_timeout(wait), Err(mpsc::RecvTimeoutError::Timeout)) {
            return;
        }
    }
}

/// The interactive view, until `q`, Ctrl-C, a signal or the terminal's end.
pub fn run(connect: &str, interval: Duration) -> Result<(), TopError> {
    let endpoint = Endpoint::parse(connect)?;
    if !std::io::stdout().is_terminal() {
        return Err(TopError::NotATerminal);
    }
    lifeline::install_signal_handlers()?;
    let input = lifeline::Input::open()?;
    input.spawn_watchdog(restore_terminal)?;
    let interval = interval.max(Duration::from_millis(100));
    let (updates_tx, updates) = mpsc::channel();
    let (_stop, stop_rx) = mpsc::channel::<()>();
    thread::Builder::new().name("top-fetch".into()).spawn(move || fetcher(endpoint, interval, updates_tx, stop_rx))?;

    let mut guard = TerminalGuard::enter()?;
    let mut app = App::new(connect);
    let mut dirty = true;
    let mut size = terminal::size().ok();
    let ended = loop {
        if app.quit || lifeline::signalled().is_some() {
            break Ok(());
        }
        if dirty {
            guard.terminal.draw(|frame| view::draw(frame, &app))?;
            dirty = false;
        }
        match input.wait(Duration::from_millis(100)) {
            lifeline::Wait::Gone => break Err(TopError::TerminalGone),
            // Bytes are there, so crossterm's poll reads without waiting; it may parse more
            // than one event from them.
            lifeline::Wait::Ready => {
                while event::poll(Duration::ZERO)? {
                    match event::read()? {
                        Event::Key(event) => {
                            if let Some(key) = key(event) {
                                app.on_key(key);
                                dirty = true;
                            }
                        }
                        Event::Resize(..) => dirty = true,
                        _ => {}
                    }
                }
            }
            lifeline::Wait::Idle => {}
        }
        // Resizes are seen here: crossterm reports them only from inside its own wait.
        let now = terminal::size().ok();
        if now != size {
            size = now;
            dirty = true;
        }
        while let Ok(update) = updates.try_recv() {
            app.apply(update);
            dirty = true;
        }
    };
    // Dropping `_stop` ends the fetcher at its next wait; it is not joined, since it may sit in
    // a connect timeout and the process is about to exit anyway.
    drop(guard);
    ended
}
