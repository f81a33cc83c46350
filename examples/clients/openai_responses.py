"""Cinder's Responses API through the official OpenAI Python client: a response, a follow-up by
`previous_response_id`, a streamed response and a function-call round trip. Start a server first:

    cinder serve qwen2.5-coder-1.5b --no-grpc
    pip install openai
    python3 examples/clients/openai_responses.py http://127.0.0.1:8080 qwen2.5-coder-1.5b
"""
import json
import sys

import openai

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused")

r = client.responses.create(model=model, instructions="Answer in one sentence.",
                            input="What is the capital of France?", max_output_tokens=64)
print(r.output_text)
r2 = client.responses.create(model=model, previous_response_id=r.id,
                             input="And of Germany?", max_output_tokens=64)
print(r2.output_text, r2.usage.input_tokens)

for event in client.responses.create(model=model, input="Name three rivers.", stream=True):
    if event.type == "response.output_text.delta":
        print(event.delta, end="", flush=True)
print()

weather = {"type": "function", "name": "get_weather", "description": "The current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
# Greedy, so the model's choice to call is reproducible; with "auto" it may also answer in text.
r = client.responses.create(model=model, tools=[weather], input="What is the weather in Oslo?",
                            temperature=0)
call = next((i for i in r.output if i.type == "function_call"), None)
if call is None:
    sys.exit(f"the model answered without calling: {r.output_text}")
print(call.name, json.loads(call.arguments))
answer = client.responses.create(model=model, previous_response_id=r.id, tools=[weather],
                                 tool_choice="none", temperature=0,
                                 input=[{"type": "function_call_output", "call_id": call.call_id,
                                         "output": '{"temperature_c": 7, "sky": "cloudy"}'}])
print(answer.output_text)
