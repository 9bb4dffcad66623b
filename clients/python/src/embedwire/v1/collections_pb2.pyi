from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CollectionIndex(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COLLECTION_INDEX_UNSPECIFIED: _ClassVar[CollectionIndex]
    COLLECTION_INDEX_EXACT: _ClassVar[CollectionIndex]
    COLLECTION_INDEX_HNSW: _ClassVar[CollectionIndex]
COLLECTION_INDEX_UNSPECIFIED: CollectionIndex
COLLECTION_INDEX_EXACT: CollectionIndex
COLLECTION_INDEX_HNSW: CollectionIndex

class CollectionSettings(_message.Message):
    __slots__ = ("chunk_tokens", "chunk_overlap_tokens", "index", "keyword_index")
    CHUNK_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_OVERLAP_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_INDEX_FIELD_NUMBER: _ClassVar[int]
    chunk_tokens: int
    chunk_overlap_tokens: int
    index: CollectionIndex
    keyword_index: bool
    def __init__(self, chunk_tokens: _Optional[int] = ..., chunk_overlap_tokens: _Optional[int] = ..., index: _Optional[_Union[CollectionIndex, str]] = ..., keyword_index: _Optional[bool] = ...) -> None: ...

class Collection(_message.Message):
    __slots__ = ("name", "settings", "created_at")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    name: str
    settings: CollectionSettings
    created_at: float
    def __init__(self, name: _Optional[str] = ..., settings: _Optional[_Union[CollectionSettings, _Mapping]] = ..., created_at: _Optional[float] = ...) -> None: ...

class CreateCollectionRequest(_message.Message):
    __slots__ = ("name", "settings")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    settings: CollectionSettings
    def __init__(self, name: _Optional[str] = ..., settings: _Optional[_Union[CollectionSettings, _Mapping]] = ...) -> None: ...

class CreateCollectionResponse(_message.Message):
    __slots__ = ("collection",)
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: Collection
    def __init__(self, collection: _Optional[_Union[Collection, _Mapping]] = ...) -> None: ...

class ListCollectionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListCollectionsResponse(_message.Message):
    __slots__ = ("collections",)
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    collections: _containers.RepeatedCompositeFieldContainer[Collection]
    def __init__(self, collections: _Optional[_Iterable[_Union[Collection, _Mapping]]] = ...) -> None: ...

class DeleteCollectionRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteCollectionResponse(_message.Message):
    __slots__ = ("deleted_documents",)
    DELETED_DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    deleted_documents: int
    def __init__(self, deleted_documents: _Optional[int] = ...) -> None: ...
