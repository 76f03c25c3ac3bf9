"""Nothing the user saved is lost: loads are all or nothing, save's report matches the disk, a folder
belongs to one run, the user's own files in it are left alone, rotation on Drive frees the bytes."""
import errno, json, os, socket, threading, time, warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from colab_t4_nb import checkpoint_format as F, persistence as P
from colab_t4_nb.testing import failing, fake_colab, patched, small_run, train_step
from conftest import python

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

# ---------------------------------------------------------------- a folder belongs to one run
def test_default_folders_are_distinct_per_run(tmp_path, monkeypatch):
    monkeypatch.setenv('COLAB_T4_HOME', str(tmp_path))
    a, b, m = P.CheckpointManager(keep=3), P.CheckpointManager(keep=3), nn.Linear(4, 2)
    for s in (1000, 2000, 3000): a.save(s, model=m)
    for s in (1, 2, 3): b.save(s, model=m)
    a.wait(); b.wait()
    assert a.path != b.path and a.path.parent == tmp_path/'checkpoints'
    assert [c.step for c in a.local.checkpoints()] == [3000, 2000, 1000]
    assert a.load(model=nn.Linear(4, 2)).step == 3000
    with fake_colab():
        drives = [P.drive_checkpoints(mountpoint=tmp_path/'drive', local=tmp_path/f'local{i}') for i in (0, 1)]
    assert drives[0].mirror.path != drives[1].mirror.path

def test_rotation_leaves_checkpoint_files_it_did_not_write(tmp_path):
    other = P.CheckpointDir(tmp_path/'other')
    theirs = other.save({'x': torch.ones(2)}, 1)
    (tmp_path/'run').mkdir()
    copied = tmp_path/'run'/'ckpt-000000001.pt'  # the user's copy of another run's checkpoint
    copied.write_bytes(theirs.path.read_bytes())
    ckpt = P.CheckpointManager(tmp_path/'run', keep=1)
    for s in (5, 6, 7): ckpt.save(s, model=nn.Linear(4, 2))
    ckpt.wait()
    assert copied.read_bytes() == theirs.path.read_bytes()
    assert [c.step for c in ckpt.local.checkpoints()] == [7]

def test_a_newer_checkpoint_of_another_run_copied_in_is_named_and_kept(tmp_path):
    m = nn.Linear(4, 2)
    mine, other = P.CheckpointManager(tmp_path/'run', keep=2), P.CheckpointManager(tmp_path/'other')
    for s in (1, 2): mine.save(s, model=m)
    for s in range(10, 15): theirs = other.save(s, model=m)  # save numbers up to 5: "newer"
    mine.release(); other.release()
    copied = tmp_path/'run'/theirs.path.name
    copied.write_bytes(theirs.path.read_bytes())
    resumed = P.CheckpointManager(tmp_path/'run', keep=2)
    with pytest.warns(F.CheckpointWarning, match=f'another training run \\({theirs.run}; the checkpoints '
                                                 f'listed here are from {mine.last_saved.run}'):
        assert resumed.latest().path == copied
    for s in (3, 4, 5): c = resumed.save(s, model=m)
    resumed.wait()
    assert c.run == mine.last_saved.run != theirs.run  # the run goes on under its own name
    assert copied.read_bytes() == theirs.path.read_bytes()  # and the copy is not rotated away

def test_a_resume_on_a_new_machine_continues_the_run_found_on_the_mirror(tmp_path):
    m = nn.Linear(4, 2)
    first = P.CheckpointManager(tmp_path/'vm1', mirror=tmp_path/'drive')
    run = first.save(1, model=m).run
    first.release()
    second = P.CheckpointManager(tmp_path/'vm2', mirror=tmp_path/'drive')  # an empty local disk
    assert second.load(model=m).step == 1
    assert second.save(2, model=m).run == run

def test_an_owner_record_removed_during_a_background_save_is_named(tmp_path):
    ckpt, m = P.CheckpointManager(tmp_path), nn.Linear(4, 2)
    ckpt.save(1, model=m)
    def write(orig, *a, **k):
        (tmp_path/'.colab_t4_nb-owner.json').unlink()  # a cleanup tool, a hand, a moved folder
        return orig(*a, **k)
    with patched(P, 'write_checkpoint', write):
        ckpt.save_async(2, model=m)
        with pytest.raises(P.CheckpointError, match='lost its owner record') as e: ckpt.wait()
    assert 'run ?' not in str(e.value) and 'next save claims the folder again' in str(e.value)
    assert ckpt.save(3, model=m).step == 3 and ckpt.load(model=m).step == 3

def test_a_folder_given_both_as_path_and_name_is_refused(tmp_path):
    with pytest.raises(P.ArgumentError, match="name='n'.*give one of them"):
        P.CheckpointManager(tmp_path, name='n')

