"""Cinder's Messages API through the official Anthropic Python client: a question, the same
streamed, and a tool-use round trip. Start a server first:

    cinder serve qwen2.5-coder-1.5b --no-grpc
    pip install anthropic
    python3 examples/clients/anthropic_messages.py http://127.0.0.1:8080 qwen2.5-coder-1.5b
"""
import sys

import anthropic

base, model = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=base, api_key="unused")

m = client.messages.create(model=model, max_tokens=64, system="Answer in one sentence.",
                           messages=[{"role": "user", "content": "What is the capital of France?"}])
print(m.content[0].text, m.stop_reason, m.usage.input_tokens, m.usage.output_tokens)

with client.messages.stream(model=model, max_tokens=64,
                            messages=[{"role": "user", "content": "Name three rivers."}]) as s:
    for text in s.text_stream:
        print(text, end="", flush=True)
print()

weather = {"name": "get_weather", "description": "The current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
ask = [{"role": "user", "content": "What is the weather in Oslo?"}]
# Greedy (the 2.x client sends `temperature` only in the body), so the model's choice to call is
# reproducible; with the default "auto" it may also answer in text.
m = client.messages.create(model=model, max_tokens=128, tools=[weather], messages=ask,
                           extra_body={"temperature": 0})
call = next((b for b in m.content if b.type == "tool_use"), None)
if call is None:
    sys.exit(f"the model answered without calling: {m.content}")
print(m.stop_reason, call.name, call.input)
# The answer from the tool's result (tool_choice none: text, not another call).
answer = client.messages.create(model=model, max_tokens=128, tools=[weather],
                                tool_choice={"type": "none"}, extra_body={"temperature": 0},
                                messages=ask + [
    {"role": "assistant", "content": m.content},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                  "content": '{"temperature_c": 7, "sky": "cloudy"}'}]},
])
print("".join(b.text for b in answer.content if b.type == "text"))
