//! The result model of every scenario: figures judged against their targets ([`Row`]), tables ([`Table`]) and
//! the environment they were measured in, printed and written once as `<name>_summary.csv`, `<name>.json` and
//! `<name>.md`, which `bench/report.py` reads. A MISS is a result, not a failure.

use std::{fmt::Display, fmt::Write as _, path::Path, path::PathBuf, time::Instant};

use anyhow::Context;
use procfs::Current;

use crate::latency::{LatencySummary, ms};

/// Which side of the limit passes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    AtLeast(f64),
    AtMost(f64),
}

/// One figure: printed, and a row of the summary CSV.
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

    pub fn judged(
        figure: impl Into<String>,
        value: f64,
        unit: &'static str,
        measured: String,
        bound: Bound,
        target: String,
    ) -> Self {
        Row { target: Some((bound, target)), ..Row::info(figure, value, unit, measured) }
    }

    /// Judged against `limit` from below; `target` says the limit as the table prints it (so does `at_most`).
    pub fn at_least(self, limit: f64, target: String) -> Row {
        Row { target: Some((Bound::AtLeast(limit), target)), ..self }
    }

    pub fn at_most(self, limit: f64, target: String) -> Row {
        Row { target: Some((Bound::AtMost(limit), target)), ..self }
    }

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

    /// `>=` or `<=`, and the limit.
    fn comparison(&self) -> Option<(&'static str, f64)> {
        self.target.as_ref().map(|(bound, _)| match *bound {
            Bound::AtLeast(limit) => (">=", limit),
            Bound::AtMost(limit) => ("<=", limit),
        })
    }

    fn verdict(&self) -> Option<&'static str> {
        self.passes().map(|pass| if pass { "PASS" } else { "MISS" })
    }

    /// Figure, measured, target and result as printed, a MISS written as `miss`.
    fn cells(&self, miss: &str) -> [String; 4] {
        let target = self.target.as_ref().map_or("-".into(), |(_, text)| text.clone());
        let result = match self.passes() {
            None => "-".into(),
            Some(pass) => {
                let word = if pass { "PASS" } else { miss };
                if self.note.is_empty() { word.into() } else { format!("{word} ({})", self.note) }
            }
        };
        [self.figure.clone(), self.measured.clone(), target, result]
    }
}

/// One scenario's results, written by [`Report::finish`].
pub struct Report {
    dir: PathBuf,
    /// File prefix: `<name>_summary.csv`, `<name>.json`, `<name>.md`.
    name: String,
    /// The summary CSV's older name, written too: bench/report.py and earlier runs use it.
    summary_copy: Option<&'static str>,
    figures: Vec<Row>,
    /// Figures only the files carry (setup, counts): too many for the printed table.
    details: Vec<Row>,
    /// Tables `<name>.md` shows after the figures.
    sections: String,
    started: Instant,
    load_before: String,
}

