"""Checkpoints under fire: SIGKILL at random moments (mid-write included), damaged files, full and
unwritable disks, crashing training scripts, errors of background saves at exit."""
import errno, json, math, os, random, shutil, signal, subprocess, sys, tempfile, textwrap, time, warnings
from pathlib import Path
from unittest import mock

import pytest
import torch
from conftest import ROOT
from zygote import Zygote

from colab_t4_nb import checkpoint_format as F, persistence as P
from colab_t4_nb.testing import fake_clock

# ---------------------------------------------------------------- the training run under test
TRAIN = r'''
import json, os, random, signal, sys, tempfile, time
import numpy as np, torch
from colab_t4_nb import checkpoint_format as F, persistence as P
from colab_t4_nb.testing import small_run, train_step  # every generator seeded; data from the step number

STEPS = 12

OPS = []
def instrument(kill_at, slow):
    "Count the checkpoint code's file operations; SIGKILL this process at operation `kill_at`; sleep `slow` s per write."
    def wrap(owner, name):
        orig = getattr(owner, name)
        def f(*a, **k):
            OPS.append(name)
            if kill_at is not None and len(OPS) > kill_at: os.kill(os.getpid(), signal.SIGKILL)
            if slow and name == '_put': time.sleep(slow)
            return orig(*a, **k)
        setattr(owner, name, f)
    for owner, name in [(F._HashingWriter, '_put'), (tempfile, 'mkstemp'), (os, 'fsync'), (os, 'replace'), (os, 'unlink')]:
        wrap(owner, name)

def train(folder, kill_at=None, slow=0.0):
    "Train to STEPS from the latest checkpoint in `folder`, saving after every step; write final.pt at the end."
    instrument(kill_at, slow)
    o = small_run()
    ckpt = P.CheckpointManager(folder, keep=2)
    start = ckpt.load(**o).step if ckpt.latest() else 0
    for step in range(start, STEPS):
        train_step(o, step)
        ckpt.save(step + 1, **o, note=step + 1)
    ckpt.wait()
    torch.save(o['model'].state_dict(), os.path.join(folder, 'final.pt'))
    with open(os.path.join(folder, 'ops.json'), 'w') as f: json.dump(len(OPS), f)
'''

# The run above, forked by a server that imports torch once (zygote.py beside this file)
ZYGOTE = TRAIN + r'''
if __name__ == '__main__':
    import io
    torch.set_num_threads(1)  # no thread pools in the forking process
    o = small_run(); train_step(o, 0)  # warm up once: lazy imports (torch.optim's first step imports a lot) happen here, not per child
    buf = io.BytesIO(); torch.save({k: v.state_dict() for k, v in o.items()}, buf); buf.seek(0); torch.load(buf)
    sys.path.insert(0, sys.argv[1])
    from zygote import serve
    serve(train)
'''

@pytest.fixture
def zygote(tmp_path, cpu_env):
    (tmp_path/'train.py').write_text(ZYGOTE)
    env = {**cpu_env, 'PYTHONPATH': os.pathsep.join([str(ROOT), cpu_env.get('PYTHONPATH', '')])}
    z = Zygote([sys.executable, str(tmp_path/'train.py'), str(Path(__file__).parent)], env,
               tmp_path/'zygote.err')
    try: yield z
    finally: z.close()

@pytest.fixture
def train_ns():
    "The training code above, in this process (for loading checkpoints and building reference objects)."
    threads = torch.get_num_threads()
    ns = {'__name__': 'train_ns'}
    exec(TRAIN, ns)
    yield ns
    torch.set_num_threads(threads)

def final_of(folder:Path)->dict: return torch.load(folder/'final.pt')

def same_weights(a:dict, b:dict)->bool: return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

def disk_state(folder:Path)->str:
    "What a killed run left behind, read from the folder before anything touches it."
    if any(folder.glob('.*.tmp')): return 'temporary file left (killed mid-write)'
    listed, _ = P.CheckpointDir(folder)._read_manifest()
    names = {e['file'] for e in listed or []}
    files = sorted(p.name for p in folder.glob('ckpt-*.pt'))
    if files and max(files) not in names: return 'new checkpoint not yet in the manifest'
    if len(files) > 2: return 'old checkpoint not yet deleted'
    return 'between saves' if files else 'nothing saved yet'

def check_latest_loads(folder:Path, ns:dict)->int|None:
    "latest() answers and the checkpoint it names loads into fresh objects; returns its step."
    rng = P.rng_state()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', P.CheckpointWarning)
            ckpt = P.CheckpointManager(folder, keep=2)
            c = ckpt.latest()
            if c is None: return None
            step, extras = ckpt.load(**ns['small_run']())
    finally: P.set_rng_state(rng)
    assert (step, extras) == (c.step, {'note': c.step})
    return step

