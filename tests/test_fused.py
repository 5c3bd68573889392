"""The fused CPU step (numeric.experiments.fused) against the generated kernels it replaces on the CPU."""
import dataclasses

import pytest
import torch

from numeric.experiments import fused, sticky

pytestmark = pytest.mark.skipif(not fused.available(), reason="numba is not installed")

# small widths compile in a few seconds; the experiment's own widths are compiled by the training tests
SMALL = dict(d_in=5, d_k=3, d_v=7, symbols=3)  # d_v = 7: one full value chunk of 5 and a remainder of 2
TOL = {"float64": 1e-10, "float32": 1e-4}  # relative to each gradient's largest entry


def _setup(dtype, length, seeds=(1, 2), arms=("sgd", "em_like", "em_mstep"), spread=0.5, **widths):
    cfg = sticky.StickyConfig(length=length, dtype=dtype, arms=arms, seeds=seeds, blocks=3, **(widths or SMALL))
    data = sticky.make_data(cfg, "cpu")
    g = torch.Generator().manual_seed(5)
    params = [p + spread * torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
              for p in sticky.init_params(cfg, "cpu")]
    _, mstep = sticky.learning_rates(cfg, "cpu")
    return cfg, data, params, mstep


def _errors(step, cfg, data, params, mstep):
    scale = cfg.d_k ** -0.5
    loss, grads = step(params, data, scale, mstep)
    ref_loss, ref = sticky.gradients(params, data, scale, sticky._blocks(data.x.shape[-2], cfg.blocks), mstep)
    assert loss.shape == ref_loss.shape and [g.shape for g in grads] == [g.shape for g in ref]
    rel = [float((a - b).abs().max() / b.abs().max()) for a, b in zip(grads, ref)]
    return float((loss - ref_loss).abs().max()), rel


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("length", [3, 4, 6, 41])  # positions 2, 3, 5, 40: short and full passes of 4 rows
def test_fused_step_equals_the_generated_kernels(dtype, length):
    cfg, data, params, mstep = _setup(dtype, length)
    loss_err, rel = _errors(fused.step_for(cfg, "cpu"), cfg, data, params, mstep)
    assert loss_err < TOL[dtype] * 10 and max(rel) < TOL[dtype], (loss_err, rel)


def test_query_ranges_split_a_run_without_changing_it():
    cfg, data, params, mstep = _setup("float64", 90, seeds=(4,), arms=("em_mstep",))
    assert len(fused._parts(89, 1, 3)) == 3
    whole = fused.Step(cfg.d_k, cfg.d_v, cfg.symbols, torch.float64, threads=1)(params, data, 0.3, mstep)
    split = fused.Step(cfg.d_k, cfg.d_v, cfg.symbols, torch.float64, threads=3)(params, data, 0.3, mstep)
    assert torch.allclose(whole[0], split[0], rtol=1e-13, atol=0)
    assert all(torch.allclose(a, b, rtol=1e-12, atol=1e-15) for a, b in zip(whole[1], split[1]))


def test_parts_cover_the_sequence_on_multiples_of_the_row_pass():
    for T, runs, threads in ((2000, 1, 2), (37, 2, 8), (5, 1, 4), (1999, 10, 2)):
        parts = fused._parts(T, runs, threads)
        assert parts[0][0] == 0 and parts[-1][1] == T
        assert all(a < b and a % fused.ROWS == 0 for a, b in parts)
        assert all(b == c for (_, b), (c, _) in zip(parts, parts[1:]))


@pytest.mark.parametrize("mutant", fused.MUTANTS)
def test_the_comparison_rejects_mutants_of_the_fused_kernel(mutant):
    cfg, data, params, mstep = _setup("float64", 41)
    step = fused.Step(cfg.d_k, cfg.d_v, cfg.symbols, torch.float64, mutant=mutant)
    _, rel = _errors(step, cfg, data, params, mstep)
    assert max(rel) > 1e-3, (mutant, rel)


def test_training_with_either_kernel_gives_the_same_run():
    cfg = sticky.StickyConfig(length=60, steps=5, seeds=(3, 9), arms=("sgd", "em_mstep"), dtype="float64", blocks=2,
                              checkpoints=2, **SMALL)
    a = sticky.train(dataclasses.replace(cfg, kernel="fused"), log=lambda *_: None)
    b = sticky.train(dataclasses.replace(cfg, kernel="generated"), log=lambda *_: None)
    assert torch.allclose(a.losses, b.losses, rtol=1e-12, atol=0)
    assert all(p.shape == q.shape and torch.allclose(p, q, rtol=1e-10, atol=1e-14) for p, q in zip(a.params, b.params))


def test_a_non_finite_input_is_left_to_the_generated_kernels():
    cfg, data, params, mstep = _setup("float64", 20)
    params[1][0, 0, 0, 0] = float("nan")
    step = fused.step_for(cfg, "cpu")
    assert step(params, data, 0.3, mstep) is None
    lrs, _ = sticky.learning_rates(cfg, "cpu")
    loss = sticky.descend(params, data, 0.3, sticky._blocks(19, 3), mstep, lrs, step=step)
    assert bool(loss[0, 0].isnan()) and bool(loss[1:].isfinite().all())


def test_kernel_settings_are_checked():
    with pytest.raises(ValueError, match="kernel must be one of"):
        sticky.StickyConfig(kernel="fast").validate()
    for device, dtype in (("meta", torch.float32), ("cpu", torch.float16)):
        with pytest.raises(ValueError, match="on the CPU in float32 or float64 only"):
            fused.applies("fused", device, dtype)
    assert not fused.applies("auto", "meta", torch.float32) and not fused.applies("generated", "cpu", torch.float32)
    assert fused.step_for(sticky.StickyConfig(kernel="generated"), "cpu") is None
    wide = sticky.StickyConfig(d_k=fused.MAX_WIDTH + 1)
    assert fused.step_for(wide, "cpu") is None  # auto: wider heads keep the generated kernels
    with pytest.raises(ValueError, match="unrolls the head widths"):
        fused.step_for(dataclasses.replace(wide, kernel="fused"), "cpu")
    with pytest.raises(ValueError, match="mutant must be one of"):
        fused.emit(3, 4, 2, mutant="nope")


def test_emitted_source_is_written_once_under_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGV_KERNEL_CACHE", str(tmp_path / "kernels"))
    assert fused.cache_dir() == tmp_path / "kernels"
    text = fused.emit(3, 7, 3, "float64")
    assert "values_grad5(" in text and "values_grad2(" in text and "def run(" in text
    assert fused.emit(3, 7, 3, "float64") == text and fused.emit(3, 7, 3, "float64", "drop-baseline") != text
    run = fused.kernel.__wrapped__(3, 7, 3, "float64")  # uncached: import only, numba compiles at the first call
    (path,) = (tmp_path / "kernels").glob("agv_fused_*.py")
    assert path.read_text() == text.replace("CACHE", "True") and run.__module__ == path.stem
    stamp = path.stat().st_mtime_ns
    fused.kernel.__wrapped__(3, 7, 3, "float64")
    assert path.stat().st_mtime_ns == stamp  # an unchanged source is not written again


def test_an_unwritable_cache_compiles_in_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("AGV_KERNEL_CACHE", str(blocker / "kernels"))
    run = fused.kernel.__wrapped__(3, 7, 3, "float64")
    assert run.__module__.startswith("agv_fused_") and not list(tmp_path.glob("**/agv_fused_*.py"))
