"""Drives `cinder serve` with the official OpenAI Python client (no changes to the client).

Usage: python3 openai_python.py BASE_URL MODEL
Prints one JSON line with what it saw; exits non-zero on any client error.
"""
import json
import sys

import openai

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
out = {}

r = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "What is the capital of Italy?"}],
    max_tokens=16,
    temperature=0,
)
out["chat_text"] = r.choices[0].message.content
out["chat_finish"] = r.choices[0].finish_reason
out["chat_usage"] = r.usage.completion_tokens

stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "What is the capital of Italy?"}],
    max_tokens=16,
    temperature=0,
    stream=True,
    stream_options={"include_usage": True},
)
text, finish, usage = "", None, None
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage.completion_tokens
    for c in chunk.choices:
        if c.delta.content:
            text += c.delta.content
        if c.finish_reason:
            finish = c.finish_reason
out["stream_text"], out["stream_finish"], out["stream_usage"] = text, finish, usage

c = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0)
out["completion_text"] = c.choices[0].text

out["models"] = [m.id for m in client.models.list().data]

try:
    client.completions.create(model="no-such-model", prompt="x", max_tokens=2)
    out["not_found"] = None
except openai.NotFoundError as e:
    out["not_found"] = e.status_code

try:
    client.completions.create(model=model, prompt="x", max_tokens=-1)
    out["bad_request"] = None
except openai.BadRequestError as e:
    out["bad_request"] = e.status_code

print(json.dumps(out))
