#!/usr/bin/env python3
"""check-layers.py: the layers under src/ form a DAG (docs/architecture.md).

Each folder of src/ is a layer with a rank (its subfolders, such as
src/llm/tokenizer/, belong to it); a file may include ("x/...") only
headers of its own layer or of lower ones. Also, no layer up to
compute calls glesc_graph_compute (the device profile and everything else
below the public entry run their own dispatches: no recursion into it),
and fusion lives with code generation: no layer below kernels has a fusion
pass (a file named *fuse*, or a call or definition of a *_fuse* function):
what a kernel can absorb is the kernels layer's knowledge, graph's op table
says only what an op means.
Prints each violation as FILE:LINE and fails; prints nothing when all is
well. --graph prints the include graph between layers instead.

usage: tools/check-layers.py [--graph]
"""
import os
import re
import sys

ORDER = ["core", "gl", "emit", "quant", "gguf", "graph", "kernels", "compute", "llm"]
RANK = {name: i for i, name in enumerate(ORDER)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"(([^"/]+)/[^"]+)"')
COMPUTE_CALL = re.compile(r"\bglesc_graph_compute\s*\(")
FUSE_CALL = re.compile(r"\b\w*_fuse\w*\s*\(")
# Comments and string literals, so that only code is searched for calls.
NOISE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"', re.S)


def layer_files(folder):
    """The .c and .h files of a layer, its subfolders' too (src/llm/tokenizer/), as
    paths relative to the layer's folder, sorted."""
    names = []
    for top, dirs, files in os.walk(folder):
        dirs.sort()
        for f in files:
            if f.endswith((".c", ".h")):
                names.append(os.path.relpath(os.path.join(top, f), folder))
    return sorted(names)


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    errors, edges = [], {}
    for layer in sorted(os.listdir(root)):
        if not os.path.isdir(os.path.join(root, layer)):
            continue
        if layer not in RANK:
            errors.append(f"src/{layer}/: a folder that is no layer of {' < '.join(ORDER)}"
                          " (add it to ORDER in tools/check-layers.py and to docs/architecture.md)")
            continue
        for name in layer_files(os.path.join(root, layer)):
            rel = f"src/{layer}/{name}"
            text = open(os.path.join(root, layer, name), encoding="utf-8").read()
            for n, line in enumerate(text.split("\n"), 1):
                m = INCLUDE.match(line)
                if not m or m.group(2) == layer:
                    continue
                header, dep = m.group(1), m.group(2)
                edges.setdefault(layer, set()).add(dep)
                if dep not in RANK:
                    errors.append(f'{rel}:{n}: includes "{header}": {dep} is no layer')
                elif RANK[dep] > RANK[layer]:
                    errors.append(f'{rel}:{n}: includes "{header}": {layer} is below {dep} '
                                  f"({' < '.join(ORDER)})")
            code = NOISE.sub(lambda c: re.sub(r"[^\n]", " ", c.group(0)), text)
            if RANK[layer] < RANK["kernels"]:
                if "fuse" in os.path.basename(name):
                    errors.append(f"{rel}: a fusion pass below kernels ({layer}): fusion lives "
                                  "with code generation (src/kernels/)")
                for c in FUSE_CALL.finditer(code):
                    n = code.count("\n", 0, c.start()) + 1
                    errors.append(f"{rel}:{n}: {c.group(0).rstrip('( ')}: fusion below kernels "
                                  f"({layer}): it lives with code generation (src/kernels/)")
            if RANK[layer] <= RANK["compute"]:
                for c in COMPUTE_CALL.finditer(code):
                    n = code.count("\n", 0, c.start()) + 1
                    if not code[:c.start()].rstrip().endswith("glesc_status"):  # the definition
                        errors.append(f"{rel}:{n}: calls glesc_graph_compute from inside the "
                                      f"engine ({layer}): only layers above compute may")
    if "--graph" in sys.argv[1:]:
        for layer in ORDER:
            deps = sorted(edges.get(layer, ()), key=lambda d: RANK.get(d, -1))
            print(f"{layer} -> {', '.join(deps) if deps else '(nothing)'}")
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
