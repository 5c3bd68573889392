"""The same agreement, exactness and resume tests on every device torch has here (CUDA skipped where absent).

Each test runs the device's computation against the CPU's: data and initial weights are drawn on CPU
generators and moved, so a device changes the arithmetic only (float64: <= 1e-10)."""
import dataclasses

import pytest
import torch

from numeric.experiments import dynamics, sticky, windtunnel

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))]
SMALL = sticky.StickyConfig(length=48, steps=6, seeds=(42, 7), arms=("sgd", "em_like", "em_mstep"), blocks=3,
                            checkpoints=3, tracked_rows=4, dtype="float64")


@pytest.mark.parametrize("device", DEVICES)
def test_batched_trainer_agrees_with_the_cpu(device):
    cpu, dev = sticky.train(SMALL, "cpu"), sticky.train(SMALL, device)
    assert dev.losses.device.type == "cpu" and dev.losses.shape == cpu.losses.shape
    assert float((dev.losses - cpu.losses).abs().max()) <= 1e-10
    assert all(float((a - b).abs().max()) <= 1e-10 for a, b in zip(dev.params, cpu.params))


@pytest.mark.parametrize("device", DEVICES)
def test_batched_trainer_equals_the_sequential_loop_on_the_device(device):
    run = sticky.train(SMALL, device)
    for a, arm in enumerate(SMALL.arms):
        ref, _ = sticky.reference_run(SMALL, arm, 1, SMALL.steps, device)
        assert float((torch.tensor(ref, dtype=torch.float64) - run.losses[a, 1, : SMALL.steps]).abs().max()) <= 1e-10


@pytest.mark.parametrize("device", DEVICES)
def test_resume_on_the_device_equals_an_uninterrupted_run(device, tmp_path):
    cfg = dataclasses.replace(SMALL, steps=8)
    whole = sticky.train(cfg, device)
    state = tmp_path / "state.partial"
    with pytest.raises(KeyboardInterrupt):
        def stop(step):
            if step == 5:
                raise KeyboardInterrupt
        sticky.train(cfg, device, progress=stop, state_path=state, save_every=4)
    resumed = sticky.train(cfg, device, state_path=state, save_every=4)
    assert torch.equal(resumed.losses, whole.losses)


@pytest.mark.parametrize("device", DEVICES)
def test_simulations_and_wind_tunnel_agree_with_the_cpu(device):
    cfg = dynamics.DynamicsConfig(instances=4, train_steps=6, checkpoints=3)
    for fn in (dynamics.advantage_sign_agreement, dynamics.specialisation, dynamics.saturation):
        a, b = fn(cfg, "cpu"), fn(cfg, device)
        for key, value in a.items():
            if isinstance(value, list) and value and isinstance(value[0], float):
                assert max(abs(x - y) for x, y in zip(value, b[key])) <= 1e-10, (fn.__name__, key)
    tcfg = windtunnel.TunnelConfig(steps=4, batch=4, eval_batch=8, length=10, pca_points=30)
    (m_cpu, c_cpu), (m_dev, c_dev) = windtunnel.train(tcfg, "em_like", "cpu"), windtunnel.train(tcfg, "em_like", device)
    assert max(abs(x - y) for x, y in zip(c_cpu, c_dev)) <= 1e-10
    assert next(m_dev.parameters()).device.type == torch.device(device).type
    assert abs(windtunnel.evaluate(tcfg, m_cpu)["kl_bits"] - windtunnel.evaluate(tcfg, m_dev)["kl_bits"]) <= 1e-10


@pytest.mark.parametrize("device", DEVICES)
def test_identity_checks_run_on_the_device_with_the_cpus_numbers(device):
    from numeric import identities
    from numeric.generated import attention as gen
    from numeric.stage import IDENTITY_SHAPES

    sizes, batch, mask = IDENTITY_SHAPES[0]
    for claim, identity, fn in identities.cases(gen, "identity"):
        cpu = identities.evaluate(fn, identity, sizes, batch, mask, 3, "cpu")
        dev = identities.evaluate(fn, identity, sizes, batch, mask, 3, device)
        assert dev[0] <= identities.TOL_FLOAT64 and abs(dev[1] - cpu[1]) <= 1e-10 * max(1.0, cpu[1]), (claim.id, identity.name)
