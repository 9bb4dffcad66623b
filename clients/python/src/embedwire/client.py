"""The blocking client, :class:`Client`.

Every unary call goes through :meth:`Client._call`, which picks the next address (round
robin), fails over to the other addresses on UNAVAILABLE and backs off on
RESOURCE_EXHAUSTED, all within the call's deadline. ``embed_many`` with several batches in
flight runs :class:`AsyncClient`'s implementation on a private event loop thread that
the client starts at the first such call (``_loop``): one bulk path for both clients
(order, retries, errors), and grpc.aio's per-call cost rather than that of sync gRPC
futures, whose completion callbacks hop between gRPC's threads and the caller's.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import grpc
import numpy as np

from . import _health, _wire
from ._bulk import RowAssembler, batch_bounds
from ._config import DEFAULT_TIMEOUT, build_config
from ._loop import BackgroundLoop
from ._endpoints import Endpoint, RoundRobin, make_endpoints
from .aio import AsyncClient
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


class Client:
    """A blocking client for one or more embedwire servers.

    Args:
        addresses: ``"host:port"``, ``"http://host:port"`` or ``"https://host:port"``,
            several as a list or comma separated. Calls rotate over them and fail over
            to the next one when a server is unreachable. Search and job calls assume
            the addresses share one document store (or give a single address).
        timeout: default deadline of each call in seconds, retries included (None: no
            deadline). Each method also takes ``timeout=``.
        api_key: sent as ``authorization: Bearer API_KEY`` with every call.
        metadata: other headers sent with every call, as (key, value) pairs.
        root_certificates: PEM root certificates (bytes or a file path) to verify the
            servers' TLS certificates; giving them turns TLS on for bare addresses.
        tls: force TLS on (system roots) or off for bare ``host:port`` addresses.
        retry: the retry policy for RESOURCE_EXHAUSTED / UNAVAILABLE.
        channel_options: extra gRPC channel arguments.

    Use it as a context manager, or call :meth:`close`.
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
        self._endpoints: list[Endpoint[grpc.Channel]] = make_endpoints(
            self._config.addresses,
            root_certificates=self._config.root_certificates,
            options=self._config.options,
            aio=False,
        )
        self._round_robin = RoundRobin(len(self._endpoints))
        # The private event loop and the grpc.aio twin of this client that run
        # embed_many's concurrent batches; started by the first such call.
        self._background: tuple[BackgroundLoop, AsyncClient] | None = None
        self._background_lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        """Closes every channel; calls in flight are cancelled."""
        for endpoint in self._endpoints:
            endpoint.channel.close()
        with self._background_lock:
            background, self._background = self._background, None
        if background is not None:
            loop, twin = background
            loop.close(twin.close)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def addresses(self) -> list[str]:
        """The server addresses, as given."""
        return [e.address.text for e in self._endpoints]

    # -- the call engine ---------------------------------------------------------------

    def _timeout(self, timeout: float | None) -> float | None:
        return self._config.timeout if timeout is _UNSET else timeout

    def _call(self, method: str, request: Any, timeout: float | None, *, idempotent: bool = True) -> Any:
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
                return endpoint.methods[method](
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
                    time.sleep(pause)

    def _async_twin(self) -> tuple[BackgroundLoop, AsyncClient]:
        """The private event loop and an AsyncClient on it with this client's
        configuration (same addresses, credentials, metadata, retry policy, channel
        options), created at the first call."""
        with self._background_lock:
            if self._background is None:
                loop = BackgroundLoop()
                config = self._config

                async def open_twin() -> AsyncClient:
                    return AsyncClient._from_config(config)

                try:
                    self._background = (loop, loop.call(open_twin))
                except BaseException:
                    loop.close()
                    raise
            return self._background

    def _stream_endpoint(self) -> Endpoint[grpc.Channel]:
        return self._endpoints[self._round_robin.next_start()]

    # -- EmbedService --------------------------------------------------------------------

    def embed(
        self,
        texts: Sequence[str],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate: bool | None = None,
        dtype: Dtype = "float32",
        timeout: float | None = _UNSET,
    ) -> np.ndarray:
        """Embeds texts in one call.

        Args:
            texts: at most the server's ``max_inputs_per_request`` non-empty strings
                (use :meth:`embed_many` for more).
            normalize: unit-length vectors (server default: True).
            dimensions: keep only the first n dimensions (Matryoshka style).
            truncate: cut inputs over the model's token limit (server default: True);
                False makes such an input an INVALID_ARGUMENT error.
            dtype: ``"float32"`` (default), ``"float16"``, ``"int8"`` (scales via
                :meth:`embed_detailed`), ``"ubinary"`` (packed bits, uint8).
            timeout: deadline in seconds (default: the client's).

        Returns:
            A (len(texts), dim) array (float32 by default), row i for texts[i]. It is a
            read-only view of the response bytes (no copy); ``.copy()`` it to write.
        """
        return self.embed_detailed(
            texts, normalize=normalize, dimensions=dimensions, truncate=truncate, dtype=dtype, timeout=timeout
        ).vectors

    def embed_detailed(
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
        return _wire.embed_result(self._call("Embed", request, self._timeout(timeout)))

    def embed_many(
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
        """Embeds any number of texts: batches of ``batch_size`` sent
        ``max_concurrent_requests`` at a time, each retried with backoff when the server
        is overloaded, reassembled in input order.

        Args:
            texts: the texts; rows of the result follow their order.
            batch_size: inputs per call (at most the server's max_inputs_per_request).
            max_concurrent_requests: calls in flight at once.
            normalize, dimensions, truncate, dtype: as for :meth:`embed` (not int8,
                whose per-row scales would be lost).
            timeout: deadline of each batch, its retries included (as for one
                :meth:`embed` call).

        Returns:
            A new, writable (len(texts), dim) array.

        Raises:
            EmbedwireError: the first batch that failed for good (the others are
            cancelled); its message names the method, address and status.
        """
        if dtype == "int8":
            raise ValueError("embed_many does not support int8 (use embed_detailed per batch)")
        if max_concurrent_requests < 1:
            raise ValueError("max_concurrent_requests must be at least 1")
        items = texts if isinstance(texts, list) else list(texts)
        if not items:
            return _wire.empty_vectors(dtype, dimensions or self.info().dim)
        call_timeout = self._timeout(timeout)
        bounds = list(batch_bounds(len(items), batch_size))
        if len(bounds) > 1 and max_concurrent_requests > 1:
            loop, twin = self._async_twin()
            return loop.run(
                twin.embed_many(
                    items,
                    batch_size=batch_size,
                    max_concurrent_requests=max_concurrent_requests,
                    normalize=normalize,
                    dimensions=dimensions,
                    truncate=truncate,
                    dtype=dtype,
                    timeout=call_timeout,
                )
            )
        # One call at a time: plain blocking calls, no event loop to start.
        rows = RowAssembler(len(items))
        for start, stop in bounds:
            request = _wire.embed_request(
                items[start:stop], normalize=normalize, truncate=truncate, dimensions=dimensions, dtype=dtype
            )
            rows.put(start, stop, _wire.decode_vectors(self._call("Embed", request, call_timeout)))
        return rows.result()

    def tokenize(
        self, texts: Sequence[str], *, truncate: bool | None = None, timeout: float | None = _UNSET
    ) -> list[TokenizedInput]:
        """The token ids the model would see for each text."""
        request = embed_pb2.TokenizeRequest(inputs=list(texts))
        if truncate is not None:
            request.truncate = truncate
        return _wire.tokenized(self._call("Tokenize", request, self._timeout(timeout)))

    def info(self, *, timeout: float | None = _UNSET) -> Info:
        """The served model (id, dimension, token limit) and the server's limits."""
        return _wire.info(self._call("Info", embed_pb2.InfoRequest(), self._timeout(timeout)))

    # -- RerankService -------------------------------------------------------------------

    def rerank(
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
        """Orders texts by relevance to the query, best first, in one call.

        The server scores with its cross-encoder, or without one with the embedding
        model: a text's score is then the cosine similarity of its vector to the
        query's (``result.scorer`` says which).

        Args:
            query: what the texts are judged against (not empty).
            texts: the candidates, at least one and at most the server's
                ``max_rerank_texts`` (``info().limits``), none of them empty.
            top_n: keep only the n best (default: all of them).
            raw_scores: a cross-encoder's logit instead of its sigmoid (a bi-encoder's
                cosine either way).
            return_text: echo each text in its :class:`Rank`.
            truncate: cut a (query, text) pair over the scorer's token limit (server
                default: True); False makes such a pair an INVALID_ARGUMENT error that
                names ``texts[i]`` or ``query``.
            truncation_direction: ``"right"`` (server default) or ``"left"``: the end
                an over-long text loses tokens from.
            max_tokens_per_text: cut each text to at most this many of the scorer's
                tokens before pairing it with the query (Cohere's max_tokens_per_doc;
                default: only the scorer's own limit).
            timeout: deadline in seconds, retries included (default: the client's).

        Returns:
            A :class:`RerankResult`: ``ranks`` best first, each with the text's
            ``index`` in ``texts``, its ``score`` and (with return_text) its ``text``.

        Raises:
            InvalidArgumentError: an empty query or text, an over-long pair with
                truncate=False, or more texts than the server's limit (OUT_OF_RANGE);
                the message names the field.
        """
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
        return _wire.rerank_result(self._call("Rerank", request, self._timeout(timeout)))

    # -- health ----------------------------------------------------------------------------

    def health(self, *, service: str = "", timeout: float | None = _UNSET) -> str:
        """The gRPC health status of a server: ``"SERVING"`` once its model is loaded,
        else ``"NOT_SERVING"`` (or ``"SERVICE_UNKNOWN"`` for an unknown service)."""
        request = _health.HealthCheckRequest(service=service)
        return _health.status_name(self._call("HealthCheck", request, self._timeout(timeout)))

    def wait_until_ready(self, timeout: float = 60.0) -> None:
        """Polls health until a server reports SERVING.

        Raises:
            UnavailableError: not ready within ``timeout`` seconds (naming the last
            status or error seen).
        """
        deadline = time.monotonic() + timeout
        pause, last = 0.02, "no answer"
        while time.monotonic() < deadline:
            for endpoint in self._endpoints:
                try:
                    response = endpoint.methods["HealthCheck"](
                        _health.HealthCheckRequest(), timeout=1.0, metadata=self._config.metadata
                    )
                    last = f"{endpoint.address.text}: {_health.status_name(response)}"
                    if response.status == _health.SERVING:
                        return
                except grpc.RpcError as err:
                    last = str(from_rpc_error(err, method="Health/Check", address=endpoint.address.text))
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
        raise UnavailableError(f"no server ready after {timeout}s; last: {last}", method="Health/Check")

    # -- SearchService -----------------------------------------------------------------------

    def search(
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
        """Searches the stored documents.

        Args:
            query: a text, or a 1-D float32 vector; or a list of those / a 2-D array for
                several queries in one call.
            top_k: hits per query (server default 5).
            filter: metadata filter: ``{"lang": "en", "tag": ["a", "b"]}`` (all keys
                must match; a list accepts any of its values) or a :class:`Filter`.
            score_threshold: drop hits below this cosine similarity.
            offset: skip the first hits (paging).
            include_text, include_metadata: return each hit's chunk text / metadata
                (server default: both).
            include_vectors: return each hit's vector.
            rerank: re-score with the server's cross-encoder (default: when it has one).
            mode: ``"vector"`` (by meaning, the default), ``"keyword"`` (BM25 over the
                chunks' words: exact terms, names, codes) or ``"hybrid"`` (both, fused).
                ``score_threshold`` then applies to the mode's score (cosine, BM25, fused).
            alpha: the vector side's weight in hybrid mode, 0 to 1 (server default 0.5).
            fusion: how hybrid mode merges its rankings: ``"relative_score"`` (the
                default) or ``"rrf"`` (reciprocal rank).
            group_by: ``"document"`` ranks documents, each by its best chunk: ``top_k``
                and ``offset`` count documents, and each document's hits (at most
                ``group_size``, default 1) follow one another. ``"none"``: chunks.
            group_size: chunks per document when grouped, 1 to 100.
            highlight: set each hit's ``highlights``: its words that match the query's.
            timeout: deadline in seconds.

        Returns:
            The hits, best first, for a single query; a list of such lists, in query
            order, for several.
        """
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
        results = _wire.hits_per_query(self._call("Search", request, self._timeout(timeout)))
        return results[0] if single else results

    def ingest(self, documents: Iterable[DocumentLike], *, timeout: float | None = _UNSET) -> IngestResult:
        """Stores documents (at most the server's per-request limit) and returns at once
        with the job that embeds and indexes them; see :meth:`wait_for_job`.

        Documents are :class:`Document`, plain texts, or ``{"text", "id", "metadata"}``
        mappings. The call is retried on UNAVAILABLE only when every document has an id
        (an idempotent upsert); server-assigned ids could otherwise be stored twice.
        """
        request = _wire.ingest_request(documents, self._config.collection)
        response = self._call("Ingest", request, self._timeout(timeout), idempotent=_wire.all_have_ids(request))
        return IngestResult(job=_wire.job(response.job), document_ids=tuple(response.document_ids))

    def ingest_stream(
        self,
        documents: Iterable[DocumentLike],
        *,
        documents_per_message: int = 256,
        timeout: float | None = None,
    ) -> IngestStreamResult:
        """Streams any number of documents as one job; returns once all are on disk.

        The iterable is consumed lazily, ``documents_per_message`` at a time, so it may
        be a generator over a file of any size. Not retried (a stream cannot be
        replayed). The default timeout is None: a bulk load takes as long as it takes.
        """
        endpoint = self._stream_endpoint()
        messages = _wire.ingest_stream_messages(documents, documents_per_message, self._config.collection)
        try:
            response = endpoint.methods["IngestStream"](
                messages, timeout=timeout, metadata=self._config.metadata
            )
        except grpc.RpcError as err:
            raise from_rpc_error(err, method="IngestStream", address=endpoint.address.text) from err
        return IngestStreamResult(job=_wire.job(response.job), received_documents=response.received_documents)

    def get_job(self, job_id: str, *, timeout: float | None = _UNSET) -> Job:
        """The current state of an ingestion job (NotFoundError for an unknown id)."""
        response = self._call("GetJob", search_pb2.GetJobRequest(job_id=job_id, collection=self._config.collection), self._timeout(timeout))
        return _wire.job(response.job)

    def wait_for_job(self, job_id: str, *, timeout: float | None = None) -> Job:
        """Follows a job with WatchJob until it ends and returns its final state
        (COMPLETED or FAILED: check ``job.status``; a failed job is not an exception).

        Raises:
            DeadlineExceededError: the job did not end within ``timeout`` seconds.
        """
        endpoint = self._stream_endpoint()
        last: Job | None = None
        try:
            for response in endpoint.methods["WatchJob"](
                search_pb2.WatchJobRequest(job_id=job_id, collection=self._config.collection), timeout=timeout, metadata=self._config.metadata
            ):
                last = _wire.job(response.job)
                if last.done:
                    return last
        except grpc.RpcError as err:
            raise from_rpc_error(err, method="WatchJob", address=endpoint.address.text) from err
        if last is None:
            raise EmbedwireError("WatchJob ended without an update", method="WatchJob", address=endpoint.address.text)
        return last

    def get_documents(self, ids: Sequence[str], *, timeout: float | None = _UNSET) -> Documents:
        """Stored documents by id, and the ids that are not stored."""
        request = search_pb2.GetDocumentsRequest(ids=list(ids), collection=self._config.collection)
        return _wire.documents(self._call("GetDocuments", request, self._timeout(timeout)))

    def delete_documents(
        self,
        ids: Sequence[str] | None = None,
        *,
        filter: FilterLike | None = None,
        timeout: float | None = _UNSET,
    ) -> int:
        """Deletes documents by id and/or metadata filter; returns how many were deleted.
        Durable when it returns."""
        request = _wire.delete_request(ids, filter, self._config.collection)
        return self._call("DeleteDocuments", request, self._timeout(timeout)).deleted_count

    def index_stats(self, *, timeout: float | None = _UNSET) -> IndexStats:
        """Counts of documents, chunks and vectors in the index."""
        response = self._call("GetIndexStats", search_pb2.GetIndexStatsRequest(collection=self._config.collection), self._timeout(timeout))
        return _wire.index_stats(response)

    # -- CollectionService ---------------------------------------------------------------

    def collection(self, name: str) -> "Client":
        """This client acting on collection ``name``: ingest, jobs, documents, search
        and statistics go there (``""`` or ``"default"``: the default collection).
        The two share their channels: close only one of them."""
        twin = copy.copy(self)
        twin._config = dataclasses.replace(self._config, collection=name)
        return twin

    def create_collection(
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
        response = self._call("CreateCollection", request, self._timeout(timeout), idempotent=False)
        return _wire.collection(response.collection)

    def list_collections(self, *, timeout: float | None = _UNSET) -> list[Collection]:
        """The collections the key reaches, by name (the default one is not listed)."""
        request = collections_pb2.ListCollectionsRequest()
        response = self._call("ListCollections", request, self._timeout(timeout))
        return [_wire.collection(c) for c in response.collections]

    def delete_collection(self, name: str, *, timeout: float | None = _UNSET) -> int:
        """Deletes a collection with its documents, jobs and vectors (an admin key
        where the server has keys); returns how many documents it held."""
        request = collections_pb2.DeleteCollectionRequest(name=name)
        response = self._call("DeleteCollection", request, self._timeout(timeout), idempotent=False)
        return response.deleted_documents


__all__ = ["Client"]
