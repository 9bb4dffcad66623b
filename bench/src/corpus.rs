//! The corpus: real text found on this machine, nothing generated. `docstrings.py` (run once, its output cached under
//! `CACHE/bench/`, beside the model `make setup` installs) collects the docstrings of the Python standard library, its help topics and the installed
//! packages; this module cuts them into paragraphs and picks, deterministically: documents (paragraphs of 20 to 120
//! words, no doctests, each text once), the second ingest's documents (more such paragraphs, spread evenly, none in the
//! corpus) and queries (the first sentence of one-line docstrings, 4 to 19 words so never a document, spread evenly).

use std::{collections::HashSet, path::Path, path::PathBuf, process::Command};

use anyhow::Context;
use clap::Parser;
use embedwire_server::ServerConfig;
use serde::Deserialize;

use crate::child_process::program_output;

/// `explicit`, or the venv Python `make setup` creates: its packages are pinned, so every machine gets one corpus.
pub fn python_or_venv(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(python) = explicit {
        return Ok(python.to_path_buf());
    }
    let python = ServerConfig::try_parse_from(["embedwire-server"])?.cache_dir().join("venv/bin/python");
    anyhow::ensure!(python.is_file(), "no Python at {} (run `make setup`, or pass --python)", python.display());
    Ok(python)
}

/// Where the corpus comes from: the options of every scenario that uses one.
#[derive(Debug, Clone, clap::Args)]
pub struct CorpusOptions {
    /// The Python interpreter whose standard library and packages give the corpus [default: the venv `make setup`
    /// creates, CACHE/venv/bin/python: its packages are pinned, so every set-up machine gets the same corpus].
    #[arg(long, env = "BENCH_PYTHON")]
    pub python: Option<PathBuf>,
    /// Where the extracted docstrings (and the rerank scenario's cross-encoder) are cached [default: CACHE/bench, in
    /// the cache `make setup` fills, so that every clone of the repository reuses them: extracting takes 25 s of CPU].
    #[arg(long, env = "BENCH_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Extract the docstrings again even when the cache is there.
    #[arg(long)]
    pub refresh_corpus: bool,
}

impl CorpusOptions {
    pub fn python(&self) -> anyhow::Result<PathBuf> {
        python_or_venv(self.python.as_deref())
    }

    /// `--cache-dir`, else CACHE/bench.
    pub fn cache_dir(&self) -> anyhow::Result<PathBuf> {
        match &self.cache_dir {
            Some(dir) => Ok(dir.clone()),
            None => Ok(ServerConfig::try_parse_from(["embedwire-server"])?.cache_dir().join("bench")),
        }
    }

    /// [`select`] over the docstrings of [`CorpusOptions::python`].
    pub fn select(&self, documents: usize, second_ingest: usize, queries: usize) -> anyhow::Result<Corpus> {
        let docstrings = docstrings(&self.python()?, &self.cache_dir()?, self.refresh_corpus)?;
        select(&docstrings, documents, second_ingest, queries)
    }
}

/// The extraction script, run with `python -I -B -c`.
const SCRIPT: &str = include_str!("docstrings.py");
/// The cache file in the cache directory.
const CACHE_FILE: &str = "search_bench_docstrings.jsonl";
/// Words of a document paragraph.
const DOCUMENT_WORDS: std::ops::RangeInclusive<usize> = 20..=120;
/// Words of a query sentence: below the documents' minimum, so no query is a document.
const QUERY_WORDS: std::ops::RangeInclusive<usize> = 4..=19;

/// One docstring as the script prints it.
#[derive(Debug, Clone, Deserialize)]
pub struct Docstring {
    /// Where it comes from: `module.Class.function` or `pydoc_data.topics.NAME`.
    pub source: String,
    /// The cleaned docstring; paragraphs are separated by blank lines.
    pub text: String,
}

/// A document to embed or ingest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paragraph {
    /// The docstring's qualified name (ingested as metadata `source`).
    pub source: String,
    /// The paragraph, whitespace folded to single spaces.
    pub text: String,
}

/// What a run uses.
#[derive(Debug, Clone)]
pub struct Corpus {
    /// Embedded with Embed, then ingested.
    pub documents: Vec<Paragraph>,
    /// Ingested while search latency is measured.
    pub second_ingest: Vec<Paragraph>,
    /// Search and Embed inputs of the concurrent runs.
    pub queries: Vec<String>,
    /// Docstrings extracted, for the record.
    pub docstrings: usize,
    /// Eligible paragraphs, before picking.
    pub paragraphs: usize,
    /// Eligible query sentences, before picking.
    pub query_candidates: usize,
}

