"""Renders a tool conversation with a GGUF's chat template through Python's jinja2, with Hugging
Face's `tojson` (json.dumps, ensure_ascii=False): the reference `tests/tools.rs` holds Cinder's
rendering to.

Usage: python3 benches/reference/render_tool_prompt.py MODEL.gguf > tests/data/qwen2.5-coder-tools.prompt.txt
"""
import json, struct, jinja2, sys
def read_gguf_template(path):
    f=open(path,'rb'); magic=f.read(4); ver,=struct.unpack('<I',f.read(4)); nt,nkv=struct.unpack('<QQ',f.read(16))
    def rs(): n,=struct.unpack('<Q',f.read(8)); return f.read(n).decode()
    def rv(t):
        sizes={0:'B',1:'b',2:'H',3:'h',4:'I',5:'i',6:'f',7:'?',10:'Q',11:'q',12:'d'}
        if t in sizes: fmt='<'+sizes[t]; return struct.unpack(fmt,f.read(struct.calcsize(fmt)))[0]
        if t==8: return rs()
        if t==9:
            at,=struct.unpack('<I',f.read(4)); n,=struct.unpack('<Q',f.read(8)); return [rv(at) for _ in range(n)]
    for _ in range(nkv):
        k=rs(); t,=struct.unpack('<I',f.read(4)); v=rv(t)
        if k=='tokenizer.chat_template': return v
t=read_gguf_template(sys.argv[1])
env=jinja2.Environment()
env.filters['tojson']=lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
tools=[{"type":"function","function":{"name":"get_weather","description":"The current weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]
msgs=[{"role":"user","content":"What is the weather in Paris right now?"},
 {"role":"assistant","content":None,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},
 {"role":"tool","tool_call_id":"c1","content":"{\"temperature\": 18}"}]
sys.stdout.write(env.from_string(t).render(messages=msgs, tools=tools, add_generation_prompt=True))
