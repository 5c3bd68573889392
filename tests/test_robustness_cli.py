"""Robustness of `python -m derive.all`, `python -m reports.render` and the experiment cache: merged runs,
bad --out / --threads, unreadable results.json, corrupt or unsafe cache entries, interrupted saves."""
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from derive import all as cli
from derive.results import PROCESS_START, Check, Results, environment
from numeric.experiments import sticky
from numeric.experiments.progress import Progress
from numeric.experiments.stage import Cache, ExperimentStage
from reports import render

ROOT = Path(__file__).resolve().parents[1]
TINY = sticky.StickyConfig(length=20, steps=20, seeds=(1, 2), arms=("sgd",), blocks=2, checkpoints=3, tracked_rows=4)


def run(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "derive.all", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=None if env is None else {**os.environ, **env})


def data(out):
    return json.loads((Path(out) / "results.json").read_text())


def verdicts(d):
    return {c["id"]: c["verdict"] for c in d["claims"]}


@pytest.fixture(scope="module")
def derived(tmp_path_factory):
    """A real run's results.json: the derive stage on C1 (27 checks, C1 proved)."""
    out = tmp_path_factory.mktemp("derived")
    p = run("--only", "derive", "--quick", "--claim", "C1", "--out", str(out))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    return out


@pytest.fixture
def out(derived, tmp_path):
    """A private copy of the derived run."""
    shutil.copy(derived / "results.json", tmp_path / "results.json")
    return tmp_path


def _proof(cid, claim, setting, outcome="proved"):
    return Check(cid, "derive", "proof", claim, "pass", 0.01, path="general", part="main", setting=setting, outcome=outcome)


def _rule(cid, verdict, reason):
    return Check(f"experiments/{cid}/verdict/rule", "experiments", "rule", cid, "pass", 0.0,
                 {"verdict": verdict, "reason": reason, "measured": {}})


def hand_written(out_dir):
    """results.json written by hand: C1 proved by derive checks, C2 with only a numeric check but recorded as
    proved (a verdict its checks do not give), C3 recorded proved with no check at all, E1/E2 with the rule
    checks the experiments stage records, a benchmark and a derive entry per stage."""
    r = Results(environment("quick", "cpu", 0))
    for setting in ("unmasked", "masked"):
        r.add(_proof(f"derive/C1/main/general/{setting}", "C1", setting))
    r.add(Check("numeric/C2/main/float64", "numeric", "numeric", "C2", "pass", 0.01))
    r.add(Check("codegen/fresh", "codegen", "numeric", "", "pass", 0.01, "old"))
    r.add(Check("experiments/sticky/valid", "experiments", "experiment", "E1", "pass", 1.0))
    r.set_claim("C2", "proved", "stale", parts=[])
    r.set_claim("C3", "proved", "stale", parts=[])
    r.add(_rule("E1", "reproduced", "kept from the experiments stage"))
    r.add(_rule("E2", "not-reproduced", "kept too"))
    r.experiments["sticky_markov"] = {"speedup": 2.0}
    r.benchmarks += [{"name": "derive/general-path-total", "ours_s": 1.0}, {"name": "experiments/x", "ours_s": 2.0}]
    r.add(Check("derive/M1/general", "derive", "negative-control", "C1", "pass", 0.01, "", "rejected", "d",
                path="general", outcome="disproved"))
    r.add(Check("numeric/M1", "numeric", "negative-control", "C1", "pass", 0.01, {}, {}, "d"))
    r.derive.update(fuzz={"claims": 3}, paths=["general"])
    for stage in ("derive", "numeric", "codegen", "experiments"):
        r.stages[stage] = {"status": "pass", "seconds": 1.0, "checks": 1}
    r.write(out_dir)
    return r


# -- 1. runs are merged, never destroyed ---------------------------------------------------------------------
def test_only_report_rerenders_and_leaves_results_json_untouched(out):
    before = (out / "results.json").read_bytes()
    mtime = (out / "results.json").stat().st_mtime_ns
    p = run("--only", "report", "--out", str(out))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    assert (out / "report.html").exists() and "left unchanged" in p.stdout
    assert (out / "results.json").read_bytes() == before and (out / "results.json").stat().st_mtime_ns == mtime
    d = data(out)
    assert len(d["checks"]) == 27 and verdicts(d)["C1"] == "proved"


