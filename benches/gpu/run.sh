#!/usr/bin/env bash
# Cinder on a CUDA GPU against the CPU and against HF transformers (fp16, eager) on the same GPU and
# GGUF file, as one JSON file. Prepared here, run on a machine with a GPU (no Rust, no network
# needed there), in ~8 minutes:
#
#   bash benches/gpu/run.sh prepare        # here: build with --features cuda, stage the binary
#                                          # and the Lee corpus in benches/gpu/.stage/0/, the model
#                                          # in parts of 30 MiB in .stage/1/, .stage/2/, ...
#   bash benches/gpu/run.sh park           # there, once per staged folder, each carried alone
#                                          # (a call carries at most 64 MiB with the ~25 MiB working
#                                          # tree): keeps it in ~/cinder-gpu
#   bash benches/gpu/run.sh run            # there: joins the parts and measures; results in
#                                          # $OUT/gpu.json (or ./gpu.json) and a log beside it
#
# What `run` measures, each step under its own timeout:
#   - greedy: 32 tokens of three prompts on cuda and on flex (the CPU), and whether they agree;
#   - perplexity on 8 × 512 tokens of the Lee corpus, cuda and flex;
#   - cinder bench on cuda: pp512, tg128, concurrency 1, 8 and 32, kernel launches and host syncs
#     per decoded token;
#   - the first token of a cold process (`cinder run --max-tokens 1`, wall time);
#   - HF transformers fp16 on the same GPU and GGUF (where python3 has torch, transformers and
#     gguf): tg128 at batch 1, pp512, 32 sequences decoding together.
set -uo pipefail
cd "$(dirname "$0")/../.."
here=benches/gpu
stage=$here/.stage
keep=${CINDER_GPU_DIR:-$HOME/cinder-gpu}
model_name=SmolLM2-135M-Instruct.Q4_1.gguf

prepare() {
  set -e
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/cinder/target}"
  cargo build --release --features cuda --bin cinder
  local bin=$CARGO_TARGET_DIR/release/cinder
  local model lee
  model=$("$bin" pull smollm2-135m | awk '{print $2}')
  lee=$("$bin" pull lee-corpus | awk '{print $2}')
  rm -rf "$stage" && mkdir -p "$stage/0"
  strip -o "$stage/0/cinder" "$bin" && gzip -9 "$stage/0/cinder"
  sha256sum "$model" | awk '{print $1}' > "$stage/0/model.sha256"
  cp "$lee" "$stage/0/lee.txt"
  local tmp
  tmp=$(mktemp -d)
  split -b 30M -d -a 2 "$model" "$tmp/model.part"
  local i=1 f
  for f in "$tmp"/model.part*; do
    mkdir -p "$stage/$i" && mv "$f" "$stage/$i/"
    i=$((i + 1))
  done
  rmdir "$tmp"
  grep -qx '/benches/gpu/.stage/' .git/info/exclude 2>/dev/null || echo /benches/gpu/.stage/ >> .git/info/exclude
  du -sh "$stage"/*
  echo "staged: carry each of benches/gpu/.stage/N in its own call with 'park', then 'run'"
}

park() {
  mkdir -p "$keep"
  local d
  for d in "$stage"/*/; do [ -d "$d" ] && cp -f "$d"* "$keep"/; done
  ls -la "$keep"
}

