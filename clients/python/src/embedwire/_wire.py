"""Conversions between Python values and the ``embedwire.v1`` wire messages.

The one place that knows both sides, shared by the sync and the async client so that
they differ only in how they wait. Vectors are decoded with ``numpy.frombuffer`` on the
response's bytes: no per-value Python work and no copy.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from .errors import ProtocolError
from .types import (
    ChunkSpan,
    Collection,
    Document,
    DocumentLike,
    Documents,
    Dtype,
    EmbedResult,
    Filter,
    FilterLike,
    Hit,
    IndexStats,
    Info,
    Job,
    JobStatus,
    Limits,
    Rank,
    RerankResult,
    RerankTiming,
    StoredDocument,
    TokenizedInput,
)
from .v1 import collections_pb2, embed_pb2, rerank_pb2, search_pb2

_DTYPE_TO_WIRE: dict[str, int] = {
    "float32": embed_pb2.EMBEDDING_DTYPE_FLOAT32,
    "float16": embed_pb2.EMBEDDING_DTYPE_FLOAT16,
    "int8": embed_pb2.EMBEDDING_DTYPE_INT8,
    "ubinary": embed_pb2.EMBEDDING_DTYPE_UBINARY,
    "float32_list": embed_pb2.EMBEDDING_DTYPE_FLOAT32_LIST,
}
_WIRE_TO_DTYPE: dict[int, Dtype] = {v: k for k, v in _DTYPE_TO_WIRE.items()}  # type: ignore[misc]
_WIRE_TO_DTYPE[embed_pb2.EMBEDDING_DTYPE_UNSPECIFIED] = "float32"

#: numpy element type of each byte encoding (all little-endian on the wire).
_NUMPY_DTYPE: dict[str, np.dtype[Any]] = {
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "int8": np.dtype("i1"),
    "ubinary": np.dtype("u1"),
}


def wire_dtype(dtype: str) -> int:
    """The EmbeddingDtype number of ``"float32"``, ``"float16"``, ..."""
    try:
        return _DTYPE_TO_WIRE[dtype]
    except KeyError:
        raise ValueError(f"dtype must be one of {sorted(_DTYPE_TO_WIRE)}, not {dtype!r}") from None


def embed_request(
    texts: Sequence[str],
    *,
    normalize: bool | None,
    truncate: bool | None,
    dimensions: int | None,
    dtype: str,
) -> embed_pb2.EmbedRequest:
    """An EmbedRequest; None leaves an option to the server's default."""
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not one string")
    request = embed_pb2.EmbedRequest(inputs=texts, dtype=wire_dtype(dtype))  # type: ignore[arg-type]
    if normalize is not None:
        request.normalize = normalize
    if truncate is not None:
        request.truncate = truncate
    if dimensions is not None:
        request.dimensions = dimensions
    return request


def row_width(dtype: str, dim: int) -> int:
    """Values per row in the decoded array (bits are packed 8 to a byte)."""
    return (dim + 7) // 8 if dtype == "ubinary" else dim


def decode_vectors(response: embed_pb2.EmbedResponse) -> np.ndarray:
    """The (count, width) array of an EmbedResponse, a read-only view of its bytes.

    Raises ProtocolError when the byte count does not match count x dim, so a truncated
    or misread response never turns into silently wrong vectors.
    """
    dtype = _WIRE_TO_DTYPE.get(response.dtype)
    if dtype is None:
        raise ProtocolError(f"unknown embedding dtype {response.dtype} in the response")
    count, width = response.count, row_width(dtype, response.dim)
    if dtype == "float32_list":
        values = np.array(response.values, dtype=np.float32)
    else:
        values = np.frombuffer(response.embeddings, dtype=_NUMPY_DTYPE[dtype])
    if values.size != count * width:
        raise ProtocolError(
            f"response has {values.size} values for {count} vectors of width {width}"
        )
    return values.reshape(count, width)


def empty_vectors(dtype: str, dim: int) -> np.ndarray:
    """The (0, width) array that embedding no text gives."""
    return np.empty((0, row_width(dtype, dim)), dtype=_NUMPY_DTYPE.get(dtype, np.dtype("<f4")))


def embed_result(response: embed_pb2.EmbedResponse) -> EmbedResult:
    """An EmbedResult from an EmbedResponse."""
    dtype = _WIRE_TO_DTYPE.get(response.dtype, "float32")
    scales = np.array(response.row_scales, dtype=np.float32) if dtype == "int8" else None
    return EmbedResult(
        vectors=decode_vectors(response),
        dtype=dtype,
        dim=response.dim,
        model=response.model,
        token_counts=np.array(response.token_counts, dtype=np.uint32),
        prompt_tokens=response.usage.prompt_tokens,
        row_scales=scales,
    )


