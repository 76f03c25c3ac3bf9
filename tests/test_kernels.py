"""colab_t4_nb.kernels and .switches where a notebook cell cannot look: a fresh import starts nothing,
the occupancy calculator's invariants on random inputs for every architecture, switches reaching a
child process, `cuda_compat` in a process without a driver, and the Triton kernel under Triton's
CPU interpreter where Triton is installed."""
import os, sys
import pytest
from hypothesis import given, settings, strategies as st
from conftest import python

from colab_t4_nb.kernels import ARCHS, ArgumentError, best_block_size, candidates, launch_config, occupancy

def test_import_starts_nothing(cpu_env):
    "Importing the modules (as `colab-t4 info` does) imports neither torch nor Triton."
    r = python('''
        import sys
        import colab_t4_nb.kernels, colab_t4_nb.switches
        assert 'torch' not in sys.modules and 'triton' not in sys.modules, [m for m in ('torch', 'triton') if m in sys.modules]
        print('ok')''', cpu_env)
    assert r.returncode == 0 and r.stdout.strip() == 'ok', r.stderr

def test_cuda_compat_without_driver(cpu_env):
    "No NVML and no nvidia-smi: a plain answer, printed, never an exception."
    env = {**cpu_env, 'PATH': os.path.dirname(sys.executable)}
    r = python('''
        from colab_t4_nb.testing import missing_nvml
        from colab_t4_nb.kernels import cuda_compat
        with missing_nvml(): c = cuda_compat()
        print(c.status); print(c)''', env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == 'no driver' and 'Verdict: no driver.' in r.stdout, r.stdout

def test_switch_reaches_child_and_is_restored(cpu_env):
    "A switch set in the block is inherited by a child process started there, and is gone after."
    r = python('''
        import os, subprocess, sys
        from colab_t4_nb.switches import env_switches
        probe = [sys.executable, '-c', 'import os; print(os.environ.get("CUDA_LAUNCH_BLOCKING"))']
        with env_switches(CUDA_LAUNCH_BLOCKING='1'): inside = subprocess.run(probe, capture_output=True, text=True).stdout.strip()
        after = subprocess.run(probe, capture_output=True, text=True).stdout.strip()
        print(inside, after)''', {k: v for k, v in cpu_env.items() if k != 'CUDA_LAUNCH_BLOCKING'})
    assert r.returncode == 0 and r.stdout.split() == ['1', 'None'], (r.stdout, r.stderr)

ccs = st.sampled_from(sorted(ARCHS))
blocks = st.integers(1, 32).map(lambda w: 32 * w)

@settings(max_examples=300, deadline=None)
@given(cc=ccs, block=blocks, regs=st.integers(0, 255), smem=st.integers(0, 48 * 1024))
def test_occupancy_never_exceeds_the_sm(cc, block, regs, smem):
    "Whatever the input, the resident blocks fit in every resource of the SM."
    a, o = ARCHS[cc], occupancy(block, regs, smem, cc)
    assert 0 <= o.blocks <= a.max_blocks and o.warps <= a.max_warps and o.warps == o.blocks * block // 32
    assert o.blocks * o.regs_alloc <= a.regs_per_sm
    assert o.blocks * o.smem_alloc <= a.smem_per_sm
    assert o.limiter and all(o.limits[k] == o.blocks for k in o.limiter)

@settings(max_examples=300, deadline=None)
@given(cc=ccs, block=blocks, regs=st.integers(0, 254), smem=st.integers(0, 40 * 1024), more=st.integers(1, 8 * 1024))
def test_more_resources_never_raise_occupancy(cc, block, regs, smem, more):
    "One more register per thread, or more shared memory per block, never lets more blocks in."
    o = occupancy(block, regs, smem, cc)
    assert occupancy(block, regs + 1, smem, cc).blocks <= o.blocks
    assert occupancy(block, regs, smem + more, cc).blocks <= o.blocks

@settings(max_examples=100, deadline=None)
@given(cc=ccs, regs=st.integers(0, 128), smem=st.integers(0, 32 * 1024))
def test_best_block_size_is_best(cc, regs, smem):
    "No block size keeps more warps resident than `best_block_size`'s, and its candidates reach the same."
    best = best_block_size(regs, smem, cc)
    assert all(occupancy(32 * w, regs, smem, cc).warps <= best.warps for w in range(1, 33))
    assert all(occupancy(b, regs, smem, cc).warps == best.warps for b in candidates(regs, smem, cc))

@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 10**9), card=st.sampled_from(['T4', 'K80', 'P100', 'V100-SXM2', 'A100-SXM4-80GB', 'L4', 'H200']),
       regs=st.integers(0, 128))
def test_launch_config_covers_n(n, card, regs):
    "The grid covers every element with blocks that can launch."
    lc = launch_config(n, card, regs)
    assert lc.grid * lc.block >= n and (lc.grid - 1) * lc.block < n and lc.occupancy.blocks >= 1

def test_bad_input_is_refused():
    for bad in [dict(block=33), dict(block=0), dict(block=1056), dict(block=128, regs=256), dict(block=128, smem=-1)]:
        with pytest.raises(ArgumentError): occupancy(device='T4', **bad)

def test_bias_gelu_under_the_triton_interpreter(tmp_path, cpu_env):
    "The Triton kernel computes the tanh GELU of x + bias on every element (Triton's CPU interpreter)."
    pytest.importorskip('triton')
    r = python('''
        import torch
        from colab_t4_nb.kernels import triton_kernels
        k = triton_kernels()
        for rows, cols, block in [(3, 100, 32), (2, 64, 64), (1, 300, 128)]:
            x, b = torch.randn(rows, cols), torch.randn(cols)
            y = torch.full_like(x, float('nan'))
            k.bias_gelu_kernel[(rows, -(-cols // block))](x, b, y, cols, BLOCK=block)
            ref = torch.nn.functional.gelu(x.double() + b.double(), approximate='tanh')
            err = ((y.double() - ref).norm() / ref.norm()).item()
            assert not y.isnan().any() and err < 1e-5, (rows, cols, block, err)
        print('ok')''', {**cpu_env, 'TRITON_INTERPRET': '1', 'TMPDIR': str(tmp_path)})
    assert r.returncode == 0 and r.stdout.strip() == 'ok', r.stderr[-3000:]
