//! The result model of every scenario: figures judged against their targets
//! ([`Row`]), tables of measurements ([`Table`]) and the environment they were
//! measured in, written once as CSV, JSON and markdown and printed as a table.
//! `bench/report.py` reads these files for REPORT.md and its plots.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;

use crate::latency::{LatencySummary, ms};
use crate::targets::{self, Bound, Row, csv_field};

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
    /// A report writing into `dir` (created).
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

    /// The same report, its summary CSV also written as `file`.
    pub fn summary_also_as(self, file: &'static str) -> Self {
        Report { summary_copy: Some(file), ..self }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Adds a figure (judged if it has a target).
    pub fn figure(&mut self, row: Row) {
        self.figures.push(row);
    }

    pub fn figures(&mut self, rows: impl IntoIterator<Item = Row>) {
        self.figures.extend(rows);
    }

    /// Adds a figure to the summary CSV and the JSON only.
    pub fn detail(&mut self, row: Row) {
        self.details.push(row);
    }

    /// A detail without a printed form: `figure`, its value and unit.
    pub fn count(&mut self, figure: impl Into<String>, value: f64, unit: &'static str) {
        self.detail(Row::info(figure, value, unit, String::new()));
    }

    /// A setting of the run, as the detail `setup <name>`.
    pub fn setup(&mut self, name: &str, value: f64, unit: &'static str) {
        self.count(format!("setup {name}"), value, unit);
    }

    /// Adds `table` to `<name>.md`, after the figures, under `## title`.
    pub fn section(&mut self, title: &str, table: &Table) {
        self.sections.push_str(&format!("\n## {title}\n\n{}", table.markdown));
    }

    /// Writes `file` in the results directory.
    pub fn write(&self, file: &str, text: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// Writes a table as `file` (CSV).
    pub fn table(&self, file: &str, table: &Table) -> anyhow::Result<PathBuf> {
        self.write(file, &table.text)
    }

    /// Prints the figures against their targets and writes them, then the details, as
    /// `<name>_summary.csv`, `<name>.json` (with the environment) and `<name>.md`.
    pub fn finish(self) -> anyhow::Result<()> {
        println!();
        print!("{}", targets::table(&self.figures));
        let all = [self.figures.as_slice(), &self.details].concat();
        let summary = targets::summary_csv(&all);
        for file in [format!("{}_summary.csv", self.name)].into_iter().chain(self.summary_copy.map(String::from)) {
            self.write(&file, &summary)?;
        }
        self.write(&format!("{}.md", self.name), &(markdown(&self.figures) + &self.sections))?;
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
        println!(
            "results in {} ({}); run time {:.1} s",
            self.dir.display(),
            path.display(),
            self.started.elapsed().as_secs_f64()
        );
        Ok(())
    }
}

/// A figure judged against a limit: `Row::info(..).at_least(limit, target)`, `target`
/// saying the limit as the table prints it.
pub trait Judge {
    fn at_least(self, limit: f64, target: String) -> Row;
    fn at_most(self, limit: f64, target: String) -> Row;
}

impl Judge for Row {
    fn at_least(self, limit: f64, target: String) -> Row {
        Row { target: Some((Bound::AtLeast(limit), target)), ..self }
    }

    fn at_most(self, limit: f64, target: String) -> Row {
        Row { target: Some((Bound::AtMost(limit), target)), ..self }
    }
}

/// A table built row by row, written as CSV (cells quoted where they need it) and
/// shown in `<name>.md` by [`Report::section`].
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

fn figure_json(row: &Row) -> serde_json::Value {
    let (comparison, limit) = match row.target.as_ref().map(|(bound, _)| *bound) {
        Some(Bound::AtLeast(limit)) => (Some(">="), Some(limit)),
        Some(Bound::AtMost(limit)) => (Some("<="), Some(limit)),
        None => (None, None),
    };
    serde_json::json!({
        "figure": row.figure, "value": row.value, "unit": row.unit, "measured": row.measured,
        "comparison": comparison, "limit": limit,
        "target": row.target.as_ref().map(|(_, text)| text),
        "result": row.passes().map(|pass| if pass { "PASS" } else { "MISS" }),
        "note": row.note,
    })
}

fn markdown(rows: &[Row]) -> String {
    let mut out = String::from("| figure | measured | target | result |\n|---|---|---|---|\n");
    for row in rows {
        let target = row.target.as_ref().map_or("-", |(_, text)| text.as_str());
        let result = match row.passes() {
            None => "-".to_string(),
            Some(pass) => format!(
                "{}{}",
                if pass { "PASS" } else { "**MISS**" },
                if row.note.is_empty() { String::new() } else { format!(" ({})", row.note) }
            ),
        };
        out.push_str(&format!("| {} | {} | {target} | {result} |\n", row.figure, row.measured));
    }
    out
}

/// The machine's 1, 5 and 15 minute load averages, for the record.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default()
}
