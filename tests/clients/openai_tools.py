"""A tool-calling round trip through the official OpenAI Python client: the model calls a
function (named in `tool_choice`, so no greedy near-tie decides whether it calls), the tool's result
goes back in a `tool` message, the model answers (`tool_choice: "none"`); non-streaming and
streaming (`delta.tool_calls` fragments joined by index). The follow-up conversation is the one
`benches/reference/render_tool_prompt.py` renders, so its prompt-token count can be checked against
that rendering. Plus forced calls: `required` with two tools and a question that needs both, and a
named function.

Usage: python3 openai_tools.py BASE_URL MODEL
Prints one JSON line with what it saw; exits non-zero on any client error.
"""
import json
import sys

import openai

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=600)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "the city's name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
# The tool of the reference rendering (benches/reference/render_tool_prompt.py), and its result.
WEATHER_REF = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
QUESTION = [{"role": "user", "content": "What is the weather in Paris right now?"}]
RESULT = '{"temperature": 18}'
out = {}


def follow_up(call_id, name, arguments):
    return QUESTION + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": call_id, "content": RESULT},
    ]


# Non-streaming round trip.
r = client.chat.completions.create(model=model, messages=QUESTION, tools=[WEATHER_REF],
                                   tool_choice=NAMED, max_tokens=120, temperature=0)
c = r.choices[0]
calls = c.message.tool_calls or []
out["call"] = {"finish": c.finish_reason, "n": len(calls),
               "name": calls[0].function.name if calls else None,
               "arguments": json.loads(calls[0].function.arguments) if calls else None,
               "id": calls[0].id if calls else None}
answer_to = follow_up(calls[0].id, calls[0].function.name, calls[0].function.arguments)
r = client.chat.completions.create(model=model, messages=answer_to, tools=[WEATHER_REF],
                                   tool_choice="none", max_tokens=80, temperature=0)
out["answer"] = {"finish": r.choices[0].finish_reason, "text": r.choices[0].message.content,
                 "calls": len(r.choices[0].message.tool_calls or [])}
# The follow-up with the tools shown (`auto`): the prompt the reference rendering holds.
r = client.chat.completions.create(model=model, messages=answer_to, tools=[WEATHER_REF],
                                   max_tokens=1, temperature=0)
out["follow_up_prompt_tokens"] = r.usage.prompt_tokens

# Streaming round trip: fragments joined by index.
acc, finish, content = {}, None, ""
for chunk in client.chat.completions.create(model=model, messages=QUESTION, tools=[WEATHER_REF],
                                            tool_choice=NAMED, max_tokens=120, temperature=0,
                                            stream=True):
    for ch in chunk.choices:
        for tc in ch.delta.tool_calls or []:
            a = acc.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            a["id"] += tc.id or ""
            a["name"] += (tc.function.name or "") if tc.function else ""
            a["arguments"] += (tc.function.arguments or "") if tc.function else ""
        content += ch.delta.content or ""
        finish = ch.finish_reason or finish
first = acc.get(0, {})
out["stream_call"] = {"finish": finish, "n": len(acc), "name": first.get("name"),
                      "arguments": json.loads(first["arguments"]) if first.get("arguments") else None,
                      "content": content}
text, finish = "", None
for chunk in client.chat.completions.create(
        model=model, messages=follow_up(first["id"], first["name"], first["arguments"]),
        tools=[WEATHER_REF], tool_choice="none", max_tokens=80, temperature=0, stream=True):
    for ch in chunk.choices:
        text += ch.delta.content or ""
        finish = ch.finish_reason or finish
out["stream_answer"] = {"finish": finish, "text": text}

# Forced: any tool, several calls allowed; then one named function.
r = client.chat.completions.create(
    model=model, tools=[WEATHER, TIME], tool_choice="required", max_tokens=150, temperature=0,
    messages=[{"role": "user", "content": "What are the weather and the local time in Tokyo?"}])
out["required"] = [{"name": t.function.name, "arguments": json.loads(t.function.arguments)}
                   for t in r.choices[0].message.tool_calls or []]
r = client.chat.completions.create(
    model=model, tools=[WEATHER, TIME], max_tokens=80, temperature=0,
    tool_choice={"type": "function", "function": {"name": "get_time"}},
    messages=[{"role": "user", "content": "Tell me about Rome."}])
out["named"] = [{"name": t.function.name, "arguments": json.loads(t.function.arguments)}
                for t in r.choices[0].message.tool_calls or []]
out["named_finish"] = r.choices[0].finish_reason

print(json.dumps(out))