def test_only_report_without_results_is_bad_usage(tmp_path):
    p = run("--only", "report", "--out", str(tmp_path))
    assert p.returncode == 2 and "error: --only report" in p.stderr and "not found" in p.stderr
    assert not (tmp_path / "results.json").exists()


def test_other_stage_merges_into_existing_results(out):
    p = run("--only", "codegen", "--out", str(out))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    d = data(out)
    stages = [c["stage"] for c in d["checks"]]
    assert stages.count("derive") == 27 and stages.count("codegen") == 1
    assert verdicts(d)["C1"] == "proved" and list(d["stages"]) == ["derive", "codegen"]
    assert "kept from the previous run" in p.stdout
    again = run("--only", "codegen", "--out", str(out))  # a rerun stage replaces its checks, never duplicates them
    assert again.returncode == 0 and [c["stage"] for c in data(out)["checks"]].count("codegen") == 1


def test_merge_keeps_other_stages_and_recomputes_verdicts(tmp_path, capsys):
    hand_written(tmp_path)
    assert cli.main(["--only", "codegen", "--out", str(tmp_path)]) == 0
    d = data(tmp_path)
    v = verdicts(d)
    assert v["C1"] == "proved"  # from its kept derive checks
    assert v["C2"] == "confirmed"  # recomputed from its checks, not the recorded "proved"
    assert v["C3"] == "not-run"  # no check names it
    assert v["E1"] == "reproduced" and v["E2"] == "not-reproduced"  # the experiments stage did not rerun
    ids = [c["id"] for c in d["checks"]]
    assert ids.count("codegen/fresh") == 1 and next(c for c in d["checks"] if c["id"] == "codegen/fresh")["measured"] != "old"
    assert {"derive/C1/main/general/masked", "numeric/C2/main/float64", "experiments/sticky/valid"} <= set(ids)
    assert d["experiments"] == {"sticky_markov": {"speedup": 2.0}}
    assert {b["name"] for b in d["benchmarks"]} == {"derive/general-path-total", "experiments/x"}
    assert d["derive"]["fuzz"] == {"claims": 3} and d["derive"]["kill_matrix"]["M1"]["numeric"] == "rejected"
    assert d["environment"]["stages_run"] == ["codegen"]


def test_rerun_experiments_stage_replaces_its_claims_and_data(tmp_path, monkeypatch, capsys):
    hand_written(tmp_path)
    real = cli.run_stage

    def fake(stage, results, args, profile, only_claims):
        if stage != "experiments":
            return real(stage, results, args, profile, only_claims)
        results.add(Check("experiments/new", "experiments", "experiment", "E1", "pass", 0.0))
        results.add(_rule("E1", "not-reproduced", "new run"))
        results.experiments["new"] = 1
        results.stages["experiments"] = {"status": "pass", "seconds": 0.0, "checks": 1}

    monkeypatch.setattr(cli, "run_stage", fake)
    assert cli.main(["--only", "experiments", "--device", "cpu", "--out", str(tmp_path)]) == 0
    d = data(tmp_path)
    v = verdicts(d)
    assert v["E1"] == "not-reproduced" and v["E2"] == "not-run" and v["C1"] == "proved"
    exp = [c["id"] for c in d["checks"] if c["stage"] == "experiments"]
    assert exp == ["experiments/new", "experiments/E1/verdict/rule"] and d["experiments"] == {"new": 1}
    assert {b["name"] for b in d["benchmarks"]} == {"derive/general-path-total"}


def test_derive_rerun_under_claim_keeps_other_claims(out):
    p = run("--only", "derive", "--quick", "--claim", "C6", "--out", str(out))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    d = data(out)
    v = verdicts(d)
    assert v["C1"] == v["C6"] == "proved"
    claims = [c["claim"] for c in d["checks"] if c["stage"] == "derive"]
    assert claims.count("C1") == 27 and claims.count("C6") > 0
    assert {row["claim"] for row in d["derive"]["kill_matrix"].values()} == {"C1", "C6"}


