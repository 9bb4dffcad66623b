//! Figures against their targets: the rows a bench builds from its results, the
//! table it prints, and the summary CSV it writes. A MISS is a result, not a failure.

use std::fmt::Write as _;

/// Which side of the limit passes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    AtLeast(f64),
    AtMost(f64),
}

/// One row of the final table.
#[derive(Debug, Clone)]
pub struct Row {
    pub figure: String,
    /// The number compared with the target (also the CSV value).
    pub value: f64,
    pub unit: &'static str,
    /// How the measured value prints.
    pub measured: String,
    /// The limit and how it prints; None for figures printed for context only.
    pub target: Option<(Bound, String)>,
    /// Printed after PASS/MISS, e.g. the achieved ratio.
    pub note: String,
}

impl Row {
    /// A figure printed for context, without a target.
    pub fn info(figure: impl Into<String>, value: f64, unit: &'static str, measured: String) -> Self {
        Row { figure: figure.into(), value, unit, measured, target: None, note: String::new() }
    }

    /// A figure judged against `bound`, described by `target`.
    pub fn judged(
        figure: impl Into<String>,
        value: f64,
        unit: &'static str,
        measured: String,
        bound: Bound,
        target: String,
    ) -> Self {
        Row { figure: figure.into(), value, unit, measured, target: Some((bound, target)), note: String::new() }
    }

    /// The same row with a note printed after PASS/MISS.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    /// None for a figure without a target.
    pub fn passes(&self) -> Option<bool> {
        self.target.as_ref().map(|(bound, _)| match *bound {
            Bound::AtLeast(limit) => self.value >= limit,
            Bound::AtMost(limit) => self.value <= limit,
        })
    }

    /// PASS or MISS; None for a figure without a target.
    fn verdict(&self) -> Option<&'static str> {
        self.passes().map(|pass| if pass { "PASS" } else { "MISS" })
    }

    fn result(&self) -> String {
        match self.verdict() {
            None => "-".into(),
            Some(word) if self.note.is_empty() => word.into(),
            Some(word) => format!("{word} ({})", self.note),
        }
    }
}

/// The table as printed: one line per row, columns as wide as their widest cell,
/// then how many targets were met.
pub fn table(rows: &[Row]) -> String {
    let header = ["figure", "measured", "target", "result"].map(String::from);
    let cells: Vec<[String; 4]> = std::iter::once(header)
        .chain(rows.iter().map(|row| {
            let target = row.target.as_ref().map_or("-".to_string(), |(_, text)| text.clone());
            [row.figure.clone(), row.measured.clone(), target, row.result()]
        }))
        .collect();
    let width = |column: usize| cells.iter().map(|cell| cell[column].chars().count()).max().unwrap_or(0);
    let (figure, measured, target) = (width(0), width(1), width(2));
    let mut out = String::new();
    for [a, b, c, result] in &cells {
        let _ = writeln!(out, "{a:<figure$}  {b:<measured$}  {c:<target$}  {result}");
    }
    let judged: Vec<bool> = rows.iter().filter_map(Row::passes).collect();
    let _ = writeln!(out, "{} of {} targets met", judged.iter().filter(|&&pass| pass).count(), judged.len());
    out
}

/// The rows as CSV: `figure,measured,unit,comparison,limit,result`, comparison and
/// limit empty for figures without a target.
pub fn summary_csv(rows: &[Row]) -> String {
    let mut out = String::from("figure,measured,unit,comparison,limit,result\n");
    for row in rows {
        let (comparison, limit) = match row.target.as_ref().map(|(bound, _)| *bound) {
            Some(Bound::AtLeast(limit)) => (">=", format!("{limit:.3}")),
            Some(Bound::AtMost(limit)) => ("<=", format!("{limit:.3}")),
            None => ("", String::new()),
        };
        let (figure, result) = (csv_field(&row.figure), row.verdict().unwrap_or(""));
        let _ = writeln!(out, "{figure},{:.3},{},{comparison},{limit},{result}", row.value, row.unit);
    }
    out
}

/// Quotes a CSV field when it needs it (RFC 4180).
pub fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Row> {
        vec![
            Row::info("context, only", 3.0, "ms", "3.00 ms".into()),
            Row::judged("ratio", 0.95, "x", "0.95 x".into(), Bound::AtLeast(0.9), ">= 0.90".into()).with_note("ok"),
            Row::judged("latency", 12.0, "ms", "12 ms".into(), Bound::AtMost(10.0), "<= 10 ms".into()),
        ]
    }

    #[test]
    fn table_judges_each_target() {
        let table = table(&rows());
        assert!(table.contains("PASS (ok)"), "{table}");
        assert!(table.contains("MISS"), "{table}");
        assert!(table.ends_with("1 of 2 targets met\n"), "{table}");
    }

    #[test]
    fn csv_quotes_and_marks_results() {
        let csv = summary_csv(&rows());
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[1], "\"context, only\",3.000,ms,,,");
        assert_eq!(lines[2], "ratio,0.950,x,>=,0.900,PASS");
        assert_eq!(lines[3], "latency,12.000,ms,<=,10.000,MISS");
    }
}
