"""What the memory notebook's cells cannot test in-process: DDP in real processes (spawned and forked),
and TensorFlow's own behaviour (its out-of-memory error, its refusal to switch memory growth late)."""
import pytest
import torch
from torch import nn
from colab_t4_nb.memory import launch_ddp, allreduce_check
from colab_t4_nb.core import ColabT4Error
from conftest import python

def ddp_grads(rank, world_size):
    "Same model on every rank (same seed), different data per rank: the DDP gradient of the summed output."
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(3, 2))
    torch.manual_seed(100 + rank)
    model(torch.randn(5, 3)).sum().backward()
    return [p.grad.clone() for p in model.module.parameters()]

def local_grads(rank):
    "The gradient rank `rank` would compute alone, without DDP."
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    torch.manual_seed(100 + rank)
    model(torch.randn(5, 3)).sum().backward()
    return [p.grad.clone() for p in model.parameters()]

def failing(rank, world_size):
    if rank == 1: raise ValueError('rank 1 found no data')
    return rank

def test_ddp_averages_gradients_over_two_gloo_processes():
    g0, g1 = launch_ddp(ddp_grads, nprocs=2, backend='gloo')
    alone = [local_grads(0), local_grads(1)]
    assert not torch.allclose(alone[0][0], alone[1][0]), 'the ranks must see different data'
    for a, b, l0, l1 in zip(g0, g1, *alone):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a, (l0 + l1) / 2)

def test_allreduce_over_three_processes():
    assert launch_ddp(allreduce_check, nprocs=3, backend='gloo') == [6.0, 6.0, 6.0]

def failing_in_a_collective(rank, world_size):
    "Rank 1 fails; rank 0 then loses its peer inside the all-reduce, and fails too."
    import torch.distributed as dist
    if rank == 1: raise ValueError('rank 1 found no data')
    dist.all_reduce(torch.ones(1))
    return rank

@pytest.mark.parametrize('fn', [failing, failing_in_a_collective])
def test_a_failing_rank_stops_the_launch_with_its_error(fn):
    "The error raised is the failing rank's own, not the lost connection of the rank that waited for it."
    for _ in range(3):  # which process the parent sees die first varies from run to run
        with pytest.raises(Exception, match='rank 1 found no data') as e:
            launch_ddp(fn, nprocs=2, backend='gloo', timeout=120)
        assert e.value.error_index == 1, e.value

@pytest.mark.skipif(torch.cuda.is_available(), reason='forking after CUDA or autograd started on a GPU machine is refused by PyTorch')
def test_fork_runs_a_function_defined_in_main():
    "A function from a script's __main__ (as in a notebook) runs when the processes are forked, after the parent used autograd on the CPU."
    r = python('''
        import torch
        from torch import nn
        from colab_t4_nb.memory import launch_ddp
        def grads(rank, world_size):
            torch.manual_seed(0)
            m = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
            m(torch.full((2, 4), rank + 1.0)).sum().backward()
            return m.module.weight.grad
        if __name__ == '__main__':
            nn.Linear(8, 8)(torch.randn(64, 8)).sum().backward()  # the parent has used autograd and OpenMP
            g0, g1 = launch_ddp(grads, nprocs=2, backend='gloo', start_method='fork')
            assert torch.equal(g0, g1) and torch.equal(g0, torch.full((1, 4), 3.0)), (g0, g1)
            print('ok')
    ''')
    assert r.returncode == 0 and r.stdout.strip() == 'ok', r.stdout + r.stderr

def test_nccl_needs_a_gpu_per_process():
    with pytest.raises(ColabT4Error, match='NCCL needs one GPU per process'): launch_ddp(allreduce_check, nprocs=99, backend='nccl')

def run_tf(code, env):
    r = python(code, {**env, 'TF_CPP_MIN_LOG_LEVEL': '3'})
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    return r.stdout

def test_tensorflow_oom_and_growth_before_start(cpu_env):
    "TF's real ResourceExhaustedError is an OOM; with no GPU the switch returns []; a GPU listed before TF starts is switched."
    pytest.importorskip('tensorflow')
    out = run_tf('''
        import tensorflow as tf
        from colab_t4_nb.memory import tf_memory_growth
        from colab_t4_nb.core import oom_kind
        assert oom_kind(tf.errors.ResourceExhaustedError(None, None, 'OOM when allocating tensor with shape[4096,4096]')) == 'tf'
        assert oom_kind(tf.errors.InvalidArgumentError(None, None, 'Incompatible shapes')) is None
        assert tf_memory_growth() == []
        from tensorflow.python.eager import context
        tf.config.list_physical_devices()
        gpu = tf.config.PhysicalDevice(name='/physical_device:GPU:0', device_type='GPU')
        context.context()._physical_devices.append(gpu)  # TF finds a GPU (a stand-in: this build has none)
        assert tf_memory_growth() == [gpu]
        assert tf.config.experimental.get_memory_growth(gpu) is True
        print('ok')
    ''', cpu_env)
    assert out.strip() == 'ok'

def test_tensorflow_growth_after_start_is_explained(cpu_env):
    "After TF has started, its own set_memory_growth raises; the error says why and what to do."
    pytest.importorskip('tensorflow')
    out = run_tf('''
        import tensorflow as tf
        from colab_t4_nb.memory import tf_memory_growth, ColabT4Error
        from tensorflow.python.eager import context
        tf.constant(1.0) + 1  # TensorFlow starts
        gpu = tf.config.PhysicalDevice(name='/physical_device:GPU:0', device_type='GPU')
        context.context()._physical_devices.append(gpu)
        try: tf_memory_growth()
        except ColabT4Error as e:
            assert 'already started on the GPU' in str(e) and 'TF_FORCE_GPU_ALLOW_GROWTH' in str(e), e
            assert 'Physical devices cannot be modified after being initialized' in str(e.__cause__), e.__cause__
            print('ok')
    ''', cpu_env)
    assert out.strip() == 'ok'
