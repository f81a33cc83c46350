#!/usr/bin/env python3
"""Time to first token per turn of a multi-turn chat against an OpenAI-compatible server.

Each turn sends the whole conversation so far (every earlier question and answer) plus a new
question, streamed, greedy, and times the first content chunk from the moment the request is sent.
With the server's prefix cache, turn N prefills only its new tokens; without it (`cinder serve
--no-prefix-cache`), the whole conversation again. Prints one JSON line per turn (turn,
prompt_tokens, cached_tokens, ttft_ms) and a summary line (turn N's TTFT over turn 1's, median of
the repetitions).

Usage (the official `openai` client on PYTHONPATH):
    cinder serve smollm2-135m --port 8080 --no-grpc &
    python3 benches/multi_turn_ttft.py --base-url http://127.0.0.1:8080/v1 --model smollm2-135m
"""

import argparse
import json
import statistics
import time

from openai import OpenAI

QUESTIONS = [
    "Name a planet of the solar system.",
    "How far is it from the Sun?",
    "What is its largest moon?",
    "Who discovered that moon?",
    "In which year?",
    "What instrument was used?",
    "Name another moon of the same planet.",
    "Which of the two is larger?",
    "Could a spacecraft land there?",
    "Summarize our conversation in one sentence.",
]


def conversation(client, model, max_tokens):
    """One conversation of len(QUESTIONS) turns: [(prompt_tokens, cached_tokens, ttft_ms)]."""
    messages = [{"role": "system", "content": "You are a helpful assistant. Answer briefly."}]
    rows = []
    for q in QUESTIONS:
        messages.append({"role": "user", "content": q})
        t0 = time.perf_counter()
        first = None
        text = []
        usage = None
        stream = client.chat.completions.create(
            model=model, messages=messages, max_tokens=max_tokens, temperature=0.0,
            stream=True, stream_options={"include_usage": True})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                if first is None:
                    first = time.perf_counter()
                text.append(chunk.choices[0].delta.content)
            if chunk.usage is not None:
                usage = chunk.usage
        if first is None:
            first = time.perf_counter()
        cached = 0
        if usage is not None and usage.prompt_tokens_details is not None:
            cached = usage.prompt_tokens_details.cached_tokens or 0
        rows.append((usage.prompt_tokens if usage else None, cached, (first - t0) * 1000.0))
        messages.append({"role": "assistant", "content": "".join(text)})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--model", required=True)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3, help="conversations, the first a warm-up")
    a = ap.parse_args()
    client = OpenAI(base_url=a.base_url, api_key="none")
    runs = [conversation(client, a.model, a.max_tokens) for _ in range(a.reps)]
    # the first conversation warms the server up (and fills the prefix cache with its system
    # prompt); the others each start from a system prompt already cached
    measured = runs[1:] or runs
    for turn in range(len(QUESTIONS)):
        ttfts = [r[turn][2] for r in measured]
        prompt, cached, _ = measured[-1][turn]
        print(json.dumps({"turn": turn + 1, "prompt_tokens": prompt, "cached_tokens": cached,
                          "ttft_ms": round(statistics.median(ttfts), 1)}))
    first = statistics.median(r[0][2] for r in measured)
    last = statistics.median(r[-1][2] for r in measured)
    print(json.dumps({"turns": len(QUESTIONS), "ttft_first_ms": round(first, 1),
                      "ttft_last_ms": round(last, 1), "last_over_first": round(last / first, 2)}))


if __name__ == "__main__":
    main()
