#!/usr/bin/env python3
"""check_links.py - the server's core links to no feature but through the feature table.

usage: check_links.py OBJECT...

The objects are sluiced_core's (CMake's $<TARGET_OBJECTS:sluiced_core>); each belongs to
the folder it was compiled from (core/, proxy/, provider_limits/, ...). check_layers.py
sees the #include arrows; this sees what they miss: a function a feature defines and the
core calls through a declaration in a core header (the pools' ramp keys once were read so).
The only feature symbols the core may name are the table's entries, `sl_feature_NAME`.
Prints every such reference and exits 1 when there is one.
"""
import os
import re
import subprocess
import sys

FEATURES = {"lease", "proxy", "limits", "fleet", "dashboard", "usage", "provider_limits"}


def folder(obj):
    parts = obj.replace(os.sep, "/").split("/")
    return parts[-2] if len(parts) >= 2 else ""


def symbols(obj, defined):
    args = ["nm", "--defined-only" if defined else "-u", obj]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    names = set()
    for line in out.splitlines():
        f = line.split()
        if defined and len(f) == 3 and f[1] in "TDRB":
            names.add(f[2])
        elif not defined and f:
            names.add(f[-1])
    return names


def main():
    objs = [o for o in sys.argv[1:] if o.endswith(".o")]
    core = [o for o in objs if folder(o) == "core"]
    features = [o for o in objs if folder(o) in FEATURES]
    if not core or not features:
        print("links: no core or no feature objects given")
        return 1
    owner = {}
    for o in features:
        for s in symbols(o, True):
            owner[s] = folder(o)
    problems = []
    for o in core:
        for s in sorted(symbols(o, False)):
            if s in owner and not re.fullmatch(r"sl_feature_[a-z_]+", s):
                problems.append(f"{os.path.basename(o)}: calls {s} of src/server/{owner[s]}/")
    for p in problems:
        print("links:", p)
    print(f"links: {len(core)} core objects checked, {len(problems)} references to a feature")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
