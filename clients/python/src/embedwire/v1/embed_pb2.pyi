from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EmbeddingDtype(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EMBEDDING_DTYPE_UNSPECIFIED: _ClassVar[EmbeddingDtype]
    EMBEDDING_DTYPE_FLOAT32: _ClassVar[EmbeddingDtype]
    EMBEDDING_DTYPE_FLOAT16: _ClassVar[EmbeddingDtype]
    EMBEDDING_DTYPE_INT8: _ClassVar[EmbeddingDtype]
    EMBEDDING_DTYPE_UBINARY: _ClassVar[EmbeddingDtype]
    EMBEDDING_DTYPE_FLOAT32_LIST: _ClassVar[EmbeddingDtype]

class RecallProbe(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECALL_PROBE_UNSPECIFIED: _ClassVar[RecallProbe]
    RECALL_PROBE_STORED_VECTORS: _ClassVar[RecallProbe]
    RECALL_PROBE_RECENT_QUERIES: _ClassVar[RecallProbe]
EMBEDDING_DTYPE_UNSPECIFIED: EmbeddingDtype
EMBEDDING_DTYPE_FLOAT32: EmbeddingDtype
EMBEDDING_DTYPE_FLOAT16: EmbeddingDtype
EMBEDDING_DTYPE_INT8: EmbeddingDtype
EMBEDDING_DTYPE_UBINARY: EmbeddingDtype
EMBEDDING_DTYPE_FLOAT32_LIST: EmbeddingDtype
RECALL_PROBE_UNSPECIFIED: RecallProbe
RECALL_PROBE_STORED_VECTORS: RecallProbe
RECALL_PROBE_RECENT_QUERIES: RecallProbe

class EmbedRequest(_message.Message):
    __slots__ = ("inputs", "normalize", "truncate", "dtype", "dimensions")
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    inputs: _containers.RepeatedScalarFieldContainer[str]
    normalize: bool
    truncate: bool
    dtype: EmbeddingDtype
    dimensions: int
    def __init__(self, inputs: _Optional[_Iterable[str]] = ..., normalize: _Optional[bool] = ..., truncate: _Optional[bool] = ..., dtype: _Optional[_Union[EmbeddingDtype, str]] = ..., dimensions: _Optional[int] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("dim", "count", "dtype", "embeddings", "row_scales", "values", "usage", "token_counts", "model")
    DIM_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    ROW_SCALES_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    dim: int
    count: int
    dtype: EmbeddingDtype
    embeddings: bytes
    row_scales: _containers.RepeatedScalarFieldContainer[float]
    values: _containers.RepeatedScalarFieldContainer[float]
    usage: Usage
    token_counts: _containers.RepeatedScalarFieldContainer[int]
    model: str
    def __init__(self, dim: _Optional[int] = ..., count: _Optional[int] = ..., dtype: _Optional[_Union[EmbeddingDtype, str]] = ..., embeddings: _Optional[bytes] = ..., row_scales: _Optional[_Iterable[float]] = ..., values: _Optional[_Iterable[float]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., token_counts: _Optional[_Iterable[int]] = ..., model: _Optional[str] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "total_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    total_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ...) -> None: ...

class EmbedStreamRequest(_message.Message):
    __slots__ = ("request_id", "request")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    request: EmbedRequest
    def __init__(self, request_id: _Optional[str] = ..., request: _Optional[_Union[EmbedRequest, _Mapping]] = ...) -> None: ...

class EmbedStreamResponse(_message.Message):
    __slots__ = ("request_id", "response", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    response: EmbedResponse
    error: StreamError
    def __init__(self, request_id: _Optional[str] = ..., response: _Optional[_Union[EmbedResponse, _Mapping]] = ..., error: _Optional[_Union[StreamError, _Mapping]] = ...) -> None: ...

class StreamError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class TokenizeRequest(_message.Message):
    __slots__ = ("inputs", "truncate")
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    inputs: _containers.RepeatedScalarFieldContainer[str]
    truncate: bool
    def __init__(self, inputs: _Optional[_Iterable[str]] = ..., truncate: _Optional[bool] = ...) -> None: ...

class TokenizeResponse(_message.Message):
    __slots__ = ("tokenized",)
    TOKENIZED_FIELD_NUMBER: _ClassVar[int]
    tokenized: _containers.RepeatedCompositeFieldContainer[TokenizedInput]
    def __init__(self, tokenized: _Optional[_Iterable[_Union[TokenizedInput, _Mapping]]] = ...) -> None: ...

class TokenizedInput(_message.Message):
    __slots__ = ("ids", "count", "truncated", "untruncated_count")
    IDS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    UNTRUNCATED_COUNT_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    count: int
    truncated: bool
    untruncated_count: int
    def __init__(self, ids: _Optional[_Iterable[int]] = ..., count: _Optional[int] = ..., truncated: _Optional[bool] = ..., untruncated_count: _Optional[int] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("model", "dim", "max_input_tokens", "pooling", "backend", "dtypes", "limits", "version", "store", "precision", "rerank_scorer")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    MAX_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    POOLING_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    DTYPES_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    RERANK_SCORER_FIELD_NUMBER: _ClassVar[int]
    model: str
    dim: int
    max_input_tokens: int
    pooling: str
    backend: str
    dtypes: _containers.RepeatedScalarFieldContainer[EmbeddingDtype]
    limits: Limits
    version: str
    store: StoreInfo
    precision: str
    rerank_scorer: str
    def __init__(self, model: _Optional[str] = ..., dim: _Optional[int] = ..., max_input_tokens: _Optional[int] = ..., pooling: _Optional[str] = ..., backend: _Optional[str] = ..., dtypes: _Optional[_Iterable[_Union[EmbeddingDtype, str]]] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., version: _Optional[str] = ..., store: _Optional[_Union[StoreInfo, _Mapping]] = ..., precision: _Optional[str] = ..., rerank_scorer: _Optional[str] = ...) -> None: ...

class StoreInfo(_message.Message):
    __slots__ = ("kind", "shared", "index_id", "healthy", "nodes", "hnsw")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    INDEX_ID_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    HNSW_FIELD_NUMBER: _ClassVar[int]
    kind: str
    shared: bool
    index_id: str
    healthy: bool
    nodes: _containers.RepeatedCompositeFieldContainer[StoreNode]
    hnsw: HnswSearch
    def __init__(self, kind: _Optional[str] = ..., shared: _Optional[bool] = ..., index_id: _Optional[str] = ..., healthy: _Optional[bool] = ..., nodes: _Optional[_Iterable[_Union[StoreNode, _Mapping]]] = ..., hnsw: _Optional[_Union[HnswSearch, _Mapping]] = ...) -> None: ...

class HnswSearch(_message.Message):
    __slots__ = ("ef_search", "target_recall", "estimated_recall", "measured_at_vectors", "probe")
    EF_SEARCH_FIELD_NUMBER: _ClassVar[int]
    TARGET_RECALL_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_RECALL_FIELD_NUMBER: _ClassVar[int]
    MEASURED_AT_VECTORS_FIELD_NUMBER: _ClassVar[int]
    PROBE_FIELD_NUMBER: _ClassVar[int]
    ef_search: int
    target_recall: float
    estimated_recall: float
    measured_at_vectors: int
    probe: RecallProbe
    def __init__(self, ef_search: _Optional[int] = ..., target_recall: _Optional[float] = ..., estimated_recall: _Optional[float] = ..., measured_at_vectors: _Optional[int] = ..., probe: _Optional[_Union[RecallProbe, str]] = ...) -> None: ...

class StoreNode(_message.Message):
    __slots__ = ("name", "address", "healthy")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    healthy: bool
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., healthy: _Optional[bool] = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ("max_inputs_per_request", "max_request_bytes", "max_in_flight_inputs", "max_batch_size", "max_batch_tokens", "max_input_chars", "max_rerank_texts", "max_interactive_calls", "max_queue_ms", "admission")
    MAX_INPUTS_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    MAX_REQUEST_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_INPUTS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_INPUT_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_RERANK_TEXTS_FIELD_NUMBER: _ClassVar[int]
    MAX_INTERACTIVE_CALLS_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_MS_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_FIELD_NUMBER: _ClassVar[int]
    max_inputs_per_request: int
    max_request_bytes: int
    max_in_flight_inputs: int
    max_batch_size: int
    max_batch_tokens: int
    max_input_chars: int
    max_rerank_texts: int
    max_interactive_calls: int
    max_queue_ms: int
    admission: str
    def __init__(self, max_inputs_per_request: _Optional[int] = ..., max_request_bytes: _Optional[int] = ..., max_in_flight_inputs: _Optional[int] = ..., max_batch_size: _Optional[int] = ..., max_batch_tokens: _Optional[int] = ..., max_input_chars: _Optional[int] = ..., max_rerank_texts: _Optional[int] = ..., max_interactive_calls: _Optional[int] = ..., max_queue_ms: _Optional[int] = ..., admission: _Optional[str] = ...) -> None: ...
