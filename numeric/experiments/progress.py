"""Progress for long runs: a tqdm bar on a terminal, a line every 10% otherwise (CI logs)."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total, desc, log=print):
        self.total, self.desc, self.log = total, desc, log
        self.done, self.t0, self.next_mark = 0, time.perf_counter(), 0.1
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, mininterval=1.0, leave=False)

    def update(self, n=1):
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.done >= self.next_mark * self.total:
            elapsed = time.perf_counter() - self.t0
            eta = elapsed * (self.total - self.done) / max(self.done, 1)
            self.log(f"    {self.desc}: {self.done}/{self.total} steps, {elapsed:.0f}s elapsed, ~{eta:.0f}s left")
            self.next_mark += 0.1

    def close(self):
        if self.bar is not None:
            self.bar.close()
