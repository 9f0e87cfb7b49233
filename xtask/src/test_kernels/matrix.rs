//! Kernel × capability → ok / degraded / failed, with the figures measured, judged from what one
//! guest (or the host's own check) reported. `check_cells.rs` judges check's output,
//! `run_cells.rs` the daemon's run; `table.rs` prints the matrix.

use super::{check_cells, check_output, expect::Expectation, ktls_cell, results::Guest, run_cells, vm::Boot};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    Ok,
    /// A capability lost; a failure unless the kernel is expected to lack it (`Cell::accepted`).
    Degraded,
    Failed,
}

#[derive(Debug)]
pub struct Cell {
    pub verdict: Verdict,
    /// Short enough for the table: the figure measured, or the gist.
    pub text: String,
    /// The whole story (which hooks, the verifier's complaint, the daemon's error), printed
    /// under the table.
    pub detail: Option<String>,
    /// For a degradation this kernel is expected to have: why it is accepted.
    pub accepted: Option<String>,
}

impl Cell {
    pub fn new(verdict: Verdict, text: impl Into<String>) -> Self {
        Self { verdict, text: text.into(), detail: None, accepted: None }
    }
    pub fn ok(text: impl Into<String>) -> Self {
        Self::new(Verdict::Ok, text)
    }
    pub fn failed(text: impl Into<String>) -> Self {
        Self::new(Verdict::Failed, text)
    }
    pub fn with_detail(self, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        Self { detail: (!detail.is_empty()).then_some(detail), ..self }
    }

    /// Fails the test: a failure, or a degradation the kernel is not expected to have.
    pub fn unexpected_failure(&self) -> bool {
        match self.verdict {
            Verdict::Ok => false,
            Verdict::Degraded => self.accepted.is_none(),
            Verdict::Failed => true,
        }
    }
}

pub struct Column {
    /// `uname -r` of the kernel, and `(host)` for this machine's own.
    pub kernel: String,
    pub cells: Vec<(&'static str, Cell)>,
}

/// Judges one guest's report.
pub fn judge(kernel: &str, boot: &Boot, guest: &Guest) -> Column {
    let mut cells = vec![("boot", boot_cell(boot, guest))];
    if guest.kernel.is_some() {
        let check = check_output::parse(&guest.check);
        cells.extend(check_cells::judge(&check, Some(&guest.run), Expectation::of(kernel)));
        cells.extend(run_cells::judge(&guest.run));
        cells.extend(ktls_cell::judge(&guest.ktls, Expectation::of(kernel)));
    }
    Column { kernel: kernel.to_owned(), cells }
}

/// Judges the host's own check (it runs no daemon: the host is shared with other tests).
pub fn judge_host(kernel: &str, check_lines: &[String]) -> Column {
    let check = check_output::parse(check_lines);
    let cells = check_cells::judge(&check, None, Expectation::of(kernel));
    Column { kernel: format!("{kernel} (host)"), cells }
}

fn boot_cell(boot: &Boot, guest: &Guest) -> Cell {
    let secs = boot.elapsed.as_secs_f64();
    if guest.kernel.is_none() {
        Cell::failed(format!("/init never ran ({secs:.0} s)"))
    } else if boot.timed_out {
        Cell::failed(format!("killed at {secs:.0} s"))
    } else if !guest.done {
        Cell::failed(format!("/init stopped early ({secs:.0} s)"))
    } else {
        Cell::ok(format!("{secs:.0} s"))
    }
}
