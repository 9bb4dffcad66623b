"""Embeds texts through the official OpenAI Python SDK against embedwire's
/v1/embeddings, once as floats and once as base64 (the SDK's default, which it
decodes itself), and prints both as JSON for the Rust test to compare with gRPC."""

import json
import sys

import openai

base_url, *texts = sys.argv[1:]
client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
as_floats = client.embeddings.create(model="all-MiniLM-L6-v2", input=texts, encoding_format="float")
as_default = client.embeddings.create(model="all-MiniLM-L6-v2", input=texts)  # the SDK asks for base64
try:
    client.embeddings.create(model="all-MiniLM-L6-v2", input="")
    error = None
except openai.BadRequestError as exc:
    error = {"status": exc.status_code, "message": exc.message}
print(json.dumps({
    "floats": [item.embedding for item in as_floats.data],
    "default": [item.embedding for item in as_default.data],
    "model": as_floats.model,
    "prompt_tokens": as_floats.usage.prompt_tokens,
    "error": error,
}))
