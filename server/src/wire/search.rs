//! Conversions for `embedwire.v1.SearchService` messages.

use std::collections::BTreeMap;

use embedwire_proto::v1::{
    self as pb, ChunkSpan, EmbeddingDtype, Job, JobStatus, SearchHit, StoredDocument, condition, search_query,
};
use embedwire_proto::vectors;

use crate::corpus::filter::{Condition, Filter};
use crate::corpus::fusion::Fusion;
use crate::corpus::search::{Hit, Query, SearchMode, SearchParams};
use crate::error::{Error, Result};
use crate::store::{CountAccuracy, DocumentRecord, HnswSearch, IndexStats, JobRecord, JobState, NewDocument};

/// The default number of hits per query, as the /v1 HTTP API has it.
pub const DEFAULT_TOP_K: usize = 5;

/// Index statistics on the wire, with how far their counts can be trusted.
pub fn index_stats_to_wire(stats: IndexStats, index_kind: &str, hnsw: Option<HnswSearch>) -> pb::GetIndexStatsResponse {
    let (accuracy, age_ms) = match &stats.accuracy {
        CountAccuracy::Exact => (pb::CountAccuracy::Exact, 0),
        CountAccuracy::LastExact { counted_at, .. } => {
            (pb::CountAccuracy::LastExact, u64::try_from(counted_at.elapsed().as_millis()).unwrap_or(u64::MAX))
        }
        CountAccuracy::Unknown { .. } => (pb::CountAccuracy::Unknown, 0),
    };
    pb::GetIndexStatsResponse {
        document_count: stats.documents,
        chunk_count: stats.chunks,
        unique_vector_count: stats.unique_vectors,
        pending_documents: stats.pending_documents,
        index_kind: index_kind.to_string(),
        counts_accuracy: accuracy as i32,
        counts_age_ms: age_ms,
        counts_detail: stats.accuracy.reason().unwrap_or_default().to_string(),
        hnsw: hnsw.map(super::hnsw_search_to_wire),
    }
}

/// A job on the wire.
pub fn job_to_wire(job: &JobRecord) -> Job {
    Job {
        job_id: job.id.clone(),
        status: match job.state {
            JobState::Pending => JobStatus::Pending,
            JobState::Running => JobStatus::Running,
            JobState::Completed => JobStatus::Completed,
            JobState::Failed => JobStatus::Failed,
        } as i32,
        total_documents: saturate(job.total),
        processed_documents: saturate(job.processed),
        failed_documents: saturate(job.failed),
        error: job.error.clone().unwrap_or_default(),
        started_at: job.started_at,
        finished_at: job.finished_at,
        last_error: job.retrying.as_ref().map(|r| r.error.clone()).unwrap_or_default(),
        retrying_since: job.retrying.as_ref().map(|r| r.since),
    }
}

/// Documents from the wire (validated later by the corpus).
pub fn documents_from_wire(documents: Vec<pb::Document>) -> Vec<NewDocument> {
    documents
        .into_iter()
        .map(|d| NewDocument { id: d.id, text: d.text, metadata: d.metadata.into_iter().collect() })
        .collect()
}

/// A stored document on the wire.
pub fn stored_document_to_wire(id: String, record: DocumentRecord) -> StoredDocument {
    StoredDocument {
        id,
        text: record.text,
        metadata: record.metadata.into_iter().collect(),
        chunks: record
            .chunks
            .iter()
            .enumerate()
            .map(|(index, c)| ChunkSpan { index: index as u32, start_char: c.start_char, end_char: c.end_char })
            .collect(),
        indexed_at: record.indexed_at,
    }
}

/// A filter from the wire; None when absent or empty.
pub fn filter_from_wire(filter: Option<pb::Filter>, field: &str) -> Result<Filter> {
    let Some(filter) = filter else { return Ok(Filter::default()) };
    let convert = |conditions: Vec<pb::Condition>, clause: &str| -> Result<Vec<Condition>> {
        conditions
            .into_iter()
            .enumerate()
            .map(|(index, c)| match c.test {
                Some(condition::Test::Equals(value)) => Ok(Condition::Equals { key: c.key, value }),
                Some(condition::Test::AnyOf(set)) => Ok(Condition::AnyOf { key: c.key, values: set.values }),
                None => Err(Error::invalid(format!("{field}.{clause}[{index}]"), "needs equals or any_of")),
            })
            .collect()
    };
    Ok(Filter {
        must: convert(filter.must, "must")?,
        should: convert(filter.should, "should")?,
        must_not: convert(filter.must_not, "must_not")?,
    })
}

