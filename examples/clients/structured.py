"""Structured output and log-probabilities with the official OpenAI client against `cinder serve`.

    cinder serve smollm2-135m &
    pip install openai
    python3 examples/clients/structured.py http://127.0.0.1:8080
"""
import sys
from typing import List, Literal

import openai
from pydantic import BaseModel, Field

base = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"
client = openai.OpenAI(base_url=base + "/v1", api_key="unused")


class Book(BaseModel):
    title: str = Field(max_length=40)
    author: str = Field(max_length=40)
    year: int = Field(ge=1450, le=2030)
    genres: List[Literal["fiction", "history", "science", "poetry"]] = Field(max_length=3)


# The schema travels as response_format (strict); the reply is parsed and validated.
r = client.chat.completions.parse(
    model="smollm2-135m",
    messages=[{"role": "user", "content": "Describe a classic novel."}],
    response_format=Book,
    max_tokens=200,
)
print(r.choices[0].message.parsed)

# Log-probabilities of each token, with the 3 most likely alternatives.
r = client.chat.completions.create(
    model="smollm2-135m",
    messages=[{"role": "user", "content": "What is the capital of Italy?"}],
    max_tokens=8,
    temperature=0,
    logprobs=True,
    top_logprobs=3,
)
for t in r.choices[0].logprobs.content:
    print(f"{t.token!r:>12} {t.logprob:8.4f}  " + "  ".join(f"{a.token!r} {a.logprob:.3f}" for a in t.top_logprobs))
