"""Ingest, jobs, documents and search round trips, sync and async."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from embedwire import AsyncClient, Client, Document, Filter, JobStatus, NotFoundError
from server_process import ServerProcess


def unique(prefix: str) -> str:
    """An id no other test of the shared server uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_ingest_wait_search_get_delete(pseudo_server: ServerProcess) -> None:
    tag = unique("tag")
    docs = [
        Document(id=unique("cat"), text="the cat sat on the mat", metadata={"tag": tag, "kind": "pet"}),
        Document(id=unique("car"), text="engines and gearboxes", metadata={"tag": tag, "kind": "machine"}),
        {"text": "a document whose id the server assigns", "metadata": {"tag": tag}},
    ]
    with Client(pseudo_server.address) as client:
        ingested = client.ingest(docs)
        assert ingested.document_ids[:2] == (docs[0].id, docs[1].id) and ingested.document_ids[2]
        job = client.wait_for_job(ingested.job.job_id, timeout=30)
        assert job.status == JobStatus.COMPLETED and job.done
        assert (job.total_documents, job.processed_documents, job.failed_documents) == (3, 3, 0)
        assert client.get_job(job.job_id).status == JobStatus.COMPLETED

        # The pseudo model's vectors carry no meaning, but a text is its own best match.
        hits = client.search("the cat sat on the mat", top_k=3, filter={"tag": tag})
        assert [h.document_id for h in hits][0] == docs[0].id
        assert hits[0].text == "the cat sat on the mat" and hits[0].metadata["kind"] == "pet"
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
        assert len(hits) == 3 and all(h.metadata["tag"] == tag for h in hits)

        by_vector = client.search(client.embed(["engines and gearboxes"])[0], top_k=1, filter={"tag": tag})
        assert by_vector[0].document_id == docs[1].id
        both = client.search(["engines and gearboxes", "the cat sat on the mat"], top_k=1, filter={"tag": tag})
        assert [r[0].document_id for r in both] == [docs[1].id, docs[0].id]
        machines = client.search(
            "the cat sat on the mat", filter=Filter(must={"tag": tag}, must_not={"kind": ["pet"]}), include_vectors=True
        )
        assert docs[0].id not in {h.document_id for h in machines}
        assert machines[0].vector is not None and machines[0].vector.shape == (384,)

        found = client.get_documents([docs[0].id, "missing-id"])
        assert [d.id for d in found.documents] == [docs[0].id] and found.missing_ids == ("missing-id",)
        stored = found.documents[0]
        span = stored.chunks[0]
        assert stored.text[span.start_char : span.end_char] == "the cat sat on the mat"

        assert client.delete_documents([docs[0].id]) == 1
        assert client.delete_documents(filter={"tag": tag}) == 2
        assert client.search("the cat sat on the mat", filter={"tag": tag}) == []


def test_ingest_stream_from_a_generator(pseudo_server: ServerProcess) -> None:
    tag = unique("stream")
    count = 1234

    def documents():  # type: ignore[no-untyped-def]
        for i in range(count):
            yield Document(id=f"{tag}-{i}", text=f"streamed document number {i}", metadata={"tag": tag})

    with Client(pseudo_server.address) as client:
        result = client.ingest_stream(documents(), documents_per_message=100)
        assert result.received_documents == count
        job = client.wait_for_job(result.job.job_id, timeout=60)
        assert job.status == JobStatus.COMPLETED and job.processed_documents == count
        hits = client.search("streamed document number 77", top_k=1, filter={"tag": tag})
        assert hits[0].document_id == f"{tag}-77"
        assert client.delete_documents(filter={"tag": tag}) == count


def test_async_round_trip(pseudo_server: ServerProcess) -> None:
    tag = unique("async")

    async def documents():  # type: ignore[no-untyped-def]
        for i in range(10):
            yield {"id": f"{tag}-{i}", "text": f"async document {i}", "metadata": {"tag": tag}}

    async def run() -> None:
        async with AsyncClient(pseudo_server.address) as client:
            ingested = await client.ingest([Document(id=f"{tag}-x", text="one more", metadata={"tag": tag})])
            streamed = await client.ingest_stream(documents(), documents_per_message=3)
            for job_id in (ingested.job.job_id, streamed.job.job_id):
                assert (await client.wait_for_job(job_id, timeout=30)).status == JobStatus.COMPLETED
            hits = await client.search("async document 3", top_k=2, filter={"tag": tag})
            assert hits[0].document_id == f"{tag}-3"
            found = await client.get_documents([f"{tag}-x"])
            assert found.documents[0].text == "one more"
            stats = await client.index_stats()
            assert stats.document_count >= 11
            assert await client.delete_documents(filter={"tag": tag}) == 11

    asyncio.run(run())