run() {
  local out=${OUT:-$PWD}
  mkdir -p "$out"
  local log=$out/gpu.log json=$out/gpu.json
  exec > >(tee -a "$log") 2>&1
  cd "$keep" || { echo "nothing parked in $keep"; exit 1; }
  [ -x cinder ] || { gunzip -f cinder.gz && chmod +x cinder; }
  if [ ! -f "$model_name" ]; then
    cat model.part* > "$model_name"
    echo "$(cat model.sha256)  $model_name" | sha256sum -c - || exit 1
  fi
  # cubecl compiles kernels with NVRTC and looks for libnvrtc.so.
  mkdir -p nvrtc
  for f in /usr/local/cuda/targets/x86_64-linux/lib/libnvrtc*.so*; do
    [ -e "$f" ] && ln -sf "$f" nvrtc/
  done
  [ -e nvrtc/libnvrtc.so ] || ln -sf "$(ls nvrtc/libnvrtc.so.* | head -1)" nvrtc/libnvrtc.so
  export LD_LIBRARY_PATH=$PWD/nvrtc:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  export CUDA_PATH=/usr/local/cuda CINDER_HOME=$PWD/home
  local C="./cinder"
  local M="$PWD/$model_name"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > gpu.txt || true
  echo "== [$(date +%T)] cold first token"
  local t0 t1
  t0=$(date +%s.%N)
  timeout 120 $C run "$M" --backend cuda --prompt "The capital of France is" --temperature 0 --max-tokens 1 > cold.txt
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc > cold_s.txt
  echo "== [$(date +%T)] greedy, cuda and flex"
  local prompts=("The capital of France is" "Rust is a systems programming language that" "def fibonacci(n):")
  for i in 0 1 2; do
    timeout 60 $C run "$M" --backend cuda --prompt "${prompts[$i]}" --temperature 0 --max-tokens 32 > "greedy_cuda_$i.txt"
    timeout 60 $C --threads 16 run "$M" --backend flex --prompt "${prompts[$i]}" --temperature 0 --max-tokens 32 > "greedy_flex_$i.txt"
  done
  echo "== [$(date +%T)] perplexity 8 x 512"
  timeout 180 $C perplexity "$M" --backend cuda --file lee.txt --ctx 512 --chunks 8 --json > ppl_cuda.json
  timeout 180 $C --threads 16 perplexity "$M" --backend flex --file lee.txt --ctx 512 --chunks 8 --json > ppl_flex.json
  echo "== [$(date +%T)] bench"
  timeout 300 $C bench "$M" --backend cuda --prompt-tokens 512 --gen-tokens 128 --reps 3 \
    --concurrency 1,8,32 --json > bench_cuda.json
  echo "== [$(date +%T)] HF transformers fp16"
  if python3 -c "import torch, transformers, gguf" 2>/dev/null; then
    timeout 240 python3 "$OLDPWD/$here/hf_bench.py" "$M" > hf.json || echo '{"error": "hf_bench failed"}' > hf.json
  else
    echo '{"error": "python3 lacks torch, transformers or gguf"}' > hf.json
  fi
  echo "== [$(date +%T)] results"
  python3 - "$json" <<'PY'
import json, os, sys
def load(p):
    try:
        return json.load(open(p))
    except Exception as e:
        return {"error": f"{p}: {e}"}
greedy = []
for i in range(3):
    c, f = open(f"greedy_cuda_{i}.txt").read(), open(f"greedy_flex_{i}.txt").read()
    same = next((j for j, (a, b) in enumerate(zip(c, f)) if a != b), min(len(c), len(f)))
    greedy.append({"cuda": c, "flex": f, "same_prefix_chars": same, "equal": c == f})
out = {
    "gpu": open("gpu.txt").read().strip() if os.path.exists("gpu.txt") else None,
    "cold_first_token_s": float(open("cold_s.txt").read()),
    "greedy": greedy,
    "ppl": {"cuda": load("ppl_cuda.json"), "flex": load("ppl_flex.json")},
    "bench_cuda": load("bench_cuda.json"),
    "hf": load("hf.json"),
}
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(json.dumps({k: out[k] for k in ("gpu", "cold_first_token_s", "ppl")}, indent=1))
b = out["bench_cuda"]
print({k: b.get(k) for k in ("pp_tps", "tg_tps", "dispatches_per_token", "dispatches_per_layer", "host_syncs_per_token")})
print([(c.get("concurrency"), c.get("aggregate_tg_tps")) for c in b.get("concurrency", [])])
print(out["hf"])
PY
}

case "${1:-}" in
  prepare) prepare ;;
  park) park ;;
  run) run ;;
  *) echo "usage: $0 prepare | park | run"; exit 2 ;;
esac
