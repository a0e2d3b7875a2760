#!/usr/bin/env python3
"""check_exports.py — the built libraries export only glesc_, and a static
consumer builds from the installed glesc-static.pc.

1. `nm -g --defined-only` on libglesc.a and libglesc.so: every global symbol
   they define must start with glesc_ (an application that also links ggml
   or anything else statically must not meet our internal names); the test
   fails naming each one that does not.
2. tests/static_consumer.c, which defines some of glesc's internal names
   itself, is compiled with `pkg-config --cflags` and linked with
   `pkg-config --libs` of the generated glesc-static.pc (copies of
   glesc.pc and glesc-static.pc whose libdir is a folder holding
   libglesc.a and libglesc.so side by side, as installed, and whose
   includedir holds a copy of the public headers, glesc_version.h
   generated in the build tree among them: INCLUDE_DIRS is a list joined
   by os.pathsep), then run; `READELF -d` of the program must name no
   libglesc.so (`-lglesc` would have picked it: the reason glesc-static.pc
   names the archive by its path). Neither .pc's Cflags may carry a -D of a
   dependency's.

usage: check_exports.py NM PKG_CONFIG PC_DIR STATIC_LIB SHARED_LIB CONSUMER_C
                        INCLUDE_DIRS READELF -- CC [CC_ARGS...]
"""
import os
import shlex
import shutil
import subprocess
import sys
import tempfile


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def global_symbols(nm, lib):
    out = subprocess.run([nm, "-g", "--defined-only", lib], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"{nm} {lib}: {out.stderr.strip()}")
    names = []
    for line in out.stdout.splitlines():
        parts = line.split()
        # "ADDRESS TYPE NAME"; archive member headers ("x.o:") and blank
        # lines have other shapes.
        if len(parts) == 3 and len(parts[1]) == 1:
            names.append((parts[1], parts[2]))
    return names


def check_namespace(nm, lib):
    names = global_symbols(nm, lib)
    foreign = sorted({f"{t} {n}" for t, n in names if not n.startswith("glesc_")})
    public = [n for _, n in names if n.startswith("glesc_")]
    if foreign:
        fail(f"{lib} defines {len(foreign)} global symbols outside glesc_:\n  " +
             "\n  ".join(foreign))
    if "glesc_version" not in public:
        fail(f"{lib} does not define glesc_version ({len(public)} glesc_ symbols)")
    print(f"{lib}: {len(public)} global symbols, all glesc_")


def check_static_consumer(pkg_config, pc_dir, libs, consumer, include_dir, readelf, cc):
    with tempfile.TemporaryDirectory(prefix="glesc-exports-") as tmp:
        # An installed layout: lib/libglesc.a beside lib/libglesc.so (the
        # shared library under the name -lglesc finds) and
        # include/glesc/*.h.
        libdir = os.path.join(tmp, "lib")
        os.mkdir(libdir)
        static_lib, shared_lib = libs
        shutil.copy(static_lib, libdir)
        shutil.copy(shared_lib, os.path.join(libdir, "libglesc.so"))
        incdir = os.path.join(tmp, "include")
        os.makedirs(os.path.join(incdir, "glesc"))
        for d in include_dir.split(os.pathsep):
            for h in os.listdir(d):
                if h.endswith(".h"):
                    shutil.copy(os.path.join(d, h), os.path.join(incdir, "glesc"))
        # The .pc files as generated, with libdir and includedir pointed
        # there (--define-variable would repoint the dependencies' .pc files
        # too).
        pcdir = os.path.join(tmp, "pkgconfig")
        os.mkdir(pcdir)
        for pc_name in ("glesc.pc", "glesc-static.pc"):
            with open(os.path.join(pc_dir, pc_name)) as src:
                lines = src.read().splitlines()
            with open(os.path.join(pcdir, pc_name), "w") as dst:
                for line in lines:
                    if line.startswith("libdir="):
                        line = "libdir=" + libdir
                    elif line.startswith("includedir="):
                        line = "includedir=" + incdir
                    dst.write(line + "\n")
        env = dict(os.environ)
        env["PKG_CONFIG_PATH"] = pcdir + os.pathsep + env.get("PKG_CONFIG_PATH", "")

        def pc(package, *args):
            cmd = [pkg_config, *args, package]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if out.returncode != 0:
                fail(f"{' '.join(cmd)}: {out.stderr.strip()}")
            return shlex.split(out.stdout)

        for package in ("glesc", "glesc-static"):
            defines = [f for f in pc(package, "--cflags") if f.startswith("-D")]
            if defines:
                fail(f"{package}.pc's Cflags hand consumers {' '.join(defines)}")
        cflags = pc("glesc-static", "--cflags")
        libs = pc("glesc-static", "--libs")
        exe = os.path.join(tmp, "static_consumer")
        cmd = [*cc, *cflags, consumer, "-o", exe, *libs]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"static link failed:\n{' '.join(cmd)}\n{out.stdout}{out.stderr}")
        dynamic = subprocess.run([readelf, "-d", exe], capture_output=True, text=True)
        if dynamic.returncode != 0:
            fail(f"{readelf} -d {exe}: {dynamic.stderr.strip()}")
        needed = [line for line in dynamic.stdout.splitlines() if "(NEEDED)" in line]
        if any("libglesc" in line for line in needed):
            fail("the static consumer needs the shared library:\n" + "\n".join(needed))
        run = subprocess.run([exe], capture_output=True, text=True)
        if run.returncode != 0:
            fail(f"static consumer exited {run.returncode}:\n{run.stdout}{run.stderr}")
        print(f"static consumer ({' '.join(libs)}; no libglesc.so among {len(needed)} "
              f"needed libraries): {run.stdout.strip()}")


def main(argv):
    if "--" not in argv or argv.index("--") != 9:
        print(__doc__)
        return 2
    nm, pkg_config, pc_dir, static_lib, shared_lib, consumer, include_dir, readelf = argv[1:9]
    cc = argv[10:]
    check_namespace(nm, static_lib)
    check_namespace(nm, shared_lib)
    check_static_consumer(pkg_config, pc_dir, (static_lib, shared_lib), consumer, include_dir,
                          readelf, cc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
