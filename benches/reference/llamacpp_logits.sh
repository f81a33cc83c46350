#!/usr/bin/env bash
# llama.cpp's logits for the tiny architecture files (tests/data/tiny): builds
# llamacpp_logits.cpp and llamacpp_embed.cpp against a llama.cpp build and writes
# DIR/<model>.logits.jsonl for every DIR/*.gguf, over the prompts in DIR/prompts.txt, with 16 greedy
# steps per prompt, and DIR/<model>.embeddings.jsonl for the files that are embedding models.
#
#   LLAMA_CPP=/path/to/llama.cpp benches/reference/llamacpp_logits.sh tests/data/tiny
#
# LLAMA_CPP is a llama.cpp source tree built with CMake into build/ (e.g. the one vendored in the
# llama-cpp-python source package; docs/perf.md has the build line used on the x86 machines).
set -euo pipefail
dir="${1:?usage: LLAMA_CPP=... $0 DIR}"
: "${LLAMA_CPP:?set LLAMA_CPP to a built llama.cpp source tree}"
here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"
for tool in llamacpp_logits llamacpp_embed; do
  g++ -O2 -std=c++17 -I"$LLAMA_CPP/include" -I"$LLAMA_CPP/ggml/include" "$here/$tool.cpp" \
    -L"$LLAMA_CPP/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$LLAMA_CPP/build/bin" -o "$tmp/$tool"
done
bin="$tmp/llamacpp_logits"
for m in "$dir"/*.gguf; do
  out="${m%.gguf}.logits.jsonl"
  "$bin" "$m" "$dir/prompts.txt" 16 > "$out" 2>/dev/null
  echo "wrote $out ($(wc -l < "$out") prompts)"
  emb="${m%.gguf}.embeddings.jsonl"
  "$tmp/llamacpp_embed" "$m" "$dir/prompts.txt" > "$emb" 2>/dev/null
  if [ -s "$emb" ]; then echo "wrote $emb"; else rm -f "$emb"; fi
done
