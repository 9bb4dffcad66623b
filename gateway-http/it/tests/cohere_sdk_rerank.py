"""Reranks through the official Cohere Python SDK against embedwire's /v1/rerank
(cohere.Client) and /v2/rerank (cohere.ClientV2), and prints what the SDK parsed
as JSON for the Rust test to compare with gRPC's Rerank, field by field. An empty
document is sent once per client too, to check that the SDK raises its
BadRequestError with the server's message.

Usage: cohere_sdk_rerank.py BASE_URL QUERY DOCUMENT...
"""

import json
import sys

import cohere

base_url, query, *documents = sys.argv[1:]
v1 = cohere.Client(api_key="unused", base_url=base_url, max_retries=0, timeout=60)
v2 = cohere.ClientV2(api_key="unused", base_url=base_url, max_retries=0, timeout=60)


def results(response, with_documents):
    parsed = []
    for result in response.results:
        item = {"index": result.index, "relevance_score": result.relevance_score}
        if with_documents:
            item["document"] = None if result.document is None else {"text": result.document.text}
        parsed.append(item)
    return parsed


def meta(response):
    if response.meta is None:
        return None
    return {
        "api_version": response.meta.api_version.version if response.meta.api_version else None,
        "input_tokens": response.meta.tokens.input_tokens if response.meta.tokens else None,
        "output_tokens": response.meta.tokens.output_tokens if response.meta.tokens else None,
    }


def bad_request(call):
    try:
        call()
    except cohere.errors.BadRequestError as exc:
        return {"status": exc.status_code, "body": exc.body}
    return None


# v1 with documents as {"text"} objects, top_n and return_documents; the model name is
# Cohere's, which the server accepts and answers with its own.
with_docs = v1.rerank(
    model="rerank-v3.5",
    query=query,
    documents=[{"text": text} for text in documents],
    top_n=2,
    return_documents=True,
)
# v1 with plain strings and the SDK's defaults (no documents back, every result).
plain = v1.rerank(query=query, documents=documents)
# v2: strings, top_n, max_tokens_per_doc.
v2_all = v2.rerank(model="rerank-v3.5", query=query, documents=documents)
v2_top = v2.rerank(model="rerank-v3.5", query=query, documents=documents, top_n=1, max_tokens_per_doc=4096)

print(json.dumps({
    "v1_with_documents": {
        "id": with_docs.id,
        "results": results(with_docs, True),
        "meta": meta(with_docs),
        # Fields outside Cohere's schema that the SDK keeps (pydantic extra="allow").
        "model": getattr(with_docs, "model", None),
        "usage": getattr(with_docs, "usage", None),
    },
    "v1_plain": {"id": plain.id, "results": results(plain, True), "meta": meta(plain)},
    "v2_all": {"id": v2_all.id, "results": results(v2_all, False), "meta": meta(v2_all)},
    "v2_top": {"id": v2_top.id, "results": results(v2_top, False), "meta": meta(v2_top)},
    "v1_error": bad_request(lambda: v1.rerank(query=query, documents=[documents[0], ""])),
    "v2_error": bad_request(lambda: v2.rerank(model="m", query=query, documents=[documents[0], ""])),
}))
