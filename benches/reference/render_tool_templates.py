"""Renders tool conversations with the chat templates in tests/data/templates (copied from
llama.cpp's models/templates, as the models' Hugging Face repositories ship them) through Python's
jinja2, set up as Hugging Face transformers renders chat templates (trim_blocks, lstrip_blocks,
`tojson` as json.dumps with ensure_ascii=False, `raise_exception`; no `strftime_now`, so the Llama
templates' fixed date is used and the renders are reproducible). tests/tool_formats.rs holds
Cinder's renders to these, and parses each template's own rendering of a past call back into it.

Usage: python3 benches/reference/render_tool_templates.py > tests/data/templates/renders.json
"""
import json
import pathlib
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = pathlib.Path(__file__).resolve().parents[2] / "tests/data/templates"
BOS, EOS = "<|im_start|>", "<|im_end|>"  # SmolLM2's, the tokenizer the test renders with


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.filters["tojson"] = lambda x, indent=None, **kw: json.dumps(x, ensure_ascii=False, indent=indent)
env.globals["raise_exception"] = raise_exception

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "What is the weather in Paris right now?"}
# a 9-character id: Mistral's templates refuse others
CALL = {"role": "assistant", "content": "", "tool_calls": [{"id": "a1b2c3d4e", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
RESULT = {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather",
          "content": "{\"temperature\": 18}"}

CASES = {
    # the conversation up to the answer, and with the answer (the model's call) rendered
    "prefix": dict(messages=[SYSTEM, USER], tools=TOOLS, add_generation_prompt=True),
    "with_call": dict(messages=[SYSTEM, USER, CALL], tools=TOOLS, add_generation_prompt=False),
    "round_trip": dict(messages=[SYSTEM, USER, CALL, RESULT], tools=TOOLS,
                       add_generation_prompt=True),
    "plain": dict(messages=[USER], add_generation_prompt=True),
    "thinking_off": dict(messages=[USER], add_generation_prompt=True, enable_thinking=False),
    "thinking_on": dict(messages=[USER], add_generation_prompt=True, enable_thinking=True),
}

out = {"bos_token": BOS, "eos_token": EOS, "templates": {}}
for path in sorted(HERE.glob("*.jinja")):
    t = env.from_string(path.read_text())
    renders = {}
    for name, kw in CASES.items():
        try:
            renders[name] = t.render(bos_token=BOS, eos_token=EOS, **kw)
        except jinja2.exceptions.TemplateError as e:
            renders[name] = {"error": str(e)}
    out["templates"][path.name] = renders
json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
sys.stdout.write("\n")