_TRUNCATION_DIRECTION: dict[str, int] = {
    "right": rerank_pb2.TRUNCATION_DIRECTION_RIGHT,
    "left": rerank_pb2.TRUNCATION_DIRECTION_LEFT,
}


def rerank_request(
    query: str,
    texts: Sequence[str],
    *,
    top_n: int | None,
    raw_scores: bool,
    return_text: bool,
    truncate: bool | None,
    truncation_direction: str | None,
    max_tokens_per_text: int | None,
) -> rerank_pb2.RerankRequest:
    """A RerankRequest; None leaves an option to the server's default."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, not {type(query).__name__}")
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not one string")
    request = rerank_pb2.RerankRequest(
        query=query, texts=texts, raw_scores=raw_scores, return_text=return_text  # type: ignore[arg-type]
    )
    if top_n is not None:
        request.top_n = top_n
    if max_tokens_per_text is not None:
        request.max_tokens_per_text = max_tokens_per_text
    if truncate is not None:
        request.truncate = truncate
    if truncation_direction is not None:
        try:
            request.truncation_direction = _TRUNCATION_DIRECTION[truncation_direction]  # type: ignore[assignment]
        except KeyError:
            raise ValueError(
                f"truncation_direction must be one of {sorted(_TRUNCATION_DIRECTION)}, not {truncation_direction!r}"
            ) from None
    return request


def rerank_result(response: rerank_pb2.RerankResponse) -> RerankResult:
    """A RerankResult from a RerankResponse."""
    metadata = response.metadata
    return RerankResult(
        ranks=[
            Rank(index=r.index, score=r.score, text=r.text if r.HasField("text") else None)
            for r in response.ranks
        ],
        scorer=response.scorer,
        model=response.model,
        prompt_tokens=response.usage.prompt_tokens,
        compute_chars=metadata.compute_chars,
        timing=RerankTiming(
            total_ns=metadata.total_time_ns,
            tokenization_ns=metadata.tokenization_time_ns,
            queue_ns=metadata.queue_time_ns,
            inference_ns=metadata.inference_time_ns,
        ),
    )


def _condition(key: str, value: str | Sequence[str]) -> search_pb2.Condition:
    if isinstance(value, str):
        return search_pb2.Condition(key=key, equals=value)
    return search_pb2.Condition(key=key, any_of=search_pb2.StringSet(values=list(value)))


def filter_message(spec: FilterLike | search_pb2.Filter | None) -> search_pb2.Filter | None:
    """A Filter message from a proto, a :class:`Filter`, or a ``{key: value}`` mapping
    (read as "every key must match")."""
    if spec is None or isinstance(spec, search_pb2.Filter):
        return spec
    if not isinstance(spec, Filter):
        spec = Filter(must=spec)  # type: ignore[arg-type]
    return search_pb2.Filter(
        must=[_condition(k, v) for k, v in spec.must.items()],
        should=[_condition(k, v) for k, v in spec.should.items()],
        must_not=[_condition(k, v) for k, v in spec.must_not.items()],
    )


def _query(query: str | np.ndarray | Sequence[float]) -> search_pb2.SearchQuery:
    if isinstance(query, str):
        return search_pb2.SearchQuery(text=query)
    vector = np.asarray(query, dtype="<f4")
    if vector.ndim != 1:
        raise ValueError(f"a query vector must be 1-D, got shape {vector.shape}")
    return search_pb2.SearchQuery(vector=vector.tobytes())


def split_queries(query: Any) -> tuple[list[Any], bool]:
    """The list of queries and whether the caller passed a single one.

    A str or a 1-D vector is one query; a list of those, or a 2-D array, is a batch.
    """
    if isinstance(query, str):
        return [query], True
    if isinstance(query, np.ndarray):
        return ([query], True) if query.ndim == 1 else (list(query), False)
    items = list(query)
    if items and all(isinstance(x, (int, float, np.floating)) for x in items):
        return [np.asarray(items, dtype=np.float32)], True
    return items, False


def search_request(
    queries: Sequence[Any],
    *,
    top_k: int | None,
    filter: FilterLike | search_pb2.Filter | None,
    score_threshold: float | None,
    offset: int,
    include_text: bool | None,
    include_metadata: bool | None,
    include_vectors: bool,
    rerank: bool | None,
    mode: str | None = None,
    alpha: float | None = None,
    fusion: str | None = None,
    group_by: str | None = None,
    group_size: int | None = None,
    highlight: bool = False,
) -> search_pb2.SearchRequest:
    """A SearchRequest; None leaves an option to the server's default."""
    request = search_pb2.SearchRequest(
        queries=[_query(q) for q in queries],
        offset=offset,
        include_vectors=include_vectors,
        mode=_choice("mode", mode, _MODES),
        fusion=_choice("fusion", fusion, _FUSIONS),
        group_by=_choice("group_by", group_by, _GROUP_BY),
        highlight=highlight,
    )
    for name, value in (
        ("top_k", top_k),
        ("score_threshold", score_threshold),
        ("include_text", include_text),
        ("include_metadata", include_metadata),
        ("rerank", rerank),
        ("alpha", alpha),
        ("group_size", group_size),
    ):
        if value is not None:
            setattr(request, name, value)
    message = filter_message(filter)
    if message is not None:
        request.filter.CopyFrom(message)
    return request


