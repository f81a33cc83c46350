"""The Responses API through the official OpenAI Python client: a response (instructions, greedy),
the same streamed (raw events, and the client's `responses.stream` helper, which checks the event
order as it assembles the response), a `previous_response_id` follow-up and the same conversation
sent as items, retrieve and delete, `store: false`, a forced function call and its round trip
(whole and streamed), a JSON-schema answer, and the errors of bad requests.

Usage: python3 openai_responses.py BASE_URL MODEL
Prints one JSON line with what it saw; exits non-zero on an unexpected client error.
"""
import json
import sys

import openai

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=600)

INSTRUCTIONS = "You are a helpful assistant. Answer in one sentence."
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
out = {}


def status_error(fn):
    try:
        fn()
        return None
    except openai.APIStatusError as e:
        err = (e.body or {}) if isinstance(e.body, dict) else {}
        err = err.get("error", err)
        return {"status": e.status_code, "class": type(e).__name__,
                "message": err.get("message"), "param": err.get("param")}


# A response.
r1 = client.responses.create(model=model, instructions=INSTRUCTIONS, max_output_tokens=24,
                             temperature=0, input="What is the capital of France?")
out["first"] = {"id": r1.id, "object": r1.object, "status": r1.status, "text": r1.output_text,
                "items": [i.type for i in r1.output], "usage": r1.usage.model_dump()}

# Streamed: the raw events, and the client's helper.
events, deltas, final = [], [], None
for e in client.responses.create(model=model, instructions=INSTRUCTIONS, max_output_tokens=24,
                                 temperature=0, input="What is the capital of France?",
                                 stream=True, store=False):
    events.append(e.type)
    if e.type == "response.output_text.delta":
        deltas.append(e.delta)
    if e.type in ("response.completed", "response.incomplete"):
        final = e.response
with client.responses.stream(model=model, instructions=INSTRUCTIONS, max_output_tokens=24,
                             temperature=0, input="What is the capital of France?",
                             store=False) as s:
    helper = s.get_final_response()
seqs = []
out["stream"] = {"events": events, "joined": "".join(deltas),
                 "final": final.output_text if final else None,
                 "helper": helper.output_text, "helper_status": helper.status}

# A follow-up by previous_response_id, and the same conversation sent whole.
r2 = client.responses.create(model=model, previous_response_id=r1.id, max_output_tokens=16,
                             temperature=0, instructions=INSTRUCTIONS,
                             input="And the capital of Germany?")
whole = client.responses.create(model=model, max_output_tokens=16, temperature=0,
                                instructions=INSTRUCTIONS, store=False, input=[
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": [{"type": "output_text", "text": r1.output_text}]},
    {"role": "user", "content": "And the capital of Germany?"},
])
out["follow_up"] = {"previous": r2.previous_response_id, "input_tokens": r2.usage.input_tokens,
                    "whole_input_tokens": whole.usage.input_tokens, "text": r2.output_text,
                    "whole_text": whole.output_text}

# Retrieve, delete, and what is gone.
got = client.responses.retrieve(r1.id)
out["retrieve"] = {"id": got.id, "text": got.output_text}
d = client.responses.delete(r1.id)
out["deleted"] = d is None or getattr(d, "deleted", True)
out["after_delete"] = status_error(lambda: client.responses.retrieve(r1.id))
out["follow_deleted"] = status_error(lambda: client.responses.create(
    model=model, previous_response_id=r1.id, input="Hi", max_output_tokens=4))
unstored = client.responses.create(model=model, input="Hi", max_output_tokens=4, store=False)
out["unstored"] = status_error(lambda: client.responses.retrieve(unstored.id))

# A function call round trip, whole and streamed.
for streamed in (False, True):
    kw = dict(model=model, max_output_tokens=60, temperature=0, tools=[WEATHER],
              tool_choice={"type": "function", "name": "get_weather"},
              input="What is the weather in Oslo?")
    arg_deltas = 0
    if streamed:
        r, kinds = None, []
        for e in client.responses.create(stream=True, **kw):
            kinds.append(e.type)
            if e.type == "response.function_call_arguments.delta":
                arg_deltas += 1
            if e.type == "response.completed":
                r = e.response
    else:
        r = client.responses.create(**kw)
    calls = [i for i in r.output if i.type == "function_call"]
    key = "stream_call" if streamed else "call"
    out[key] = {"n": len(calls), "name": calls[0].name if calls else None,
                "arguments": json.loads(calls[0].arguments) if calls else None,
                "call_id": calls[0].call_id if calls else None, "arg_deltas": arg_deltas}
    if calls:
        a = client.responses.create(model=model, previous_response_id=r.id, temperature=0,
                                    max_output_tokens=30, tools=[WEATHER], tool_choice="none",
                                    input=[{"type": "function_call_output",
                                            "call_id": calls[0].call_id,
                                            "output": '{"temperature_c": 7, "sky": "cloudy"}'}])
        out[key + "_answer"] = {"text": a.output_text, "items": [i.type for i in a.output],
                                "status": a.status}

# A JSON-schema answer.
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                         "country": {"type": "string", "maxLength": 20}},
        "required": ["city", "country"], "additionalProperties": False}
j = client.responses.create(model=model, max_output_tokens=60, temperature=0,
                            input="What is the capital of France?",
                            text={"format": {"type": "json_schema", "name": "city",
                                             "schema": CITY, "strict": True}})
out["json"] = j.output_text

# Bad requests.
CYCLE = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}
out["errors"] = {
    "image": status_error(lambda: client.responses.create(model=model, input=[
        {"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}])),
    "bad_model": status_error(lambda: client.responses.create(model="nope", input="Hi")),
    "unknown_previous": status_error(lambda: client.responses.create(
        model=model, input="Hi", previous_response_id="resp_nope")),
    "cycle": status_error(lambda: client.responses.create(model=model, input="Hi", text={
        "format": {"type": "json_schema", "name": "c", "schema": CYCLE}})),
    "unknown_tool": status_error(lambda: client.responses.create(
        model=model, input="Hi", tools=[WEATHER],
        tool_choice={"type": "function", "name": "nope"})),
    "web_search": status_error(lambda: client.responses.create(
        model=model, input="Hi", tools=[{"type": "web_search"}])),
    "max_output_tokens": status_error(lambda: client.responses.create(
        model=model, input="Hi", max_output_tokens=0)),
}
print(json.dumps(out))
