"""A T4's memory as PyTorch sees it, held on a bigger card: the figures the rehearsal imitates, memory caps
nested inside and around `t4_rehearsal`, and a rehearsal left from another thread or context.
CPU only: where a GPU is needed, `torch.cuda` answers as an H100 would (a stand-in that keeps the
per-process memory fraction set, so the bytes PyTorch could reserve follow from it)."""
import contextvars, threading
from contextlib import ExitStack
from types import SimpleNamespace
from unittest import mock
import pytest, torch
from colab_t4_nb.amp import amp_choice, decide_as
from colab_t4_nb.memory import cap_memory, usable_memory
from colab_t4_nb.t4 import t4_rehearsal

GiB = 2**30
# what PyTorch's out-of-memory messages show on Colab's T4 (see `T4_MEMORY` on the memory page): the largest
# "total capacity", and the most "reserved in total by PyTorch"
T4_TOTAL_SEEN, T4_RESERVED_SEEN = 14.75 * GiB, 14.61 * GiB

class H100:
    "`torch.cuda` as an H100 answers the cap's and the rehearsal's questions; `reservable` follows the fraction set."
    def __init__(self, total:int=81079 * 2**20, fraction:float=1.0): self.total, self.fraction = total, fraction
    def patches(self)->list:
        props = SimpleNamespace(name='NVIDIA H100 80GB HBM3', major=9, minor=0, multi_processor_count=132,
                                total_memory=self.total, warp_size=32, L2_cache_size=50 * 2**20)
        def set_fraction(f, device=None): self.fraction = f
        answers = dict(is_available=lambda: True, current_device=lambda: 0, is_initialized=lambda: False,
                       empty_cache=lambda: None, get_device_properties=lambda device=None: props,
                       mem_get_info=lambda device=None: (self.total, self.total),
                       memory_reserved=lambda device=None: 0, set_per_process_memory_fraction=set_fraction,
                       get_per_process_memory_fraction=lambda device=None: self.fraction)
        return [mock.patch.object(torch.cuda, k, v) for k, v in answers.items()]
    @property
    def reservable(self)->float: return self.fraction * self.total  # what PyTorch's allocator may hold

@pytest.fixture
def h100():
    gpu = H100(fraction=0.9)  # a fraction set before, which must come back
    with ExitStack() as stack:
        for p in gpu.patches(): stack.enter_context(p)
        yield gpu

# --- the figures ----------------------------------------------------------------------------------------------

def test_a_t4_is_what_pytorch_reports_there_not_what_nvidia_smi_says():
    assert usable_memory('T4') <= T4_TOTAL_SEEN, usable_memory('T4') / GiB

def test_the_rehearsal_lets_pytorch_reserve_what_a_t4_lets_it(h100):
    "A batch found inside the rehearsal must fit on a T4: the cap is what PyTorch can reserve there."
    with t4_rehearsal(verbose=False):
        assert h100.reservable <= T4_RESERVED_SEEN, h100.reservable / GiB
        assert torch.cuda.get_device_properties(0).total_memory <= T4_TOTAL_SEEN
        free, total = torch.cuda.mem_get_info()
        assert free <= h100.reservable and total <= T4_TOTAL_SEEN, (free / GiB, total / GiB)
    assert h100.fraction == 0.9

# --- caps inside and around the rehearsal ------------------------------------------------------------------------

def test_caps_inside_the_rehearsal_hold_against_the_real_card(h100):
    with t4_rehearsal(verbose=False):
        rehearsed = h100.reservable
        with cap_memory('T4') as cap:
            assert h100.reservable == pytest.approx(rehearsed) and cap.total == h100.total, cap
        with cap_memory(12 * GiB):
            assert h100.reservable == pytest.approx(12 * GiB)
        assert h100.reservable == pytest.approx(rehearsed)  # the rehearsal's own cap is back
    assert h100.fraction == 0.9

def rehearsal(): return t4_rehearsal(verbose=False)
def t4_cap(): return cap_memory('T4')
def cap_12(): return cap_memory(12 * GiB)

@pytest.mark.parametrize('outer,inner', [(cap_12, rehearsal), (rehearsal, cap_12), (cap_12, t4_cap),
                                         (t4_cap, cap_12)], ids=lambda f: f.__name__)
def test_nested_caps_keep_the_tighter_and_leaving_the_inner_restores_the_outer(h100, outer, inner):
    with outer():
        alone = h100.reservable
        with inner(): assert h100.reservable == pytest.approx(min(alone, 12 * GiB))
        assert h100.reservable == pytest.approx(alone)
    assert h100.fraction == 0.9

def test_caps_left_out_of_order_restore_what_was_there(h100):
    first, second = cap_12(), t4_cap()
    first.restore()
    assert h100.reservable == pytest.approx(second.limit)  # the T4 cap still holds
    first.restore()  # twice is harmless
    assert h100.reservable == pytest.approx(second.limit)
    second.restore()
    assert h100.fraction == 0.9

# --- a rehearsal is process-wide ---------------------------------------------------------------------------------

def in_thread(fn):
    "`fn()` in a new thread: its result, or the exception it raised."
    out = []
    def run():
        try: out.append(fn())
        except Exception as e: out.append(e)
    t = threading.Thread(target=run)
    t.start(); t.join(30)
    return out[0]

def in_context(fn):
    "`fn()` in a copy of this thread's `contextvars` context."
    try: return contextvars.copy_context().run(fn)
    except Exception as e: return e

@pytest.mark.parametrize('elsewhere', [in_thread, in_context], ids=['thread', 'context'])
def test_a_rehearsal_left_elsewhere_restores_everything(elsewhere):
    before = amp_choice().name, torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision('high')
    try:
        r = t4_rehearsal(verbose=False).__enter__()
        assert (amp_choice().name, torch.get_float32_matmul_precision()) == ('fp16', 'highest')
        assert elsewhere(lambda: r.__exit__(None, None, None)) is False
        assert (amp_choice().name, torch.get_float32_matmul_precision()) == (before[0], 'high')
    finally: torch.set_float32_matmul_precision(before[1])

@pytest.mark.parametrize('elsewhere', [in_thread, in_context], ids=['thread', 'context'])
def test_decide_as_left_elsewhere(elsewhere):
    before, block = amp_choice().name, decide_as('T4')
    block.__enter__()
    assert elsewhere(lambda: block.__exit__(None, None, None)) in (None, False)
    assert amp_choice().name == before

def test_a_thread_started_inside_the_rehearsal_sees_a_t4_as_tf32_does():
    with t4_rehearsal(verbose=False):
        seen = in_thread(lambda: (amp_choice().name, torch.get_float32_matmul_precision()))
    assert seen == ('fp16', 'highest'), seen
