"""Property-based tests of the public functions of `colab_t4_nb.amp` and `colab_t4_nb.memory`: given any arguments,
a call either works (and then its result keeps its promise) or raises an error of the package, or a `ValueError` /
`TypeError`, whose message names the argument or the value passed; never a bare `IndexError`, `StopIteration`,
`AttributeError` or `KeyError` from inside, and never anything else. Tiny models, CPU only."""
import math, warnings
import pandas as pd
import pytest, torch
import torch.nn.functional as F
from torch import nn
from hypothesis import given, settings, strategies as st

from colab_t4_nb.allocation import SPECS
from colab_t4_nb.core import ColabT4Error
from colab_t4_nb import amp, memory, models
from conftest import PROPS, PROPS_TINY, assert_clear

INTS = st.integers(-3, 40)
JUNK = st.one_of(st.none(), st.booleans(), INTS, st.floats(allow_nan=True, allow_infinity=True, width=32),
                 st.text(max_size=5), st.tuples(st.integers(-1, 12)), st.tuples(st.integers(-1, 12), st.integers(-1, 12)),
                 st.lists(st.integers(-2, 8), max_size=3))
DTYPES = st.one_of(JUNK, st.sampled_from(['fp16', 'bf16', 'fp32', 'half', torch.float16, torch.bfloat16, torch.int8]))
DEVICES = st.one_of(JUNK, st.sampled_from(['cpu', 'cuda', 'cuda:1', 'mps', 'meta', 'T4', 'Tesla K80', 'NVIDIA H200', 'A100',
                                           (7, 5), (8, 0), (9,), SPECS['T4'], torch.device('cpu')]))

def call(f, *args, **kw):
    "`f(*args, **kw)`, or None after a clear error whose message names one of the arguments or its value."
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            return f(*args, **kw)
    except Exception as e:
        assert_clear(e, [*kw, *(repr(v) for v in (*args, *kw.values()))], f' from {f.__name__}')
        return None

def linear(): torch.manual_seed(0); return nn.Linear(4, 1)

# --- amp ---------------------------------------------------------------------------------------------------------

@PROPS_TINY
@given(dtype=DTYPES)
def test_parse_dtype(dtype):
    r = call(amp.parse_dtype, dtype=dtype)
    if r is not None: assert r in (torch.float16, torch.bfloat16, torch.float32)
    n = call(amp.dtype_name, dtype=dtype)
    if n is not None: assert amp.DTYPES[n] == r

@PROPS_TINY
@given(device=DEVICES, dtype=DTYPES)
def test_amp_choice(device, dtype):
    c = call(amp.amp_choice, device=device, dtype=dtype)
    if c is not None:
        assert c.device_type in ('cpu', 'cuda') and c.dtype in amp.DTYPES.values()
        assert c.scaler == (c.dtype == torch.float16 and c.device_type == 'cuda') or dtype is not None

@PROPS_TINY
@given(model=st.sampled_from(['linear', 'relu', None, 3]), loss_fn=st.sampled_from([F.mse_loss, None, 'mse', 3]),
       dtype=st.one_of(st.none(), DTYPES), clip=st.one_of(st.none(), JUNK), scaler=st.one_of(st.none(), JUNK),
       max_skips=st.one_of(st.just(20), JUNK), check_every=st.one_of(st.none(), JUNK))
def test_amp_step(model, loss_fn, dtype, clip, scaler, max_skips, check_every):
    net = linear()
    m = {'linear': net, 'relu': nn.ReLU()}.get(model, model)
    opt = torch.optim.SGD(net.parameters(), 1e-3)
    step = call(amp.AmpStep, model=m, opt=opt, loss_fn=loss_fn, dtype=dtype, clip=clip, scaler=scaler,
                max_skips=max_skips, check_every=check_every)
    if step is None or loss_fn is not F.mse_loss: return
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    before = F.mse_loss(net(x), y).item()
    step(x, y)
    after = F.mse_loss(net(x), y).item()
    assert after <= before + 1e-3 * abs(before) + 1e-6, (clip, before, after)  # a small step never goes uphill
    assert len(step.history) == 1

@PROPS_TINY
@given(model=st.sampled_from(['linear', 'relu', 3]), loss_fn=st.sampled_from([F.mse_loss, None, 3]), dtype=DTYPES,
       device_type=st.one_of(JUNK, st.sampled_from(['cpu', 'cuda'])), scaler=st.one_of(st.none(), JUNK))
def test_plain_amp_step(model, loss_fn, dtype, device_type, scaler):
    net = linear()
    m = {'linear': net, 'relu': nn.ReLU()}.get(model, model)
    call(amp.plain_amp_step, model=m, opt=torch.optim.SGD(net.parameters(), 1e-3), loss_fn=loss_fn, dtype=dtype,
         device_type=device_type, scaler=scaler)

@PROPS_TINY
@given(d=INTS, h=INTS, multiple=st.one_of(INTS, JUNK))
def test_mlp_and_lint_dims(d, h, multiple):
    m = call(models.mlp, d=d, h=h)
    if m is None: return
    df = call(amp.lint_dims, model=m, multiple=multiple)
    if df is not None: assert all(r.pad_to % multiple == 0 and r.pad_to > r.size for r in df.itertuples())
    call(amp.lint_dims, model=multiple, multiple=8)