def test_sigkill_at_random_moments(tmp_path, zygote, train_ns, capsys):
    "SIGKILL >= 50 times, from inside at a random file operation and from outside at a random time: latest() always loads, and every resumed run ends bit-identical to an uninterrupted one."
    ref = tmp_path/'ref'
    assert zygote.run(folder=ref) == {'signal': 0, 'code': 0}
    ref_final, n_ops = final_of(ref), json.loads((ref/'ops.json').read_text())
    t0 = time.monotonic(); assert zygote.run(folder=tmp_path/'slow', slow=0.0005)['code'] == 0
    slow_run = time.monotonic() - t0
    rng, stats, loads = random.Random(20261202), {}, {'checkpoint': 0, 'none yet': 0}
    trials = [('at a file operation', dict(kill_at=rng.randrange(n_ops))) for _ in range(36)]
    trials += [('at a random time', dict(delay=rng.uniform(0, slow_run))) for _ in range(24)]
    kills = 0
    for i, (how, t) in enumerate(trials):
        folder = tmp_path/f'trial{i:02d}'
        if 'kill_at' in t: r = zygote.run(folder=folder, kill_at=t['kill_at'])
        else:
            pid = zygote.start(folder=folder, slow=0.0005)
            time.sleep(t['delay']); os.kill(pid, signal.SIGKILL)  # not yet reaped: the pid is still this child's
            r = zygote.wait(pid)
        if r['signal'] != signal.SIGKILL:  # the run ended before the kill came
            assert r['code'] == 0; stats['finished before the kill'] = stats.get('finished before the kill', 0) + 1; continue
        kills += 1
        where = disk_state(folder)
        stats[where] = stats.get(where, 0) + 1
        loads['checkpoint' if check_latest_loads(folder, train_ns) is not None else 'none yet'] += 1
        assert zygote.run(folder=folder) == {'signal': 0, 'code': 0}, f'resume after kill {i} ({how}, {where}) failed'
        assert same_weights(final_of(folder), ref_final), f'resume after kill {i} ({how}, {where}) differs from the uninterrupted run'
        assert check_latest_loads(folder, train_ns) == 12
    mid_write = stats.get('temporary file left (killed mid-write)', 0)
    with capsys.disabled():
        print(f'\nfault injection: {kills} SIGKILLs ({mid_write} mid-write), latest() loaded after every kill '
              f'({loads["checkpoint"]} with a checkpoint, {loads["none yet"]} before the first save), '
              f'{kills} resumed runs bit-identical to the uninterrupted run; {n_ops} file operations per run; states: {stats}')
    assert kills >= 50 and mid_write >= 10, stats

# ---------------------------------------------------------------- damaged files
def saved(folder:Path, steps=(1, 2, 3))->P.CheckpointManager:
    ckpt = P.CheckpointManager(folder, keep=5)
    for s in steps: ckpt.save(s, model=torch.nn.Linear(64, 64), step_note=s)
    ckpt.wait()
    return ckpt

