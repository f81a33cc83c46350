#!/usr/bin/env python3
"""Fails when a workspace crate depends on a crate of a higher floor.

Cinder is built in floors; each crate may depend on crates of its own floor or of floors below it,
never above (normal, build and dev dependencies alike). A crate's floor is the folder it lives in,
so a new crate gets its floor by where it is put, and a crate in no known folder is an error.
The same order is drawn in book/src/architecture.md.

Usage: python3 .ci/layering.py   (from anywhere inside the repository; runs `cargo metadata`)
"""

import json
import os
import subprocess
import sys

# Lowest first: (floor, folders relative to the workspace root).
FLOORS = [
    ("formats", ["gguf", "tokenizer", "catalog"]),
    # the vector index: files and search, nothing of the model stack
    ("index", ["index"]),
    ("backends", ["backends"]),
    ("runtime", ["runtime"]),
    # perplexity and KL divergence: run models, serve nothing
    ("eval", ["eval"]),
    ("models", ["models"]),
    ("importer", ["importer"]),
    ("server", ["server"]),
    # the facade crate at the root (CLI, examples, benches, tests), and the example crates built on it
    ("cinder", ["", "examples"]),
]


def floor_of(root, manifest_path):
    rel = os.path.relpath(os.path.dirname(manifest_path), root)
    rel = "" if rel == "." else rel
    best = None
    for level, (name, folders) in enumerate(FLOORS):
        for folder in folders:
            if folder == "" and rel == "":
                return level, name
            if folder and (rel == folder or rel.startswith(folder + os.sep)):
                if best is None or len(folder) > best[2]:
                    best = (level, name, len(folder))
    return None if best is None else best[:2]


def main():
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--no-deps"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    root = meta["workspace_root"]
    members = {p["name"]: p for p in meta["packages"]}
    floors = {}
    errors = []
    for name, p in members.items():
        f = floor_of(root, p["manifest_path"])
        if f is None:
            errors.append(f"{name}: {p['manifest_path']} is in no floor's folder (see FLOORS)")
        else:
            floors[name] = f
    for name, p in sorted(members.items()):
        if name not in floors:
            continue
        level, floor = floors[name]
        for dep in p["dependencies"]:
            other = dep["name"]
            if other not in floors:
                continue  # not a workspace crate
            olevel, ofloor = floors[other]
            if olevel > level:
                kind = dep.get("kind") or "normal"
                errors.append(
                    f"{name} ({floor}) depends on {other} ({ofloor}), a higher floor ({kind} dependency)"
                )
    order = " <- ".join(name for name, _ in FLOORS)
    if errors:
        print(f"layering check failed (floors, lowest first: {order}):", file=sys.stderr)
        for e in errors:
            print(f"  {e}", file=sys.stderr)
        return 1
    by_floor = {}
    for name, (level, floor) in floors.items():
        by_floor.setdefault(level, []).append(name)
    for level, (floor, _) in enumerate(FLOORS):
        print(f"{floor:>9}: {', '.join(sorted(by_floor.get(level, [])))}")
    print(f"layering ok: {len(floors)} crates, every dependency points down ({order})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