_MODES = {
    "vector": search_pb2.SEARCH_MODE_VECTOR,
    "keyword": search_pb2.SEARCH_MODE_KEYWORD,
    "hybrid": search_pb2.SEARCH_MODE_HYBRID,
}
_GROUP_BY = {"none": search_pb2.GROUP_BY_NONE, "document": search_pb2.GROUP_BY_DOCUMENT}
_FUSIONS = {"rrf": search_pb2.FUSION_RECIPROCAL_RANK, "relative_score": search_pb2.FUSION_RELATIVE_SCORE}


def _choice(name: str, value: str | None, choices: Mapping[str, int]) -> int:
    """The enum value of `value` (0, the server's default, for None); a ValueError
    naming the field for anything else, before the call leaves."""
    if value is None:
        return 0
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, not {value!r}")
    return choices[value]


def _chunk(span: search_pb2.ChunkSpan) -> ChunkSpan:
    return ChunkSpan(index=span.index, start_char=span.start_char, end_char=span.end_char)


def hit(message: search_pb2.SearchHit) -> Hit:
    """A Hit from a SearchHit (vectors come as float32, the request's default dtype)."""
    return Hit(
        document_id=message.document_id,
        score=message.score,
        chunk=_chunk(message.chunk),
        text=message.text,
        metadata=dict(message.metadata),
        rerank_score=message.rerank_score if message.HasField("rerank_score") else None,
        vector_score=message.vector_score if message.HasField("vector_score") else None,
        keyword_score=message.keyword_score if message.HasField("keyword_score") else None,
        vector=np.frombuffer(message.vector, dtype="<f4") if message.vector else None,
        highlights=tuple((span.start_char, span.end_char) for span in message.highlights),
    )


def hits_per_query(response: search_pb2.SearchResponse) -> list[list[Hit]]:
    """The hits of each query of a SearchResponse, in query order."""
    return [[hit(h) for h in result.hits] for result in response.results]


def job(message: search_pb2.Job) -> Job:
    """A Job from its wire message."""
    name = search_pb2.JobStatus.Name(message.status).removeprefix("JOB_STATUS_")
    return Job(
        job_id=message.job_id,
        status=JobStatus(name),
        total_documents=message.total_documents,
        processed_documents=message.processed_documents,
        failed_documents=message.failed_documents,
        error=message.error,
        started_at=message.started_at,
        finished_at=message.finished_at if message.HasField("finished_at") else None,
        last_error=message.last_error,
        retrying_since=message.retrying_since if message.HasField("retrying_since") else None,
    )


def document(doc: DocumentLike) -> search_pb2.Document:
    """A Document message from a Document, a text, or a mapping with "text"."""
    if isinstance(doc, str):
        return search_pb2.Document(text=doc)
    if isinstance(doc, Document):
        return search_pb2.Document(id=doc.id, text=doc.text, metadata=doc.metadata)
    if isinstance(doc, Mapping):
        return search_pb2.Document(
            id=str(doc.get("id", "")),
            text=str(doc["text"]),
            metadata=dict(doc.get("metadata") or {}),  # type: ignore[call-overload]
        )
    raise TypeError(f"a document is a Document, a str or a mapping, not {type(doc).__name__}")


def ingest_request(documents: Iterable[DocumentLike], collection: str = "") -> search_pb2.IngestRequest:
    """An IngestRequest for the documents."""
    return search_pb2.IngestRequest(documents=[document(d) for d in documents], collection=collection)


def ingest_stream_messages(
    documents: Iterable[DocumentLike], per_message: int, collection: str = ""
) -> Iterator[search_pb2.IngestStreamRequest]:
    """Groups documents into IngestStream messages of up to ``per_message`` each,
    lazily, so a bulk load of any size holds one message in memory at a time."""
    batch: list[search_pb2.Document] = []
    for doc in documents:
        batch.append(document(doc))
        if len(batch) == per_message:
            yield search_pb2.IngestStreamRequest(documents=batch, collection=collection)
            batch = []
    if batch:
        yield search_pb2.IngestStreamRequest(documents=batch, collection=collection)