def test_a_second_manager_in_another_thread_is_refused_and_the_first_loses_nothing(tmp_path):
    a, b, m = P.CheckpointManager(tmp_path, keep=2), P.CheckpointManager(tmp_path, keep=2), nn.Linear(4, 2)
    out = {'a': [], 'b': []}
    def run(k, ckpt):
        for s in range(25):
            try: out[k].append(ckpt.save(s + 1, model=m))
            except Exception as e: out[k].append(e)
    ts = [threading.Thread(target=run, args=kv) for kv in (('a', a), ('b', b))]
    for t in ts: t.start()
    for t in ts: t.join()
    a.wait()
    errors = [r for k in out for r in out[k] if isinstance(r, Exception)]
    assert all('belongs to another run' in str(e) for e in errors), [str(e) for e in errors[:2]]
    winner = [k for k in out if not any(isinstance(r, Exception) for r in out[k])]
    assert len(winner) == 1 and len(errors) == 25, (winner, errors[:2])
    last = out[winner[0]][-2:]
    assert [F.verify_file(c) for c in last] == [None, None]  # the two kept ones are on disk and intact
    assert isinstance(errors[0], F.CheckpointError) and 'take_over=True' in str(errors[0])

HOLD = r'''
import sys, time, torch
from colab_t4_nb import persistence as P
ckpt = P.CheckpointManager(sys.argv[1], keep=2)
ckpt.save(1, model=torch.nn.Linear(4, 2)); ckpt.wait()
print(ckpt.local.run, flush=True)
time.sleep(120)
'''

def test_a_folder_held_by_a_live_process_is_refused_and_taken_over_once_it_died(tmp_path, cpu_env):
    p = python(HOLD, cpu_env, [tmp_path], popen=True, stderr=None)
    try:
        run = p.stdout.readline().strip()
        assert run, 'the holding process did not start'
        left = tmp_path/f'.colab_t4_nb-{run}-ckpt-000000002.pt.x1y2z3.tmp'  # its save in flight
        left.write_bytes(b'half a checkpoint')
        mine = tmp_path/'.ckpt-000000009.pt.mine.tmp'
        mine.write_bytes(b'a file of the user')
        ckpt = P.CheckpointManager(tmp_path, keep=2)
        with pytest.raises(F.CheckpointError, match=f'belongs to another run: run {run} \\(process {p.pid} on '):
            ckpt.save(2, model=nn.Linear(4, 2))
        assert left.exists() and ckpt.load(model=nn.Linear(4, 2)).step == 1  # reading it is fine
    finally: p.kill(); p.wait()
    with pytest.warns(F.CheckpointWarning, match='that run has ended'): ckpt.save(2, model=nn.Linear(4, 2))
    assert not left.exists() and mine.read_bytes() == b'a file of the user'
    assert [c.step for c in ckpt.local.checkpoints()] == [2, 1]

def test_another_hosts_owner_is_trusted_until_its_record_is_stale(tmp_path):
    ckpt, m = P.CheckpointManager(tmp_path), nn.Linear(4, 2)
    rec = {'format': 'colab_t4_nb owner v1', 'run': 'r-elsewhere', 'host': 'colab-runtime-2', 'pid': 4242,
           'since': '2026-12-03T09:00:00+00:00'}
    (tmp_path/'.colab_t4_nb-owner.json').write_text(json.dumps(rec))
    with pytest.raises(F.CheckpointError, match='on colab-runtime-2.*refreshed 0 s ago'): ckpt.save(1, model=m)
    stale = time.time() - getattr(P, 'OWNER_STALE_S', 0) - 5
    os.utime(tmp_path/'.colab_t4_nb-owner.json', (stale, stale))
    with pytest.warns(F.CheckpointWarning, match='that run has ended'): ckpt.save(1, model=m)
    (tmp_path/'.colab_t4_nb-owner.json').write_text(json.dumps(rec))  # a live run there again
    late = P.CheckpointManager(tmp_path, take_over=True)
    with pytest.warns(F.CheckpointWarning, match=r'as asked \(take_over=True\)'): late.save(2, model=m)
    with pytest.raises(F.CheckpointError, match='was taken over'): ckpt.save(3, model=m)

# ---------------------------------------------------------------- the user's own files in the folder
def test_the_users_manifest_and_temporary_files_are_left_alone(tmp_path):
    users = {'manifest.json': '{"my": "experiment notes"}', '.ckpt-000000001.pt.abc.tmp': 'theirs',
             '.manifest.json.abc.tmp': 'theirs too'}
    for k, v in users.items(): (tmp_path/k).write_text(v)
    ckpt = P.CheckpointManager(tmp_path, keep=1)
    for s in (1, 2): ckpt.save(s, model=nn.Linear(4, 2))
    ckpt.wait()
    assert {k: (tmp_path/k).read_text() for k in users} == users
    assert P.CheckpointManager(tmp_path).load(model=nn.Linear(4, 2)).step == 2

def test_paths_past_the_file_systems_limits_are_refused_by_name(tmp_path):
    from colab_t4_nb.ledger import UsageLedger
    from colab_t4_nb.core import ColabT4Error
    long_name, deep = tmp_path/('a' * 300), tmp_path/'/'.join(['b' * 200] * 30)
    for p in (long_name, deep):
        for make in (lambda: P.CheckpointManager(p), lambda: P.CheckpointDir(p),
                     lambda: P.CheckpointManager(tmp_path/'ok', mirror=p), lambda: UsageLedger(p)):
            with pytest.raises(ColabT4Error, match='a path the file system can hold'): make()
    assert list(tmp_path.iterdir()) == []