/// The docstrings of `python`'s stdlib and packages, from the cache in `cache_dir` when it was made by the same
/// interpreter (and `refresh` is off), else extracted now and cached.
pub fn docstrings(python: &Path, cache_dir: &Path, refresh: bool) -> anyhow::Result<Vec<Docstring>> {
    let cache = cache_dir.join(CACHE_FILE);
    if !refresh
        && let Ok(text) = std::fs::read_to_string(&cache)
        && let Some(docstrings) = parse_cache(&text, python)
    {
        return Ok(docstrings);
    }
    // The script prints JSON lines, ASCII only (json.dumps escapes the rest).
    let mut script = Command::new(python);
    let stdout = program_output(script.args(["-I", "-B", "-c", SCRIPT]), "extracting docstrings; or pass --python")?;
    let parse = |line: &str| serde_json::from_str(line).with_context(|| format!("bad script line: {line}"));
    let docstrings = stdout.lines().map(parse).collect::<anyhow::Result<Vec<Docstring>>>()?;
    write_cache(&cache, python, &stdout).with_context(|| format!("writing {}", cache.display()))?;
    Ok(docstrings)
}

/// The first line of the cache: which interpreter produced it, and with which script (the cache outlives a checkout).
fn cache_header(python: &Path) -> String {
    use std::hash::{Hash, Hasher};
    let mut script = std::hash::DefaultHasher::new();
    SCRIPT.hash(&mut script);
    serde_json::json!({ "python": python.to_string_lossy(), "script": format!("{:016x}", script.finish()) }).to_string()
}

/// The cached docstrings, or None when the cache is unreadable or from another interpreter.
fn parse_cache(text: &str, python: &Path) -> Option<Vec<Docstring>> {
    let mut lines = text.lines();
    if lines.next()? != cache_header(python) {
        return None;
    }
    lines.map(|line| serde_json::from_str(line).ok()).collect()
}

/// Writes the cache through a temporary file, so a concurrent run never reads half of it.
fn write_cache(cache: &Path, python: &Path, lines: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(cache.parent().context("cache file without a directory")?)?;
    let partial = cache.with_extension(format!("{}.partial", std::process::id()));
    std::fs::write(&partial, format!("{}\n{lines}", cache_header(python)))?;
    Ok(std::fs::rename(&partial, cache)?)
}

/// The paragraphs of a docstring, each with its whitespace folded; blank lines separate paragraphs.
pub fn paragraphs(docstring: &str) -> Vec<String> {
    let lines: Vec<&str> = docstring.lines().collect();
    let blocks = lines.split(|line| line.trim().is_empty()).filter(|block| !block.is_empty());
    blocks.map(|block| block.join(" ").split_whitespace().collect::<Vec<_>>().join(" ")).collect()
}

/// The text up to and including the first `.`, `?` or `!` followed by a space (or the end); the whole text when there
/// is none. "e.g. x" ends early, as a simple splitter does; such fragments are rare and still real text.
pub fn first_sentence(text: &str) -> &str {
    let mut ends = text.match_indices(['.', '?', '!']).map(|(i, _)| i + 1);
    ends.find(|&end| text[end..].is_empty() || text[end..].starts_with(' ')).map_or(text, |end| &text[..end])
}

