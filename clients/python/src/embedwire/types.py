"""The plain Python values the client returns and accepts.

They mirror the proto messages but are frozen dataclasses with type hints, so callers
need not know protobuf; ``_wire`` converts between the two.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence, Union

import numpy as np

#: Encodings Embed can return. ``"float32"`` is the default and the one to use unless
#: bandwidth matters; ``"float32_list"`` exists only to benchmark protobuf's repeated float.
Dtype = Literal["float32", "float16", "int8", "ubinary", "float32_list"]

#: Which end of an over-long text a rerank cuts tokens from (server default: ``"right"``).
TruncationDirection = Literal["right", "left"]

#: A metadata filter: a proto ``embedwire.v1.Filter``, or a mapping read as "every key
#: must match": a string value must equal, a list or tuple value lists accepted values.
FilterLike = Union["Filter", Mapping[str, Union[str, Sequence[str]]]]


@dataclass(frozen=True)
class Filter:
    """Selects documents by metadata: all of ``must``, at least one of ``should`` (when
    not empty), none of ``must_not``. Each side maps a key to the required value or to a
    list of accepted values."""

    must: Mapping[str, str | Sequence[str]] = field(default_factory=dict)
    should: Mapping[str, str | Sequence[str]] = field(default_factory=dict)
    must_not: Mapping[str, str | Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class EmbedResult:
    """An Embed response with everything beside the vectors.

    Attributes:
        vectors: (count, dim) array; float32, float16, int8, or uint8 packed bits
            ((count, ceil(dim / 8)) for ``"ubinary"``). A view of the response bytes:
            read-only, copy it (``vectors.copy()``) to modify it.
        dtype: the encoding of ``vectors``.
        dim: dimensions per vector (before bit packing).
        model: the id of the model that produced them.
        token_counts: tokens per input, after truncation, special tokens included.
        prompt_tokens: the sum of ``token_counts``.
        row_scales: for ``"int8"``, the per-row scale (value = q * scale); else None.
    """

    vectors: np.ndarray
    dtype: Dtype
    dim: int
    model: str
    token_counts: np.ndarray
    prompt_tokens: int
    row_scales: np.ndarray | None = None


@dataclass(frozen=True)
class Rank:
    """One text's place in a rerank answer.

    Attributes:
        index: the text's position in the ``texts`` given to rerank.
        score: its relevance, higher is better: a probability in [0, 1] from a
            cross-encoder (its logit with ``raw_scores``), the cosine similarity in
            [-1, 1] from a bi-encoder.
        text: the text itself with ``return_text``, else None.
    """

    index: int
    score: float
    text: str | None = None


@dataclass(frozen=True)
class RerankTiming:
    """Where a rerank call's time went on the server, in nanoseconds."""

    #: From the request's arrival to its answer.
    total_ns: int
    #: Tokenizing the (query, text) pairs.
    tokenization_ns: int
    #: Waiting from queueing to the start of the first batch.
    queue_ns: int
    #: Model time of the batches that held the pairs.
    inference_ns: int


@dataclass(frozen=True)
class RerankResult:
    """A Rerank response.

    Attributes:
        ranks: the texts best first (the ``top_n`` best when it was given).
        scorer: what scored them: ``"cross-encoder:<model id>"`` or
            ``"bi-encoder:<model id>"``.
        model: the scorer's model id.
        prompt_tokens: tokens the model read for this call, special tokens included.
        compute_chars: characters scored (query and texts).
        timing: the server's time spent, by stage.
    """

    ranks: list[Rank]
    scorer: str
    model: str
    prompt_tokens: int
    compute_chars: int
    timing: RerankTiming


@dataclass(frozen=True)
class ChunkSpan:
    """Where a chunk sits in its document's normalized text: ``text[start_char:end_char]``."""

    index: int
    start_char: int
    end_char: int


@dataclass(frozen=True)
class Hit:
    """One search result.

    Attributes:
        document_id: the chunk's document.
        score: cosine similarity of the chunk to the query (vector mode), its BM25
            score (keyword mode) or the fused score (hybrid mode).
        chunk: the chunk's position in its document.
        text: the chunk's text ("" unless include_text).
        metadata: the document's metadata (empty unless include_metadata).
        rerank_score: the cross-encoder's score when the hits were reranked.
        vector: the chunk's float32 vector when include_vectors, else None.
        vector_score: the cosine similarity, when the vector side found the chunk.
        keyword_score: the BM25 score, when the keyword side found the chunk.
        highlights: with highlight, the chunk's words that match the query's, as
            (start, end) offsets in code points of the document, like ``chunk``:
            ``text[start - chunk.start_char:end - chunk.start_char]`` is the word.
    """

    document_id: str
    score: float
    chunk: ChunkSpan
    text: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    rerank_score: float | None = None
    vector: np.ndarray | None = None
    vector_score: float | None = None
    keyword_score: float | None = None
    highlights: tuple[tuple[int, int], ...] = ()


