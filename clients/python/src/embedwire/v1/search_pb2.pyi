from embedwire.v1 import embed_pb2 as _embed_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATUS_UNSPECIFIED: _ClassVar[JobStatus]
    JOB_STATUS_PENDING: _ClassVar[JobStatus]
    JOB_STATUS_RUNNING: _ClassVar[JobStatus]
    JOB_STATUS_COMPLETED: _ClassVar[JobStatus]
    JOB_STATUS_FAILED: _ClassVar[JobStatus]

class SearchMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEARCH_MODE_UNSPECIFIED: _ClassVar[SearchMode]
    SEARCH_MODE_VECTOR: _ClassVar[SearchMode]
    SEARCH_MODE_KEYWORD: _ClassVar[SearchMode]
    SEARCH_MODE_HYBRID: _ClassVar[SearchMode]

class Fusion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FUSION_UNSPECIFIED: _ClassVar[Fusion]
    FUSION_RECIPROCAL_RANK: _ClassVar[Fusion]
    FUSION_RELATIVE_SCORE: _ClassVar[Fusion]

class GroupBy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GROUP_BY_UNSPECIFIED: _ClassVar[GroupBy]
    GROUP_BY_NONE: _ClassVar[GroupBy]
    GROUP_BY_DOCUMENT: _ClassVar[GroupBy]

class CountAccuracy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COUNT_ACCURACY_UNSPECIFIED: _ClassVar[CountAccuracy]
    COUNT_ACCURACY_EXACT: _ClassVar[CountAccuracy]
    COUNT_ACCURACY_LAST_EXACT: _ClassVar[CountAccuracy]
    COUNT_ACCURACY_UNKNOWN: _ClassVar[CountAccuracy]
JOB_STATUS_UNSPECIFIED: JobStatus
JOB_STATUS_PENDING: JobStatus
JOB_STATUS_RUNNING: JobStatus
JOB_STATUS_COMPLETED: JobStatus
JOB_STATUS_FAILED: JobStatus
SEARCH_MODE_UNSPECIFIED: SearchMode
SEARCH_MODE_VECTOR: SearchMode
SEARCH_MODE_KEYWORD: SearchMode
SEARCH_MODE_HYBRID: SearchMode
FUSION_UNSPECIFIED: Fusion
FUSION_RECIPROCAL_RANK: Fusion
FUSION_RELATIVE_SCORE: Fusion
GROUP_BY_UNSPECIFIED: GroupBy
GROUP_BY_NONE: GroupBy
GROUP_BY_DOCUMENT: GroupBy
COUNT_ACCURACY_UNSPECIFIED: CountAccuracy
COUNT_ACCURACY_EXACT: CountAccuracy
COUNT_ACCURACY_LAST_EXACT: CountAccuracy
COUNT_ACCURACY_UNKNOWN: CountAccuracy

class Document(_message.Message):
    __slots__ = ("id", "text", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class IngestRequest(_message.Message):
    __slots__ = ("documents", "collection")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[Document]
    collection: str
    def __init__(self, documents: _Optional[_Iterable[_Union[Document, _Mapping]]] = ..., collection: _Optional[str] = ...) -> None: ...

class IngestResponse(_message.Message):
    __slots__ = ("job", "document_ids")
    JOB_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_IDS_FIELD_NUMBER: _ClassVar[int]
    job: Job
    document_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., document_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class IngestStreamRequest(_message.Message):
    __slots__ = ("documents", "collection")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[Document]
    collection: str
    def __init__(self, documents: _Optional[_Iterable[_Union[Document, _Mapping]]] = ..., collection: _Optional[str] = ...) -> None: ...

class IngestStreamResponse(_message.Message):
    __slots__ = ("job", "received_documents")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    job: Job
    received_documents: int
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., received_documents: _Optional[int] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "status", "total_documents", "processed_documents", "failed_documents", "error", "started_at", "finished_at", "last_error", "retrying_since")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    PROCESSED_DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    FAILED_DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRYING_SINCE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    status: JobStatus
    total_documents: int
    processed_documents: int
    failed_documents: int
    error: str
    started_at: float
    finished_at: float
    last_error: str
    retrying_since: float
    def __init__(self, job_id: _Optional[str] = ..., status: _Optional[_Union[JobStatus, str]] = ..., total_documents: _Optional[int] = ..., processed_documents: _Optional[int] = ..., failed_documents: _Optional[int] = ..., error: _Optional[str] = ..., started_at: _Optional[float] = ..., finished_at: _Optional[float] = ..., last_error: _Optional[str] = ..., retrying_since: _Optional[float] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id", "collection")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    collection: str
    def __init__(self, job_id: _Optional[str] = ..., collection: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("job_id", "collection")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    collection: str
    def __init__(self, job_id: _Optional[str] = ..., collection: _Optional[str] = ...) -> None: ...

class WatchJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class GetDocumentsRequest(_message.Message):
    __slots__ = ("ids", "collection")
    IDS_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    collection: str
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., collection: _Optional[str] = ...) -> None: ...

class GetDocumentsResponse(_message.Message):
    __slots__ = ("documents", "missing_ids")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    MISSING_IDS_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[StoredDocument]
    missing_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, documents: _Optional[_Iterable[_Union[StoredDocument, _Mapping]]] = ..., missing_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class StoredDocument(_message.Message):
    __slots__ = ("id", "text", "metadata", "chunks", "indexed_at")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    INDEXED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    metadata: _containers.ScalarMap[str, str]
    chunks: _containers.RepeatedCompositeFieldContainer[ChunkSpan]
    indexed_at: float
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., chunks: _Optional[_Iterable[_Union[ChunkSpan, _Mapping]]] = ..., indexed_at: _Optional[float] = ...) -> None: ...

