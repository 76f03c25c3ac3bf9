"""Public functions take only what a user passes; tests reach the machine through `colab_t4_nb.testing`.

The environment, the GPUs (NVML), `torch.cuda`, the clock, a notebook's display and accelerate are
replaced for a `with` block by the stand-ins, never through a parameter of the function under test."""
import inspect
import pytest

from colab_t4_nb import acceptance, allocation, amp, cli, core, kernels, memory, monitoring, switches, timing
from colab_t4_nb.testing import (FakeCuda, fake_clock, fake_cuda, fake_env, fake_notebook, fake_nvml,
                                 h200_reading, t4_reading)

GONE = {core.runtime: {'env', 'modules'}, core.state_dir: {'env'}, allocation.ensure_gpu: {'gpus'},
        allocation.nvml_gpus: {'nvml'}, timing.cpu_timer: {'clock'}, amp.matmul_ms: {'clock'},
        memory.try_batch: {'clock'}, kernels.clock_state: {'nvml'},
        switches.env_switches: {'cuda_started', 'tf_started'}, monitoring.NVMLSource: {'nvml'},
        monitoring.GPUMonitor: {'display'}, monitoring.LiveView: {'display'},
        cli.info_dict: {'gpus', 'why', 'compat'}, acceptance.accelerate_search: {'finder'},
        acceptance.finder_race: {'finder'}}

@pytest.mark.parametrize('fn', GONE, ids=lambda f: f.__qualname__)
def test_no_parameter_for_tests(fn):
    assert not GONE[fn] & set(inspect.signature(fn).parameters), inspect.signature(fn)

def test_no_attribute_for_tests():
    assert not hasattr(memory.cap_memory, '_cuda') and not hasattr(timing.benchmark, '_clock')
    with fake_nvml([t4_reading()]): src = monitoring.NVMLSource()
    src.close()
    assert not hasattr(src, 'torch_module')

def test_environment_and_clock():
    with fake_env({'KAGGLE_KERNEL_RUN_TYPE': 'x', 'COLAB_RELEASE_TAG': None, 'COLAB_T4_HOME': '/tmp/t4'},
                  {'google.colab': None}):
        assert (core.runtime(), str(core.state_dir(create=False))) == ('kaggle', '/tmp/t4')
    with fake_clock([0.0, 0.5]): assert timing.cpu_timer(lambda: None) == 500.0

def test_gpus_and_cuda():
    with fake_nvml([t4_reading()]):
        assert [g.name for g in allocation.ensure_gpu('T4', ledger=False)] == ['Tesla T4']
    with fake_nvml([h200_reading()]): assert kernels.clock_state().reasons == ['SwPowerCap']
    with fake_cuda(FakeCuda(initialized=True)), pytest.warns(Warning, match='has no effect here'):
        with switches.env_switches(CUDA_LAUNCH_BLOCKING='1'): pass
    with fake_cuda(FakeCuda(total_mib=15360)) as cuda, memory.cap_memory(12 * 2**30):
        assert cuda.fraction == 12 * 1024 / 15360

def test_notebook_display():
    with fake_nvml([h200_reading()]), fake_notebook() as notebook:
        mon = monitoring.GPUMonitor(live=True)
        mon.run_once()
        mon.close()
    assert [k for k, _ in notebook.shown] == ['display']