@pytest.mark.parametrize("content, problem", [
    ('{"schema_version": 1, "checks": [', "not valid JSON"),
    ('{"schema_version": 99, "environment": {}, "checks": [], "claims": []}', "schema_version 99"),
    ('{"schema_version": 1, "environment": {}, "checks": {}, "claims": []}', "'checks' should be a list"),
    ("", "empty"),
])
def test_unusable_results_json_is_bad_usage_and_kept(tmp_path, content, problem):
    (tmp_path / "results.json").write_text(content)
    p = run("--only", "codegen", "--out", str(tmp_path))
    assert p.returncode == 2, p.stdout + p.stderr
    assert problem in p.stderr and "results.json" in p.stderr and "Traceback" not in p.stderr
    assert "== stage" not in p.stdout  # nothing ran
    assert (tmp_path / "results.json").read_text() == content


def test_results_json_has_normal_mode_and_no_temporaries(tmp_path):
    old = os.umask(0o022)
    try:
        stale = tmp_path / ".results-abc123.json"  # left by a save killed mid-write
        stale.write_text("{")
        os.utime(stale, (PROCESS_START - 60, PROCESS_START - 60))  # older than this process
        Results(environment("quick", "cpu", 0)).write(tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "results.json").stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_interrupted_save_leaves_no_temporary(tmp_path):
    from derive.results import atomic_write

    (tmp_path / "x.pt").write_text("old")

    def killed(fh):  # SIGTERM under derive.all raises SystemExit mid-write
        fh.write(b"half")
        raise SystemExit(143)

    with pytest.raises(SystemExit):
        atomic_write(tmp_path / "x.pt", killed, binary=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.pt"] and (tmp_path / "x.pt").read_text() == "old"


# -- 2. --out is checked before any work ------------------------------------------------------------------
@pytest.mark.parametrize("make, message", [
    (lambda t: (t / "file").write_text("x") and t / "file", "exists and is not a directory"),
    (lambda t: t / "missing" / "out", "does not exist"),
    (lambda t: (t / "file").write_text("x") and t / "file" / "out", "is not a directory"),
    (lambda t: (t / "link").symlink_to(t / "nowhere") or t / "link", "symbolic link to nothing"),
])
def test_bad_out_is_refused_before_any_stage(tmp_path, make, message):
    target = make(tmp_path)
    t0 = time.perf_counter()
    p = run("--only", "derive,codegen", "--quick", "--out", str(target))
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.startswith("error: --out") and message in p.stderr and "Traceback" not in p.stderr
    assert "== stage" not in p.stdout and time.perf_counter() - t0 < 30


def test_unwritable_out_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli.os, "access", lambda path, mode: False)  # root may write anywhere: pretend not
    assert cli.main(["--only", "codegen", "--out", str(tmp_path / "new")]) == 2
    assert cli.main(["--only", "codegen", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "error: --out" in err and "is not writable" in err and not (tmp_path / "results.json").exists()


# -- 3. the experiment cache: safe loads, old entries, corrupt entries, interrupted saves ---------------------
def _tiny_run():
    return sticky.Run(torch.zeros(1, 2, 3, dtype=torch.float64), [torch.ones(2, 2)], [0, 2], [torch.ones(1)], [torch.ones(1)])


def test_entries_written_by_earlier_code_still_load(tmp_path):
    """torch.save of the pickled dicts the experiments stage has always written (a Run dataclass, evaluation
    dicts of tensors, floats and lists, numpy floats) loads with weights_only."""
    cache, logs = Cache(tmp_path), []
    cache.root.mkdir(parents=True)
    entries = {
        "run": {"run": _tiny_run(), "seconds": 12.5},
        "eval": {"loss": torch.ones(1, 2), "entropy": torch.zeros(1, 2), "bayes": {"loss": torch.ones(2)}, "x": [1.0, 2]},
        "tunnel": {"kl_bits": np.float64(0.25), "within_symbol": {"pc1": [np.float64(0.5), np.float32(0.1)]},
                   "curve": [1.0, 0.5], "n": np.int64(3), "arr": np.arange(3.0)},
    }
    for name, obj in entries.items():
        torch.save(obj, cache.key(name, TINY, "cpu"))  # the old way: plain torch.save, full pickle

    def never():
        raise AssertionError("recomputed a valid entry")

    got = {name: cache.get_or_run(name, TINY, "cpu", never, logs.append) for name in entries}
    assert isinstance(got["run"]["run"], sticky.Run) and got["run"]["seconds"] == 12.5
    assert torch.equal(got["run"]["run"].losses, entries["run"]["run"].losses)
    assert torch.equal(got["eval"]["bayes"]["loss"], torch.ones(2)) and got["eval"]["x"] == [1.0, 2]
    assert float(got["tunnel"]["kl_bits"]) == 0.25 and list(got["tunnel"]["arr"]) == [0.0, 1.0, 2.0]
    assert all("cached" in line for line in logs)


class Payload:
    """A pickle that runs code when unpickled without weights_only."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_cache_loads_never_run_code(tmp_path):
    cache, logs, marker = Cache(tmp_path), [], tmp_path / "pwned"
    path = cache.key("evil", TINY, "cpu")
    path.parent.mkdir(parents=True)
    torch.save({"x": Payload(marker)}, path)
    assert cache.get_or_run("evil", TINY, "cpu", lambda: {"x": 1}, logs.append) == {"x": 1}
    assert not marker.exists()
    assert any(f"discarding corrupt cache entry {path.name}" in line for line in logs)


def test_truncated_entry_is_discarded_and_recomputed(tmp_path):
    cache, logs = Cache(tmp_path), []
    cache.get_or_run("e", TINY, "cpu", lambda: {"run": _tiny_run(), "seconds": 1.0}, logs.append)
    path = cache.key("e", TINY, "cpu")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    calls = []
    out = Cache(tmp_path).get_or_run("e", TINY, "cpu", lambda: calls.append(1) or {"seconds": 2.0}, logs.append)
    assert out == {"seconds": 2.0} and calls == [1]
    assert any(line.startswith(f"  discarding corrupt cache entry {path.name}: ") for line in logs)
    assert sticky.load(path) == {"seconds": 2.0}  # rewritten whole


def test_garbage_partial_is_discarded_and_training_starts_over(tmp_path):
    partial, logs, starts = tmp_path / "x.partial", [], []
    partial.write_bytes(b"\x00garbage")
    r = sticky.train(TINY, state_path=partial, log=logs.append, on_start=starts.append)
    assert starts == [0] and any("discarding corrupt cache entry x.partial" in line for line in logs)
    assert torch.equal(r.losses, sticky.train(TINY).losses)
    wrong = tmp_path / "y.partial"  # readable, but not a state of this configuration
    torch.save({"params": [torch.zeros(1)], "losses": [], "tracked": [], "values": [], "step": 5}, wrong)
    sticky.train(TINY, state_path=wrong, log=logs.append)
    assert any("discarding corrupt cache entry y.partial" in line for line in logs) and not wrong.exists()


def test_stale_temporaries_are_removed_and_files_have_normal_modes(tmp_path):
    cache, logs = Cache(tmp_path), []
    cache.root.mkdir(parents=True)
    old = PROCESS_START - 60  # older than this process
    stale = [cache.root / "tmpk3j4h5.tmp", cache.root / f".e.pt.{2 ** 22 + 12345}.00ff00ff.tmp"]  # no such pid
    for p in stale:
        p.write_bytes(b"")
        os.utime(p, (old, old))
    live = cache.root / f".e.pt.{os.getppid()}.00ff00ff.tmp"  # a running writer's: kept
    live.write_bytes(b"")
    os.utime(live, (old, old))
    umask = os.umask(0o022)
    try:
        cache.get_or_run("e", TINY, "cpu", lambda: {"a": torch.ones(1)}, logs.append)
    finally:
        os.umask(umask)
    assert not any(p.exists() for p in stale) and live.exists()
    assert sum("interrupted save" in line for line in logs) == 2
    assert stat.S_IMODE(cache.key("e", TINY, "cpu").stat().st_mode) == 0o644
    assert sorted(p.name for p in cache.root.iterdir()) == sorted([cache.key("e", TINY, "cpu").name, live.name])


def test_progress_after_resume_counts_from_the_resumed_step(tmp_path):
    stage = ExperimentStage(Results(environment("quick", "cpu", 0)), "quick", "cpu", 0, tmp_path, log=lambda *a: None)
    partial = stage.cache.key("tiny", TINY, "cpu").with_suffix(".partial")

    def stop(step):
        if step == 13:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sticky.train(TINY, state_path=partial, save_every=10, progress=stop)
    assert partial.exists() and not list(partial.parent.glob("*.tmp"))
    logs = []
    stage.log = logs.append
    out = stage._train("tiny", TINY)
    assert any("resuming tiny at step 10/20" in line for line in logs), logs
    counts = [int(line.split(": ")[1].split("/")[0]) for line in logs if " steps, " in line]
    assert counts and counts[0] > 10 and counts[-1] == 20, logs
    assert torch.equal(out["run"].losses, sticky.train(TINY).losses) and not partial.exists()

    lines = []
    bar = Progress(100, "x", lines.append, initial=50)
    bar.t0 -= 10.0  # 10 s for the 10 steps run since the resume: 40 steps left is ~40 s
    bar.update(10)
    assert lines and "60/100" in lines[0] and "~40s left" in lines[0]


# -- 4. threads -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_bad_threads_is_bad_usage(tmp_path, value):
    p = run("--only", "codegen", "--threads", value, "--out", str(tmp_path))
    assert p.returncode == 2 and "--threads" in p.stderr and not (tmp_path / "results.json").exists()


def test_threads_recorded(tmp_path):
    p = run("--only", "codegen", "--threads", "3", "--out", str(tmp_path))
    assert p.returncode == 0 and data(tmp_path)["environment"]["threads"] == 3
    p = run("--only", "codegen", "--out", str(tmp_path), env={"OMP_NUM_THREADS": "1"})
    assert p.returncode == 0 and data(tmp_path)["environment"]["threads"] == 1


def test_experiment_stage_respects_thread_count(tmp_path, monkeypatch):
    before = torch.get_num_threads()
    for step in ("sticky_replay", "typicality", "sticky_fresh", "exactness", "sweep", "speed", "simulations", "tunnel",
                 "negative_controls"):
        monkeypatch.setattr(ExperimentStage, step, lambda self: None)

    def used(threads=None, **env):
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        results = Results(environment("quick", "cpu", 0))
        ExperimentStage(results, "quick", "cpu", 0, tmp_path, threads=threads).run()
        return torch.get_num_threads(), results.environment["threads"]

    try:
        assert used(OMP_NUM_THREADS="1") == (1, 1)
        assert used(MKL_NUM_THREADS="1") == (1, 1)
        assert used(threads=1) == (1, 1)
        default = min(2, os.cpu_count() or 1)
        assert used() == (default, default)
    finally:
        torch.set_num_threads(before)


# -- 5. reports.render on unusable results.json -----------------------------------------------------------
@pytest.mark.parametrize("content, problem", [
    (None, "not found"),
    ('{"schema_version": 1, "environment": {}, "checks": [{"id": "a"', "not valid JSON"),
    ("[]", "expected a JSON object"),
    ('{"schema_version": 1, "environment": {}, "checks": [], "claims": [3]}', "claims[0]"),
    ('{"schema_version": 1, "environment": [], "checks": [], "claims": []}', "'environment' should be an object"),
    ('{"schema_version": 1, "environment": {}, "checks": [], "claims": [], "experiments": {"sticky_markov": 3}}',
     "cannot be rendered"),
])
def test_render_cli_reports_unusable_results_in_one_line(tmp_path, capsys, content, problem):
    if content is not None:
        (tmp_path / "results.json").write_text(content)
    assert render.main([str(tmp_path), "--no-pdf"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and problem in err and str(tmp_path / "results.json") in err


def test_render_cli_subprocess_has_no_traceback(tmp_path):
    (tmp_path / "results.json").write_text('{"schema_version": 1, "checks": [')
    p = subprocess.run([sys.executable, "-m", "reports.render", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stderr.startswith("error: ")


def test_a_users_claim_may_not_take_an_empirical_claims_id(tmp_path):
    """A claims file registering "E1" would silently become the paper's em-speedup in results.json: refused."""
    path = tmp_path / "mine.py"
    path.write_text('from derive.claims import Claim, Identity, register\n'
                    'register(Claim(id="E1", name="mine", statement="s", ref="r", parts=(Identity(\n'
                    '    "rows", ("n",), "scores", derived=lambda m, i: m.sum("n", lambda j: m.dS(i, j)),\n'
                    '    closed=lambda m, i: 0, latex="x"),)))\n')
    p = run("--quick", "--only", "derive", "--claims", str(path), "--out", str(tmp_path / "out"))
    assert p.returncode == 2 and "claim id E1 is an empirical claim of this project" in p.stderr, p.stderr
    assert not (tmp_path / "out" / "results.json").exists()