class ChunkSpan(_message.Message):
    __slots__ = ("index", "start_char", "end_char")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    START_CHAR_FIELD_NUMBER: _ClassVar[int]
    END_CHAR_FIELD_NUMBER: _ClassVar[int]
    index: int
    start_char: int
    end_char: int
    def __init__(self, index: _Optional[int] = ..., start_char: _Optional[int] = ..., end_char: _Optional[int] = ...) -> None: ...

class DeleteDocumentsRequest(_message.Message):
    __slots__ = ("ids", "filter", "collection")
    IDS_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    filter: Filter
    collection: str
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., filter: _Optional[_Union[Filter, _Mapping]] = ..., collection: _Optional[str] = ...) -> None: ...

class DeleteDocumentsResponse(_message.Message):
    __slots__ = ("deleted_count",)
    DELETED_COUNT_FIELD_NUMBER: _ClassVar[int]
    deleted_count: int
    def __init__(self, deleted_count: _Optional[int] = ...) -> None: ...

class Filter(_message.Message):
    __slots__ = ("must", "should", "must_not")
    MUST_FIELD_NUMBER: _ClassVar[int]
    SHOULD_FIELD_NUMBER: _ClassVar[int]
    MUST_NOT_FIELD_NUMBER: _ClassVar[int]
    must: _containers.RepeatedCompositeFieldContainer[Condition]
    should: _containers.RepeatedCompositeFieldContainer[Condition]
    must_not: _containers.RepeatedCompositeFieldContainer[Condition]
    def __init__(self, must: _Optional[_Iterable[_Union[Condition, _Mapping]]] = ..., should: _Optional[_Iterable[_Union[Condition, _Mapping]]] = ..., must_not: _Optional[_Iterable[_Union[Condition, _Mapping]]] = ...) -> None: ...

class Condition(_message.Message):
    __slots__ = ("key", "equals", "any_of")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EQUALS_FIELD_NUMBER: _ClassVar[int]
    ANY_OF_FIELD_NUMBER: _ClassVar[int]
    key: str
    equals: str
    any_of: StringSet
    def __init__(self, key: _Optional[str] = ..., equals: _Optional[str] = ..., any_of: _Optional[_Union[StringSet, _Mapping]] = ...) -> None: ...

class StringSet(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[str]] = ...) -> None: ...

class SearchQuery(_message.Message):
    __slots__ = ("text", "vector")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    text: str
    vector: bytes
    def __init__(self, text: _Optional[str] = ..., vector: _Optional[bytes] = ...) -> None: ...

