#!/usr/bin/env python3
"""Tiny Hugging Face checkpoints saved by `transformers` itself, with the logits it computes.

Cinder's SafeTensors loader reads names, layouts (Q/K row order, fused Phi-3 projections, per-expert
tensors), config keys and tokenizer files that another program wrote. Checking it against checkpoints
that Cinder's own tests write would hide a misunderstanding shared by writer and reader, so these
come from `transformers`: each architecture's `*ForCausalLM`, random weights, `save_pretrained`
(SafeTensors), and a byte-level BPE tokenizer trained here by `tokenizers` and saved with
`PreTrainedTokenizerFast.save_pretrained`.

For every checkpoint, `OUT/<name>.logits.jsonl` holds, per prompt, the prompt's token ids, 8 greedy
tokens and, at every position (the prompt's, then each greedy token's), the 10 most likely next tokens with
their log-probabilities: the format of `tests/data/tiny/*.logits.jsonl`. The logits are computed in
float32 by the model loaded back from the saved folder (for a bf16 checkpoint: its bf16 weights
widened to float32, which is what Cinder computes with).

Usage (torch, transformers and tokenizers from PyPI; CPU):
    python3 benches/reference/hf_tiny_checkpoints.py tests/data/hf-tiny
The output is deterministic (fixed seeds, one thread).
"""

import json
import math
import shutil
import sys
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

CORPUS = [
    "The three primary colors are red, yellow and blue.",
    "Once upon a time there was a small cat who lived in a quiet town by the sea.",
    "def add(a, b):\n    return a + b\n",
    "Paris is the capital of France; Berlin is the capital of Germany.",
    "Water boils at 100 degrees Celsius at sea level.",
    "A list of numbers: 1, 2, 3, 5, 8, 13, 21, 34.",
]
PROMPTS = [
    "The capital of France is",
    "Once upon a time, a cat",
    "def add(a, b):",
]
GREEDY = 8
VOCAB = 400

# Each checkpoint: the transformers class, its config, the dtype it is saved in.
COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5)
CHECKPOINTS = {
    "llama-f32": ("LlamaForCausalLM", "LlamaConfig",
                  dict(COMMON, rope_theta=10000.0, tie_word_embeddings=False), torch.float32),
    "llama-bf16": ("LlamaForCausalLM", "LlamaConfig",
                   dict(COMMON, rope_theta=10000.0, tie_word_embeddings=False), torch.bfloat16),
    # Qwen2: biases on Q, K, V; tied embeddings as the 0.5B and 1.5B sizes
    "qwen2-f32": ("Qwen2ForCausalLM", "Qwen2Config",
                  dict(COMMON, rope_theta=1000000.0, tie_word_embeddings=True), torch.float32),
    "qwen2-bf16": ("Qwen2ForCausalLM", "Qwen2Config",
                   dict(COMMON, rope_theta=1000000.0, tie_word_embeddings=True), torch.bfloat16),
    # Qwen3: per-head Q/K norms, a head width that is not hidden/heads
    "qwen3-f32": ("Qwen3ForCausalLM", "Qwen3Config",
                  dict(COMMON, head_dim=32, rope_theta=1000000.0, tie_word_embeddings=True),
                  torch.float32),
    # Phi-3: fused qkv_proj and gate_up_proj
    "phi3-f32": ("Phi3ForCausalLM", "Phi3Config",
                 dict(COMMON, rope_theta=10000.0, tie_word_embeddings=False, pad_token_id=0),
                 torch.float32),
    # Mixtral: a Llama with a mixture of 4 experts, 2 per token
    "mixtral-f32": ("MixtralForCausalLM", "MixtralConfig",
                    dict(COMMON, rope_theta=1000000.0, tie_word_embeddings=False,
                         num_local_experts=4, num_experts_per_tok=2), torch.float32),
    # Qwen3 with YaRN: a 4x extension of an original context of 16, which the prompts pass
    "qwen3-yarn-f32": ("Qwen3ForCausalLM", "Qwen3Config",
                       dict(COMMON, head_dim=32, tie_word_embeddings=True,
                            rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                                 original_max_position_embeddings=16)),
                       torch.float32),
}


def train_tokenizer(out: Path) -> PreTrainedTokenizerFast:
    """A byte-level BPE of VOCAB tokens over CORPUS, no special tokens but an end-of-text."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    fast.save_pretrained(out)
    return fast


def randomize(model: torch.nn.Module) -> None:
    """Weights with a spread that makes the logits differ by a few units (transformers' own init,
    std 0.02, gives near-uniform logits that would hide most mistakes): linear weights
    N(0, 1/fan_in), Q and K twice that, the blocks' outputs four times (so they, not the input
    embedding, dominate the residual stream), routers three times; norms around 1, biases N(0, 1),
    embeddings N(0, 1), the final norm around 0.3."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                if name.endswith("bias"):
                    p.copy_(torch.randn_like(p) * (0.5 if "v_proj" in name else 1.0))
                elif name == "model.norm.weight":
                    p.copy_(0.3 + 0.05 * torch.randn_like(p))
                else:
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                continue
            if "embed_tokens" in name or "lm_head" in name:
                p.copy_(torch.randn_like(p))
                continue
            fan_in = p.shape[-1]
            x = torch.randn_like(p) / math.sqrt(fan_in)
            if any(k in name for k in ("q_proj", "k_proj", "qkv_proj")):
                x = 2.0 * x
            elif any(k in name for k in ("o_proj", "down_proj", "w2")):
                x = 4.0 * x
            elif name.endswith("gate.weight") and "proj" not in name:
                x = 3.0 * x
            p.copy_(x)


def top10(row: torch.Tensor):
    lp = torch.log_softmax(row.double(), dim=-1)
    v, i = torch.topk(lp, 10)
    return [[int(t), float(x)] for t, x in zip(i, v)]


def reference(folder: Path, tok: PreTrainedTokenizerFast) -> list:
    cls = getattr(transformers, json.loads((folder / "config.json").read_text())["architectures"][0])
    model = cls.from_pretrained(folder, dtype=torch.float32).eval()
    lines = []
    for prompt in PROMPTS:
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        seq = list(ids)
        with torch.no_grad():
            for _ in range(GREEDY):
                logits = model(torch.tensor([seq])).logits[0]
                seq.append(int(torch.argmax(logits[-1])))
            logits = model(torch.tensor([seq])).logits[0]
        # positions: every prompt position, then each greedy token's (as in the llama.cpp
        # references: the last row predicts past the greedy run)
        positions = [top10(logits[p]) for p in range(len(seq))]
        lines.append(dict(prompt=prompt, prompt_tokens=ids, greedy=seq[len(ids):],
                          positions=positions))
    return lines


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    torch.set_num_threads(1)
    tok_dir = out / "_tokenizer"
    tok = train_tokenizer(tok_dir)
    for i, (name, (cls_name, cfg_name, cfg, dtype)) in enumerate(CHECKPOINTS.items()):
        torch.manual_seed(100 + i)
        config = getattr(transformers, cfg_name)(vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                                                 bos_token_id=None, **cfg)
        model = getattr(transformers, cls_name)(config).float()
        randomize(model)
        folder = out / name
        if folder.exists():
            shutil.rmtree(folder)
        model.to(dtype).save_pretrained(folder)
        tok.save_pretrained(folder)
        lines = reference(folder, tok)
        with open(out / f"{name}.logits.jsonl", "w") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
        size = sum(p.stat().st_size for p in folder.iterdir())
        print(f"wrote {folder} ({size} bytes) and {name}.logits.jsonl")
    shutil.rmtree(tok_dir)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
