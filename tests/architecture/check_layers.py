#!/usr/bin/env python3
"""check_layers.py - every #include of ours follows the arrows of docs/architecture.md.

usage: check_layers.py SOURCE_DIR

Each file under src/ belongs to a module (its directory; src/backend/redis.h belongs
to the redis backend, with src/backend/redis/). A quoted include, or <sluice/...>, is
resolved the way the build resolves it (the including file's directory first, then
include/ and the modules' directories) and must name a header of the same module, a
module that module may use, or a public header it may use. Prints every include that
runs against an arrow, and exits 1 when there is one; a module missing from the table
below is an error too, so a new module gets its row (and docs/architecture.md its
line) before it gets code.
"""
import os
import re
import sys

# module -> (modules it may include, public headers it may include). common.h is
# always allowed: every public header includes it.
ALLOWED = {
    # common: the pieces every layer shares (the hash map, the error table); it uses nothing.
    "common": (set(), set()),
    "tokenizer": (set(), {"tokenizer.h"}),
    "provider": (set(), set()),
    "engine": ({"common"}, {"engine.h"}),  # common/map.h: the engine's maps
    "limits": ({"common"}, set()),  # common/map.h: the key map
    "backend": ({"common"}, {"engine.h"}),  # common/grow.h: growing arrays
    # limits: the FCALL plans; common/grow.h
    "backend/redis": ({"backend", "limits", "common"}, {"engine.h"}),
    "client": ({"common"}, {"client.h"}),  # common/errors.def: an answer's type -> code
    "sim": ({"provider", "common"}, {"engine.h"}),  # common/grow.h
    # sluiced: a core and one folder per feature. A feature uses the core and the
    # libraries, never another feature; the core uses no feature: it reaches them through
    # the feature table (core/features.def, core/feature.h) and the event bus.
    # common: errors.def, the one error table the server and the client share.
    "server/core": ({"backend", "backend/redis", "limits", "common"}, {"engine.h", "tokenizer.h"}),
    "server/provider_limits": ({"server/core", "backend", "provider"}, {"engine.h"}),
    "server/lease": ({"server/core", "backend"}, {"engine.h", "tokenizer.h"}),
    "server/proxy": ({"server/core", "backend", "provider", "common"}, {"engine.h", "tokenizer.h"}),  # common/grow.h
    "server/limits": ({"server/core", "backend", "backend/redis", "limits"}, {"engine.h"}),
    "server/fleet": ({"server/core", "backend", "common"}, {"engine.h"}),  # common/map.h
    "server/dashboard": ({"server/core"}, {"engine.h"}),
    "server/usage": ({"server/core", "backend"}, {"engine.h"}),
    "emu": ({"provider", "common"}, {"tokenizer.h"}),  # common/mix.h: the filler's mixer
    "cli": ({"sim", "common"}, {"client.h", "tokenizer.h"}),  # common/grow.h
}

INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<(sluice/[^>]+)>)', re.M)


def module_of(root, path):
    rel = os.path.relpath(path, os.path.join(root, "src")).replace(os.sep, "/")
    if rel.startswith("backend/redis/") or rel == "backend/redis.h":
        return "backend/redis"
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def main():
    root = os.path.abspath(sys.argv[1])
    src = os.path.join(root, "src")
    public = os.path.join(root, "include")
    files, dirs = [], set()
    for d, _, names in os.walk(src):
        for n in names:
            if n.endswith((".c", ".h", ".def")):
                files.append(os.path.join(d, n))
                dirs.add(d)
    problems = []
    for m in sorted({module_of(root, f) for f in files}):
        if m not in ALLOWED:
            problems.append(f"src/{m}: a module docs/architecture.md and this test do not list")
    search = [public] + sorted(dirs)
    for f in sorted(files):
        mod = module_of(root, f)
        if mod not in ALLOWED:
            continue
        may_modules, may_public = ALLOWED[mod]
        text = open(f, encoding="utf-8", errors="replace").read()
        for match in INCLUDE.finditer(text):
            name = match.group(1) or match.group(2)
            target = None
            for d in [os.path.dirname(f)] + search:
                cand = os.path.normpath(os.path.join(d, name))
                if os.path.isfile(cand):
                    target = cand
                    break
            if target is None:
                continue  # a system or third-party header
            rel = os.path.relpath(f, root)
            if target.startswith(public + os.sep):
                h = os.path.basename(target)
                if h != "common.h" and h not in may_public:
                    problems.append(f"{rel}: includes public {name}; src/{mod} may include "
                                    f"{sorted(may_public | {'common.h'})}")
                continue
            tmod = module_of(root, target)
            if tmod != mod and tmod not in may_modules:
                problems.append(f"{rel}: includes {os.path.relpath(target, root)} of src/{tmod}; "
                                f"src/{mod} may use {sorted(may_modules) or 'no other module'}")
    for p in problems:
        print("layers:", p)
    print(f"layers: {len(files)} files checked, {len(problems)} arrows against the layers")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