class SearchRequest(_message.Message):
    __slots__ = ("queries", "top_k", "score_threshold", "offset", "filter", "include_text", "include_metadata", "include_vectors", "vector_dtype", "rerank", "mode", "alpha", "fusion", "group_by", "group_size", "highlight", "collection")
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    SCORE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TEXT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_METADATA_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_VECTORS_FIELD_NUMBER: _ClassVar[int]
    VECTOR_DTYPE_FIELD_NUMBER: _ClassVar[int]
    RERANK_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    GROUP_SIZE_FIELD_NUMBER: _ClassVar[int]
    HIGHLIGHT_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    queries: _containers.RepeatedCompositeFieldContainer[SearchQuery]
    top_k: int
    score_threshold: float
    offset: int
    filter: Filter
    include_text: bool
    include_metadata: bool
    include_vectors: bool
    vector_dtype: _embed_pb2.EmbeddingDtype
    rerank: bool
    mode: SearchMode
    alpha: float
    fusion: Fusion
    group_by: GroupBy
    group_size: int
    highlight: bool
    collection: str
    def __init__(self, queries: _Optional[_Iterable[_Union[SearchQuery, _Mapping]]] = ..., top_k: _Optional[int] = ..., score_threshold: _Optional[float] = ..., offset: _Optional[int] = ..., filter: _Optional[_Union[Filter, _Mapping]] = ..., include_text: _Optional[bool] = ..., include_metadata: _Optional[bool] = ..., include_vectors: _Optional[bool] = ..., vector_dtype: _Optional[_Union[_embed_pb2.EmbeddingDtype, str]] = ..., rerank: _Optional[bool] = ..., mode: _Optional[_Union[SearchMode, str]] = ..., alpha: _Optional[float] = ..., fusion: _Optional[_Union[Fusion, str]] = ..., group_by: _Optional[_Union[GroupBy, str]] = ..., group_size: _Optional[int] = ..., highlight: _Optional[bool] = ..., collection: _Optional[str] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ("results", "took_ms")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    TOOK_MS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[QueryResult]
    took_ms: float
    def __init__(self, results: _Optional[_Iterable[_Union[QueryResult, _Mapping]]] = ..., took_ms: _Optional[float] = ...) -> None: ...

class QueryResult(_message.Message):
    __slots__ = ("hits",)
    HITS_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[SearchHit]
    def __init__(self, hits: _Optional[_Iterable[_Union[SearchHit, _Mapping]]] = ...) -> None: ...

class SearchHit(_message.Message):
    __slots__ = ("document_id", "chunk", "score", "rerank_score", "text", "metadata", "vector", "vector_scale", "vector_score", "keyword_score", "highlights")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    RERANK_SCORE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    VECTOR_SCALE_FIELD_NUMBER: _ClassVar[int]
    VECTOR_SCORE_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_SCORE_FIELD_NUMBER: _ClassVar[int]
    HIGHLIGHTS_FIELD_NUMBER: _ClassVar[int]
    document_id: str
    chunk: ChunkSpan
    score: float
    rerank_score: float
    text: str
    metadata: _containers.ScalarMap[str, str]
    vector: bytes
    vector_scale: float
    vector_score: float
    keyword_score: float
    highlights: _containers.RepeatedCompositeFieldContainer[TextSpan]
    def __init__(self, document_id: _Optional[str] = ..., chunk: _Optional[_Union[ChunkSpan, _Mapping]] = ..., score: _Optional[float] = ..., rerank_score: _Optional[float] = ..., text: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., vector: _Optional[bytes] = ..., vector_scale: _Optional[float] = ..., vector_score: _Optional[float] = ..., keyword_score: _Optional[float] = ..., highlights: _Optional[_Iterable[_Union[TextSpan, _Mapping]]] = ...) -> None: ...

class TextSpan(_message.Message):
    __slots__ = ("start_char", "end_char")
    START_CHAR_FIELD_NUMBER: _ClassVar[int]
    END_CHAR_FIELD_NUMBER: _ClassVar[int]
    start_char: int
    end_char: int
    def __init__(self, start_char: _Optional[int] = ..., end_char: _Optional[int] = ...) -> None: ...

class SearchStreamRequest(_message.Message):
    __slots__ = ("search", "page_size")
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    search: SearchRequest
    page_size: int
    def __init__(self, search: _Optional[_Union[SearchRequest, _Mapping]] = ..., page_size: _Optional[int] = ...) -> None: ...

class SearchStreamResponse(_message.Message):
    __slots__ = ("query_index", "hits")
    QUERY_INDEX_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    query_index: int
    hits: _containers.RepeatedCompositeFieldContainer[SearchHit]
    def __init__(self, query_index: _Optional[int] = ..., hits: _Optional[_Iterable[_Union[SearchHit, _Mapping]]] = ...) -> None: ...

class GetIndexStatsRequest(_message.Message):
    __slots__ = ("collection",)
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    def __init__(self, collection: _Optional[str] = ...) -> None: ...

class GetIndexStatsResponse(_message.Message):
    __slots__ = ("document_count", "chunk_count", "unique_vector_count", "pending_documents", "index_kind", "counts_accuracy", "counts_age_ms", "counts_detail", "hnsw")
    DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_VECTOR_COUNT_FIELD_NUMBER: _ClassVar[int]
    PENDING_DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    INDEX_KIND_FIELD_NUMBER: _ClassVar[int]
    COUNTS_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    COUNTS_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_DETAIL_FIELD_NUMBER: _ClassVar[int]
    HNSW_FIELD_NUMBER: _ClassVar[int]
    document_count: int
    chunk_count: int
    unique_vector_count: int
    pending_documents: int
    index_kind: str
    counts_accuracy: CountAccuracy
    counts_age_ms: int
    counts_detail: str
    hnsw: _embed_pb2.HnswSearch
    def __init__(self, document_count: _Optional[int] = ..., chunk_count: _Optional[int] = ..., unique_vector_count: _Optional[int] = ..., pending_documents: _Optional[int] = ..., index_kind: _Optional[str] = ..., counts_accuracy: _Optional[_Union[CountAccuracy, str]] = ..., counts_age_ms: _Optional[int] = ..., counts_detail: _Optional[str] = ..., hnsw: _Optional[_Union[_embed_pb2.HnswSearch, _Mapping]] = ...) -> None: ...
