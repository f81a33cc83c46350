"""onnxruntime side of the embedding throughput comparison (see benches/embed_vs_ort.sh).

Runs an ONNX BERT export on the same sentences, batch sizes and thread count as `cinder bench-embed`:
batches in file order, padded to the batch's longest, mean pooling over the mask, L2 normalization
(in numpy, counted in the time). Prints `batch B: S sentences/s (median of R)`.
With `sorted` last, all the sentences are sorted by length first and cut into batches of B
(sentence-transformers' `encode` does this, by characters: each batch then pads little), as `cinder
bench-embed --sorted` does (by tokens); the sort is counted in the time.
usage: python3 benches/ort_embed.py MODEL.onnx TOKENIZER.json SENTENCES.txt THREADS BATCHES SENTENCES REPS [sorted]
"""
import statistics, sys, time
import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

model, tok_path, file, threads, batches, n, reps = sys.argv[1:8]
sort = sys.argv[8:9] == ["sorted"]
threads, n, reps = int(threads), int(n), int(reps)
lines = [l for l in open(file, encoding="utf-8").read().splitlines() if l.strip()]
texts = [lines[i % len(lines)] for i in range(n)]
tok = Tokenizer.from_file(tok_path)
tok.enable_padding(pad_id=0, pad_token="[PAD]")  # pad to the batch's longest, as Cinder does
tok.enable_truncation(512)
opts = ort.SessionOptions()
opts.intra_op_num_threads = threads
opts.inter_op_num_threads = 1
opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
inputs = [i.name for i in sess.get_inputs()]
hidden = next(o.name for o in sess.get_outputs() if len(o.shape) == 3)

def embed(batch):
    enc = tok.encode_batch(batch)
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    feed = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in inputs:
        feed["token_type_ids"] = np.zeros_like(ids)
    h = sess.run([hidden], feed)[0]
    m = mask[..., None].astype(np.float32)
    v = (h * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
    return v / np.linalg.norm(v, axis=1, keepdims=True)

embed(texts[:8])
for b in [int(x) for x in batches.split(",")]:
    rates = []
    for _ in range(reps):
        t = time.perf_counter()
        if sort:
            # sentence-transformers sorts by the text's length in characters
            order = sorted(range(n), key=lambda i: len(texts[i]))
            out = [None] * n
            for i in range(0, n, b):
                idx = order[i : i + b]
                for j, v in zip(idx, embed([texts[j] for j in idx])):
                    out[j] = v
        else:
            for i in range(0, n, b):
                embed(texts[i : i + b])
        rates.append(n / (time.perf_counter() - t))
    tag = f"{b:>3}" + (" sorted" if sort else "")
    print(f"onnxruntime {ort.__version__:<20} batch {tag}: {statistics.median(rates):>8.1f} sentences/s (median of {reps})")
