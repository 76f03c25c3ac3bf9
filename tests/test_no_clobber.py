"""Nothing the user saved is lost: loads are all or nothing, save's report matches the disk, a folder
belongs to one run, the user's own files in it are left alone, rotation on Drive frees the bytes."""
import errno, json, os, socket, subprocess, sys, threading, time, warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from colab_t4_nb import checkpoint_format as F, persistence as P
from colab_t4_nb.testing import failing, fake_colab, patched, small_run, train_step

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

# ---------------------------------------------------------------- a full disk at the manifest write
def test_full_disk_at_the_manifest_write_keeps_the_saved_checkpoint(tmp_path):
    ckpt, m = P.CheckpointManager(tmp_path, keep=2), nn.Linear(4, 2)
    for s in (1, 2): ckpt.save(s, model=m)
    full = OSError(errno.ENOSPC, 'No space left on device')
    with failing(P.CheckpointDir, '_write_manifest', full), pytest.warns(F.CheckpointWarning, match='is saved'):
        c = ckpt.save(3, model=m)
    assert c.step == 3 and F.verify_file(c) is None
    assert sorted(p.name for p in tmp_path.glob('ckpt-*.pt')) == [f'ckpt-00000000{s}.pt' for s in (1, 2, 3)]
    again = P.CheckpointManager(tmp_path, keep=2)
    assert again.latest().path == c.path and again.load(model=nn.Linear(4, 2)).step == 3

# ---------------------------------------------------------------- rotation on Google Drive frees the bytes
def test_rotation_on_drive_truncates_before_deleting(tmp_path):
    sizes = {}
    def unlink(orig, p, *a, **k):
        if str(p).endswith('.pt'): sizes[Path(p).name, Path(p).parent.name] = os.stat(p).st_size
        return orig(p, *a, **k)
    with fake_colab(), patched(os, 'unlink', unlink):
        ckpt = P.drive_checkpoints('run', keep=1, mountpoint=tmp_path/'drive', local=tmp_path/'local')
        for s in (1, 2): ckpt.save(s, model=nn.Linear(64, 64))
        ckpt.wait()
    assert ckpt.mirror.path.is_relative_to(tmp_path/'drive'/'MyDrive')
    assert sizes[('ckpt-000000001.pt', ckpt.mirror.path.name)] == 0  # its bytes freed before it went to the trash
    assert sizes[('ckpt-000000001.pt', 'local')] > 0  # a local disk has no trash: plain unlink
