"""The benchmark harness (correctness of its bookkeeping; speed itself is never asserted)."""
import math

from numeric import bench


def test_rows_and_benchmark_entries():
    row = bench.bench_size(16, True, "cpu", batch=2, d=8, repeats=2)
    assert set(row.seconds) == {"ours", "api", "autograd", "sdpa"}
    assert all(s > 0 for s in row.seconds.values())
    assert row.max_rel_diff < 1e-4
    other = bench.bench_size(32, False, "cpu", batch=2, d=8, repeats=2)
    bench.measure_memory([row, other])  # children at once, each row its own peak
    assert set(row.peak_mb) == set(row.seconds) == set(other.peak_mb)
    assert all(math.isnan(v) or v >= 0 for v in row.peak_mb.values())
    entries = bench.as_benchmarks([row])
    assert len(entries) == 4
    for e in entries:
        assert {"name", "device", "dtype", "shape", "ours_s", "reference", "reference_s", "ratio"} <= set(e)
        assert math.isclose(e["ratio"], e["ours_s"] / e["reference_s"])


def test_cli_rejects_bad_arguments(capsys):
    import pytest

    with pytest.raises(SystemExit) as exc:
        bench.main(["--threads", "0"])
    assert exc.value.code == 2


def test_gpu_profile_is_larger_and_warmed_up_several_times():
    from numeric import bench

    assert min(bench.SIZES["gpu"]) > max(bench.SIZES["default"]) // 2 and bench.BATCH["gpu"] > bench.BATCH["default"]
    assert bench.WARMUPS["gpu"] >= 3 and set(bench.REPEATS["gpu"]) == set(bench.SIZES["gpu"])
    import pytest

    with pytest.raises(ValueError, match="unknown benchmark profile"):
        bench.run("huge")
