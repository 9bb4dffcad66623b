//! BEIR-format retrieval data (`corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv`) and its metrics computed as BEIR
//! computes them (pytrec_eval): documents ranked once each (at their best chunk's rank), nDCG@10 with graded
//! relevance (gain = the judgement), recall@100 and MRR@10, each the mean over the qrels' queries; a query with no
//! ranking counts 0.

use std::{
    collections::{HashMap, HashSet},
    io::{BufRead, BufReader, Write},
    path::Path,
};

use anyhow::Context;
use serde::Deserialize;

/// One document: `title` and `text` as BEIR has them.
#[derive(Debug, Clone, Deserialize)]
pub struct BeirDocument {
    #[serde(rename = "_id")]
    pub id: String,
    #[serde(default)]
    pub title: String,
    pub text: String,
}

impl BeirDocument {
    /// The text a retriever sees: the title, then the body (as BEIR's dense models read it).
    pub fn full_text(&self) -> String {
        if self.title.is_empty() { self.text.clone() } else { format!("{}\n\n{}", self.title, self.text) }
    }
}

/// One query.
#[derive(Debug, Clone, Deserialize)]
pub struct BeirQuery {
    #[serde(rename = "_id")]
    pub id: String,
    pub text: String,
}

/// A data set's split: the corpus, the judged queries (in file order) and their judgements.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub corpus: Vec<BeirDocument>,
    pub queries: Vec<BeirQuery>,
    /// Query id -> document id -> relevance (> 0 only).
    pub qrels: HashMap<String, HashMap<String, u32>>,
}

fn jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<Vec<T>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    BufReader::new(file)
        .lines()
        .enumerate()
        .filter(|(_, line)| line.as_ref().map_or(true, |l| !l.trim().is_empty()))
        .map(|(number, line)| {
            serde_json::from_str(&line?).with_context(|| format!("{} line {}", path.display(), number + 1))
        })
        .collect()
}

impl Dataset {
    /// Reads `dir`'s corpus, the queries judged in `split`, and the judgements.
    pub fn read(dir: &Path, split: &str) -> anyhow::Result<Self> {
        let qrels_path = dir.join("qrels").join(format!("{split}.tsv"));
        let text = std::fs::read_to_string(&qrels_path).with_context(|| format!("reading {}", qrels_path.display()))?;
        let mut qrels: HashMap<String, HashMap<String, u32>> = HashMap::new();
        for (number, line) in text.lines().enumerate().skip(1).filter(|(_, l)| !l.trim().is_empty()) {
            let fields: Vec<&str> = line.split('\t').collect();
            anyhow::ensure!(
                fields.len() >= 3,
                "{} line {}: not query-id, corpus-id, score",
                qrels_path.display(),
                number + 1
            );
            let score: u32 =
                fields[2].trim().parse().with_context(|| format!("{} line {}", qrels_path.display(), number + 1))?;
            if score > 0 {
                qrels.entry(fields[0].to_string()).or_default().insert(fields[1].to_string(), score);
            }
        }
        let corpus: Vec<BeirDocument> = jsonl(&dir.join("corpus.jsonl"))?;
        let queries: Vec<BeirQuery> =
            jsonl::<BeirQuery>(&dir.join("queries.jsonl"))?.into_iter().filter(|q| qrels.contains_key(&q.id)).collect();
        anyhow::ensure!(!queries.is_empty(), "{}: no query of the split has a text in queries.jsonl", dir.display());
        Ok(Dataset { corpus, queries, qrels })
    }

    /// A slice for quick runs: the first `queries` judged queries, every document they judge relevant, and other
    /// documents up to `documents` in all.
    pub fn slice(&self, queries: usize, documents: usize) -> Dataset {
        let queries: Vec<BeirQuery> = self.queries.iter().take(queries).cloned().collect();
        let qrels: HashMap<_, _> = queries.iter().map(|q| (q.id.clone(), self.qrels[&q.id].clone())).collect();
        let relevant: HashSet<&String> = qrels.values().flat_map(|judged| judged.keys()).collect();
        let mut room = documents.saturating_sub(relevant.len());
        let corpus = self
            .corpus
            .iter()
            .filter(|d| {
                let keep = relevant.contains(&d.id) || room > 0;
                if keep && !relevant.contains(&d.id) {
                    room -= 1;
                }
                keep
            })
            .cloned()
            .collect();
        Dataset { corpus, queries, qrels }
    }

