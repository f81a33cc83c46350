"""The Messages API through the official Anthropic Python client: a conversation (system prompt,
greedy), the same conversation streamed (text deltas joined equal the final message), the token
count of the conversation, a stop sequence taken from the answer itself, a tool-use round trip
(`tool_use` forced by `tool_choice`, so no greedy near-tie decides whether the model calls; the
`tool_result` sent back; the answer) whole and streamed, and the errors of bad requests.

Usage: python3 anthropic_messages.py BASE_URL MODEL
Prints one JSON line with what it saw; exits non-zero on an unexpected client error.
"""
import json
import sys

import anthropic

base, model = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0, timeout=600)

SYSTEM = "You are a helpful assistant. Answer in one sentence."
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
# The client has no sampling arguments; Cinder reads Anthropic's `temperature` from the body.
GREEDY = {"temperature": 0}
out = {}


def blocks(message):
    return [b.model_dump() for b in message.content]


def text(message):
    return "".join(b.text for b in message.content if b.type == "text")


# A conversation.
m = client.messages.create(model=model, max_tokens=24, extra_body=GREEDY, system=SYSTEM,
                           messages=QUESTION)
out["chat"] = {"id": m.id, "type": m.type, "role": m.role, "stop_reason": m.stop_reason,
               "text": text(m), "usage": m.usage.model_dump()}

# The same, streamed: deltas joined equal the final message the client assembles.
with client.messages.stream(model=model, max_tokens=24, extra_body=GREEDY, system=SYSTEM,
                            messages=QUESTION) as stream:
    deltas = [t for t in stream.text_stream]
    final = stream.get_final_message()
events = []
with client.messages.stream(model=model, max_tokens=8, extra_body=GREEDY, messages=QUESTION) as s:
    for e in s:
        events.append(e.type)
out["stream"] = {"deltas": len(deltas), "joined": "".join(deltas), "final": text(final),
                 "stop_reason": final.stop_reason, "output_tokens": final.usage.output_tokens,
                 "events": events}

# The count of the conversation's prompt tokens.
out["count"] = client.messages.count_tokens(model=model, system=SYSTEM,
                                            messages=QUESTION).input_tokens

# A stop sequence: a word of the greedy answer ends the same request there.
words = [w for w in out["chat"]["text"].split() if len(w) >= 4]
if words:
    stop = words[len(words) // 2]
    m = client.messages.create(model=model, max_tokens=24, extra_body=GREEDY, system=SYSTEM,
                               messages=QUESTION, stop_sequences=[stop, "\u2603never"])
    out["stop"] = {"word": stop, "stop_reason": m.stop_reason, "stop_sequence": m.stop_sequence,
                   "text": text(m)}

# A tool-use round trip: forced call, the tool's result back, the answer.
ask = [{"role": "user", "content": "What is the weather in Oslo?"}]
for streamed in (False, True):
    kw = dict(model=model, max_tokens=60, extra_body=GREEDY, tools=[WEATHER],
              tool_choice={"type": "tool", "name": "get_weather"}, messages=ask)
    if streamed:
        with client.messages.stream(**kw) as s:
            m = s.get_final_message()
    else:
        m = client.messages.create(**kw)
    uses = [b for b in m.content if b.type == "tool_use"]
    key = "stream_tool" if streamed else "tool"
    out[key] = {"stop_reason": m.stop_reason, "n": len(uses),
                "name": uses[0].name if uses else None,
                "input": uses[0].input if uses else None,
                "id": uses[0].id if uses else None}
    if not uses:
        continue
    follow = ask + [
        {"role": "assistant", "content": blocks(m)},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                      "content": '{"temperature_c": 7, "sky": "cloudy"}'}]},
    ]
    a = client.messages.create(model=model, max_tokens=30, extra_body=GREEDY, tools=[WEATHER],
                               tool_choice={"type": "none"}, messages=follow)
    out[key + "_answer"] = {"stop_reason": a.stop_reason, "text": text(a),
                            "kinds": [b.type for b in a.content]}

# Structured output: `output_config.format` with a JSON schema.
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                         "country": {"type": "string", "maxLength": 20}},
        "required": ["city", "country"], "additionalProperties": False}
m = client.messages.create(model=model, max_tokens=60, extra_body=GREEDY, messages=QUESTION,
                           output_config={"format": {"type": "json_schema", "schema": CITY}})
out["json"] = {"text": text(m), "stop_reason": m.stop_reason}

# Bad requests: Anthropic's error shape through the client's exception types.
errors = {}
for name, kw in {
    "no_max_tokens": dict(model=model, messages=QUESTION),
    "bad_role": dict(model=model, max_tokens=5, messages=[{"role": "system", "content": "x"}]),
    "bad_model": dict(model="no-such-model", max_tokens=5, messages=QUESTION),
    "bad_temperature": dict(model=model, max_tokens=5, extra_body={"temperature": 1.5},
                            messages=QUESTION),
    "bad_schema": dict(model=model, max_tokens=5, messages=QUESTION, output_config={
        "format": {"type": "json_schema", "schema": {"$ref": "#/$defs/a",
                                                     "$defs": {"a": {"$ref": "#/$defs/a"}}}}}),
    "unknown_tool": dict(model=model, max_tokens=5, messages=QUESTION, tools=[WEATHER],
                         tool_choice={"type": "tool", "name": "nope"}),
}.items():
    try:
        if name == "no_max_tokens":
            # the client itself insists on max_tokens; send the raw request past it
            client.post("/v1/messages", body=kw, cast_to=object)
        else:
            client.messages.create(**kw)
        errors[name] = None
    except anthropic.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        errors[name] = {"status": e.status_code, "class": type(e).__name__,
                        "type": body.get("error", {}).get("type"),
                        "message": body.get("error", {}).get("message")}
out["errors"] = errors
print(json.dumps(out))
