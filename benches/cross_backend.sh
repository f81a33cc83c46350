#!/usr/bin/env bash
# Every criterion bench of the kernels and the embedding path on every backend this build has, then
# the cross-backend table in docs/perf.md (between its `cross-backend` markers), in one command.
# usage: benches/cross_backend.sh [FEATURES=ndarray,candle,wgpu]   (flex is always in; add cuda on
#        a GPU machine). wgpu without a GPU runs on Mesa's lavapipe (apt: mesa-vulkan-drivers).
set -euo pipefail
cd "$(dirname "$0")/.."
FEATURES="${1:-ndarray,candle,wgpu}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
TARGET="${CARGO_TARGET_DIR:-target}"
# Old results of benches that no longer exist would otherwise reach the table.
rm -rf "$TARGET/criterion"
cargo bench --features "$FEATURES" --bench kernels -- --noplot
cargo bench --features "$FEATURES" --bench embeddings -- --noplot embed_
python3 benches/criterion_table.py "$TARGET/criterion" docs/perf.md \
  "$(git rev-parse --short HEAD) · $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores · features flex,$FEATURES · $(nproc) threads · $(date -u +%Y-%m-%d)"