    /// Writes the data set in BEIR's format (for a baseline run on the same slice).
    pub fn write(&self, dir: &Path, split: &str) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir.join("qrels"))?;
        let mut corpus = std::io::BufWriter::new(std::fs::File::create(dir.join("corpus.jsonl"))?);
        for d in &self.corpus {
            writeln!(corpus, "{}", serde_json::json!({"_id": d.id, "title": d.title, "text": d.text}))?;
        }
        corpus.flush()?;
        let mut queries = std::io::BufWriter::new(std::fs::File::create(dir.join("queries.jsonl"))?);
        for q in &self.queries {
            writeln!(queries, "{}", serde_json::json!({"_id": q.id, "text": q.text}))?;
        }
        queries.flush()?;
        let mut qrels = String::from("query-id\tcorpus-id\tscore\n");
        for q in &self.queries {
            for (doc, score) in &self.qrels[&q.id] {
                qrels.push_str(&format!("{}\t{doc}\t{score}\n", q.id));
            }
        }
        std::fs::write(dir.join("qrels").join(format!("{split}.tsv")), qrels)?;
        Ok(())
    }
}

/// Quality of a set of rankings, means over the judged queries.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Quality {
    pub ndcg_at_10: f64,
    pub recall_at_100: f64,
    pub mrr_at_10: f64,
}

/// Metrics of `rankings` (query id -> document ids, best first, each once) against the judgements.
pub fn quality(qrels: &HashMap<String, HashMap<String, u32>>, rankings: &HashMap<String, Vec<String>>) -> Quality {
    let mut sum = Quality::default();
    for (query, judged) in qrels {
        let ranking = rankings.get(query).map(Vec::as_slice).unwrap_or_default();
        let gain = |doc: &String| f64::from(judged.get(doc).copied().unwrap_or(0));
        let dcg: f64 = ranking.iter().take(10).enumerate().map(|(i, d)| gain(d) / (i as f64 + 2.0).log2()).sum();
        let mut ideal: Vec<u32> = judged.values().copied().collect();
        ideal.sort_unstable_by(|a, b| b.cmp(a));
        let idcg: f64 = ideal.iter().take(10).enumerate().map(|(i, g)| f64::from(*g) / (i as f64 + 2.0).log2()).sum();
        sum.ndcg_at_10 += if idcg > 0.0 { dcg / idcg } else { 0.0 };
        let found = ranking.iter().take(100).filter(|d| judged.contains_key(*d)).count();
        sum.recall_at_100 += found as f64 / judged.len().max(1) as f64;
        sum.mrr_at_10 +=
            ranking.iter().take(10).position(|d| judged.contains_key(d)).map_or(0.0, |rank| 1.0 / (rank as f64 + 1.0));
    }
    let n = qrels.len().max(1) as f64;
    Quality { ndcg_at_10: sum.ndcg_at_10 / n, recall_at_100: sum.recall_at_100 / n, mrr_at_10: sum.mrr_at_10 / n }
}

/// Document ids in order of first appearance: a document found through several chunks keeps its best rank.
pub fn documents_once(chunk_documents: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut seen = HashSet::new();
    chunk_documents.into_iter().filter(|d| seen.insert(d.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_match_hand_computed_values() {
        let qrels = HashMap::from([
            ("q1".to_string(), HashMap::from([("a".to_string(), 1), ("b".to_string(), 2)])),
            ("q2".to_string(), HashMap::from([("c".to_string(), 1)])),
        ]);
        let rankings = HashMap::from([("q1".to_string(), vec!["x".to_string(), "b".to_string(), "a".to_string()])]);
        let q = quality(&qrels, &rankings);
        // q1: DCG = 2/log2(3) + 1/log2(4); IDCG = 2/log2(2) + 1/log2(3). q2 has no ranking: 0.
        let ndcg_q1 = (2.0 / 3f64.log2() + 0.5) / (2.0 + 1.0 / 3f64.log2());
        assert!((q.ndcg_at_10 - ndcg_q1 / 2.0).abs() < 1e-12, "{q:?}");
        assert!((q.recall_at_100 - 0.5).abs() < 1e-12 && (q.mrr_at_10 - 0.25).abs() < 1e-12, "{q:?}");
    }

    #[test]
    fn a_document_counts_once_at_its_best_rank() {
        let ranked = documents_once(["a", "b", "a", "c", "b"].map(String::from));
        assert_eq!(ranked, ["a", "b", "c"]);
    }
}

/// `texts` embedded by the server on `channel` (Embed, f32, 32 texts per call), one row each.
pub async fn embed_texts(channel: &tonic::transport::Channel, texts: &[String]) -> anyhow::Result<Vec<Vec<f32>>> {
    use embedwire_proto::v1::{EmbedRequest, EmbeddingDtype, embed_service_client::EmbedServiceClient};
    let mut client = EmbedServiceClient::new(channel.clone()).max_decoding_message_size(64 << 20);
    let mut rows = Vec::with_capacity(texts.len());
    for batch in texts.chunks(32) {
        let request =
            EmbedRequest { inputs: batch.to_vec(), dtype: EmbeddingDtype::Float32 as i32, ..Default::default() };
        let response = client.embed(request).await.context("Embed")?.into_inner();
        let values = embedwire_proto::vectors::f32_from_le_bytes(&response.embeddings);
        rows.extend(values.chunks_exact(response.dim as usize).map(<[f32]>::to_vec));
    }
    Ok(rows)
}
