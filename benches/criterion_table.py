"""Turns criterion's results into the cross-backend table of docs/perf.md (benches/cross_backend.sh).

Reads every `<group>/.../new/benchmark.json` + `estimates.json` under CRITERION_DIR. A group names
its backend (`matmul_wgpu_m1_1536x576`, `decode_step_flex`, ...): rows are the benchmark without it,
columns the backends, cells the median time per iteration. The table replaces what sits between
`<!-- cross-backend:begin -->` and `<!-- cross-backend:end -->` in PERF_MD.
usage: python3 benches/criterion_table.py CRITERION_DIR PERF_MD "caption"
"""
import json, pathlib, re, sys

BACKENDS = ["flex", "ndarray", "candle", "wgpu", "cuda"]
root, perf, caption = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]

def fmt(ns):
    for unit, div in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= div:
            return f"{ns / div:.3g} {unit}"
    return f"{ns:.3g} ns"

cells, rows = {}, []
for bench in sorted(root.glob("**/new/benchmark.json")):
    meta = json.loads(bench.read_text())
    est = json.loads((bench.parent / "estimates.json").read_text())
    group = meta["group_id"]
    kind = next((k for k in BACKENDS if re.search(rf"(^|_){k}(_|$)", group)), None)
    if kind is None:
        continue
    name = re.sub(rf"(^|_){kind}(?=_|$)", "", group)
    row = " / ".join(p for p in (name, meta.get("function_id"), meta.get("value_str")) if p)
    if row not in rows:
        rows.append(row)
    cells[(row, kind)] = est["median"]["point_estimate"]

kinds = [k for k in BACKENDS if any(k == c for _, c in cells)]
if not kinds:
    sys.exit(f"no backend results under {root}")
lines = [f"Median time per iteration ({caption}); `benches/cross_backend.sh` regenerates this table.", "",
         "| benchmark | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
for row in rows:
    lines.append(f"| {row} | " + " | ".join(fmt(cells[(row, k)]) if (row, k) in cells else "—" for k in kinds) + " |")
table = "\n".join(lines)

text = perf.read_text()
begin, end = "<!-- cross-backend:begin -->", "<!-- cross-backend:end -->"
if begin not in text:
    sys.exit(f"{perf} has no {begin} marker")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
perf.write_text(f"{head}{begin}\n{table}\n{end}{tail}")
print(table)
