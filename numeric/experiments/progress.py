"""Progress for long runs: a tqdm bar on a terminal, a line every 10% otherwise (CI logs)."""
from __future__ import annotations

import sys
import time


class Progress:
    """`initial`: steps already done when counting starts (a resumed run); the rate, and so the time left,
    comes from the steps run since."""

    def __init__(self, total, desc, log=print, initial=0, unit="steps"):
        self.total, self.desc, self.log, self.unit = total, desc, log, unit
        self.initial = self.done = initial
        self.t0 = time.perf_counter()
        self.next_tenth = self._tenths(initial) + 1  # the next 10% mark past the starting point
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, mininterval=1.0, leave=False)

    def _tenths(self, done):
        return 10 * done // max(self.total, 1)

    def update(self, n=1):
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self._tenths(self.done) >= self.next_tenth:
            elapsed = time.perf_counter() - self.t0
            eta = elapsed * (self.total - self.done) / max(self.done - self.initial, 1)
            self.log(f"    {self.desc}: {self.done}/{self.total} {self.unit}, {elapsed:.0f}s elapsed, ~{eta:.0f}s left")
            self.next_tenth = self._tenths(self.done) + 1

    def close(self):
        if self.bar is not None:
            self.bar.close()