def all_have_ids(request: search_pb2.IngestRequest) -> bool:
    """Whether every document names its id, which makes the Ingest an idempotent upsert."""
    return all(d.id for d in request.documents)


def documents(response: search_pb2.GetDocumentsResponse) -> Documents:
    """Documents from a GetDocumentsResponse."""
    return Documents(
        documents=tuple(
            StoredDocument(
                id=d.id,
                text=d.text,
                metadata=dict(d.metadata),
                chunks=tuple(_chunk(c) for c in d.chunks),
                indexed_at=d.indexed_at,
            )
            for d in response.documents
        ),
        missing_ids=tuple(response.missing_ids),
    )


def delete_request(
    ids: Sequence[str] | None, filter: FilterLike | search_pb2.Filter | None, collection: str = ""
) -> search_pb2.DeleteDocumentsRequest:
    """A DeleteDocumentsRequest by ids and/or filter."""
    if isinstance(ids, str):
        raise TypeError("ids must be a sequence of ids, not one string")
    request = search_pb2.DeleteDocumentsRequest(ids=list(ids or ()), collection=collection)
    message = filter_message(filter)
    if message is not None:
        request.filter.CopyFrom(message)
    return request


def info(response: embed_pb2.InfoResponse) -> Info:
    """Info from an InfoResponse."""
    limits = response.limits
    return Info(
        model=response.model,
        dim=response.dim,
        max_input_tokens=response.max_input_tokens,
        pooling=response.pooling,
        backend=response.backend,
        dtypes=tuple(_WIRE_TO_DTYPE.get(d, str(d)) for d in response.dtypes),
        limits=Limits(
            max_inputs_per_request=limits.max_inputs_per_request,
            max_request_bytes=limits.max_request_bytes,
            max_in_flight_inputs=limits.max_in_flight_inputs,
            max_batch_size=limits.max_batch_size,
            max_batch_tokens=limits.max_batch_tokens,
            max_input_chars=limits.max_input_chars,
            max_rerank_texts=limits.max_rerank_texts,
        ),
        version=response.version,
        rerank_scorer=response.rerank_scorer,
    )


def index_stats(response: search_pb2.GetIndexStatsResponse) -> IndexStats:
    """IndexStats from a GetIndexStatsResponse."""
    return IndexStats(
        document_count=response.document_count,
        chunk_count=response.chunk_count,
        unique_vector_count=response.unique_vector_count,
        pending_documents=response.pending_documents,
        index_kind=response.index_kind,
    )


def tokenized(response: embed_pb2.TokenizeResponse) -> list[TokenizedInput]:
    """The tokenization of each input of a TokenizeResponse."""
    return [
        TokenizedInput(ids=tuple(t.ids), truncated=t.truncated, untruncated_count=t.untruncated_count)
        for t in response.tokenized
    ]


_INDEXES = {"exact": collections_pb2.COLLECTION_INDEX_EXACT, "hnsw": collections_pb2.COLLECTION_INDEX_HNSW}


def create_collection_request(
    name: str,
    *,
    chunk_tokens: int | None,
    chunk_overlap_tokens: int | None,
    index: str | None,
    keyword_index: bool | None,
) -> collections_pb2.CreateCollectionRequest:
    """A CreateCollectionRequest; settings left None take the server's."""
    settings = collections_pb2.CollectionSettings()
    if chunk_tokens is not None:
        settings.chunk_tokens = chunk_tokens
    if chunk_overlap_tokens is not None:
        settings.chunk_overlap_tokens = chunk_overlap_tokens
    if index is not None:
        if index not in _INDEXES:
            raise ValueError(f'index must be "exact" or "hnsw", not {index!r}')
        settings.index = _INDEXES[index]
    if keyword_index is not None:
        settings.keyword_index = keyword_index
    return collections_pb2.CreateCollectionRequest(name=name, settings=settings)


def collection(message: collections_pb2.Collection) -> Collection:
    """A Collection from its message."""
    settings = message.settings
    return Collection(
        name=message.name,
        chunk_tokens=settings.chunk_tokens,
        chunk_overlap_tokens=settings.chunk_overlap_tokens,
        index="hnsw" if settings.index == collections_pb2.COLLECTION_INDEX_HNSW else "exact",
        keyword_index=settings.keyword_index,
        created_at=message.created_at,
    )
