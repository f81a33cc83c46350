"""Drives `cinder serve --embedding-model` with the official OpenAI Python client (unchanged).

Usage: python3 openai_embeddings.py BASE_URL MODEL TEXT...
Prints one JSON line with what it saw; exits non-zero on any client error.
"""
import json
import sys

import openai

base, model, texts = sys.argv[1], sys.argv[2], sys.argv[3:]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
out = {}

# The client's default: it asks for base64 and decodes it itself.
r = client.embeddings.create(model=model, input=texts)
out["default"] = [d.embedding for d in sorted(r.data, key=lambda d: d.index)]
out["model"] = r.model
out["prompt_tokens"] = r.usage.prompt_tokens

r = client.embeddings.create(model=model, input=texts, encoding_format="float")
out["float"] = [d.embedding for d in sorted(r.data, key=lambda d: d.index)]

try:
    client.embeddings.create(model="text-embedding-3-small", input="x")
    out["not_found"] = None
except openai.NotFoundError as e:
    out["not_found"] = e.status_code

try:
    client.embeddings.create(model=model, input="")
    out["bad_request"] = None
except openai.BadRequestError as e:
    out["bad_request"] = e.status_code

print(json.dumps(out))
