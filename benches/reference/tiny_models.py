#!/usr/bin/env python3
"""Writes the tiny random-weight GGUF files that check each architecture against llama.cpp.

No small real checkpoint of these architectures is reachable from the build machines, so each one
gets a file with the real SmolLM2 tokenizer (copied from the catalog's SmolLM2-135M GGUF), two
layers, small widths and random weights stored in several quant types (F32, F16, Q8_0, Q5_0, Q5_1,
Q4_0, Q4_1, Q4_K, Q6_K), so the graph and the dequantization are both exercised. `phi3-tiny`
stores its projections fused, as Phi-3 files do. The weights are
drawn so that the model is not degenerate: attention scores and logits have a spread of a few units,
and for `llama3-tiny` the RoPE frequency factors (`rope_freqs`) change the logits at short positions.
`qwen3-yarn-tiny` has YaRN scaling over an original context of 16 tokens, which the prompts pass.

Usage (numpy and the `gguf` package from PyPI):
    python3 benches/reference/tiny_models.py SMOLLM2.gguf OUT_DIR [MODEL ...]
(MODEL names write only those files.)
then `benches/reference/llamacpp_logits.sh OUT_DIR` writes llama.cpp's logits beside them.
The output is deterministic (fixed seeds): rerunning it rewrites the same bytes.
"""

import math
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

QK_K = 256


def f16(x):
    return np.asarray(x, dtype=np.float16).view(np.uint8)