impl Report {
    pub fn new(dir: PathBuf, name: &str) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Report {
            dir,
            name: name.into(),
            summary_copy: None,
            figures: Vec::new(),
            details: Vec::new(),
            sections: String::new(),
            started: Instant::now(),
            load_before: load_average(),
        })
    }

    /// The summary CSV also written as `file`.
    pub fn summary_also_as(self, file: &'static str) -> Self {
        Report { summary_copy: Some(file), ..self }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn figure(&mut self, row: Row) {
        self.figures.push(row);
    }

    pub fn figures(&mut self, rows: impl IntoIterator<Item = Row>) {
        self.figures.extend(rows);
    }

    /// A figure only the summary CSV and the JSON carry.
    pub fn count(&mut self, figure: impl Into<String>, value: f64, unit: &'static str) {
        self.details.push(Row::info(figure, value, unit, String::new()));
    }

    /// A setting of the run, as the detail `setup <name>`.
    pub fn setup(&mut self, name: &str, value: f64, unit: &'static str) {
        self.count(format!("setup {name}"), value, unit);
    }

    /// Adds `table` to `<name>.md`, after the figures, under `## title`.
    pub fn section(&mut self, title: &str, table: &Table) {
        self.sections.push_str(&format!("\n## {title}\n\n{}", table.markdown));
    }

    pub fn write(&self, file: &str, text: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    pub fn table(&self, file: &str, table: &Table) -> anyhow::Result<PathBuf> {
        self.write(file, &table.text)
    }

    /// Prints the figures against their targets and writes them, then the details, as `<name>_summary.csv`,
    /// `<name>.json` (with the environment) and `<name>.md`.
    pub fn finish(self) -> anyhow::Result<()> {
        println!();
        print!("{}", printed_table(&self.figures));
        let all = [self.figures.as_slice(), &self.details].concat();
        let summary = summary_csv(&all);
        for file in [format!("{}_summary.csv", self.name)].into_iter().chain(self.summary_copy.map(String::from)) {
            self.write(&file, &summary)?;
        }
        let mut markdown = Table::new("figure,measured,target,result");
        for row in &self.figures {
            markdown.row(row.cells("**MISS**"));
        }
        self.write(&format!("{}.md", self.name), &(markdown.markdown + &self.sections))?;
        let figures: Vec<serde_json::Value> = all.iter().map(figure_json).collect();
        let json = serde_json::json!({
            "scenario": self.name,
            "figures": figures,
            "environment": {
                "command": std::env::args().collect::<Vec<_>>(),
                "cpu": cpu_model(),
                "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
                "load_before": self.load_before,
                "load_after": load_average(),
                "seconds": self.started.elapsed().as_secs_f64(),
            },
        });
        let path = self.write(&format!("{}.json", self.name), &serde_json::to_string_pretty(&json)?)?;
        let seconds = self.started.elapsed().as_secs_f64();
        println!("results in {} ({}); run time {seconds:.1} s", self.dir.display(), path.display());
        Ok(())
    }
}

/// A table built row by row, written as CSV and shown in `<name>.md` by [`Report::section`].
pub struct Table {
    text: String,
    markdown: String,
}

impl Table {
    /// A table of `columns`, comma-separated as in the CSV header.
    pub fn new(columns: &str) -> Self {
        let columns: Vec<&str> = columns.split(',').collect();
        let markdown = format!("| {} |\n|{}\n", columns.join(" | "), "---|".repeat(columns.len()));
        Table { text: format!("{}\n", columns.join(",")), markdown }
    }

    pub fn row<I: IntoIterator<Item = D>, D: Display>(&mut self, cells: I) {
        let cells: Vec<String> = cells.into_iter().map(|cell| cell.to_string()).collect();
        self.text.push_str(&cells.iter().map(|cell| csv_field(cell)).collect::<Vec<_>>().join(","));
        self.text.push('\n');
        self.markdown.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
}

/// p50, p95 and p99 in ms, as the tables print them.
pub fn percentiles(l: &LatencySummary) -> String {
    format!("{:.1} / {:.1} / {:.1} ms", ms(l.p50), ms(l.p95), ms(l.p99))
}

/// The table as printed: columns as wide as their widest cell, then how many targets were met.
fn printed_table(rows: &[Row]) -> String {
    let header = ["figure", "measured", "target", "result"].map(String::from);
    let cells: Vec<[String; 4]> = std::iter::once(header).chain(rows.iter().map(|row| row.cells("MISS"))).collect();
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

/// `figure,measured,unit,comparison,limit,result`, comparison and limit empty for figures without a target.
fn summary_csv(rows: &[Row]) -> String {
    let mut out = String::from("figure,measured,unit,comparison,limit,result\n");
    for row in rows {
        let (comparison, limit) =
            row.comparison().map_or(("", String::new()), |(op, limit)| (op, format!("{limit:.3}")));
        let (figure, result) = (csv_field(&row.figure), row.verdict().unwrap_or(""));
        let _ = writeln!(out, "{figure},{:.3},{},{comparison},{limit},{result}", row.value, row.unit);
    }
    out
}

/// Quotes a CSV field when it needs it (RFC 4180).
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text.to_string() }
}

fn figure_json(row: &Row) -> serde_json::Value {
    let comparison = row.comparison();
    serde_json::json!({
        "figure": row.figure, "value": row.value, "unit": row.unit, "measured": row.measured,
        "comparison": comparison.map(|(op, _)| op), "limit": comparison.map(|(_, limit)| limit),
        "target": row.target.as_ref().map(|(_, text)| text),
        "result": row.verdict(),
        "note": row.note,
    })
}

/// The machine's 1, 5 and 15 minute load averages, for the record.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn cpu_model() -> String {
    let info = procfs::CpuInfo::current().ok();
    info.and_then(|info| info.model_name(0).map(String::from)).unwrap_or_default()
}
