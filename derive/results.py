"""results.json (schema_version 1): checks, claims with verdicts, benchmarks, experiments; atomic writes."""
from __future__ import annotations

import json
import os
import platform
import re
import secrets
import subprocess
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

SCHEMA_VERSION = 1
# Files this process writes are newer than this; a temporary left by an interrupted save is older.
PROCESS_START = time.time()
KINDS = ("proof", "negative-control", "numeric", "benchmark", "experiment", "rule", "report")
STATUSES = ("pass", "fail", "skipped")
VERDICTS = ("proved", "disproved", "undecided", "confirmed", "reproduced", "partly-reproduced", "not-reproduced", "failed",
            "not-run")
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def default_threads():
    """The thread count a user set through OMP_NUM_THREADS / MKL_NUM_THREADS (the first valid one), else
    min(2, CPU count): the torch stages were measured on 2 cores."""
    for name in THREAD_ENV:
        text = os.environ.get(name, "").strip()
        if text.isdigit() and int(text) > 0:
            return int(text)
    return min(2, os.cpu_count() or 1)

@dataclass
class Check:
    id: str
    stage: str
    kind: str
    claim: str
    status: str
    seconds: float
    measured: object = None
    expected: object = None
    detail: str = ""
    # Proof checks: which path, identity and mask setting, and the outcome (derive.prove.OUTCOMES).
    path: str = ""
    part: str = ""
    setting: str = ""
    outcome: str = ""  # proved | holds | disproved (with witness) | undecided (reason in measured)
    witness: dict | None = None
    scope: list | None = None  # holds: the sizes the path tried, the only sizes its outcome is about

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"check {self.id}: unknown kind {self.kind!r}")
        if self.status not in STATUSES:
            raise ValueError(f"check {self.id}: unknown status {self.status!r}")


