#!/usr/bin/env python3
"""Random-weight GGUF files at real model shapes, for speed comparisons with llama.cpp only.

No real Llama 3 or Qwen3 checkpoint is reachable from the build machines; speed depends on the
shapes and storage types, not on the weights' values, so these files have the shapes of
Llama-3.2-1B and Qwen3-0.6B, and a Qwen3-MoE of 8 experts (2 per token) at ~1.3B parameters (the
SmolLM2 tokenizer and its 49,152-row embedding in place of the real
vocabularies, so the output head is smaller than the real model's) with random F16 weights, which
`llama-quantize` then turns into Q4_K_M as for a real model:

    python3 benches/reference/bench_models.py SMOLLM2.gguf OUT_DIR [NAME ...]
    llama-quantize OUT_DIR/qwen3-0.6b-shape.f16.gguf OUT_DIR/qwen3-0.6b-shape.Q4_K_M.gguf Q4_K_M
    llama-quantize OUT_DIR/llama3.2-1b-shape.f16.gguf OUT_DIR/llama3.2-1b-shape.Q4_K_M.gguf Q4_K_M

docs/perf.md has the commands that compare `cinder bench` and `llama-bench` on them.
"""

import math
import sys
from pathlib import Path

import numpy as np
import gguf

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import copy_tokenizer, finish, llama3_freq_factors  # noqa: E402

SHAPES = {
    # Llama-3.2-1B: Llama 3 RoPE scaling (factor 32, original context 8192), tied embeddings
    "llama3.2-1b-shape": dict(arch="llama", d=2048, ff=8192, heads=32, kv_heads=8, head_dim=64,
                              layers=16, theta=500000.0,
                              rope_freqs=dict(factor=32.0, low=1.0, high=4.0, old_ctx=8192.0)),
    # Qwen3-0.6B: QK-norm, head_dim 128 with 16 heads on a 1024 width, tied embeddings
    "qwen3-0.6b-shape": dict(arch="qwen3", d=1024, ff=3072, heads=16, kv_heads=8, head_dim=128,
                             layers=28, theta=1000000.0, rope_freqs=None),
    # A Qwen3-MoE of ~1.3B parameters (~0.35B active): 8 experts of width 2048, 2 per token
    "qwen3moe-8x-shape": dict(arch="qwen3moe", d=1024, ff=2048, heads=16, kv_heads=4, head_dim=64,
                              layers=24, theta=1000000.0, rope_freqs=None, experts=8, used=2),
}


def write(name, s, tokenizer_src, out_dir):
    rng = np.random.default_rng(0)
    path = Path(out_dir) / f"{name}.f16.gguf"
    w = gguf.GGUFWriter(str(path), s["arch"])
    w.add_name(name)
    n_vocab = copy_tokenizer(tokenizer_src, w)
    d, ff, h, kvh, hd = s["d"], s["ff"], s["heads"], s["kv_heads"], s["head_dim"]
    w.add_context_length(32768)
    w.add_embedding_length(d)
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(ff)
    w.add_head_count(h)
    w.add_head_count_kv(kvh)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(s["theta"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if s.get("experts"):
        w.add_expert_count(s["experts"])
        w.add_expert_used_count(s["used"])
        w.add_expert_feed_forward_length(ff)

    def lin(rows, cols):
        return (rng.standard_normal((rows, cols), dtype=np.float32) / math.sqrt(cols)).astype(np.float16)

    def ones(n):
        return np.ones(n, dtype=np.float32)

    w.add_tensor("token_embd.weight", rng.standard_normal((n_vocab, d), dtype=np.float32).astype(np.float16))
    if s["rope_freqs"]:
        rf = s["rope_freqs"]
        w.add_tensor("rope_freqs.weight",
                     llama3_freq_factors(s["theta"], hd, rf["factor"], rf["low"], rf["high"], rf["old_ctx"]))
    for i in range(s["layers"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(d))
        w.add_tensor(p + "attn_q.weight", lin(h * hd, d))
        w.add_tensor(p + "attn_k.weight", lin(kvh * hd, d))
        w.add_tensor(p + "attn_v.weight", lin(kvh * hd, d))
        if s["arch"] in ("qwen3", "qwen3moe"):
            w.add_tensor(p + "attn_q_norm.weight", ones(hd))
            w.add_tensor(p + "attn_k_norm.weight", ones(hd))
        w.add_tensor(p + "attn_output.weight", lin(d, h * hd))
        w.add_tensor(p + "ffn_norm.weight", ones(d))
        if s.get("experts"):
            n = s["experts"]
            w.add_tensor(p + "ffn_gate_inp.weight", lin(n, d).astype(np.float32))
            w.add_tensor(p + "ffn_gate_exps.weight", np.stack([lin(ff, d) for _ in range(n)]))
            w.add_tensor(p + "ffn_up_exps.weight", np.stack([lin(ff, d) for _ in range(n)]))
            w.add_tensor(p + "ffn_down_exps.weight", np.stack([lin(d, ff) for _ in range(n)]))
            continue
        w.add_tensor(p + "ffn_gate.weight", lin(ff, d))
        w.add_tensor(p + "ffn_up.weight", lin(ff, d))
        w.add_tensor(p + "ffn_down.weight", lin(d, ff))
    w.add_tensor("output_norm.weight", ones(d))
    finish(w, path)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    Path(sys.argv[2]).mkdir(parents=True, exist_ok=True)
    only = sys.argv[3:]
    for name, s in SHAPES.items():
        if not only or name in only:
            write(name, s, sys.argv[1], sys.argv[2])


if __name__ == "__main__":
    main()