@PROPS_TINY
@given(batch=st.one_of(INTS, JUNK), seq=st.one_of(INTS, JUNK), vocab=st.one_of(INTS, JUNK))
def test_token_batch(batch, seq, vocab):
    r = call(models.token_batch, batch=batch, seq=seq, vocab=vocab)
    if r is not None: assert r[0].shape == (batch, seq) and int(r[0].max()) < vocab

@settings(PROPS, max_examples=25)
@given(vocab=st.integers(-1, 30), hidden=st.integers(-1, 16), layers=st.integers(-1, 3), heads=st.integers(-1, 4),
       ffn=st.integers(-1, 16), max_len=st.integers(-1, 16))
def test_encoder(vocab, hidden, layers, heads, ffn, max_len):
    call(models.Encoder, vocab=vocab, hidden=hidden, layers=layers, heads=heads, ffn=ffn, max_len=max_len)

@PROPS_TINY
@given(report=st.sampled_from(['ok', 'no ms', 3]), gflop=st.one_of(JUNK, st.floats(0, 1e3)), spec=DEVICES)
def test_math_share(report, gflop, spec):
    df = {'ok': pd.DataFrame({'ms': [2.0, 1.0]}, index=['fp32', 'amp fp16']), 'no ms': pd.DataFrame({'t': [1.0]})}.get(report, report)
    r = call(amp.math_share, report=df, gflop=gflop, spec=spec)
    if r is not None: assert (r.math_ms.dropna() >= 0).all()

@settings(PROPS, max_examples=30)
@given(device=DEVICES, dtype=st.one_of(st.none(), DTYPES), n=st.one_of(st.none(), st.integers(-2, 24), JUNK),
       repeats=st.one_of(st.integers(-1, 3), JUNK), warmup=st.one_of(st.integers(-1, 2), JUNK))
def test_tensor_core_check(device, dtype, n, repeats, warmup):
    c = call(amp.tensor_core_check, device=device, dtype=dtype, n=n, repeats=repeats, warmup=warmup)
    if c is not None: assert c.fp32_tflops > 0 and c.amp_tflops > 0 and 0 < c.amp_err < 0.1

@PROPS_TINY
@given(a=st.sampled_from(['ok', 'wrong', 'vector', 3]), repeats=st.one_of(st.integers(-1, 3), JUNK),
       warmup=st.one_of(st.integers(-1, 2), JUNK))
def test_matmul_ms(a, repeats, warmup):
    x = {'ok': torch.randn(8, 8), 'wrong': torch.randn(3, 5), 'vector': torch.randn(8)}.get(a, a)
    r = call(amp.matmul_ms, a=x, b=torch.randn(8, 8), repeats=repeats, warmup=warmup)
    if r is not None: assert r >= 0

@PROPS_TINY
@given(device=DEVICES, dtype=st.one_of(st.none(), DTYPES))
def test_autocast_ops(device, dtype):
    r = call(amp.autocast_ops, device=device, dtype=dtype)
    if r is not None: assert set(r.autocast) <= {'cast down', 'kept in fp32', 'follows input'}

@PROPS_TINY
@given(dim=st.one_of(JUNK, st.integers(-4, 4)), x=st.sampled_from(['matrix', 'scalar', 3]))
def test_softmax32(dim, x):
    t = {'matrix': torch.randn(2, 3), 'scalar': torch.tensor(1.5)}.get(x, x)
    r = call(amp.softmax32, x=t, dim=dim)
    if r is not None: assert r.dtype == torch.float32 and torch.allclose(r.sum(dim), torch.ones(()))
    call(amp.in_fp32, fn=dim)

@PROPS_TINY
@given(step=JUNK)
def test_step_anatomy(step):
    call(amp.step_anatomy, step=step)

# --- memory ------------------------------------------------------------------------------------------------------

def oom_above(limit):
    def step(bs):
        if bs > limit: raise torch.OutOfMemoryError(f'CUDA out of memory. Tried to allocate {bs} MiB.')
    return step

SIZES = st.one_of(st.integers(-3, 400), JUNK)

@settings(PROPS, max_examples=150)
@given(limit=st.integers(0, 300), fn=st.sampled_from(['step', 3, None]), mode=st.one_of(JUNK, st.sampled_from(['grow', 'halve'])),
       start=st.one_of(st.none(), SIZES), min_size=st.one_of(st.just(1), SIZES), max_size=st.one_of(st.just(2**14), SIZES),
       steps=st.one_of(st.just(3), SIZES), margin=st.one_of(st.just(0.015), JUNK, st.floats(0, 0.99)),
       tol=st.one_of(st.just(0.03), JUNK, st.floats(0, 1)), finder=st.sampled_from(['find_batch_size', 'find_max_size']))
