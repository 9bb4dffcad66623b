//! A plain text table with left-aligned columns sized to their content, for people
//! reading a terminal (scripts use `--json`).

use std::fmt::Write;

/// A table: a header row and data rows of the same width.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Table { header: header.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }

    pub fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.header.len());
        self.rows.push(row);
    }

    /// The table with two spaces between columns and no trailing spaces.
    pub fn render(&self) -> String {
        let widths: Vec<usize> = (0..self.header.len())
            .map(|column| {
                std::iter::once(&self.header)
                    .chain(&self.rows)
                    .map(|row| row[column].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (cell, width) in row.iter().zip(&widths) {
                let _ = write!(line, "{cell:<width$}  ");
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `text` on one line (runs of whitespace folded) and at most `max_chars`
/// characters, with `…` when cut.
pub fn snippet(text: &str, max_chars: usize) -> String {
    let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if folded.chars().count() <= max_chars {
        return folded;
    }
    let mut cut: String = folded.chars().take(max_chars.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell() {
        let mut table = Table::new(&["RANK", "ID"]);
        table.push(vec!["1".into(), "a-long-id".into()]);
        table.push(vec!["10".into(), "b".into()]);
        assert_eq!(table.render(), "RANK  ID\n1     a-long-id\n10    b\n");
    }

    #[test]
    fn snippets_are_one_line_and_bounded() {
        assert_eq!(snippet("a\n  b\tc", 10), "a b c");
        assert_eq!(snippet("abcdefghij", 5), "abcd…");
        assert_eq!(snippet("ééééé", 5), "ééééé");
    }
}