def quant_q6_k(x):
    """Q6_K blocks of rows `x` [rows, n] (n % 256 == 0): 16 groups of 16, int8 group scales, one
    f16 super-scale; value = d * scale * (q - 32). Packed as ggml's block_q6_K."""
    blocks = x.reshape(-1, QK_K).astype(np.float32)
    out = []
    for b in blocks:
        g = b.reshape(16, 16)
        amax_idx = np.argmax(np.abs(g), axis=1)
        signed_max = g[np.arange(16), amax_idx]
        scale_f = -signed_max / 32.0  # ggml's choice: the extreme value maps to -32
        max_scale = np.max(np.abs(scale_f))
        d = max_scale / 127.0 if max_scale > 0 else 0.0
        d = float(np.float16(d))
        sc = np.clip(np.round(scale_f / d), -128, 127).astype(np.int8) if d > 0 else np.zeros(16, np.int8)
        L = np.zeros(QK_K, dtype=np.uint8)
        for j in range(16):
            s = d * float(sc[j])
            q = np.round(g[j] / s) if s != 0 else np.zeros(16)
            L[16 * j : 16 * j + 16] = np.clip(q + 32, 0, 63).astype(np.uint8)
        ql = np.zeros(128, np.uint8)
        qh = np.zeros(64, np.uint8)
        for half in range(2):
            j = 128 * half
            for l in range(32):
                q1, q2, q3, q4 = (L[j + l + 32 * k] for k in range(4))
                ql[64 * half + l] = (q1 & 0xF) | ((q3 & 0xF) << 4)
                ql[64 * half + l + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4)
                qh[32 * half + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
        out.append(np.concatenate([ql, qh, sc.view(np.uint8), f16([d])]))
    return np.concatenate(out)


def quant_q4_k(x):
    """Q4_K blocks: 8 groups of 32 with 6-bit scales and mins, f16 d and dmin;
    value = d * sc * q - dmin * m. Packed as ggml's block_q4_K."""
    blocks = x.reshape(-1, QK_K).astype(np.float32)
    out = []
    for b in blocks:
        g = b.reshape(8, 32)
        mn = np.minimum(g.min(axis=1), 0.0)
        mx = g.max(axis=1)
        scale_g = (mx - mn) / 15.0
        min_g = -mn
        d = float(np.float16(scale_g.max() / 63.0))
        dmin = float(np.float16(min_g.max() / 63.0))
        ls = np.clip(np.round(scale_g / d), 0, 63).astype(np.uint8) if d > 0 else np.zeros(8, np.uint8)
        lm = np.clip(np.round(min_g / dmin), 0, 63).astype(np.uint8) if dmin > 0 else np.zeros(8, np.uint8)
        L = np.zeros(QK_K, dtype=np.uint8)
        for j in range(8):
            s = d * float(ls[j])
            q = np.round((g[j] + dmin * float(lm[j])) / s) if s > 0 else np.zeros(32)
            L[32 * j : 32 * j + 32] = np.clip(q, 0, 15).astype(np.uint8)
        scales = np.zeros(12, np.uint8)
        for j in range(8):
            if j < 4:
                scales[j] = ls[j]
                scales[j + 4] = lm[j]
            else:
                scales[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4)
                scales[j - 4] |= (ls[j] >> 4) << 6
                scales[j] |= (lm[j] >> 4) << 6
        qs = np.zeros(128, np.uint8)
        for c in range(4):
            j = 64 * c
            qs[32 * c : 32 * c + 32] = L[j : j + 32] | (L[j + 32 : j + 64] << 4)
        out.append(np.concatenate([f16([d]), f16([dmin]), scales, qs]))
    return np.concatenate(out)


def encode(x, qtype):
    """`x` [rows, cols] (row-major, cols = GGUF ne[0]) stored as `qtype`: (bytes or array, raw type)."""
    if qtype == T.F32:
        return x.astype(np.float32), None
    if qtype == T.F16:
        return x.astype(np.float16), None
    if qtype == T.Q6_K:
        data = quant_q6_k(x)
    elif qtype == T.Q4_K:
        data = quant_q4_k(x)
    else:
        data = gguf.quants.quantize(x.astype(np.float32), qtype)
    data = np.asarray(data, dtype=np.uint8)
    rows = int(np.prod(x.shape[:-1]))
    # Round trip through gguf-py's own dequantizer: the packing above must decode to the weights.
    back = gguf.quants.dequantize(data.reshape(rows, -1), qtype)
    err = np.abs(back - x.reshape(rows, -1)).max() / (np.abs(x).max() + 1e-9)
    assert err < 0.2, f"{qtype.name} round trip error {err}"
    return data.reshape(*x.shape[:-1], -1), qtype


def copy_tokenizer(src, w):
    """The SmolLM2 GGUF's tokenizer.* keys, copied with their types."""
    r = gguf.GGUFReader(src)
    for name, field in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                vals = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                vals = [field.parts[i].tolist()[0] for i in field.data]
            w.add_key_value(name, vals, vtype, sub_type=sub)
        elif vtype == gguf.GGUFValueType.STRING:
            w.add_key_value(name, bytes(field.parts[field.data[0]]).decode("utf-8"), vtype)
        else:
            w.add_key_value(name, field.parts[field.data[0]].tolist()[0], vtype)
    return len(r.fields["tokenizer.ggml.tokens"].data)


def llama3_freq_factors(theta, rope_dim, factor, low, high, old_ctx):
    """Llama 3 RoPE scaling as llama.cpp's converter computes `rope_freqs`."""
    out = []
    for i in range(rope_dim // 2):
        freq = theta ** (-2.0 * i / rope_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


# Each model: GGUF arch, widths, and the storage type of each weight.
MODELS = {
    "llama3-tiny": dict(
        arch="llama",
        d=128, ff=256, heads=4, kv_heads=2, head_dim=64, layers=2, theta=10000.0,
        # Llama 3 scaling shrunk to this scale (original context 16 instead of 8192) so the
        # factors (1.6 … 4) move the logits within a short prompt.
        rope_freqs=dict(factor=4.0, low=1.0, high=4.0, old_ctx=16.0),
        types=dict(token_embd=T.Q4_0, attn_q=T.Q8_0, attn_k=T.Q5_0, attn_v=T.Q4_1,
                   attn_output=T.Q4_K, ffn_gate=T.Q5_1, ffn_up=T.F16, ffn_down=T.Q6_K),
        seed=1,
    ),
    "qwen3-tiny": dict(
        arch="qwen3",
        # head_dim × heads (256) differs from the width (128), as in the real Qwen3 sizes
        d=128, ff=256, heads=4, kv_heads=2, head_dim=64, layers=2, theta=1000000.0,
        rope_freqs=None,
        # also an embedding model, as Qwen3-Embedding is: the last token's state, L2-normalized
        pooling=gguf.PoolingType.LAST,
        types=dict(token_embd=T.Q4_1, attn_q=T.F16, attn_k=T.Q8_0, attn_v=T.Q8_0,
                   attn_output=T.Q6_K, ffn_gate=T.Q4_0, ffn_up=T.Q5_0, ffn_down=T.Q4_K),
        seed=2,
    ),
    "phi3-tiny": dict(
        arch="phi3",
        # Phi-3 stores Q, K, V as one `attn_qkv` and gate + up as one `ffn_up` of twice the width.
        # As Phi-3.5 and Phi-4-mini: LongRoPE (long and short factors, an attention factor) and,
        # as Phi-4-mini, RoPE on 3/4 of each head.
        d=128, ff=256, heads=4, kv_heads=2, head_dim=32, rope_dim=24, layers=2, theta=10000.0,
        rope_freqs=None, fused=True, longrope=dict(original_ctx=256),
        types=dict(token_embd=T.Q4_0, attn_qkv=T.Q8_0, attn_output=T.Q4_1, ffn_up=T.Q5_0,
                   ffn_down=T.Q4_K),
        seed=3,
    ),
    "qwen3moe-tiny": dict(
        arch="qwen3moe",
        # Qwen3-MoE: Qwen3's attention, every MLP a mixture of 4 experts of which 2 run per token
        d=128, ff=256, heads=4, kv_heads=2, head_dim=64, layers=2, theta=1000000.0,
        rope_freqs=None, moe=dict(experts=4, used=2),
        types=dict(token_embd=T.Q4_0, attn_q=T.Q8_0, attn_k=T.Q8_0, attn_v=T.Q5_0,
                   attn_output=T.Q4_K, ffn_gate_exps=T.Q8_0, ffn_up_exps=T.Q4_0,
                   ffn_down_exps=T.Q6_K),
        seed=4,
    ),
    "olmoe-tiny": dict(
        arch="olmoe",
        # OLMoE: Q and K normed over their whole width, experts' weights not renormalized, an
        # untied output head
        d=128, ff=256, heads=4, kv_heads=4, head_dim=32, layers=2, theta=10000.0,
        rope_freqs=None, moe=dict(experts=4, used=2, width_key=False),
        types=dict(token_embd=T.Q4_0, output=T.Q4_0, attn_q=T.Q8_0, attn_k=T.Q5_1,
                   attn_v=T.Q8_0, attn_output=T.Q4_1, ffn_gate_exps=T.Q5_0,
                   ffn_up_exps=T.Q8_0, ffn_down_exps=T.Q4_K),
        seed=5,
    ),
    "qwen2-tiny": dict(
        arch="qwen2",
        # Qwen2 / Qwen2.5: biases on Q, K and V (drawn large enough to move the logits), NeoX RoPE,
        # an untied output head
        # (llama.cpp's qwen2 wants heads × head width = the model width)
        d=128, ff=256, heads=4, kv_heads=2, head_dim=32, layers=2, theta=1000000.0,
        rope_freqs=None, qkv_bias=True,
        types=dict(token_embd=T.Q4_0, output=T.Q4_1, attn_q=T.Q8_0, attn_k=T.Q5_1, attn_v=T.Q4_1,
                   attn_output=T.Q5_0, ffn_gate=T.Q5_0, ffn_up=T.Q8_0, ffn_down=T.Q6_K),
        seed=7,
    ),
    "qwen2-tied-tiny": dict(
        arch="qwen2",
        # the small Qwen2.5 sizes (0.5B, 1.5B): the same biases, the head tied to the embedding
        d=128, ff=256, heads=4, kv_heads=2, head_dim=32, layers=2, theta=1000000.0,
        rope_freqs=None, qkv_bias=True,
        types=dict(token_embd=T.Q5_0, attn_q=T.Q4_0, attn_k=T.Q8_0, attn_v=T.F16,
                   attn_output=T.Q5_1, ffn_gate=T.Q4_0, ffn_up=T.Q4_1, ffn_down=T.Q4_K),
        seed=8,
    ),
    "qwen3-yarn-tiny": dict(
        arch="qwen3",
        # YaRN (Qwen2.5 / Qwen3 past 32k) shrunk to this scale: a 4x extension of an original
        # context of 16, so the prompts run past it; 64-wide heads at base 10,000 put the ramp
        # between extrapolated and interpolated pairs over pairs 0-4 (0.75, 0.5, 0.25 in between)
        d=128, ff=256, heads=4, kv_heads=2, head_dim=64, layers=2, theta=10000.0,
        rope_freqs=None, yarn=dict(factor=4.0, original_ctx=16),
        types=dict(token_embd=T.Q8_0, attn_q=T.F16, attn_k=T.Q8_0, attn_v=T.Q5_0,
                   attn_output=T.Q4_K, ffn_gate=T.Q4_1, ffn_up=T.Q8_0, ffn_down=T.Q6_K),
        seed=9,
    ),
    "mixtral-tiny": dict(
        arch="llama",
        # Mixtral: a Llama file whose MLPs are mixtures of experts (interleaved RoPE)
        d=128, ff=256, heads=4, kv_heads=2, head_dim=32, layers=2, theta=1000000.0,
        rope_freqs=None, moe=dict(experts=4, used=2, width_key=False),
        types=dict(token_embd=T.Q4_0, attn_q=T.Q4_1, attn_k=T.Q8_0, attn_v=T.Q8_0,
                   attn_output=T.Q5_0, ffn_gate_exps=T.Q4_0, ffn_up_exps=T.Q5_1,
                   ffn_down_exps=T.Q6_K),
        seed=6,
    ),
}


def write_model(name, spec, tokenizer_src, out_dir):
    rng = np.random.default_rng(spec["seed"])
    arch, d, ff = spec["arch"], spec["d"], spec["ff"]
    h, kvh, hd, n_layers = spec["heads"], spec["kv_heads"], spec["head_dim"], spec["layers"]
    path = Path(out_dir) / f"{name}.gguf"
    w = gguf.GGUFWriter(str(path), arch)
    # llama.cpp sets special-token attributes for models whose name says Phi-3, which needs
    # Phi-3's own vocabulary (`</s>`): the SmolLM2 vocabulary's Phi-3 file goes by another name.
    w.add_name("tiny random model" if arch == "phi3" else name)
    n_vocab = copy_tokenizer(tokenizer_src, w)
    w.add_context_length(2048)
    w.add_embedding_length(d)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(h)
    w.add_head_count_kv(kvh)
    w.add_key_length(hd)
    w.add_value_length(hd)
    rope_dim = spec.get("rope_dim", hd)
    w.add_rope_dimension_count(rope_dim)
    w.add_rope_freq_base(spec["theta"])
    w.add_layer_norm_rms_eps(1e-6)
    if spec.get("pooling"):
        w.add_pooling_type(spec["pooling"])
    if spec.get("moe"):
        w.add_expert_count(spec["moe"]["experts"])
        w.add_expert_used_count(spec["moe"]["used"])
        if spec["moe"].get("width_key", True):
            w.add_expert_feed_forward_length(ff)
    if spec.get("yarn"):
        # what the converter writes for an HF rope_scaling of type yarn
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(spec["yarn"]["factor"])
        w.add_rope_scaling_orig_ctx_len(spec["yarn"]["original_ctx"])
    if arch == "phi3":
        # what the converter writes for a LongRoPE Phi (llama.cpp ignores Phi's sliding window):
        # the context (2048) exceeds the original (256), so the long factors apply
        orig = spec["longrope"]["original_ctx"]
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(2048 / orig) / math.log(orig)))
        w.add_sliding_window(2047)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    types = spec["types"]

    def add(tname, x, qtype):
        data, raw = encode(x, qtype)
        w.add_tensor(tname, data, raw_dtype=raw)

    def linear(rows, cols):
        # rows = outputs, cols = inputs (GGUF ne[0]); std 1/sqrt(fan_in) keeps activations O(1)
        return rng.standard_normal((rows, cols)).astype(np.float32) / math.sqrt(cols)

    def norm(n, spread=0.2, centre=1.0):
        return (centre + spread * rng.standard_normal(n)).astype(np.float32)

    # Embedding entries ~N(0, 1): the tied output head then gives logits with a spread of a few units
    # (the final norm's weights are ~0.3 for that).
    add("token_embd.weight", rng.standard_normal((n_vocab, d)).astype(np.float32), types["token_embd"])
    if spec.get("longrope"):
        w.add_tensor("rope_factors_long.weight",
                     rng.uniform(1.0, 8.0, rope_dim // 2).astype(np.float32))
        w.add_tensor("rope_factors_short.weight",
                     rng.uniform(1.0, 2.0, rope_dim // 2).astype(np.float32))
    if spec["rope_freqs"]:
        rf = spec["rope_freqs"]
        factors = llama3_freq_factors(spec["theta"], hd, rf["factor"], rf["low"], rf["high"], rf["old_ctx"])
        w.add_tensor("rope_freqs.weight", factors)
    for i in range(n_layers):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", norm(d), T.F32)
        # Q and K scaled up so attention scores spread over a few units and positions matter.
        q, k, v = 2.0 * linear(h * hd, d), 2.0 * linear(kvh * hd, d), linear(kvh * hd, d)
        if spec.get("fused"):
            add(p + "attn_qkv.weight", np.concatenate([q, k, v]), types["attn_qkv"])
        else:
            add(p + "attn_q.weight", q, types["attn_q"])
            add(p + "attn_k.weight", k, types["attn_k"])
            add(p + "attn_v.weight", v, types["attn_v"])
        if spec.get("qkv_bias"):
            # Biases of the size of a projected value (~1 for Q and K after the 2x scale), so a
            # model that drops them is far off.
            add(p + "attn_q.bias", rng.standard_normal(h * hd).astype(np.float32), T.F32)
            add(p + "attn_k.bias", rng.standard_normal(kvh * hd).astype(np.float32), T.F32)
            add(p + "attn_v.bias", 0.5 * rng.standard_normal(kvh * hd).astype(np.float32), T.F32)
        if arch in ("qwen3", "qwen3moe"):
            add(p + "attn_q_norm.weight", norm(hd, 0.3, 1.5), T.F32)
            add(p + "attn_k_norm.weight", norm(hd, 0.3, 1.5), T.F32)
        elif arch == "olmoe":
            add(p + "attn_q_norm.weight", norm(h * hd, 0.3, 1.5), T.F32)
            add(p + "attn_k_norm.weight", norm(kvh * hd, 0.3, 1.5), T.F32)
        # The blocks' outputs scaled up so they, not the token's own embedding, dominate the
        # residual stream: otherwise the tied head mostly predicts the input token again.
        add(p + "attn_output.weight", 4.0 * linear(d, h * hd), types["attn_output"])
        add(p + "ffn_norm.weight", norm(d), T.F32)
        if spec.get("moe"):
            n_exp = spec["moe"]["experts"]
            # the router scaled up so tokens prefer different experts clearly
            add(p + "ffn_gate_inp.weight", 3.0 * linear(n_exp, d), T.F32)
            experts = [(linear(ff, d), linear(ff, d), 4.0 * linear(d, ff)) for _ in range(n_exp)]
            for name, part in (("ffn_gate_exps", 0), ("ffn_up_exps", 1), ("ffn_down_exps", 2)):
                add(p + name + ".weight", np.stack([e[part] for e in experts]), types[name])
            continue
        gate, up = linear(ff, d), linear(ff, d)
        if spec.get("fused"):
            # gate rows first, then up rows: llama.cpp's swiglu applies SiLU to the first half
            add(p + "ffn_up.weight", np.concatenate([gate, up]), types["ffn_up"])
        else:
            add(p + "ffn_gate.weight", gate, types["ffn_gate"])
            add(p + "ffn_up.weight", up, types["ffn_up"])
        add(p + "ffn_down.weight", 4.0 * linear(d, ff), types["ffn_down"])
    add("output_norm.weight", norm(d, 0.05, 0.3), T.F32)
    if "output" in types:
        add("output.weight", rng.standard_normal((n_vocab, d)).astype(np.float32), types["output"])
    finish(w, path)


def finish(w, path):
    """Writes the file `w` holds to `path`."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {path} ({path.stat().st_size} bytes)")


def main():
    if len(sys.argv) < 3 or any(n not in MODELS for n in sys.argv[3:]):
        sys.exit(__doc__)
    src, out_dir, only = sys.argv[1], sys.argv[2], sys.argv[3:]
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for name, spec in MODELS.items():
        if not only or name in only:
            write_model(name, spec, src, out_dir)


if __name__ == "__main__":
    main()
