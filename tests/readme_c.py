#!/usr/bin/env python3
"""readme_c.py README CC INCLUDE_DIR — compiles the C API section's code.

The ```c blocks of README.md are one program, in order: `#include` lines and
blocks that start with a `static` function go to file scope, every other
block goes into main's body, which ends with `return 0;`. The program is
compiled (not linked or run) against INCLUDE_DIR with -std=c11 -Wall -Wextra
-Wpedantic -Werror, so the README's snippets compile as written.
"""
import os
import re
import subprocess
import sys
import tempfile

readme, cc, include_dirs = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
text = open(readme, encoding="utf-8").read()
blocks = re.findall(r"^```c\n(.*?)^```", text, re.S | re.M)
if not blocks:
    sys.exit(f"{readme}: no ```c blocks")
top, body = [], []
for b in blocks:
    lines = b.splitlines()
    includes = [l for l in lines if l.startswith("#include")]
    rest = "\n".join(l for l in lines if not l.startswith("#include")).strip("\n")
    top += includes
    if rest.lstrip().startswith("static "):
        top.append(rest)
    elif rest:
        body.append(rest)
program = "\n".join(top) + "\n\nint main(void)\n{\n" + "\n".join(body) + "\nreturn 0;\n}\n"
with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
    f.write(program)
cmd = cc + ["-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-fsyntax-only"]
cmd += [a for inc in include_dirs for a in ("-I", inc)] + [f.name]
r = subprocess.run(cmd, capture_output=True, text=True)
os.unlink(f.name)
if r.returncode != 0:
    numbered = "\n".join(f"{i + 1:4} {l}" for i, l in enumerate(program.splitlines()))
    sys.exit(f"the README's C code does not compile:\n{r.stderr}\n{numbered}")
print(f"{len(blocks)} C blocks of {readme} compile")
