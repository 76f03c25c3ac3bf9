"""What the T4 rehearsal patches on a GPU is its table, `REHEARSAL_PATCHES`, and every target is the original
object again once the rehearsal closes. CPU only: `torch.cuda` answers as an H200 would."""
import pkgutil
from contextlib import ExitStack
from types import SimpleNamespace
from unittest import mock
import pytest, torch
from colab_t4_nb import t4

H200 = SimpleNamespace(name='NVIDIA H200', major=9, minor=0, multi_processor_count=132,
                       total_memory=150_754_820_096, warp_size=32, L2_cache_size=60 * 2**20)

@pytest.fixture
def h200():
    "`torch.cuda` answers the rehearsal's questions as an H200 would."
    answers = dict(is_available=lambda: True, current_device=lambda: 0, memory_reserved=lambda device=None: 0,
                   get_device_properties=lambda device=None: H200,
                   mem_get_info=lambda device=None: (140 * 2**30, 140 * 2**30))
    with ExitStack() as stack:
        for k, v in answers.items(): stack.enter_context(mock.patch.object(torch.cuda, k, v))
        yield

def _now()->dict: return {target: pkgutil.resolve_name(target) for target in t4.REHEARSAL_PATCHES}

def test_every_target_is_the_original_again_after_the_rehearsal(h200):
    before = _now()
    with t4.t4_rehearsal(memory=False, verbose=False):
        inside = _now()
        assert torch.cuda.get_device_name() == 'Tesla T4'
    replaced = [t for t in before if inside[t] is not before[t]]
    assert replaced == list(t4.REHEARSAL_PATCHES), replaced
    back = [t for t, f in _now().items() if f is not before[t]]
    assert not back, f'still patched after the rehearsal: {back}'

def test_the_table_is_what_is_patched(h200):
    "A target added to the table is patched and put back; one taken out of it is left alone."
    real_arch, real_name = torch.cuda.get_arch_list, torch.cuda.get_device_name
    added = {'torch.cuda.get_arch_list': ("['sm_75']", lambda real, bf16: lambda: ['sm_75'])}
    with mock.patch.dict(t4.REHEARSAL_PATCHES, added):
        del t4.REHEARSAL_PATCHES['torch.cuda.get_device_name']
        with t4.t4_rehearsal(memory=False, verbose=False):
            assert torch.cuda.get_arch_list() == ['sm_75']
            assert torch.cuda.get_device_name is real_name
    assert torch.cuda.get_arch_list is real_arch and 'torch.cuda.get_device_name' in t4.REHEARSAL_PATCHES
