"""Reference embeddings for Cinder's ONNX loading test, from onnxruntime on the catalog's ONNX files.

Run: python3 tests/data/make_onnx_reference.py > tests/data/minilm-onnx.json
(needs `pip install onnxruntime tokenizers numpy` and `cinder pull all-minilm-l6-v2-onnx-int8` +
`cinder pull paraphrase-minilm-l3-v2-onnx`). Each sentence runs alone (batch 1, no padding); the
embedding is the mean of the last hidden state over the tokens, then L2-normalized, in float64.
"""
import json, os, sys
import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

home = os.environ.get("CINDER_HOME") or os.path.expanduser("~/.cache/cinder")
MODELS = {
    "all-minilm-l6-v2-onnx-int8": ("model.onnx", "last_hidden_state"),
    "paraphrase-minilm-l3-v2-onnx": ("paraphrase-MiniLM-L3-v2.onnx", "onnx::Shape_422"),
}
SENTENCES = [
    "A man is eating food.",
    "The girl is carrying a baby.",
    "Rust is a systems programming language.",
    "Quantum entanglement puzzles physicists, even today!",
    "Zwei Hunde spielen im Schnee.",
    "The quarterly report, due on 2024-03-31, was delayed by 3 weeks because of an audit.",
]

out = {"sentences": SENTENCES, "pooling": "mean over tokens, then L2-normalize", "models": {}}
for name, (file, hidden) in MODELS.items():
    d = os.path.join(home, "models", name)
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    tok.no_padding()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(os.path.join(d, file), opts)
    names = [i.name for i in sess.get_inputs()]
    embs, ids_all = [], []
    for s in SENTENCES:
        ids = np.array([tok.encode(s).ids], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if "token_type_ids" in names:
            feed["token_type_ids"] = np.zeros_like(ids)
        h = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))[hidden]
        v = h[0].astype(np.float64).mean(axis=0)
        v /= np.linalg.norm(v)
        embs.append([round(float(x), 7) for x in v])
        ids_all.append(ids[0].tolist())
    out["models"][name] = {"input_ids": ids_all, "embeddings": embs}
json.dump(out, sys.stdout)
print()