def damage(path:Path, how:str):
    data = bytearray(path.read_bytes())
    if how == 'truncate by one byte': path.write_bytes(data[:-1])
    elif how == 'truncate to half': path.write_bytes(data[:len(data) // 2])
    elif how == 'flip one bit': data[len(data) // 3] ^= 1; path.write_bytes(data)
    elif how == 'zero a 4 KiB block': data[4096:8192] = bytes(4096); path.write_bytes(data)
    elif how == 'same size, random bytes': path.write_bytes(os.urandom(len(data)))
    elif how == 'empty file': path.write_bytes(b'')
    elif how == 'delete': path.unlink()

@pytest.mark.parametrize('how', ['truncate by one byte', 'truncate to half', 'flip one bit', 'zero a 4 KiB block',
                                 'same size, random bytes', 'empty file', 'delete'])
def test_damaged_newest_falls_back_to_previous(tmp_path, how):
    ckpt = saved(tmp_path)
    newest = ckpt.local.file_for(3)
    damage(newest, how)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        c = P.CheckpointManager(tmp_path).latest()
    assert c.step == 2
    said = [str(x.message) for x in w if issubclass(x.category, P.CheckpointWarning)]
    assert len(said) == 1 and str(newest) in said[0], said
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', P.CheckpointWarning)
        step, extras = P.CheckpointManager(tmp_path).load(model=torch.nn.Linear(64, 64))
    assert (step, extras) == (2, {'step_note': 2})

def test_every_damaged_file_is_skipped(tmp_path):
    "Damage to all but the oldest: each is named, the oldest loads; damage to all: no checkpoint, a clear error."
    ckpt = saved(tmp_path, steps=(1, 2, 3, 4))
    for s in (2, 3, 4): damage(ckpt.local.file_for(s), 'flip one bit')
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        assert P.CheckpointManager(tmp_path).latest().step == 1
    assert [f'ckpt-00000000{s}.pt' in str(x.message) for x, s in zip(w, (4, 3, 2))] == [True] * 3
    damage(ckpt.local.file_for(1), 'truncate to half')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', P.CheckpointWarning)
        with pytest.raises(P.NoCheckpoint, match='No checkpoint that verifies in'): P.CheckpointManager(tmp_path).load(model=torch.nn.Linear(64, 64))

@pytest.mark.parametrize('text', ['', 'not json', '[]', '{"format": "colab_t4_nb checkpoints v1", "checkpoints": [{"file": "../etc/passwd"}]}',
                                  '{"format": "something else", "checkpoints": []}'])
def test_unreadable_manifest_is_rebuilt(tmp_path, text):
    ckpt = saved(tmp_path)
    ckpt.local.manifest.write_text(text)
    with pytest.warns(P.CheckpointWarning, match='rebuilt from the 3 checkpoint file'):
        assert P.CheckpointManager(tmp_path).latest().step == 3
    assert [e['step'] for e in json.loads(ckpt.local.manifest.read_text())['checkpoints']] == [3, 2, 1]

def test_manifest_missing_is_rebuilt(tmp_path):
    ckpt = saved(tmp_path)
    ckpt.local.manifest.unlink()
    with pytest.warns(P.CheckpointWarning, match='is missing; rebuilt from the 3 checkpoint file'):
        assert P.CheckpointManager(tmp_path).latest().step == 3

def test_mismatched_model_changes_nothing(tmp_path):
    ckpt = saved(tmp_path)
    model, opt = torch.nn.Linear(64, 32), None
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(P.CheckpointMismatch, match=r'different shapes weight \(64, 64\) vs \(32, 64\) here, bias \(64,\) vs \(32,\) here\. Nothing was changed'):
        ckpt.load(model=model)
    assert same_weights(model.state_dict(), before)
    seq = torch.nn.Sequential(torch.nn.Linear(64, 64))
    with pytest.raises(P.CheckpointMismatch, match='missing keys 0.weight, 0.bias; unexpected keys weight, bias'): ckpt.load(model=seq)
    m2 = torch.nn.Linear(64, 64); o2 = torch.optim.SGD([{'params': [m2.weight]}, {'params': [m2.bias]}], lr=0.1)
    ckpt.save(4, model=m2, optimizer=o2)
    m3 = torch.nn.Linear(64, 64); o3 = torch.optim.SGD(m3.parameters(), lr=0.1)
    before = {k: v.clone() for k, v in m3.state_dict().items()}
    with pytest.raises(P.CheckpointMismatch, match=r'optimizer parameter groups of sizes \[1, 1\], \[2\] here'): ckpt.load(model=m3, optimizer=o3)
    assert same_weights(m3.state_dict(), before)

# ---------------------------------------------------------------- full or unwritable disk
def earlier_all_load(folder:Path, steps:list):
    ckpt = P.CheckpointManager(folder)
    for c in ckpt.local.checkpoints():
        if c.step in steps: assert ckpt.load(model=torch.nn.Linear(64, 64), checkpoint=c).step == c.step
    assert {c.step for c in ckpt.local.checkpoints()} >= set(steps)

def fail_after(n:int, exc:Exception):
    calls = [0]
    def f(*a, **k):
        calls[0] += 1
        if calls[0] > n: raise exc
    return f

@pytest.mark.parametrize('where', ['first write', 'mid-file', 'fsync', 'rename'])  # at the manifest: test_no_clobber
def test_full_disk_is_a_clear_error_and_earlier_checkpoints_load(tmp_path, monkeypatch, where):
    ckpt = saved(tmp_path)
    full = OSError(errno.ENOSPC, 'No space left on device')
    if where in ('first write', 'mid-file'):
        orig, hook = F._HashingWriter._put, fail_after(0 if where == 'first write' else 20, full)
        monkeypatch.setattr(F._HashingWriter, '_put', lambda self, b: (hook(), orig(self, b)))
    elif where == 'fsync': monkeypatch.setattr(os, 'fsync', lambda fd: (_ for _ in ()).throw(full))
    else: monkeypatch.setattr(os, 'replace', lambda a, b: (_ for _ in ()).throw(full))
    with pytest.raises(P.CheckpointWriteError, match=r'No space left on device \(the disk is full: free space, lower `keep`, or save to another disk\)\. Earlier checkpoints there are untouched') as e:
        ckpt.save(4, model=torch.nn.Linear(64, 64))
    assert e.value.errno == errno.ENOSPC and isinstance(e.value, OSError)
    monkeypatch.undo()
    assert not list(tmp_path.glob('.*.tmp'))
    earlier_all_load(tmp_path, [1, 2, 3])

def test_unwritable_folder(tmp_path, monkeypatch):
    ckpt = saved(tmp_path)
    if os.geteuid() != 0: tmp_path.chmod(0o500)  # root ignores permissions: there the refusal is simulated
    else: monkeypatch.setattr(tempfile, 'mkstemp', lambda *a, **k: (_ for _ in ()).throw(PermissionError(errno.EACCES, 'Permission denied')))
    try:
        with pytest.raises(P.CheckpointWriteError, match='Permission denied \\(the folder is not writable: choose another folder\\)') as e:
            ckpt.save(4, model=torch.nn.Linear(64, 64))
        assert e.value.errno == errno.EACCES
    finally: tmp_path.chmod(0o700)
    monkeypatch.undo()
    earlier_all_load(tmp_path, [1, 2, 3])
    with pytest.raises(P.CheckpointWriteError, match='Could not write a checkpoint in'):
        P.CheckpointManager(tmp_path/'ckpt-000000001.pt'/'sub').save(1, model=torch.nn.Linear(2, 2))  # a file in the way

def test_background_save_error_is_raised_once(tmp_path, monkeypatch):
    ckpt = saved(tmp_path)
    monkeypatch.setattr(F._HashingWriter, '_put', lambda self, b: (_ for _ in ()).throw(OSError(errno.ENOSPC, 'No space left on device')))
    ckpt.save_async(4, model=torch.nn.Linear(64, 64))
    with pytest.raises(P.CheckpointWriteError, match='No space left on device'): ckpt.latest()
    monkeypatch.undo()
    assert ckpt.latest().step == 3
    ckpt.save_async(5, model=torch.nn.Linear(64, 64)); assert ckpt.wait().step == 5

def test_background_save_error_is_printed_at_exit(tmp_path, cpu_env):
    "A background save that fails in a script that never calls wait() is reported when Python exits."
    script = tmp_path/'s.py'
    script.write_text(textwrap.dedent(f'''
        import errno, torch
        from colab_t4_nb import checkpoint_format as F, persistence as P
        ckpt = P.CheckpointManager({str(tmp_path/"ck")!r})
        F._HashingWriter._put = lambda self, b: (_ for _ in ()).throw(OSError(errno.ENOSPC, 'No space left on device'))
        ckpt.save_async(1, model=torch.nn.Linear(2, 2))
    '''))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env={**cpu_env, 'PYTHONPATH': str(ROOT)})
    assert 'colab_t4_nb at exit: The last background checkpoint save in' in r.stderr and 'No space left on device' in r.stderr, r.stderr

# ---------------------------------------------------------------- a crashing training script
SCRIPT = r'''
import os, signal, sys, torch
from colab_t4_nb.persistence import CheckpointManager, run_resumable

def train(folder, out, crash=True):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    attempt = int(os.environ.get('COLAB_T4_ATTEMPT', 0))
    def step(s):
        if crash and (attempt, s) == (1, 3): os._exit(9)                         # dies on the spot
        if crash and (attempt, s) == (2, 7): os.kill(os.getpid(), signal.SIGKILL)  # killed from outside
        if crash and (attempt, s) == (3, 10): raise RuntimeError('CUDA error: device-side assert triggered')
        g = torch.Generator().manual_seed(s)
        loss = (model(torch.randn(8, 4, generator=g)) - 1).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    rep = run_resumable(step, CheckpointManager(folder), 12, model=model, optimizer=opt, every_steps=2)
    print(f'attempt {attempt}: steps {rep.start} to {rep.stop}', flush=True)
    torch.save(model.state_dict(), out)

if __name__ == '__main__': train(sys.argv[1], sys.argv[2])
'''

def test_runner_restarts_a_crashing_script_until_done(tmp_path, cpu_env):
    (tmp_path/'train.py').write_text(SCRIPT)
    attempts = P.run_with_restarts([sys.executable, tmp_path/'train.py', tmp_path/'ck', tmp_path/'final.pt'], max_restarts=3,
                                   env={**cpu_env, 'PYTHONPATH': str(ROOT)}, echo=False)
    assert [a.returncode for a in attempts] == [9, -signal.SIGKILL, 1, 0]
    assert any('ColabT4Error: CUDA failed at step 10' in l for l in attempts[2].tail), attempts[2].tail
    assert attempts[3].tail[-1] == 'attempt 4: steps 10 to 12\n'
    ns = {'__name__': 'ref'}; exec(SCRIPT, ns)
    ns['train'](tmp_path/'ref', tmp_path/'ref.pt', crash=False)
    assert same_weights(torch.load(tmp_path/'final.pt'), torch.load(tmp_path/'ref.pt'))

def test_runner_gives_up_after_the_restart_limit(tmp_path, cpu_env):
    (tmp_path/'bad.py').write_text('import os\nprint("attempt", os.environ["COLAB_T4_ATTEMPT"])\nraise SystemExit(4)\n')
    with pytest.raises(P.ColabT4Error, match=r'bad.py failed 3 times \(last exit status 4\); gave up after 2 restarts. Its last output:\nattempt 3'):
        P.run_with_restarts([sys.executable, tmp_path/'bad.py'], max_restarts=2, env=cpu_env, echo=False)

# ---------------------------------------------------------------- Google Drive (stand-in)
def test_new_runtime_resumes_from_drive_skipping_a_damaged_copy(tmp_path):
    from colab_t4_nb.testing import fake_colab
    with fake_colab() as colab:
        ckpt = P.drive_checkpoints('run', keep=3, mountpoint=tmp_path/'drive', local=tmp_path/'local')
        for s in (1, 2, 3): ckpt.save(s, model=torch.nn.Linear(64, 64))
        ckpt.wait()
        assert ckpt.mirror_error is None and colab.calls == [('drive.mount', str(tmp_path/'drive'))]
        damage(ckpt.mirror.file_for(3), 'flip one bit')
        fresh = P.drive_checkpoints('run', mountpoint=tmp_path/'drive', local=tmp_path/'local-new')  # the old local disk is gone
        with pytest.warns(P.CheckpointWarning, match='ckpt-000000003.pt is corrupt'):
            assert fresh.load(model=torch.nn.Linear(64, 64)).step == 2
        assert fresh.last_loaded.path.parent == ckpt.mirror.path

# ---------------------------------------------------------------- rotation and damaged files
def flip_bit(path:Path):
    data = bytearray(path.read_bytes()); data[len(data) // 2] ^= 1; path.write_bytes(data)

def test_rotation_never_counts_a_damaged_checkpoint(tmp_path):
    "keep=2: save 1 and 2, damage 2, save 3 -> 1 is kept (not the damaged 2); with 3 then cut short, 1 still loads."
    ckpt = P.CheckpointManager(tmp_path, keep=2)
    for s in (1, 2): ckpt.save(s, model=torch.nn.Linear(8, 8))
    flip_bit(ckpt.local.file_for(2))
    said = r'ckpt-000000002.pt is damaged \(its checksum is crc32:.*moved to damaged-ckpt-000000002.pt'
    with pytest.warns(P.CheckpointWarning, match=said):
        ckpt.save(3, model=torch.nn.Linear(8, 8))
    ckpt.wait()
    assert ckpt.local.file_for(1).exists() and (tmp_path/'damaged-ckpt-000000002.pt').exists()
    assert [c.step for c in ckpt.local.checkpoints()] == [3, 1]
    damage(ckpt.local.file_for(3), 'truncate to half')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', P.CheckpointWarning)
        assert P.CheckpointManager(tmp_path, keep=2).load(model=torch.nn.Linear(8, 8)).step == 1

@pytest.mark.parametrize('how', ['truncate by one byte', 'flip one bit', 'zero a 4 KiB block', 'same size, random bytes',
                                 'empty file'])
def test_rotation_keeps_the_newest_that_verifies_and_sets_damage_aside(tmp_path, how):
    "keep=1: the newest good checkpoint survives any damage to the others; damaged files are renamed, never deleted."
    ckpt = P.CheckpointManager(tmp_path, keep=3)
    for s in (1, 2, 3): ckpt.save(s, model=torch.nn.Linear(8, 8))
    for s in (2, 3): damage(ckpt.local.file_for(s), how)
    damaged_bytes = {s: ckpt.local.file_for(s).read_bytes() for s in (2, 3)}
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', P.CheckpointWarning)
        ckpt.save(4, model=torch.nn.Linear(8, 8)); ckpt.wait()
        assert [c.step for c in ckpt.local.checkpoints()] == [4, 1]
        assert ckpt.load(model=torch.nn.Linear(8, 8), checkpoint=ckpt.local.file_for(1)).step == 1
    for s in (2, 3): assert (tmp_path/f'damaged-ckpt-00000000{s}.pt').read_bytes() == damaged_bytes[s]

def test_manifest_lists_only_verified_after_rotation(tmp_path):
    "Saving past keep with a good history rotates as before: newest keep files, no damaged-* files."
    ckpt = P.CheckpointManager(tmp_path, keep=2)
    with warnings.catch_warnings():
        warnings.simplefilter('error', P.CheckpointWarning)
        for s in range(1, 6): ckpt.save(s, model=torch.nn.Linear(8, 8))
    ckpt.wait()
    assert sorted(p.name for p in tmp_path.iterdir()) == ['.colab_t4_nb-owner.json', 'ckpt-000000004.pt', 'ckpt-000000005.pt',
                                                          'colab_t4_nb-manifest.json']

# ---------------------------------------------------------------- run_resumable's default schedule
def test_run_resumable_saves_before_the_session_cut(tmp_path):
    "With only a SessionClock, the run saves before the cut and stops there."
    now = [0.0]
    def step(s): now[0] += 600
    with warnings.catch_warnings(), fake_clock(lambda: now[0]):
        warnings.simplefilter('ignore', P.SessionEnding)
        rep = P.run_resumable(step, P.CheckpointManager(tmp_path, keep=100), 1000, model=torch.nn.Linear(2, 2),
                              session=P.SessionClock(idle_min=None), every_minutes=math.inf)
    # 10 min a step: step 72 is the first within 5 min of the 12 h cut
    assert rep.reason == 'session limit' and P.CheckpointDir(tmp_path).latest().step == rep.stop == 72

# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize('call, match', [
    (lambda d: P.run_resumable(lambda s: None, P.CheckpointManager(d), -3), 'got steps=-3'),
    (lambda d: P.run_resumable(lambda s: None, P.CheckpointManager(d), 5, every_steps=-2),
     'got every_steps=-2'),
    (lambda d: P.run_resumable(lambda s: None, P.CheckpointManager(d), 5, steps_per_epoch=0),
     'got steps_per_epoch=0'),
    (lambda d: P.run_resumable(lambda s: None, P.CheckpointManager(d), 5, every_minutes=-1),
     'got every_minutes=-1'),
    (lambda d: P.run_resumable(None, P.CheckpointManager(d), 5), 'step_fn must be a function, got step_fn=None'),
    (lambda d: P.CheckpointManager(d).save('5'), "step must be an integer >= 0, got step='5' (str)"),
    (lambda d: P.CheckpointManager(d).save(1.0), 'step must be an integer >= 0, got step=1.0 (float)'),
    (lambda d: P.CheckpointManager(d).save_async(-1), 'step must be an integer >= 0, got step=-1'),
    (lambda d: P.CheckpointManager(d, keep=0), 'got keep=0'),
    (lambda d: P.CheckpointManager(d, checksum='crc64'), "got checksum='crc64'"),
    (lambda d: P.CheckpointManager(name='a/b'), 'name must be a folder name (no slashes, not "."'),
    (lambda d: P.CheckpointManager(name='x' * 256), 'at most 255 bytes'),
    (lambda d: P.CheckpointManager(d/'ck', mirror=d/'ck'/'.'), 'is the checkpoint folder itself'),
    (lambda d: P.drive_checkpoints('..', local=d/'ck'), "got name='..'"),
    (lambda d: P.drive_checkpoints('r', folder='/content/x', local=d/'ck'), "got '/content/x'"),
    (lambda d: P.SessionClock(session_h=0), 'session_h must be a number > 0, got session_h=0'),
    (lambda d: P.SessionClock(warn_min=30), 'warn_min must be a list of at least 0 items, got warn_min=30'),
    (lambda d: P.run_with_restarts('python x.py'), 'cmd must be a list such as'),
    (lambda d: P.run_with_restarts([sys.executable], max_restarts=-1), 'got max_restarts=-1'),
])
def test_bad_arguments_are_named(tmp_path, call, match):
    with pytest.raises((TypeError, ValueError, P.CheckpointError)) as e: call(tmp_path)
    assert match in str(e.value), str(e.value)
    assert not any(tmp_path.iterdir())  # nothing written

def test_load_names_a_missing_file_and_a_plain_torch_save_file(tmp_path):
    ckpt = P.CheckpointManager(tmp_path/'ck')
    with pytest.raises(P.NoCheckpoint, match='no such file'): ckpt.load(checkpoint=tmp_path/'nope.pt')
    torch.save({'w': torch.zeros(3)}, tmp_path/'plain.pt')
    said = r'not a colab_t4_nb checkpoint .*written by torch.save\? load it with torch.load'
    with pytest.raises(P.CheckpointCorrupt, match=said):
        ckpt.load(checkpoint=tmp_path/'plain.pt')
    (tmp_path/'junk.pt').write_bytes(os.urandom(1000))
    with pytest.raises(P.CheckpointCorrupt, match=r'no valid trailer: truncated or damaged'):
        ckpt.load(checkpoint=tmp_path/'junk.pt')

def test_write_into_a_folder_that_takes_no_files_names_the_target(tmp_path):
    if not Path('/proc').is_dir(): pytest.skip('needs /proc')
    with pytest.raises(P.CheckpointWriteError) as e: P.write_checkpoint('/proc/x.pt', {'a': 1})
    msg = str(e.value)
    assert 'Could not write the checkpoint /proc/x.pt' in msg and 'the folder /proc is not writable' in msg, msg
    assert '.tmp' not in msg, msg  # no hidden temporary file named
    with pytest.raises(P.CheckpointWriteError, match=f'the folder {tmp_path}/no does not exist'):
        P.write_checkpoint(tmp_path/'no'/'x.pt', {'a': 1})
    with pytest.raises(P.CheckpointWriteError) as e: P.CheckpointManager('/proc').save(1, model=torch.nn.Linear(2, 2))
    assert str(e.value).count('Could not write') == 1 and 'ckpt-000000001.pt' in str(e.value), str(e.value)
    with pytest.raises(P.CheckpointWriteError, match='the folder /proc/x cannot be created there: choose another'):
        P.CheckpointManager('/proc/x').save(1, model=torch.nn.Linear(2, 2))

def test_write_error_messages_carry_their_cause():
    e = P.write_error(OSError(errno.ELOOP, 'Too many levels of symbolic links', '/d/x'), Path('/d'))
    assert 'see the error above' not in str(e) and 'ELOOP on /d/x' in str(e), str(e)

def test_a_flipped_bit_in_a_save_number_does_not_make_an_old_checkpoint_newest(tmp_path):
    "The trailer's own fields are checked: an old file whose seq became 9 is damaged, not newest."
    from colab_t4_nb.testing import small_run, train_step
    o, ckpt = small_run(), P.CheckpointManager(tmp_path, keep=3)
    for s in range(3):
        train_step(o, s)
        ckpt.save(s + 1, **o)
    ckpt.release()  # a new process: the folder is free
    oldest = tmp_path/'ckpt-000000001.pt'
    data = oldest.read_bytes()
    i = data.rindex(b'seq=1 ')
    oldest.write_bytes(data[:i] + b'seq=9 ' + data[i + 6:])  # '1' -> '9': bits flipped
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', P.CheckpointWarning)
        again = P.CheckpointManager(tmp_path, keep=3)
        assert again.latest().step == 3
        assert again.load(**small_run()).step == 3
        again.save(4, **o)  # rotating keeps the real newest states
    assert (tmp_path/'ckpt-000000003.pt').exists()

def test_a_file_put_back_is_not_deleted_by_a_stale_retired_list(tmp_path):
    "Rotation deletes only what the run's records prove it wrote: a backup put back, or a name added to the manifest, stays."
    d = P.CheckpointDir(tmp_path, keep=2)
    for s in (1, 2, 3): d.save({'step': s}, s)
    d.wait()
    backup = tmp_path/'ckpt-000000001.pt'
    assert not backup.exists() and 'retired' not in json.loads(d.manifest.read_text())  # done
    d2 = P.CheckpointDir(tmp_path, keep=2)
    d.release()
    first = P.CheckpointDir(tmp_path/'elsewhere')
    c = first.save({'step': 1}, 1, seq=1)
    os.replace(c.path, backup)  # a backup of ckpt 1 put back
    man = json.loads(d2.manifest.read_text())
    man['retired'] = ['ckpt-000000001.pt']  # an edited (or old) manifest naming it
    d2.manifest.write_text(json.dumps(man))
    d2.save({'step': 4}, 4)
    d2.wait()
    assert backup.exists()

@pytest.mark.parametrize('remounts', [False, True])
def test_a_vanished_drive_mount_is_reported_and_mounted_again(tmp_path, remounts):
    "Drive's mount goes away mid-run: no local folder stands in for MyDrive; the next save mounts again."
    from torch import nn
    from colab_t4_nb.testing import fake_colab
    mnt = tmp_path/'drive'
    with fake_colab() as colab, warnings.catch_warnings(record=True) as said:
        warnings.simplefilter('always')
        ckpt = P.drive_checkpoints('demo', mountpoint=mnt, local=tmp_path/'local')
        ckpt.save(1, model=nn.Linear(4, 4))
        shutil.rmtree(mnt)  # the FUSE mount dropped: /content/drive is empty
        if not remounts: colab.mount_error = OSError('credential propagation was unsuccessful')
        ckpt.save(2, model=nn.Linear(4, 4))
        ckpt.save(3, model=nn.Linear(4, 4))
    assert [c.step for c in ckpt.local.checkpoints()] == [3, 2, 1]
    # at the start, then at each save until a mount works
    assert colab.calls.count(('drive.mount', str(mnt))) == (2 if remounts else 3)
    if remounts:
        assert ckpt.mirror_error is None and [c.step for c in ckpt.mirror.checkpoints()] == [3, 2]
    else:
        assert not (mnt/'MyDrive').exists(), 'a local folder stands in for Drive'
        assert 'Google Drive is not mounted' in str(ckpt.mirror_error)
        assert any('not mounted' in str(w.message) for w in said)

@pytest.fixture
def one_step(tmp_path):
    "A small run trained one step and saved: its objects and its manager."
    from colab_t4_nb.testing import small_run, train_step
    o, ckpt = small_run(), P.CheckpointManager(tmp_path)
    train_step(o, 0)
    ckpt.save(1, **o)
    return o, ckpt

def test_a_failed_load_is_undone_without_the_objects_help(one_step):
    "An optimizer that refuses its own old state is put back all the same, and the error is the package's."
    from colab_t4_nb.testing import small_run, train_step
    o, ckpt = one_step
    fresh = small_run(seed=5)
    train_step(fresh, 3)
    opt = fresh['optimizer']
    before = {id(p): {k: v.clone() for k, v in st.items()} for p, st in opt.state.items()}
    groups = [{k: v for k, v in g.items() if k != 'params'} for g in opt.param_groups]
    loads, opt_load = [], opt.load_state_dict
    def stubborn(sd):
        loads.append(1)
        if len(loads) > 1: raise ValueError('not my state')  # refuses the undo
        opt_load(sd)
    opt.load_state_dict = stubborn
    def broken(*a, **k): raise RuntimeError('the model cannot take it')  # fails after the checks
    fresh['model'].load_state_dict = broken
    with pytest.raises(P.CheckpointMismatch, match='put back as they were'):
        ckpt.load(**fresh)
    assert len(loads) == 2 and {id(p) for p in opt.state} == set(before)
    assert all(torch.equal(before[id(p)][k], v) for p, st in opt.state.items() for k, v in st.items())
    assert [{k: v for k, v in g.items() if k != 'params'} for g in opt.param_groups] == groups

def test_ctrl_c_inside_load_waits_until_everything_is_loaded(one_step):
    "A Ctrl-C during load() comes after it: the model and the optimizer are both the checkpoint's."
    from colab_t4_nb.testing import small_run
    o, ckpt = one_step
    fresh = small_run(seed=5)
    opt_load = fresh['optimizer'].load_state_dict
    def interrupted(sd):
        opt_load(sd)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C after the optimizer, before the model
    fresh['optimizer'].load_state_dict = interrupted
    with pytest.raises(KeyboardInterrupt):
        ckpt.load(**fresh)
    assert same_weights(fresh['model'].state_dict(), o['model'].state_dict())

def test_a_folder_sync_failing_after_the_rename_reports_what_is_on_disk(tmp_path, monkeypatch):
    "EIO from the folder's fsync after the rename (a FUSE mount): the checkpoint is in place and said to be."
    from colab_t4_nb import core
    def eio(d): raise OSError(errno.EIO, 'Input/output error')
    monkeypatch.setattr(core, '_fsync_dir', eio)
    ckpt = P.CheckpointManager(tmp_path)
    with pytest.warns(P.CheckpointWarning, match='written and in place, but syncing its folder failed'):
        c = ckpt.save(1, model=torch.nn.Linear(2, 2))
    assert c.step == 1 and ckpt.latest() == c

def test_folders_are_fixed_when_the_manager_is_made(tmp_path, monkeypatch):
    "`~` is the home folder, and a relative folder stays where it was when %cd moves the notebook."
    monkeypatch.setenv('HOME', str(tmp_path/'home'))
    assert P.CheckpointManager('~/runs/x').path == tmp_path/'home'/'runs'/'x'
    monkeypatch.chdir(tmp_path)
    rel = P.CheckpointManager('rel')
    (tmp_path/'other').mkdir()
    monkeypatch.chdir(tmp_path/'other')  # %cd other
    rel.save(1, model=torch.nn.Linear(2, 2))
    assert (tmp_path/'rel'/'ckpt-000000001.pt').exists() and not (tmp_path/'other'/'rel').exists()
    assert repr(rel) == f"CheckpointManager({str(tmp_path/'rel')!r}, keep=3)"

def test_a_copy_of_another_run_is_named_by_every_new_load(tmp_path):
    "Once taken into the manifest, the copy is still named when a later process loads it."
    from torch import nn
    m = nn.Linear(4, 2)
    mine, other = P.CheckpointManager(tmp_path/'run'), P.CheckpointManager(tmp_path/'other')
    mine.save(1, model=m)
    for s in (10, 11): theirs = other.save(s, model=m)
    mine.release(); other.release()
    (tmp_path/'run'/theirs.path.name).write_bytes(theirs.path.read_bytes())
    said = (f'another training run \\({theirs.run}; the checkpoints listed here are from '
            f'{mine.last_saved.run}')
    for _ in range(2):  # the first lists it in the manifest; the second is a new process's resume
        with pytest.warns(F.CheckpointWarning, match=said):
            assert P.CheckpointManager(tmp_path/'run').load(model=m).step == 11
    with warnings.catch_warnings():  # a file of this run's own is loaded without a word
        warnings.simplefilter('error')
        again = P.CheckpointManager(tmp_path/'run')
        assert again.load(model=m, checkpoint=mine.last_saved).step == 1

@pytest.mark.parametrize('top', ['MyDrive', 'Shareddrives'])
def test_a_folder_on_a_lost_drive_mount_is_never_made_on_the_local_disk(tmp_path, top):
    "Drive mounted anywhere: while it is gone each save fails and says so; nothing stands in for it."
    from torch import nn
    from colab_t4_nb.testing import fake_colab
    folder = tmp_path/'gdrive'/top/'team'/'run'
    with fake_colab(mount_error=OSError('credential propagation was unsuccessful')):
        (tmp_path/'gdrive'/top).mkdir(parents=True)
        ckpt = P.CheckpointManager(folder)
        ckpt.save(1, model=nn.Linear(4, 4))
        shutil.rmtree(tmp_path/'gdrive'/top)  # the mount dropped
        for s in (2, 3, 4):
            said = f'Google Drive is not mounted.*its {top} is gone'
            with pytest.raises(F.CheckpointWriteError, match=said):
                ckpt.save(s, model=nn.Linear(4, 4))
    assert not (tmp_path/'gdrive'/top).exists()

@pytest.mark.skipif(not hasattr(os, 'mkfifo'), reason='no named pipes here')
def test_a_named_pipe_is_no_checkpoint_and_is_not_waited_on(tmp_path):
    import threading
    pipe = tmp_path/'ckpt-000000001.pt'
    os.mkfifo(pipe)
    out = []
    fifo = F.Checkpoint(pipe, 1, 1, 10, 'crc32:00000000')
    t = threading.Thread(target=lambda: out.extend([F.read_trailer(pipe), F.verify_file(fifo)]),
                         daemon=True)
    t.start(); t.join(30)
    stuck = t.is_alive()
    for _ in range(50):  # let a reader that waits go: a writer opens the pipe and closes it
        if not t.is_alive(): break
        try: os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
        except OSError: pass
        t.join(0.1)
    assert not stuck, 'a named pipe was waited on'
    assert out[0] is None and 'not a regular file' in out[1], out
