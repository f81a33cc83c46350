#!/usr/bin/env bash
# Sentence-embedding throughput, Cinder against onnxruntime, in one run on the same threads:
# paraphrase-MiniLM-L3-v2 (the catalog's f32 ONNX model; Cinder loads the same file) and, Cinder only
# unless an f32 ONNX export exists, all-MiniLM-L6-v2. Batches in file order (requests of B texts), then
# the same sentences length-sorted into batches (an offline corpus, where padding is small).
# Needs `pip install onnxruntime tokenizers numpy`.
# usage: benches/embed_vs_ort.sh [THREADS=2] [REPS=5]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS="${1:-2}"; REPS="${2:-5}"; N=128; BATCHES=1,8,32
CINDER="${CINDER:-${CARGO_TARGET_DIR:-target}/release/cinder}"
FILE=benches/prompts/sentences.txt
L3=paraphrase-minilm-l3-v2-onnx
dir="$("$CINDER" pull "$L3" | awk '/\.onnx$/ {print $2}' | xargs dirname)"
for round in 1 2; do
  echo "== round $round"
  "$CINDER" --threads "$THREADS" bench-embed "$L3" --file "$FILE" --batch "$BATCHES" --sentences "$N" --reps "$REPS"
  python3 benches/ort_embed.py "$dir/paraphrase-MiniLM-L3-v2.onnx" "$dir/tokenizer.json" "$FILE" "$THREADS" "$BATCHES" "$N" "$REPS"
  # Length-sorted batches (an offline corpus): onnxruntime's padding mostly goes away.
  "$CINDER" --threads "$THREADS" bench-embed "$L3" --file "$FILE" --batch 8,32 --sentences "$N" --reps "$REPS" --sorted
  python3 benches/ort_embed.py "$dir/paraphrase-MiniLM-L3-v2.onnx" "$dir/tokenizer.json" "$FILE" "$THREADS" 8,32 "$N" "$REPS" sorted
done
"$CINDER" --threads "$THREADS" bench-embed all-minilm-l6-v2 --file "$FILE" --batch "$BATCHES" --sentences "$N" --reps "$REPS"
