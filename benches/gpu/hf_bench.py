"""HF transformers on the same GPU and GGUF file as `cinder bench --backend cuda`: the model loaded
from the GGUF (dequantized to fp16), eager attention, batch-1 decode (tg128), a 512-token prefill
(pp512) and 32 sequences decoding together. Prints one JSON object. Used by benches/gpu/run.sh.

Usage: python3 hf_bench.py MODEL.gguf
"""

import json
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def timed(fn, reps=3):
    """Median wall time of fn() over reps runs after one warm-up, synchronized."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def main():
    path = sys.argv[1]
    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path),
        gguf_file=os.path.basename(path),
        torch_dtype=torch.float16,
        attn_implementation="eager",
    ).to("cuda")
    model.eval()
    vocab = model.config.vocab_size
    prompt = (torch.arange(512, device="cuda") * 2654435761 % vocab).unsqueeze(0)

    def generate(batch, prompt_len, new):
        ids = prompt[:, :prompt_len].repeat(batch, 1)
        with torch.no_grad():
            model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
            )

    def prefill():
        with torch.no_grad():
            model(prompt)

    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    pp = timed(prefill)
    out["pp512_tps"] = 512 / pp
    one = timed(lambda: generate(1, 1, 1))
    t = timed(lambda: generate(1, 1, 129))
    out["tg128_tps"] = 128 / (t - one)
    one32 = timed(lambda: generate(32, 1, 1), reps=2)
    t32 = timed(lambda: generate(32, 1, 65), reps=2)
    out["batch32_tg64_total_tps"] = 32 * 64 / (t32 - one32)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
