"""checkpoint.py - an agent's plan state on disk, in libsluice-client's format (docs/client.md
"Checkpoints"), written atomically."""
from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any, Mapping


def save_checkpoint(path: str, cp: Mapping[str, Any]) -> None:
    """Writes checkpoint `cp` (goal, step, files, decisions, next_call, request_id) to
    `path` atomically: a temporary file beside it, fsync, rename, fsync of the directory."""
    data = dict(cp)
    data["sluice_checkpoint"] = 1
    data["saved_at"] = time.time()
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
