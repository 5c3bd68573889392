"""The experiments' cache: one file per (name, config, device, code version) under DIR/cache.

An interrupted run resumes where it stopped; entries are written atomically and read back with
torch.load(weights_only=True), so a file in a shared directory cannot run code."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from derive import __version__
from derive.results import remove_stale_temporaries
from numeric.experiments import sticky


class Cache:
    """Experiment outputs under DIR/cache, one file per (name, config, device, code version). Entries are
    loaded with torch.load(weights_only=True) (tensors, plain data and the classes sticky.SAFE_GLOBALS
    names: a file in a shared directory cannot run code); a corrupt or truncated entry is reported,
    deleted and recomputed; temporaries left by an interrupted save are removed."""

    def __init__(self, root):
        self.root = Path(root) / "cache"
        self._swept = False

    def key(self, name, cfg, device):
        blob = json.dumps({"name": name, "cfg": repr(cfg), "device": device, "version": __version__}, sort_keys=True)
        return self.root / f"{name}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}.pt"

    def sweep(self, log):
        """Once per run: remove the temporaries of saves an earlier process did not finish."""
        if not self._swept:
            remove_stale_temporaries(self.root, ("*.tmp",), log=log)
            self._swept = True

    def load(self, path, log):
        """The entry at `path`, or None if there is none or it is corrupt (then it is reported and deleted)."""
        if not path.exists():
            return None
        try:
            return sticky.load(path)
        except Exception as exc:  # truncated zip, garbage, a pickle of something not allowed
            sticky.discard_corrupt(path, exc, log)
            return None

    def get_or_run(self, name, cfg, device, fn, log):
        self.sweep(log)
        path = self.key(name, cfg, device)
        out = self.load(path, log)
        if out is not None:
            log(f"  cached   {name} ({path.name})")
            return out
        out = fn()
        sticky.save_atomic(out, path)
        return out
