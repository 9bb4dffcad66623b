from embedwire.v1 import embed_pb2 as _embed_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TruncationDirection(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRUNCATION_DIRECTION_UNSPECIFIED: _ClassVar[TruncationDirection]
    TRUNCATION_DIRECTION_RIGHT: _ClassVar[TruncationDirection]
    TRUNCATION_DIRECTION_LEFT: _ClassVar[TruncationDirection]
TRUNCATION_DIRECTION_UNSPECIFIED: TruncationDirection
TRUNCATION_DIRECTION_RIGHT: TruncationDirection
TRUNCATION_DIRECTION_LEFT: TruncationDirection

class RerankRequest(_message.Message):
    __slots__ = ("query", "texts", "truncate", "raw_scores", "return_text", "truncation_direction", "top_n", "max_tokens_per_text")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    RAW_SCORES_FIELD_NUMBER: _ClassVar[int]
    RETURN_TEXT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_DIRECTION_FIELD_NUMBER: _ClassVar[int]
    TOP_N_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_PER_TEXT_FIELD_NUMBER: _ClassVar[int]
    query: str
    texts: _containers.RepeatedScalarFieldContainer[str]
    truncate: bool
    raw_scores: bool
    return_text: bool
    truncation_direction: TruncationDirection
    top_n: int
    max_tokens_per_text: int
    def __init__(self, query: _Optional[str] = ..., texts: _Optional[_Iterable[str]] = ..., truncate: _Optional[bool] = ..., raw_scores: _Optional[bool] = ..., return_text: _Optional[bool] = ..., truncation_direction: _Optional[_Union[TruncationDirection, str]] = ..., top_n: _Optional[int] = ..., max_tokens_per_text: _Optional[int] = ...) -> None: ...

class Rank(_message.Message):
    __slots__ = ("index", "text", "score")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    index: int
    text: str
    score: float
    def __init__(self, index: _Optional[int] = ..., text: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class RerankMetadata(_message.Message):
    __slots__ = ("compute_chars", "compute_tokens", "total_time_ns", "tokenization_time_ns", "queue_time_ns", "inference_time_ns")
    COMPUTE_CHARS_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    TOKENIZATION_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    compute_chars: int
    compute_tokens: int
    total_time_ns: int
    tokenization_time_ns: int
    queue_time_ns: int
    inference_time_ns: int
    def __init__(self, compute_chars: _Optional[int] = ..., compute_tokens: _Optional[int] = ..., total_time_ns: _Optional[int] = ..., tokenization_time_ns: _Optional[int] = ..., queue_time_ns: _Optional[int] = ..., inference_time_ns: _Optional[int] = ...) -> None: ...

class RerankResponse(_message.Message):
    __slots__ = ("ranks", "metadata", "scorer", "model", "usage")
    RANKS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SCORER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    ranks: _containers.RepeatedCompositeFieldContainer[Rank]
    metadata: RerankMetadata
    scorer: str
    model: str
    usage: _embed_pb2.Usage
    def __init__(self, ranks: _Optional[_Iterable[_Union[Rank, _Mapping]]] = ..., metadata: _Optional[_Union[RerankMetadata, _Mapping]] = ..., scorer: _Optional[str] = ..., model: _Optional[str] = ..., usage: _Optional[_Union[_embed_pb2.Usage, _Mapping]] = ...) -> None: ...

class RerankStreamRequest(_message.Message):
    __slots__ = ("request_id", "request")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    request: RerankRequest
    def __init__(self, request_id: _Optional[str] = ..., request: _Optional[_Union[RerankRequest, _Mapping]] = ...) -> None: ...

class RerankStreamResponse(_message.Message):
    __slots__ = ("request_id", "response", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    response: RerankResponse
    error: _embed_pb2.StreamError
    def __init__(self, request_id: _Optional[str] = ..., response: _Optional[_Union[RerankResponse, _Mapping]] = ..., error: _Optional[_Union[_embed_pb2.StreamError, _Mapping]] = ...) -> None: ...