class JobStatus(str, enum.Enum):
    """Where an ingestion job stands."""

    UNSPECIFIED = "UNSPECIFIED"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


@dataclass(frozen=True)
class Job:
    """The progress of one ingestion job.

    Attributes:
        job_id: the job's UUID.
        status: PENDING, RUNNING, COMPLETED or FAILED.
        total_documents: the job's documents (grows while an IngestStream is open).
        processed_documents: documents durably indexed and searchable.
        failed_documents: documents that could not be indexed.
        error: why the job failed, "" otherwise.
        started_at: creation time, Unix seconds.
        finished_at: end time, Unix seconds, or None while it runs.
        last_error: why the job cannot progress right now while the server retries
            it (e.g. too few store replicas reachable), "" while it progresses.
        retrying_since: since when it has been retrying, Unix seconds, or None.
    """

    job_id: str
    status: JobStatus
    total_documents: int
    processed_documents: int
    failed_documents: int
    error: str
    started_at: float
    finished_at: float | None
    last_error: str = ""
    retrying_since: float | None = None

    @property
    def done(self) -> bool:
        """True once the job ended (COMPLETED or FAILED)."""
        return self.status in (JobStatus.COMPLETED, JobStatus.FAILED)


@dataclass(frozen=True)
class Document:
    """A document to ingest. An empty id lets the server assign a UUID; an existing id
    replaces that document."""

    text: str
    id: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)


#: What ingest accepts per document: a Document, a bare text, or a mapping with
#: "text" and optionally "id" and "metadata".
DocumentLike = Union[Document, str, Mapping[str, object]]


@dataclass(frozen=True)
class IngestResult:
    """The answer to an Ingest: the job and the documents' ids in request order."""

    job: Job
    document_ids: tuple[str, ...]


@dataclass(frozen=True)
class IngestStreamResult:
    """The answer to an IngestStream, once every streamed document is on disk."""

    job: Job
    received_documents: int


@dataclass(frozen=True)
class StoredDocument:
    """A document as the server stores it (text normalized)."""

    id: str
    text: str
    metadata: Mapping[str, str]
    chunks: tuple[ChunkSpan, ...]
    indexed_at: float


@dataclass(frozen=True)
class Documents:
    """The answer to GetDocuments: the documents found, in request order, and the
    requested ids that are not stored."""

    documents: tuple[StoredDocument, ...]
    missing_ids: tuple[str, ...]


@dataclass(frozen=True)
class Limits:
    """The server's request limits (see ``embedwire-server --help``)."""

    max_inputs_per_request: int
    max_request_bytes: int
    max_in_flight_inputs: int
    max_batch_size: int
    max_batch_tokens: int
    max_input_chars: int
    #: The most texts one rerank call may carry (0 from a server without RerankService).
    max_rerank_texts: int = 0


@dataclass(frozen=True)
class Info:
    """The served model and the server's limits."""

    model: str
    dim: int
    max_input_tokens: int
    pooling: str
    backend: str
    dtypes: tuple[str, ...]
    limits: Limits
    version: str
    #: What rerank scores with: ``"cross-encoder:<model id>"`` or
    #: ``"bi-encoder:<model id>"`` (the embedding model's cosine similarity); "" from a
    #: server without RerankService.
    rerank_scorer: str = ""


@dataclass(frozen=True)
class IndexStats:
    """Counts of what the search index holds."""

    document_count: int
    chunk_count: int
    unique_vector_count: int
    pending_documents: int
    index_kind: str


@dataclass(frozen=True)
class Collection:
    """A collection: a separate index on the server, with its own settings."""

    name: str
    chunk_tokens: int
    chunk_overlap_tokens: int
    #: ``"exact"`` or ``"hnsw"``.
    index: str
    keyword_index: bool
    #: Unix seconds.
    created_at: float


@dataclass(frozen=True)
class TokenizedInput:
    """How the model tokenizes one input."""

    ids: tuple[int, ...]
    truncated: bool
    untruncated_count: int