def test_find_size(limit, fn, mode, start, min_size, max_size, steps, margin, tol, finder):
    f = oom_above(limit) if fn == 'step' else fn
    try: r = call(getattr(memory, finder), fn=f, mode=mode, start=start, min_size=min_size, max_size=max_size, steps=steps,
                  margin=margin, tol=tol)
    except memory.NothingFits as e:
        assert min(t.size for t in e.trials) == min_size > limit and 'Nothing fits' in str(e)
        return
    if r is None: return
    assert type(r.size) is int and min_size <= r.size <= min(r.largest_ok, max_size) and r.largest_ok <= limit
    assert all(type(s) is int and min_size <= s <= max_size for s in r.sizes)
    if r.smallest_oom is not None: assert r.smallest_oom > limit and r.largest_ok >= r.smallest_oom * (1 - tol) - 1 - 1e-9

@PROPS_TINY
@given(size=SIZES, steps=SIZES)
def test_try_batch(size, steps):
    t = call(memory.try_batch, fn=oom_above(100), size=size, steps=steps)
    if t is not None: assert t.ok == (size <= 100)

@PROPS_TINY
@given(target=SIZES, fits=SIZES)
def test_accumulation(target, fits):
    a = call(memory.accumulation, target=target, fits=fits)
    if a is not None: assert sum(a.sizes) == target and max(a.sizes) <= fits and max(a.sizes) - min(a.sizes) <= 1

@PROPS_TINY
@given(sizes=st.one_of(JUNK, st.lists(st.integers(0, 50), max_size=6), st.lists(JUNK, max_size=3)), parts=st.one_of(INTS, JUNK))
def test_balance(sizes, parts):
    r = call(memory.balance, sizes=sizes, parts=parts)
    if r is not None: assert sum(r) == len(sizes) and len(r) == parts and min(r) >= 1

@PROPS_TINY
@given(n=st.one_of(INTS, JUNK), model=st.sampled_from(['seq', 'linear', 3]))
def test_checkpoint_every(n, model):
    seq = nn.Sequential(*[nn.Linear(4, 4) for _ in range(5)])
    r = call(memory.checkpoint_every, model={'seq': seq, 'linear': nn.Linear(2, 2)}.get(model, model), n=n)
    if r is not None: assert sum(len(s.module) for s in r) == 5

@PROPS_TINY
@given(device=DEVICES, reserve=st.one_of(st.booleans(), JUNK))
def test_usable_memory(device, reserve):
    r = call(memory.usable_memory, device=device, reserve=reserve)
    if r is not None: assert 2**30 < r <= memory.usable_memory(device) and reserve in (True, False)

@PROPS_TINY
@given(device=DEVICES)
def test_peak_memory(device):
    call(memory.peak_memory, device=device)

@PROPS_TINY
@given(devices=st.one_of(st.none(), JUNK, st.lists(st.sampled_from(['cpu', 'T4', 'meta', 3, None]), max_size=4)))
def test_split_model(devices):
    seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    sm = call(memory.split_model, model=seq, devices=devices, verbose=False)
    if sm is not None: assert sum(sm.plan.blocks) == 3

@settings(PROPS, max_examples=40)
@given(model=st.sampled_from(['linear', 'relu', 3]), input_shape=st.one_of(JUNK, st.just((4,))), num_classes=st.one_of(INTS, JUNK),
       target_shape=st.one_of(st.just(()), JUNK), amp_=st.one_of(st.sampled_from([None, 'bf16', 'fp16']), JUNK))
def test_synthetic_step(model, input_shape, num_classes, target_shape, amp_):
    net = nn.Linear(4, 3)
    m = {'linear': net, 'relu': nn.ReLU()}.get(model, model)
    step = call(memory.synthetic_step, model=m, opt=torch.optim.SGD(net.parameters(), 0.01), input_shape=input_shape,
                num_classes=num_classes, target_shape=target_shape, amp=amp_)
    if step is not None and input_shape == (4,) and target_shape == () and num_classes == 3 and amp_ != 'fp16': step(2)

@settings(PROPS, max_examples=25)
@given(n=st.one_of(st.integers(-1, 4), JUNK), repeats=st.one_of(st.integers(-1, 3), JUNK), warmup=st.one_of(st.integers(-1, 2), JUNK),
       x=st.sampled_from(['ok', 3]))
def test_checkpoint_report(n, repeats, warmup, x):
    seq = nn.Sequential(*[nn.Linear(4, 4) for _ in range(4)])
    r = call(memory.checkpoint_report, model=seq, x=torch.randn(2, 4) if x == 'ok' else x, n=n, repeats=repeats, warmup=warmup)
    if r is not None: assert r.peak_mib.isna().all() and all(p.grad is None for p in seq.parameters())

@PROPS_TINY
@given(e=st.one_of(JUNK, st.just(ValueError('x'))))
def test_free_memory(e):
    call(memory.free_memory, e=e)

@PROPS_TINY
@given(card=DEVICES)
def test_cap_memory_without_gpu(card):
    if torch.cuda.is_available(): pytest.skip('a GPU is here: the cap would be set for real')
    try: memory.cap_memory(card)
    except ColabT4Error as e: assert 'needs a CUDA GPU' in str(e)
    else: raise AssertionError('cap_memory worked without a GPU')
