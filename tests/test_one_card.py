"""One card, read in one place: every public `device` goes through `as_card`, with one rule."""
import ast, inspect
from pathlib import Path
import pytest
import torch
import colab_t4_nb

PKG = Path(colab_t4_nb.__file__).parent

def _wrappers()->list:
    "The package's private functions that call `as_card`, as 'module.name'."
    found = []
    for f in sorted(PKG.glob('*.py')):
        for node in ast.walk(ast.parse(f.read_text())):
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith('_')
                    and not node.name.startswith('__')): continue
            calls = {c.func.id for c in ast.walk(node)
                     if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            if 'as_card' in calls: found.append(f'{f.stem}.{node.name}')
    return found

def test_at_most_two_private_helpers_wrap_as_card():
    assert len(_wrappers()) <= 2, _wrappers()

def test_card_parameters_are_named_device():
    from colab_t4_nb.acceptance import check
    from colab_t4_nb.benchmarks import t4_figures
    assert list(inspect.signature(check).parameters)[:2] == ['name', 'device']
    assert list(inspect.signature(t4_figures).parameters) == ['df', 'device']

def _doors():
    "Public functions that run code on `device`, each called with only that argument given."
    from colab_t4_nb import acceptance, amp, benchmarks, memory, models, switches, t4
    return {'context': benchmarks.context, 'peak_memory': memory.peak_memory,
            'seg_batch': lambda device: models.seg_batch(1, 8, device=device),
            'validation_table': lambda device: t4.validation_table(device=device),
            'autocast_ops': amp.autocast_ops, 'tensor_core_check': amp.tensor_core_check,
            'switch_benchmark': lambda device: switches.shape_change_cost(
                lambda: torch.nn.Linear(2, 2), lambda n: (torch.ones(n, 2), torch.zeros(n)),
                device=device),
            'acceptance': lambda device: acceptance._args(device=device)}

@pytest.mark.parametrize('door', sorted(_doors()))
def test_a_card_only_named_is_refused_the_same_way(door):
    "Code that runs here refuses a card that is not here: one error class, one message."
    from colab_t4_nb.allocation import NoGPUError
    with pytest.raises(NoGPUError, match="device='T4' names a card, not a device of this runtime"):
        _doors()[door]('T4')

def test_errors_name_the_argument():
    from colab_t4_nb.allocation import as_card, NoGPUError
    from colab_t4_nb.memory import split_model
    with pytest.raises(NoGPUError, match=r"devices\[0\]='T4' names a card"):
        split_model(torch.nn.Sequential(torch.nn.Linear(2, 2)), ['T4'], verbose=False)
    with pytest.raises(ValueError, match=r"where=\(7, 5, 1\)"): as_card((7, 5, 1), name='where')
    assert as_card('cpu', ('cuda', 'cpu'), here=True).device == torch.device('cpu')