def test_keyword_and_hybrid_modes(pseudo_server: ServerProcess) -> None:
    from embedwire.errors import InvalidArgumentError

    tag = unique("modes")
    part = f"QZ-{uuid.uuid4().hex[:6]}"
    docs = [
        Document(id=f"{tag}-part", text=f"order gasket {part} for the intake flange", metadata={"tag": tag}),
        Document(id=f"{tag}-pump", text="the pump moves water with an impeller", metadata={"tag": tag}),
    ]
    with Client(pseudo_server.address) as client:
        client.wait_for_job(client.ingest(docs).job.job_id, timeout=30)
        keyword = client.search(part, mode="keyword", filter={"tag": tag})
        assert [h.document_id for h in keyword] == [f"{tag}-part"]
        assert keyword[0].keyword_score == pytest.approx(keyword[0].score) and keyword[0].vector_score is None
        for fusion in ("rrf", "relative_score"):
            hybrid = client.search(part, mode="hybrid", alpha=0.3, fusion=fusion, filter={"tag": tag})
            assert hybrid[0].document_id == f"{tag}-part", fusion
            assert hybrid[0].keyword_score is not None and hybrid[0].vector_score is not None
        plain = client.search(part, filter={"tag": tag})
        assert all(h.keyword_score is None and h.vector_score == pytest.approx(h.score) for h in plain)
        with pytest.raises(InvalidArgumentError, match="alpha"):
            client.search(part, mode="hybrid", alpha=2.0)
        with pytest.raises(ValueError, match="mode"):
            client.search(part, mode="fuzzy")
        with pytest.raises(ValueError, match="fusion"):
            client.search(part, mode="hybrid", fusion="max")


def test_grouped_by_document_with_highlights(pseudo_server: ServerProcess) -> None:
    tag = unique("grouped")
    word = f"zq{uuid.uuid4().hex[:6]}"
    # A long document (several chunks, each naming the word) and two short ones.
    long_text = " ".join(f"Step {i}: the {word} valve is checked again." for i in range(120))
    docs = [
        Document(id=f"{tag}-long", text=long_text, metadata={"tag": tag}),
        Document(id=f"{tag}-a", text=f"A short note on the {word} valve.", metadata={"tag": tag}),
        Document(id=f"{tag}-b", text=f"Another {word} remark.", metadata={"tag": tag}),
    ]
    with Client(pseudo_server.address) as client:
        client.wait_for_job(client.ingest(docs).job.job_id, timeout=30)
        chunks = client.search(word, mode="keyword", top_k=10, filter={"tag": tag})
        assert sum(h.document_id == f"{tag}-long" for h in chunks) > 1, [h.document_id for h in chunks]
        grouped = client.search(word, mode="keyword", top_k=3, group_by="document", filter={"tag": tag})
        assert sorted(h.document_id for h in grouped) == sorted(d.id for d in docs)
        two = client.search(
            word, mode="hybrid", top_k=1, group_by="document", group_size=2, highlight=True, filter={"tag": tag}
        )
        assert len({h.document_id for h in two}) == 1 and len(two) <= 2
        for hit in two:
            assert hit.highlights, hit
            for start, end in hit.highlights:
                assert hit.text[start - hit.chunk.start_char : end - hit.chunk.start_char].lower() == word
        with pytest.raises(ValueError, match="group_by"):
            client.search(word, group_by="page")


def test_collections_sync_and_async(pseudo_server: ServerProcess) -> None:
    name = "py_" + uuid.uuid4().hex[:8]
    with Client(pseudo_server.address) as client:
        created = client.create_collection(name, chunk_tokens=48, index="hnsw")
        assert (created.name, created.chunk_tokens, created.index) == (name, 48, "hnsw")
        assert name in [c.name for c in client.list_collections()]
        tenant = client.collection(name)
        ingested = tenant.ingest([Document(id="only-here", text="a document of one collection")])
        assert tenant.wait_for_job(ingested.job.job_id, timeout=30).status == JobStatus.COMPLETED
        assert tenant.index_stats().document_count == 1
        assert [h.document_id for h in tenant.search("a document of one collection")] == ["only-here"]
        # Not in the default collection: neither the document nor the job.
        assert not client.get_documents(["only-here"]).documents
        with pytest.raises(NotFoundError):
            client.get_job(ingested.job.job_id)

    async def run() -> None:
        async with AsyncClient(pseudo_server.address, collection=name) as tenant:
            assert (await tenant.index_stats()).document_count == 1
            streamed = await tenant.ingest_stream([Document(id="streamed", text="sent as a stream")])
            await tenant.wait_for_job(streamed.job.job_id, timeout=30)
            assert len((await tenant.get_documents(["only-here", "streamed"])).documents) == 2
            assert await tenant.delete_collection(name) == 2

    asyncio.run(run())
    with Client(pseudo_server.address) as client:
        assert name not in [c.name for c in client.list_collections()]
        with pytest.raises(ValueError, match="index"):
            client.create_collection("bad_index", index="ivf")