@dataclass
class Results:
    environment: dict
    checks: list = field(default_factory=list)
    claims: dict = field(default_factory=dict)  # id -> {id, name, verdict, evidence}
    benchmarks: list = field(default_factory=list)
    experiments: dict = field(default_factory=dict)
    derive: dict = field(default_factory=dict)  # kill matrix, scaling table, path timings
    stages: dict = field(default_factory=dict)  # stage -> {status, seconds}
    # id -> {name, statement, ref, ...} of every claim the run is about, from the claim registries
    # (derive.claims, numeric.experiments.registry): a claim no stage sets is written as not-run.
    catalogue: dict = field(default_factory=dict)

    def add(self, check: Check):
        if any(c.id == check.id for c in self.checks):
            raise ValueError(f"duplicate check id {check.id}")
        self.checks.append(check)
        return check

    def record(self, check: Check, log=print, note=None):
        """Add `check` and print its one line: status, id, seconds, then `note` (None: the measured value)."""
        self.add(check)
        shown = check.measured if note is None else note
        log(f"  {check.status.upper():4} {check.id:56} {check.seconds:8.3f}s  {shown if shown is not None else ''}".rstrip())
        return check

    def set_claim(self, cid, verdict, evidence, name=None, **extra):
        """Record a verdict; extra fields (statement, ref, derivation, paths) feed the report."""
        if verdict not in VERDICTS:
            raise ValueError(f"claim {cid}: unknown verdict {verdict!r}")
        old, facts = self.claims.get(cid, {}), self.catalogue.get(cid, {})
        self.claims[cid] = {**old, "id": cid, "name": name or facts.get("name", cid), "verdict": verdict,
                            "evidence": evidence, **extra}
        for key in ("statement", "ref"):
            if facts.get(key):
                self.claims[cid].setdefault(key, facts[key])

    def derive_entries(self):
        """The `derive` entries, with the kill matrix computed from the checks (derive.verdict.kill_matrix)."""
        from derive.verdict import kill_matrix

        out = {k: v for k, v in self.derive.items() if k not in ("kill_matrix", "mechanisms")}
        kill = kill_matrix(self.checks)
        return {**out, "kill_matrix": kill} if kill else out

    def inconsistencies(self):
        """Every place one proof path's positive outcome is contradicted by another's witness (derive.verdict)."""
        return [{"claim": cid, **x} for cid, c in self.claims.items() for x in c.get("inconsistencies", [])]

    def failed(self):
        return [c for c in self.checks if c.status == "fail"]

    def to_json(self):
        # every catalogued claim carries its kind (identity, inequality, empirical): readers tell the two kinds of
        # claim apart by it, a not-run placeholder included
        claims = {cid: {"kind": facts.get("kind"), **self.claims.get(cid, {
                      "id": cid, "name": facts.get("name", cid), "verdict": "not-run", "evidence": "stage not run",
                      "statement": facts.get("statement", "")})}
                  for cid, facts in self.catalogue.items()}
        claims.update({cid: c for cid, c in self.claims.items() if cid not in claims})
        return {
            "schema_version": SCHEMA_VERSION,
            "environment": self.environment,
            "stages": self.stages,
            "checks": [asdict(c) for c in self.checks],
            "claims": list(claims.values()),
            "inconsistencies": self.inconsistencies(),
            "benchmarks": self.benchmarks,
            "experiments": self.experiments,
            "derive": self.derive_entries(),
            # mechanism x question -> verdict (derive.mechanisms.table), written by the derive stage
            "mechanisms": self.derive.get("mechanisms", {}),
        }

    def write(self, out_dir):
        """Write DIR/results.json atomically (a reader never sees a half-written file)."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(out_dir, (".results.json.*.tmp", ".results-*.json"))
        path = out_dir / "results.json"
        atomic_write(path, lambda fh: json.dump(self.to_json(), fh, indent=1, default=str))
        return path

    @classmethod
    def from_json(cls, data, source="results.json"):
        """A Results holding what `to_json` wrote (claims `to_json` only filled in as not-run are left out)."""
        validate(data, source)
        known = {f.name for f in fields(Check)}
        try:
            checks = [Check(**{k: v for k, v in c.items() if k in known}) for c in data["checks"]]
        except (TypeError, ValueError) as exc:
            raise ResultsError(f"{source}: a check cannot be read: {exc}") from exc
        claims = {c["id"]: c for c in data["claims"] if not _placeholder(c)}
        derive = dict(data.get("derive", {}))
        if data.get("mechanisms"):
            derive["mechanisms"] = dict(data["mechanisms"])
        return cls(dict(data["environment"]), checks, claims, list(data.get("benchmarks", [])),
                   dict(data.get("experiments", {})), derive, dict(data.get("stages", {})))

    @classmethod
    def read(cls, path):
        """Results from a results.json file; ResultsError (one line, naming the file) if it cannot be used."""
        return cls.from_json(read_json(path), str(path))


def slug(text):
    """A name as one segment of a check id: runs of anything but letters and digits become one '-'."""
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")


class ResultsError(ValueError):
    """A results.json that cannot be read: missing, truncated, not JSON, wrong shape or schema version."""


def read_json(path):
    """The parsed and shape-checked content of a results.json file."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError as exc:
        raise ResultsError(f"{path}: not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot be read ({exc.strerror if isinstance(exc, OSError) else exc})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        what = "empty" if not text.strip() else "not valid JSON (truncated?)"
        raise ResultsError(f"{path}: {what}: {exc.msg} at line {exc.lineno}, column {exc.colno}") from exc
    validate(data, str(path))
    return data


_SECTIONS = {"environment": dict, "checks": list, "claims": list}  # required
_OPTIONAL = {"stages": dict, "benchmarks": list, "experiments": dict, "derive": dict, "inconsistencies": list,
             "mechanisms": dict}
_JSON_TYPE = {dict: "an object", list: "a list"}


def validate(data, source="results.json"):
    """Raise ResultsError unless `data` has the shape of a results.json of this schema version."""
    if not isinstance(data, dict):
        raise ResultsError(f"{source}: expected a JSON object at the top level, found {type(data).__name__}")
    if "schema_version" not in data:
        raise ResultsError(f"{source}: no schema_version: not a results.json written by python -m derive.all")
    if data["schema_version"] != SCHEMA_VERSION:
        raise ResultsError(f"{source}: schema_version {data['schema_version']!r}, but this version reads and writes "
                           f"schema_version {SCHEMA_VERSION}")
    for key, kind in {**_SECTIONS, **_OPTIONAL}.items():
        if key not in data:
            if key in _SECTIONS:
                raise ResultsError(f"{source}: the {key!r} section is missing")
            continue
        if not isinstance(data[key], kind):
            raise ResultsError(f"{source}: {key!r} should be {_JSON_TYPE[kind]}, found {type(data[key]).__name__}")
    for i, c in enumerate(data["checks"]):
        if not isinstance(c, dict) or not all(isinstance(c.get(k), str) for k in ("id", "stage", "kind", "claim", "status")):
            raise ResultsError(f"{source}: checks[{i}] should be an object with string id, stage, kind, claim and status")
    for i, c in enumerate(data["claims"]):
        if not isinstance(c, dict) or not all(isinstance(c.get(k), str) for k in ("id", "verdict")):
            raise ResultsError(f"{source}: claims[{i}] should be an object with string id and verdict")
    for stage, info in data.get("stages", {}).items():
        if not isinstance(info, dict):
            raise ResultsError(f"{source}: stages[{stage!r}] should be an object, found {type(info).__name__}")
    return data


def _placeholder(claim):
    """The entry `to_json` writes for a paper claim no stage set."""
    return claim.get("verdict") == "not-run" and claim.get("evidence") == "stage not run" and set(claim) <= {
        "id", "name", "verdict", "evidence", "statement", "kind"}


# -- atomic writes -----------------------------------------------------------------------------------
def atomic_write(path, write, binary=False):
    """Call write(file) on a temporary file beside `path`, then rename it onto `path`: a reader sees the old
    file or the whole new one. The file gets the usual mode (0666 less the umask, as open() would give);
    the temporary is removed if writing fails, and one left by a killed process is removed by
    `remove_stale_temporaries` on a later run."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def remove_stale_temporaries(directory, patterns=("*.tmp",), log=None):
    """Remove temporaries an interrupted save left in `directory`: files matching `patterns` older than this
    process, unless their name carries the id of a process still running (a concurrent writer)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    for pattern in patterns:
        for tmp in sorted(directory.glob(pattern)):
            try:
                if not tmp.is_file() or tmp.stat().st_mtime >= PROCESS_START or _writer_alive(tmp.name):
                    continue
                tmp.unlink()
            except OSError:
                continue
            removed.append(tmp.name)
            if log:
                log(f"  removed {tmp.name}: a temporary left by an interrupted save")
    return removed


def _writer_alive(name):
    """Whether a temporary's name (.TARGET.PID.HEX.tmp, as atomic_write makes them) names a running process."""
    parts = name.split(".")
    if len(parts) < 4 or not parts[-3].isdigit():
        return False
    pid = int(parts[-3])
    if pid == os.getpid():
        return False  # older than this process: an earlier process that had our id
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def environment(profile, device, seed, threads=None):
    import numpy
    import sympy

    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sympy": sympy.__version__,
        "numpy": numpy.__version__,
        "torch": _torch_version(),
        "device": device,
        "profile": profile,
        "seeds": [seed],
        "git_commit": _git_commit(),
    }
    if threads is not None:
        env["threads"] = threads
    return env


def _torch_version():
    # derive/ never imports torch: ask the installed distribution's metadata instead.
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _git_commit():
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None
