//! The matrix as text: one row per capability, one column per kernel (rows: ten capabilities stay
//! readable, ten wide columns would not), each cell a verdict and a short figure; the longer
//! stories (verifier complaints, the daemon's error, why a degradation is accepted) numbered
//! under it, so the table stays narrow.

use super::matrix::{Cell, Column, Verdict};

pub fn print(columns: &[Column]) {
    let mut rows: Vec<&str> = Vec::new();
    for (capability, _) in columns.iter().flat_map(|c| &c.cells) {
        if !rows.contains(capability) {
            rows.push(capability);
        }
    }
    let mut notes = Notes::default();
    let header = std::iter::once("capability".to_owned()).chain(columns.iter().map(|c| c.kernel.clone()));
    let mut table: Vec<Vec<String>> = vec![header.collect()];
    for row in &rows {
        let cells = columns.iter().map(|column| match column.cells.iter().find(|(capability, _)| capability == row) {
            Some((capability, cell)) => render(cell, capability, &mut notes),
            None => "—".to_owned(),
        });
        table.push(std::iter::once((*row).to_owned()).chain(cells).collect());
    }
    let widths: Vec<usize> =
        (0..table[0].len()).map(|i| table.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    for (n, row) in table.iter().enumerate() {
        let padded: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:w$}")).collect();
        println!("{}", padded.join(" | ").trim_end());
        if n == 0 {
            let rules: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            println!("{}", rules.join("-|-"));
        }
    }
    for (n, note) in notes.0.iter().enumerate() {
        println!("[{}] {note}", n + 1);
    }
}

/// Numbered notes, each printed once however many cells point at it.
#[derive(Default)]
struct Notes(Vec<String>);

impl Notes {
    fn number(&mut self, note: String) -> usize {
        match self.0.iter().position(|n| *n == note) {
            Some(at) => at + 1,
            None => {
                self.0.push(note);
                self.0.len()
            }
        }
    }
}

/// `verdict: text [n]`, or `degraded (accepted [k]): text [n]`; `[n]` is the detail, `[k]` why
/// the degradation is accepted. Capitals for what fails the test. The same note on two kernels is
/// one note.
fn render(cell: &Cell, capability: &str, notes: &mut Notes) -> String {
    let mut text = match (cell.verdict, cell.accepted.as_deref()) {
        (Verdict::Ok, _) => format!("ok: {}", cell.text),
        (Verdict::Degraded, Some(why)) => {
            format!("degraded (accepted [{}]): {}", notes.number(format!("accepted: {why}")), cell.text)
        }
        (Verdict::Degraded, None) => format!("DEGRADED: {}", cell.text),
        (Verdict::Failed, _) => format!("FAILED: {}", cell.text),
    };
    if let Some(detail) = &cell.detail {
        text.push_str(&format!(" [{}]", notes.number(format!("{capability}: {detail}"))));
    }
    text
}
