"""Nothing the user saved is lost: loads are all or nothing, save's report matches the disk, a folder
belongs to one run, the user's own files in it are left alone, rotation on Drive frees the bytes."""
import errno, json, os, socket, subprocess, sys, threading, time, warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from colab_t4_nb import checkpoint_format as F, persistence as P
from colab_t4_nb.testing import failing, fake_colab, small_run, train_step

def states(*objs)->list:
    "Deep copies of the state dicts of `objs`, to compare before and after."
    return [None if o is None else torch.utils._pytree.tree_map(
        lambda v: v.clone() if isinstance(v, torch.Tensor) else v, o.state_dict()) for o in objs]

def same(a, b)->bool:
    if isinstance(a, torch.Tensor): return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict): return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)): return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b

# ---------------------------------------------------------------- load is all or nothing
def trained(seed=0):
    o = small_run(seed)
    for s in range(3): train_step(o, s)
    return o

def test_scheduler_of_another_class_changes_nothing(tmp_path):
    ckpt = P.CheckpointManager(tmp_path)
    ckpt.save(3, **trained())
    o = small_run(1)
    o['scheduler'] = torch.optim.lr_scheduler.LambdaLR(o['optimizer'], lambda e: 0.9 ** e)
    before = states(*o.values())
    with pytest.raises(F.CheckpointMismatch, match='scheduler'): ckpt.load(**o)
    assert same(states(*o.values()), before)

def test_adam_state_into_sgd_is_refused(tmp_path):
    ckpt = P.CheckpointManager(tmp_path)
    o = trained()
    ckpt.save(3, model=o['model'], optimizer=o['optimizer'])
    m = small_run(1)['model']
    sgd = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    before = states(m, sgd)
    with pytest.raises(F.CheckpointMismatch, match='Adam'): ckpt.load(model=m, optimizer=sgd)
    assert same(states(m, sgd), before)

def test_adam_state_over_parameters_in_another_order_is_refused(tmp_path):
    ckpt = P.CheckpointManager(tmp_path)
    o = trained()
    ckpt.save(3, model=o['model'], optimizer=o['optimizer'])
    m = small_run(1)['model']
    opt = torch.optim.Adam(list(m.parameters())[::-1], lr=1e-2)
    before = states(m, opt)
    with pytest.raises(F.CheckpointMismatch, match='optimizer state'): ckpt.load(model=m, optimizer=opt)
    assert same(states(m, opt), before)

def test_failing_load_state_dict_leaves_everything_as_it_was(tmp_path):
    ckpt = P.CheckpointManager(tmp_path)
    ckpt.save(3, **trained())
    o = small_run(1)
    before, rng = states(*o.values()), torch.get_rng_state()
    with failing(o['model'], 'load_state_dict', RuntimeError('a hook refused it')):
        with pytest.raises(F.CheckpointMismatch, match='a hook refused it'): ckpt.load(**o)
    assert same(states(*o.values()), before) and torch.equal(torch.get_rng_state(), rng)