/// Cuts the docstrings into paragraphs and picks `documents` corpus documents, `second_ingest` further documents and
/// `queries` query sentences, or says how many there are when too few.
pub fn select(
    docstrings: &[Docstring],
    documents: usize,
    second_ingest: usize,
    queries: usize,
) -> anyhow::Result<Corpus> {
    // One set for both: queries are shorter than any document, so never the same text.
    let mut seen = HashSet::new();
    let (mut eligible, mut query_candidates) = (Vec::new(), Vec::new());
    for docstring in docstrings {
        let parts = paragraphs(&docstring.text);
        for text in &parts {
            let words = text.split_whitespace().count();
            if DOCUMENT_WORDS.contains(&words) && !text.starts_with(">>>") && seen.insert(text.clone()) {
                eligible.push(Paragraph { source: docstring.source.clone(), text: text.clone() });
            }
        }
        if let [only] = parts.as_slice() {
            let sentence = first_sentence(only);
            let words = sentence.split_whitespace().count();
            if QUERY_WORDS.contains(&words)
                && sentence.starts_with(|c: char| c.is_ascii_uppercase())
                && seen.insert(sentence.to_string())
            {
                query_candidates.push(sentence.to_string());
            }
        }
    }
    anyhow::ensure!(
        eligible.len() >= documents + second_ingest,
        "the docstrings hold {} paragraphs of {}-{} words, fewer than the {documents} + {second_ingest} documents \
         asked for (lower --documents or --second-ingest-documents)",
        eligible.len(),
        DOCUMENT_WORDS.start(),
        DOCUMENT_WORDS.end()
    );
    anyhow::ensure!(
        query_candidates.len() >= queries,
        "the docstrings hold {} query sentences, fewer than the {queries} asked for",
        query_candidates.len()
    );
    let paragraphs = eligible.len();
    let (corpus, second) = split_evenly(eligible, documents, second_ingest);
    Ok(Corpus {
        documents: corpus,
        second_ingest: second,
        queries: spread(&query_candidates, queries),
        docstrings: docstrings.len(),
        paragraphs,
        query_candidates: query_candidates.len(),
    })
}

/// Takes `aside` items spread evenly over all of `items` (every k-th, k = len / aside), then the first `keep` of the
/// others, in order. Expects `keep + aside <= items.len()`.
fn split_evenly<T>(items: Vec<T>, keep: usize, aside: usize) -> (Vec<T>, Vec<T>) {
    let stride = items.len().checked_div(aside).map_or(usize::MAX, |stride| stride.max(1));
    let mut kept = Vec::with_capacity(keep);
    let mut set_aside = Vec::with_capacity(aside);
    for (i, item) in items.into_iter().enumerate() {
        if set_aside.len() < aside && i % stride == stride - 1 {
            set_aside.push(item);
        } else if kept.len() < keep {
            kept.push(item);
        }
    }
    (kept, set_aside)
}

/// `count` items spread evenly over `items` (which has at least that many).
fn spread(items: &[String], count: usize) -> Vec<String> {
    (0..count).map(|i| items[i * items.len() / count].clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paragraphs_split_on_blank_lines_and_sentences_end_at_a_stop_before_a_space() {
        let text = "Summary line.\n\n  Indented   body\nwith two lines.\n \n\n>>> code()\n";
        assert_eq!(paragraphs(text), ["Summary line.", "Indented body with two lines.", ">>> code()"]);
        assert!(paragraphs("\n\n").is_empty());
        assert_eq!(first_sentence("Return the value. More words."), "Return the value.");
        assert_eq!(first_sentence("Call os.path.join here"), "Call os.path.join here");
        assert_eq!(first_sentence("Is it done? Yes"), "Is it done?");
        assert_eq!(first_sentence("Ends with a stop."), "Ends with a stop.");
    }

    #[test]
    fn select_keeps_long_paragraphs_once_and_one_line_queries() {
        let docstring = |source: &str, text: &str| Docstring { source: source.into(), text: text.into() };
        let words = |n: usize, word: &str| vec![word; n].join(" ");
        let long = words(25, "alpha");
        let docstrings = vec![
            docstring("m.f", &format!("Do the thing now please.\n\n{long}\n\n>>> {long}")),
            docstring("m.g", &long),
            docstring("m.h", &format!("{}\n\n{}", words(30, "beta"), words(121, "gamma"))),
            docstring("m.i", "Return the sum of the two given numbers. Then stop."),
            docstring("m.j", "too short"),
            docstring("m.k", &words(40, "delta")),
        ];
        let corpus = select(&docstrings, 2, 1, 1).unwrap();
        assert_eq!(corpus.paragraphs, 3, "alpha once, beta, delta; not the doctest nor 121 words");
        assert_eq!(corpus.query_candidates, 1);
        assert_eq!(corpus.queries, ["Return the sum of the two given numbers."]);
        let texts = |ps: &[Paragraph]| ps.iter().map(|p| p.text.clone()).collect::<Vec<_>>();
        // One of three set aside: every third paragraph, so delta.
        assert_eq!(texts(&corpus.documents), [long.clone(), words(30, "beta")]);
        assert_eq!(texts(&corpus.second_ingest), [words(40, "delta")]);
        assert_eq!(corpus.documents[0].source, "m.f");
        assert!(select(&docstrings, 3, 1, 1).is_err(), "four documents asked of three");
    }
}
