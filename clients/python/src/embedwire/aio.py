"""The asyncio client, :class:`AsyncClient`, on ``grpc.aio``.

Same methods, arguments and results as :class:`embedwire.Client`, awaited. Request
building and response decoding are shared with it (``_wire``, ``_bulk``); only the
waiting differs. ``embed_many`` runs ``max_concurrent_requests`` worker coroutines that
pull batches from one shared iterator, so concurrency is bounded without a task per
batch.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import time
from pathlib import Path
from typing import Any, AsyncIterable, AsyncIterator, Iterable, Sequence

import grpc
import grpc.aio
import numpy as np

from . import _health, _wire
from ._bulk import RowAssembler, batch_bounds
from ._config import DEFAULT_TIMEOUT, ClientConfig, build_config
from ._endpoints import Endpoint, RoundRobin, make_endpoints
from .errors import EmbedwireError, UnavailableError, from_rpc_error, status_of
from .retry import RetryPolicy, is_retryable
from .types import (
    Collection,
    DocumentLike,
    Documents,
    Dtype,
    EmbedResult,
    FilterLike,
    Hit,
    IndexStats,
    Info,
    IngestResult,
    IngestStreamResult,
    Job,
    RerankResult,
    TokenizedInput,
    TruncationDirection,
)
from .v1 import collections_pb2, embed_pb2, search_pb2

log = logging.getLogger("embedwire")

_UNSET: Any = object()


class AsyncClient:
    """An asyncio client for one or more embedwire servers.

    Takes the same arguments as :class:`embedwire.Client`. Build it inside the event
    loop that uses it; use ``async with`` or ``await client.close()``.
    """

    def __init__(
        self,
        addresses: str | Sequence[str],
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        api_key: str | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        root_certificates: bytes | str | Path | None = None,
        tls: bool | None = None,
        retry: RetryPolicy | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
        collection: str = "",
    ) -> None:
        self._config = build_config(
            addresses,
            timeout=timeout,
            api_key=api_key,
            metadata=metadata,
            root_certificates=root_certificates,
            tls=tls,
            retry=retry,
            channel_options_=channel_options,
        )
        if collection:
            self._config = dataclasses.replace(self._config, collection=collection)
        self._open(self._config)

    @classmethod
    def _from_config(cls, config: ClientConfig) -> "AsyncClient":
        """An AsyncClient with an already checked configuration (the blocking client
        builds one on its private event loop to run ``embed_many``)."""
        client = cls.__new__(cls)
        client._config = config
        client._open(config)
        return client

    def _open(self, config: ClientConfig) -> None:
        """Opens the channels (inside the running event loop, which grpc.aio binds)."""
        self._endpoints: list[Endpoint[grpc.aio.Channel]] = make_endpoints(
            config.addresses,
            root_certificates=config.root_certificates,
            options=config.options,
            aio=True,
        )
        self._round_robin = RoundRobin(len(self._endpoints))

    # -- lifecycle -------------------------------------------------------------------

    async def close(self) -> None:
        """Closes every channel; calls in flight are cancelled."""
        await asyncio.gather(*(endpoint.channel.close() for endpoint in self._endpoints))

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def addresses(self) -> list[str]:
        """The server addresses, as given."""
        return [e.address.text for e in self._endpoints]

    # -- the call engine ---------------------------------------------------------------

    def _timeout(self, timeout: float | None) -> float | None:
        return self._config.timeout if timeout is _UNSET else timeout

    async def _call(self, method: str, request: Any, timeout: float | None, *, idempotent: bool = True) -> Any:
        """Sends one unary call with failover and retries; raises EmbedwireError."""
        policy = self._config.retry
        deadline = None if timeout is None else time.monotonic() + timeout
        start = self._round_robin.next_start()
        n = len(self._endpoints)
        attempt = 0
        while True:
            endpoint = self._endpoints[(start + attempt) % n]
            attempt += 1
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            try:
                return await endpoint.methods[method](
                    request, timeout=remaining, metadata=self._config.metadata
                )
            except grpc.RpcError as err:
                code, _ = status_of(err)
                error = from_rpc_error(err, method=method, address=endpoint.address.text)
                if attempt >= policy.max_attempts or not is_retryable(code, idempotent=idempotent):
                    raise error from err
                failover = code == grpc.StatusCode.UNAVAILABLE and attempt < n
                pause = 0.0 if failover else policy.pause(attempt, error.retry_after)
                if deadline is not None and time.monotonic() + pause >= deadline:
                    raise error from err
                log.info("retrying %s after %s (attempt %d, pause %.3fs)", method, error, attempt, pause)
                if pause:
                    await asyncio.sleep(pause)

    def _stream_endpoint(self) -> Endpoint[grpc.aio.Channel]:
        return self._endpoints[self._round_robin.next_start()]

    # -- EmbedService --------------------------------------------------------------------

    async def embed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate: bool | None = None,
        dtype: Dtype = "float32",
        timeout: float | None = _UNSET,
    ) -> np.ndarray:
        """Embeds texts in one call; see :meth:`embedwire.Client.embed`. The array is a
        read-only view of the response bytes."""
        result = await self.embed_detailed(
            texts, normalize=normalize, dimensions=dimensions, truncate=truncate, dtype=dtype, timeout=timeout
        )
        return result.vectors

    async def embed_detailed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate: bool | None = None,
        dtype: Dtype = "float32",
        timeout: float | None = _UNSET,
    ) -> EmbedResult:
        """Like :meth:`embed`, with the model id, token counts and int8 scales."""
        request = _wire.embed_request(
            texts, normalize=normalize, truncate=truncate, dimensions=dimensions, dtype=dtype
        )
        return _wire.embed_result(await self._call("Embed", request, self._timeout(timeout)))

    async def embed_many(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = 256,
        max_concurrent_requests: int = 8,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate: bool | None = None,
        dtype: Dtype = "float32",
        timeout: float | None = _UNSET,
    ) -> np.ndarray:
        """Embeds any number of texts in concurrent batches, in input order; see
        :meth:`embedwire.Client.embed_many`. Returns a new, writable array."""
        if dtype == "int8":
            raise ValueError("embed_many does not support int8 (use embed_detailed per batch)")
        if max_concurrent_requests < 1:
            raise ValueError("max_concurrent_requests must be at least 1")
        items = texts if isinstance(texts, list) else list(texts)
        if not items:
            return _wire.empty_vectors(dtype, dimensions or (await self.info()).dim)
        call_timeout = self._timeout(timeout)
        rows = RowAssembler(len(items))
        bounds = list(batch_bounds(len(items), batch_size))
        queue = iter(bounds)  # shared by the workers: one event loop thread, no lock needed

        async def worker() -> None:
            for start, stop in queue:
                request = _wire.embed_request(
                    items[start:stop], normalize=normalize, truncate=truncate, dimensions=dimensions, dtype=dtype
                )
                rows.put(start, stop, _wire.decode_vectors(await self._call("Embed", request, call_timeout)))

        workers = [asyncio.ensure_future(worker()) for _ in range(min(max_concurrent_requests, len(bounds)))]
        try:
            await asyncio.gather(*workers)
        except BaseException:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            raise
        return rows.result()

    async def tokenize(
        self, texts: Sequence[str], *, truncate: bool | None = None, timeout: float | None = _UNSET
    ) -> list[TokenizedInput]:
        """The token ids the model would see for each text."""
        request = embed_pb2.TokenizeRequest(inputs=list(texts))
        if truncate is not None:
            request.truncate = truncate
        return _wire.tokenized(await self._call("Tokenize", request, self._timeout(timeout)))

    async def info(self, *, timeout: float | None = _UNSET) -> Info:
        """The served model (id, dimension, token limit) and the server's limits."""
        return _wire.info(await self._call("Info", embed_pb2.InfoRequest(), self._timeout(timeout)))

    # -- RerankService -------------------------------------------------------------------

    async def rerank(
        self,
        query: str,
        texts: Sequence[str],
        *,
        top_n: int | None = None,
        raw_scores: bool = False,
        return_text: bool = False,
        truncate: bool | None = None,
        truncation_direction: TruncationDirection | None = None,
        max_tokens_per_text: int | None = None,
        timeout: float | None = _UNSET,
    ) -> RerankResult:
        """Orders texts by relevance to the query, best first; see
        :meth:`embedwire.Client.rerank`."""
        request = _wire.rerank_request(
            query,
            texts,
            top_n=top_n,
            raw_scores=raw_scores,
            return_text=return_text,
            truncate=truncate,
            truncation_direction=truncation_direction,
            max_tokens_per_text=max_tokens_per_text,
        )
        return _wire.rerank_result(await self._call("Rerank", request, self._timeout(timeout)))

    # -- health ----------------------------------------------------------------------------

    async def health(self, *, service: str = "", timeout: float | None = _UNSET) -> str:
        """The gRPC health status of a server (``"SERVING"`` once its model is loaded)."""
        request = _health.HealthCheckRequest(service=service)
        return _health.status_name(await self._call("HealthCheck", request, self._timeout(timeout)))

    async def wait_until_ready(self, timeout: float = 60.0) -> None:
        """Polls health until a server reports SERVING (UnavailableError after timeout)."""
        deadline = time.monotonic() + timeout
        pause, last = 0.02, "no answer"
        while time.monotonic() < deadline:
            for endpoint in self._endpoints:
                try:
                    response = await endpoint.methods["HealthCheck"](
                        _health.HealthCheckRequest(), timeout=1.0, metadata=self._config.metadata
                    )
                    last = f"{endpoint.address.text}: {_health.status_name(response)}"
                    if response.status == _health.SERVING:
                        return
                except grpc.RpcError as err:
                    last = str(from_rpc_error(err, method="Health/Check", address=endpoint.address.text))
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)
        raise UnavailableError(f"no server ready after {timeout}s; last: {last}", method="Health/Check")

    # -- SearchService -----------------------------------------------------------------------

    async def search(
        self,
        query: str | np.ndarray | Sequence[Any],
        *,
        top_k: int | None = None,
        filter: FilterLike | None = None,
        score_threshold: float | None = None,
        offset: int = 0,
        include_text: bool | None = None,
        include_metadata: bool | None = None,
        include_vectors: bool = False,
        rerank: bool | None = None,
        mode: str | None = None,
        alpha: float | None = None,
        fusion: str | None = None,
        group_by: str | None = None,
        group_size: int | None = None,
        highlight: bool = False,
        timeout: float | None = _UNSET,
    ) -> list[Hit] | list[list[Hit]]:
        """Searches the stored documents; see :meth:`embedwire.Client.search`."""
        queries, single = _wire.split_queries(query)
        request = _wire.search_request(
            queries,
            top_k=top_k,
            filter=filter,
            score_threshold=score_threshold,
            offset=offset,
            include_text=include_text,
            include_metadata=include_metadata,
            include_vectors=include_vectors,
            rerank=rerank,
            mode=mode,
            alpha=alpha,
            fusion=fusion,
            group_by=group_by,
            group_size=group_size,
            highlight=highlight,
        )
        request.collection = self._config.collection
        results = _wire.hits_per_query(await self._call("Search", request, self._timeout(timeout)))
        return results[0] if single else results

    async def ingest(self, documents: Iterable[DocumentLike], *, timeout: float | None = _UNSET) -> IngestResult:
        """Stores documents and returns the job; see :meth:`embedwire.Client.ingest`."""
        request = _wire.ingest_request(documents, self._config.collection)
        response = await self._call(
            "Ingest", request, self._timeout(timeout), idempotent=_wire.all_have_ids(request)
        )
        return IngestResult(job=_wire.job(response.job), document_ids=tuple(response.document_ids))

    async def ingest_stream(
        self,
        documents: Iterable[DocumentLike] | AsyncIterable[DocumentLike],
        *,
        documents_per_message: int = 256,
        timeout: float | None = None,
    ) -> IngestStreamResult:
        """Streams any number of documents (a sync or async iterable, consumed lazily)
        as one job; see :meth:`embedwire.Client.ingest_stream`."""
        endpoint = self._stream_endpoint()
        if isinstance(documents, AsyncIterable):
            messages: Any = _async_stream_messages(documents, documents_per_message, self._config.collection)
        else:
            messages = _wire.ingest_stream_messages(documents, documents_per_message, self._config.collection)
        try:
            response = await endpoint.methods["IngestStream"](
                messages, timeout=timeout, metadata=self._config.metadata
            )
        except grpc.RpcError as err:
            raise from_rpc_error(err, method="IngestStream", address=endpoint.address.text) from err
        return IngestStreamResult(job=_wire.job(response.job), received_documents=response.received_documents)

    async def get_job(self, job_id: str, *, timeout: float | None = _UNSET) -> Job:
        """The current state of an ingestion job (NotFoundError for an unknown id)."""
        response = await self._call("GetJob", search_pb2.GetJobRequest(job_id=job_id, collection=self._config.collection), self._timeout(timeout))
        return _wire.job(response.job)

    async def wait_for_job(self, job_id: str, *, timeout: float | None = None) -> Job:
        """Follows a job with WatchJob until it ends; returns its final state."""
        endpoint = self._stream_endpoint()
        last: Job | None = None
        call = endpoint.methods["WatchJob"](
            search_pb2.WatchJobRequest(job_id=job_id, collection=self._config.collection), timeout=timeout, metadata=self._config.metadata
        )
        try:
            async for response in call:
                last = _wire.job(response.job)
                if last.done:
                    call.cancel()
                    return last
        except grpc.RpcError as err:
            raise from_rpc_error(err, method="WatchJob", address=endpoint.address.text) from err
        if last is None:
            raise EmbedwireError("WatchJob ended without an update", method="WatchJob", address=endpoint.address.text)
        return last

    async def get_documents(self, ids: Sequence[str], *, timeout: float | None = _UNSET) -> Documents:
        """Stored documents by id, and the ids that are not stored."""
        request = search_pb2.GetDocumentsRequest(ids=list(ids), collection=self._config.collection)
        return _wire.documents(await self._call("GetDocuments", request, self._timeout(timeout)))

    async def delete_documents(
        self,
        ids: Sequence[str] | None = None,
        *,
        filter: FilterLike | None = None,
        timeout: float | None = _UNSET,
    ) -> int:
        """Deletes documents by id and/or metadata filter; returns how many were deleted."""
        request = _wire.delete_request(ids, filter, self._config.collection)
        return (await self._call("DeleteDocuments", request, self._timeout(timeout))).deleted_count

    async def index_stats(self, *, timeout: float | None = _UNSET) -> IndexStats:
        """Counts of documents, chunks and vectors in the index."""
        response = await self._call("GetIndexStats", search_pb2.GetIndexStatsRequest(collection=self._config.collection), self._timeout(timeout))
        return _wire.index_stats(response)

    # -- CollectionService ---------------------------------------------------------------

    def collection(self, name: str) -> "AsyncClient":
        """This client acting on collection ``name``: ingest, jobs, documents, search
        and statistics go there (``""`` or ``"default"``: the default collection).
        The two share their channels: close only one of them."""
        twin = copy.copy(self)
        twin._config = dataclasses.replace(self._config, collection=name)
        return twin

    async def create_collection(
        self,
        name: str,
        *,
        chunk_tokens: int | None = None,
        chunk_overlap_tokens: int | None = None,
        index: str | None = None,
        keyword_index: bool | None = None,
        timeout: float | None = _UNSET,
    ) -> Collection:
        """Creates an empty collection (an admin key where the server has keys);
        settings left None take the server's. ``index``: ``"exact"`` or ``"hnsw"``.
        Not retried after it was sent (a retry could find its own creation)."""
        request = _wire.create_collection_request(
            name,
            chunk_tokens=chunk_tokens,
            chunk_overlap_tokens=chunk_overlap_tokens,
            index=index,
            keyword_index=keyword_index,
        )
        response = await self._call("CreateCollection", request, self._timeout(timeout), idempotent=False)
        return _wire.collection(response.collection)

    async def list_collections(self, *, timeout: float | None = _UNSET) -> list[Collection]:
        """The collections the key reaches, by name (the default one is not listed)."""
        request = collections_pb2.ListCollectionsRequest()
        response = await self._call("ListCollections", request, self._timeout(timeout))
        return [_wire.collection(c) for c in response.collections]

    async def delete_collection(self, name: str, *, timeout: float | None = _UNSET) -> int:
        """Deletes a collection with its documents, jobs and vectors (an admin key
        where the server has keys); returns how many documents it held."""
        request = collections_pb2.DeleteCollectionRequest(name=name)
        response = await self._call("DeleteCollection", request, self._timeout(timeout), idempotent=False)
        return response.deleted_documents


async def _async_stream_messages(
    documents: AsyncIterable[DocumentLike], per_message: int, collection: str
) -> AsyncIterator[search_pb2.IngestStreamRequest]:
    """The async twin of ``_wire.ingest_stream_messages``."""
    batch: list[search_pb2.Document] = []
    async for doc in documents:
        batch.append(_wire.document(doc))
        if len(batch) == per_message:
            yield search_pb2.IngestStreamRequest(documents=batch, collection=collection)
            batch = []
    if batch:
        yield search_pb2.IngestStreamRequest(documents=batch, collection=collection)


__all__ = ["AsyncClient"]
