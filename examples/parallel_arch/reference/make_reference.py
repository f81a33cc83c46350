#!/usr/bin/env python3
"""Writes the tiny GPT-NeoX-style GGUF of the example architecture crate and the NumPy forward of
its weights, the reference its test checks Cinder against.

The file has GGUF architecture `gptneox` and llama.cpp's tensor names for it: per block a LayerNorm
(weight and bias) before attention and one before the MLP, fused QKV projection with bias (rows
Q, then K, then V, as llama.cpp's converter stores them), output projection with bias, a GELU MLP
with biases, and the parallel residual `x + attn(ln1(x)) + mlp(ln2(x))`; NeoX rotary on the first
`rope.dimension_count` dims of each head; a final LayerNorm and a separate output head. The
tokenizer is SmolLM2's (copied from the catalog's GGUF), the weights random (fixed seed), the token
embedding Q8_0 (a lookup: no activation rounding), the head and some block weights F16, the rest
F32, so the file stays small and the comparison tight.

The reference is a plain float64 NumPy forward of the weights as stored (dequantized by gguf-py),
with GELU's tanh form: for each prompt (SmolLM2 token ids from the greedy reference file) the greedy
continuation and, per step, the top-5 tokens with their log-probabilities.

Usage (numpy and gguf from PyPI):
    python3 examples/parallel_arch/reference/make_reference.py SMOLLM2.gguf
writes examples/parallel_arch/data/neox-tiny.gguf and neox-tiny.reference.jsonl. Deterministic.
"""

import json
import math
import sys
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "benches/reference"))
from tiny_models import copy_tokenizer  # noqa: E402  (the tiny architecture files' tokenizer copy)
D, HEADS, ROT, FF, LAYERS, EPS, THETA = 32, 2, 8, 128, 2, 1e-5, 10000.0
HD = D // HEADS
STEPS = 8


def write(path, smollm):
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(str(path), "gptneox")
    w.add_name("neox-tiny")
    w.add_context_length(2048)
    w.add_embedding_length(D)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_rope_dimension_count(ROT)
    w.add_layer_norm_eps(EPS)
    w.add_parallel_residual(True)
    n_vocab = copy_tokenizer(smollm, w)

    def add(name, x, qtype=T.F32):
        x = x.astype(np.float32)
        if qtype == T.F16:
            w.add_tensor(name, x.astype(np.float16))
        elif qtype == T.F32:
            w.add_tensor(name, x)
        else:
            data = gguf.quants.quantize(x, qtype)
            w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)

    n = lambda *s: rng.standard_normal(s)
    add("token_embd.weight", n(n_vocab, D), T.Q8_0)
    for i in range(LAYERS):
        add(f"blk.{i}.attn_norm.weight", 1 + 0.1 * n(D))
        add(f"blk.{i}.attn_norm.bias", 0.1 * n(D))
        add(f"blk.{i}.attn_qkv.weight", n(3 * D, D) / math.sqrt(D) * 1.5, T.F16)
        add(f"blk.{i}.attn_qkv.bias", 0.1 * n(3 * D))
        add(f"blk.{i}.attn_output.weight", n(D, D) / math.sqrt(D))
        add(f"blk.{i}.attn_output.bias", 0.1 * n(D))
        add(f"blk.{i}.ffn_norm.weight", 1 + 0.1 * n(D))
        add(f"blk.{i}.ffn_norm.bias", 0.1 * n(D))
        add(f"blk.{i}.ffn_up.weight", n(FF, D) / math.sqrt(D), T.F16)
        add(f"blk.{i}.ffn_up.bias", 0.1 * n(FF))
        add(f"blk.{i}.ffn_down.weight", n(D, FF) / math.sqrt(FF))
        add(f"blk.{i}.ffn_down.bias", 0.1 * n(D))
    add("output_norm.weight", 1 + 0.1 * n(D))
    add("output_norm.bias", 0.1 * n(D))
    add("output.weight", n(n_vocab, D) / math.sqrt(D) * 6.0, T.F16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def load(path):
    """Every tensor of the file as float64 (dequantized as stored), by name, shaped [rows, cols]."""
    r = gguf.GGUFReader(str(path))
    out = {}
    for t in r.tensors:
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        shape = [int(s) for s in reversed(t.shape)]
        out[t.name] = x.reshape(shape)
    return out


def layer_norm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + EPS) * w + b


def gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def rope(x, pos):
    """NeoX rotary on the first ROT dims of each head: x [t, heads, HD]."""
    half = ROT // 2
    freq = THETA ** (-2.0 * np.arange(half) / ROT)
    ang = pos[:, None] * freq[None, :]  # [t, half]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., :half], x[..., half:ROT]
    out = x.copy()
    out[..., :half] = a * c - b * s
    out[..., half:ROT] = b * c + a * s
    return out


def forward(wt, ids):
    """Logits [t, vocab] of token ids (no cache: the whole sequence each call)."""
    t = len(ids)
    x = wt["token_embd.weight"][ids]
    pos = np.arange(t, dtype=np.float64)
    mask = np.triu(np.full((t, t), -np.inf), 1)
    for i in range(LAYERS):
        p = lambda n: wt[f"blk.{i}.{n}"]
        h = layer_norm(x, p("attn_norm.weight"), p("attn_norm.bias"))
        qkv = h @ p("attn_qkv.weight").T + p("attn_qkv.bias")
        q, k, v = (qkv[:, j * D:(j + 1) * D].reshape(t, HEADS, HD) for j in range(3))
        q, k = rope(q, pos), rope(k, pos)
        s = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(HD) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = np.einsum("hqk,khd->qhd", s, v).reshape(t, D)
        attn = a @ p("attn_output.weight").T + p("attn_output.bias")
        h2 = layer_norm(x, p("ffn_norm.weight"), p("ffn_norm.bias"))
        m = gelu(h2 @ p("ffn_up.weight").T + p("ffn_up.bias")) @ p("ffn_down.weight").T
        x = x + attn + m + p("ffn_down.bias")
    x = layer_norm(x, wt["output_norm.weight"], wt["output_norm.bias"])
    return x @ wt["output.weight"].T


def main():
    smollm = sys.argv[1]
    data = HERE.parent / "data"
    path = data / "neox-tiny.gguf"
    write(path, smollm)
    wt = load(path)
    refs = [json.loads(l) for l in open(ROOT / "tests/data/smollm2-135m-q4_1.greedy.jsonl")]
    with open(data / "neox-tiny.reference.jsonl", "w") as f:
        for r in refs[:3]:
            ids = list(r["prompt_tokens"])
            steps = []
            for _ in range(STEPS):
                z = forward(wt, ids)[-1]
                lp = z - z.max() - math.log(np.exp(z - z.max()).sum())
                top = np.argsort(-lp, kind="stable")[:5]
                steps.append([[int(j), round(float(lp[j]), 5)] for j in top])
                ids.append(int(top[0]))
            f.write(json.dumps({"prompt": r["prompt"], "prompt_tokens": r["prompt_tokens"],
                                "greedy": ids[len(r["prompt_tokens"]):], "top5": steps}) + "\n")
    print(f"wrote {path} and its reference")


if __name__ == "__main__":
    main()