/// A search from the wire, with defaults filled in; `max_top_k` depends on the rpc.
pub fn search_from_wire(request: pb::SearchRequest, max_top_k: usize) -> Result<(SearchParams, EmbeddingDtype)> {
    let queries = request
        .queries
        .into_iter()
        .enumerate()
        .map(|(index, q)| match q.query {
            Some(search_query::Query::Text(text)) => Ok(Query::Text(text)),
            Some(search_query::Query::Vector(bytes)) => {
                if bytes.len() % 4 != 0 {
                    return Err(Error::invalid(
                        format!("queries[{index}].vector"),
                        format!("has {} bytes, not a whole number of float32 values", bytes.len()),
                    ));
                }
                Ok(Query::Vector(vectors::f32_from_le_bytes(&bytes)))
            }
            None => Err(Error::invalid(format!("queries[{index}]"), "needs text or vector")),
        })
        .collect::<Result<Vec<_>>>()?;
    let dtype = EmbeddingDtype::try_from(request.vector_dtype)
        .map(vectors::effective_dtype)
        .map_err(|_| Error::invalid("vector_dtype", format!("unknown value {}", request.vector_dtype)))?;
    if dtype == EmbeddingDtype::Float32List {
        return Err(Error::invalid("vector_dtype", "FLOAT32_LIST is not offered for search hits"));
    }
    let params = SearchParams {
        queries,
        top_k: request.top_k.map_or(DEFAULT_TOP_K, |k| k as usize),
        score_threshold: request.score_threshold,
        offset: request.offset as usize,
        filter: filter_from_wire(request.filter, "filter")?,
        include_text: request.include_text.unwrap_or(true),
        include_metadata: request.include_metadata.unwrap_or(true),
        include_vectors: request.include_vectors,
        rerank: request.rerank,
        max_top_k,
        mode: match pb::SearchMode::try_from(request.mode) {
            Ok(pb::SearchMode::Unspecified | pb::SearchMode::Vector) => SearchMode::Vector,
            Ok(pb::SearchMode::Keyword) => SearchMode::Keyword,
            Ok(pb::SearchMode::Hybrid) => SearchMode::Hybrid,
            Err(_) => return Err(Error::invalid("mode", format!("unknown value {}", request.mode))),
        },
        alpha: request.alpha,
        fusion: match pb::Fusion::try_from(request.fusion) {
            Ok(pb::Fusion::Unspecified) => Fusion::default(),
            Ok(pb::Fusion::ReciprocalRank) => Fusion::ReciprocalRank,
            Ok(pb::Fusion::RelativeScore) => Fusion::RelativeScore,
            Err(_) => return Err(Error::invalid("fusion", format!("unknown value {}", request.fusion))),
        },
        group_size: match pb::GroupBy::try_from(request.group_by) {
            Ok(pb::GroupBy::Unspecified | pb::GroupBy::None) if request.group_size.is_some() => {
                return Err(Error::invalid("group_size", "needs group_by GROUP_BY_DOCUMENT"));
            }
            Ok(pb::GroupBy::Unspecified | pb::GroupBy::None) => None,
            Ok(pb::GroupBy::Document) => Some(request.group_size.map_or(1, |size| size as usize)),
            Err(_) => return Err(Error::invalid("group_by", format!("unknown value {}", request.group_by))),
        },
        highlight: request.highlight,
    };
    Ok((params, dtype))
}

/// A hit on the wire, its vector encoded as `dtype`.
pub fn hit_to_wire(hit: Hit, dtype: EmbeddingDtype) -> SearchHit {
    let (vector, vector_scale) = match &hit.vector {
        Some(values) => {
            let encoded = vectors::encode_rows(values, values.len(), dtype);
            (encoded.bytes.into(), encoded.row_scales.first().copied().unwrap_or(0.0))
        }
        None => (Default::default(), 0.0),
    };
    SearchHit {
        document_id: hit.document_id,
        chunk: Some(ChunkSpan { index: hit.chunk_index, start_char: hit.start_char, end_char: hit.end_char }),
        score: hit.score,
        vector_score: hit.vector_score,
        keyword_score: hit.keyword_score,
        rerank_score: hit.rerank_score,
        text: hit.text.unwrap_or_default(),
        metadata: hit.metadata.unwrap_or_else(BTreeMap::new).into_iter().collect(),
        vector,
        vector_scale,
        highlights: hit
            .highlights
            .into_iter()
            .map(|(start_char, end_char)| pb::TextSpan { start_char, end_char })
            .collect(),
    }
}

fn saturate(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}
