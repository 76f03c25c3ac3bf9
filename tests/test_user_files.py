"""No file of the user's is changed, and nothing is written outside the package's own places, by any entry
point: saves, loads, resumes, the callbacks' restores, Drive, the ledger and the CLI. Each test builds
a tree of user files (some named as the package names its own), runs one group of entry points in it,
the ways users get them wrong included, and compares the tree before and after."""
import contextlib, hashlib, io, json, os, shutil, threading, warnings, zlib
from pathlib import Path

import pytest
import torch
from torch import nn

from colab_t4_nb import callbacks as C, checkpoint_format as F, persistence as P
from colab_t4_nb.cli import main
from colab_t4_nb.core import ColabT4Error
from colab_t4_nb.testing import fake_colab, fake_nvml, h200_reading

USER_FILES = {
    'notes.txt': 'my notes', 'data/train.csv': 'x,y\n1,2\n',
    'gpu.csv': 'date,loss\n2026-12-01,0.3\n',  # a CSV of the user's, not a monitor's
    'ckpt-000000001.pt': 'named like a checkpoint, in the working folder',
    'figure.png': 'not really a png', 'budget.txt': 'my budget notes', 'ledger.jsonl': '{"my": "log"}\n',
    'ck/manifest.json': '{"my": "experiment notes"}', 'ck/notes.md': 'about this run',
    'ck/ckpt-000000099.pt': 'a file of the user named like a checkpoint',
    'ck/.ckpt-000000001.pt.abc.tmp': 'theirs', 'ck/colab_t4_nb-manifest.json.bak': 'a backup',
    'home/notes.txt': 'in the state folder too',
    'drive/MyDrive/thesis.tex': 'chapter 1',
    'drive/MyDrive/colab_t4_nb/checkpoints/r/readme.txt': 'mine',
}

def snapshot(root:Path)->dict:
    "Every file under `root`: its bytes' digest and modification time."
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob('*')) if p.is_file()}

@pytest.fixture
def tree(tmp_path, tmp_path_factory, monkeypatch):
    "A working folder full of the user's files; yields it, then checks nothing of theirs changed."
    for k, v in USER_FILES.items():
        (tmp_path/k).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path/k).write_text(v)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('HOME', str(tmp_path))
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path_factory.mktemp('cache')))  # other libraries' caches
    monkeypatch.setenv('MPLCONFIGDIR', str(tmp_path_factory.mktemp('mpl')))
    monkeypatch.setenv('COLAB_T4_HOME', str(tmp_path/'home'))
    monkeypatch.delenv('COLAB_RELEASE_TAG', raising=False)
    allowed = []  # folders and files the entry points were told to write
    before = snapshot(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        yield tmp_path, allowed
    after = snapshot(tmp_path)
    changed = [k for k in before if after.get(k) != before[k]]
    assert not changed, f'user files changed or removed: {changed}'
    outside = [k for k in after if k not in before
               and not any(Path(k) == Path(a) or Path(a) in Path(k).parents for a in allowed)]
    assert not outside, f'files written outside the places given: {outside}'

def refused(f, *a, **k):
    "Call `f`; a deliberate error of the package is an answer too (what is checked is the tree)."
    try: return f(*a, **k)
    except ColabT4Error as e: return e

def model(seed=0):
    torch.manual_seed(seed)
    return nn.Linear(4, 2)

def test_saves_loads_and_resumes(tree):
    root, allowed = tree
    allowed += ['ck', 'home/checkpoints']
    m = model(); opt = torch.optim.AdamW(m.parameters(), lr=0.1)
    ckpt = P.CheckpointManager('ck', keep=2)
    for s in range(1, 5): ckpt.save(s, model=m, optimizer=opt)
    ckpt.save_async(5, model=m, optimizer=opt); ckpt.wait()
    again = P.CheckpointManager('ck', keep=2)  # a second manager while the first holds the folder
    assert isinstance(refused(again.save, 6, model=m), P.CheckpointError)
    ckpt.release()
    assert isinstance(refused(again.load, model=nn.Linear(3, 2)), ColabT4Error)  # another shape
    assert again.load(model=m, optimizer=opt).step == 5
    refused(again.load, checkpoint='notes.txt', model=m)  # not a checkpoint
    refused(again.load, checkpoint='ck/ckpt-000000099.pt', model=m)
    run = P.CheckpointManager(name='default-folder')
    run.save(1, model=m); run.release(); again.release()

def test_run_resumable_with_a_loader_twice(tree):
    root, allowed = tree
    allowed += ['ck']
    data = torch.utils.data.TensorDataset(torch.randn(12, 4))
    def go(stop):
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True,
                                             generator=torch.Generator().manual_seed(0))
        def step(i, batch):
            if i == stop: raise KeyboardInterrupt  # a kill, as far as the folder can tell
            m(batch[0]).sum().backward(); opt.step(); opt.zero_grad()
        ckpt = P.CheckpointManager('ck', keep=2)
        try: P.run_resumable(step, ckpt, 9, m, opt, every_steps=2, loader=loader)
        except KeyboardInterrupt: pass
        finally: ckpt.release()
    go(5); go(None)

def test_callbacks_restoring_crafted_checkpoints(tree):
    root, allowed = tree
    allowed += ['crafted']
    for name in ('../notes.txt', str(root/'notes.txt'), '../../x/../notes.txt'):
        for cls, fw in ((C.HFCallback, 'transformers'), (C.LightningCallback, 'lightning')):
            ckpt = P.CheckpointManager('crafted')
            ckpt.save(3, framework=fw, files={name: b'overwritten'})
            ckpt.release()
            cb = cls(P.CheckpointManager('crafted'))
            got = refused(cb.train_kwargs if cls is C.HFCallback else cb.ckpt_path)
            assert isinstance(got, ColabT4Error), (name, got)
            cb.ckpt.release()

def test_a_damaged_checkpoint_is_set_aside_not_deleted(tree):
    root, allowed = tree
    allowed += ['ck']
    ckpt = P.CheckpointManager('ck', keep=2)
    c = ckpt.save(1, model=model())
    data = bytearray(c.path.read_bytes()); data[100] ^= 1; c.path.write_bytes(bytes(data))
    assert isinstance(refused(ckpt.load, model=model()), ColabT4Error)
    ckpt.save(2, model=model()); ckpt.wait()
    assert any(p.name.startswith('damaged-') for p in (root/'ck').iterdir())  # kept for the user

def test_drive_checkpoints_and_a_lost_mount(tree):
    root, allowed = tree
    allowed += ['checkpoints', 'drive/MyDrive/colab_t4_nb/checkpoints/r', 'ck',
                'drive/MyDrive/mirror', 'drive/MyDrive/run']
    drive = root/'drive'/'MyDrive'
    with fake_colab() as colab:
        ckpt = P.drive_checkpoints('r', mountpoint=root/'drive', keep=2)
        for s in (1, 2, 3): ckpt.save(s, model=model())
        ckpt.wait(); ckpt.release()
        P.flush_drive(root/'drive')
        assert P.drive_checkpoints('r', mountpoint=root/'drive').load(model=model()).step == 3
        # Drive on a mount of its own: a mirror, a manager's folder itself, and drive_checkpoints
        mirrored = P.CheckpointManager('ck', mirror=drive/'mirror')
        on_drive = P.CheckpointManager(drive/'run')
        again = P.drive_checkpoints('r', mountpoint=root/'drive', keep=2)
        for m in (mirrored, on_drive, again): m.save(4, model=model())
        drive.rename(root/'away')  # the mount is lost mid-run, and does not come back
        colab.mount_error = OSError('credential propagation was unsuccessful')
        try:
            for s in (5, 6, 7):  # every save while Drive is gone says so
                for m in (mirrored, again):
                    with warnings.catch_warnings(record=True) as said:
                        warnings.simplefilter('always')
                        m.save(s, model=model())
                    assert m.mirror_error is not None and said, f'save {s} said nothing of Drive'
                got = refused(on_drive.save, s, model=model())
                assert isinstance(got, P.CheckpointWriteError), (s, got)
            assert not drive.exists(), 'a folder on the local disk stands in for Drive'
            for e in (got, mirrored.mirror_error, again.mirror_error):
                assert 'Google Drive is not mounted' in str(e), e
        finally:
            if drive.exists(): shutil.rmtree(drive)
            (root/'away').rename(drive)
        for m in (mirrored, on_drive, again): m.release()

def test_the_ledger_given_a_users_file(tree):
    root, allowed = tree
    from colab_t4_nb.ledger import UsageLedger
    allowed += ['led.jsonl']
    refused(lambda: UsageLedger('ledger.jsonl').begin('Tesla T4'))
    refused(lambda: UsageLedger('notes.txt').records())
    led = UsageLedger('led.jsonl')
    led.begin('Tesla T4').update(0.5)
    assert len(led.records()) >= 1

def test_the_cli_given_the_users_files(tree, capsys):
    root, allowed = tree
    allowed += ['home', 'out.csv', 'out.png', 'led2.jsonl']
    with fake_nvml([h200_reading()]):
        for argv in (['monitor', '--interval', '0.2', '--duration', '0.5', '--csv', 'gpu.csv'],
                     ['monitor', '--interval', '0.2', '--duration', '0.5', '--csv', 'out.csv', '--plot', 'figure.png'],
                     ['monitor', '--interval', '0.2', '--duration', '0.5', '--csv', 'out.csv', '--plot', 'out.csv'],
                     ['monitor', '--interval', '0.2', '--duration', '0.5', '--ledger', 'ledger.jsonl'],
                     ['monitor', '--interval', '0.2', '--duration', '0.5', '--csv', 'notes.txt'],
                     ['monitor', '--interval', '0.2', '--duration', '0.5', '--csv', 'out.csv',
                      '--plot', 'out.png', '--ledger', 'led2.jsonl'],
                     ['info'], ['info', '--json']):
            main(argv)
        with fake_colab():
            assert main(['ensure', '--want', 'T4', '--budget', '2', '--budget-path', 'budget.txt']) != 0
    out = capsys.readouterr()
    assert 'Traceback' not in out.out + out.err

def test_a_run_name_is_one_folder_in_colab_too(tree):
    "'..' or a path as a run's name, or a mirror that is the folder itself: refused, in Colab too."
    root, allowed = tree
    allowed += ['checkpoints', 'drive/MyDrive/colab_t4_nb']
    def tried(make):
        got = refused(make)
        if isinstance(got, (P.CheckpointManager, C.HFCallback)):  # what it would do: save there
            ckpt = getattr(got, 'ckpt', got)
            refused(ckpt.save, 1, model=model()); ckpt.release()
        return got
    for colab in (contextlib.nullcontext(), fake_colab()):  # transformers is imported outside Colab
        with colab:
            for bad in ('..', '.', str(root/'elsewhere'), 'a/b'):
                got = tried(lambda: P.drive_checkpoints(bad, mountpoint=root/'drive'))
                assert isinstance(got, P.ArgumentError), (bad, got)
                assert 'name must be a folder name' in str(got), (bad, got)
            for bad in ('..', '.'):  # a name, for a callback: with a slash it is a folder
                got = tried(lambda: C.HFCallback(bad, monitor=False, session=False))
                assert isinstance(got, P.ArgumentError), (bad, got)
                assert 'must be a folder name' in str(got), (bad, got)
    with fake_colab():
        got = tried(lambda: P.drive_checkpoints('r', mountpoint=root/'drive', folder=str(root/'x')))
        assert isinstance(got, P.ArgumentError), got
        same = root/'drive'/'MyDrive'/'colab_t4_nb'/'checkpoints'/'r'  # local: the Drive folder itself
        got = tried(lambda: P.drive_checkpoints('r', mountpoint=root/'drive', local=same))
        assert isinstance(got, P.ArgumentError) and 'the checkpoint folder itself' in str(got), got

def test_another_runs_checkpoint_copied_over_the_newest_is_named_on_every_load(tree):
    "Every load checks the run in the trailer; the copy is used, named, and never rotated away."
    root, allowed = tree
    allowed += ['ck', 'other']
    mine = P.CheckpointManager('ck', keep=2)
    for s in (1, 2): mine.save(s, model=model(), framework='transformers', files={})
    mine.release()
    other = P.CheckpointManager('other')
    for s in (7, 8, 2): theirs = other.save(s, model=model(1), framework='transformers', files={})
    other.release()
    copied = root/'ck'/theirs.path.name  # the same name as this run's newest, a newer save number
    copied.write_bytes(theirs.path.read_bytes())
    said = (f'another training run \\({theirs.run}; the checkpoints listed here are from '
            f'{mine.last_saved.run}')
    with pytest.warns(P.CheckpointWarning, match=said):
        assert P.CheckpointManager('ck').load(model=model()).step == 2
    with pytest.warns(P.CheckpointWarning, match=said):  # a new manager, as after a restart
        cb = C.HFCallback(P.CheckpointManager('ck'), monitor=False, session=False)
        assert cb.train_kwargs() and cb.resumed_from == 2
    cb._end(); cb.ckpt.release()
    ckpt = P.CheckpointManager('ck', keep=2)
    with pytest.warns(P.CheckpointWarning, match=said):
        rep = P.run_resumable(lambda s: None, ckpt, 6, model=model(), every_steps=1)
    ckpt.release()
    assert (rep.start, rep.stop) == (2, 6)
    assert copied.read_bytes() == theirs.path.read_bytes()  # kept, out of the rotation
    assert [c.run for c in ckpt.local.checkpoints()][:2] == [mine.last_saved.run] * 2

def bounded(f, pipes, seconds=60):
    "Run `f` on a thread; if it still waits after `seconds`, open `pipes` to let it go, and fail."
    out = {}
    def go():
        try: out['value'] = f()
        except BaseException as e: out['error'] = e
    t = threading.Thread(target=go, daemon=True)
    t.start(); t.join(seconds)
    stuck = t.is_alive()
    for _ in range(100):  # a writer opening and closing each pipe ends the wait of its reader
        if not t.is_alive(): break
        for p in pipes:
            try: os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))
            except OSError: pass
        t.join(0.1)
    assert not stuck, f'{f.__name__} waited on a named pipe for {seconds} s'
    if 'error' in out: raise out['error']
    return out.get('value')

@pytest.mark.skipif(not hasattr(os, 'mkfifo'), reason='no named pipes here')
def test_named_pipes_in_checkpoint_folders_are_skipped_not_waited_on(tree):
    root, allowed = tree
    allowed += ['pipes', 'pipes2', 'pipes3']
    d, pipes = root/'pipes', []
    def pipe(p):
        if p.exists(): p.unlink()
        os.mkfifo(p); pipes.append(p)
        return p
    def saves():
        ckpt = P.CheckpointManager('pipes', keep=2)
        for s in (1, 2): ckpt.save(s, model=model())
        pipe(d/'ckpt-000000003.pt')  # listing: every trailer is read
        ckpt.save(4, model=model())
        pipe(d/'ckpt-000000002.pt')  # in place of a listed checkpoint
        pipe(d/'ckpt-000000004.pt')  # in place of one this run wrote: the set-aside
        ckpt.save(5, model=model()); ckpt.wait()
        steps = [c.step for c in ckpt.local.checkpoints()]
        fifo = F.Checkpoint(d/'ckpt-000000003.pt', 3, 3, 10, 'crc32:00000000')
        why = ckpt.local.verify(fifo)
        bad_load = refused(ckpt.load, model=model(), checkpoint=d/'ckpt-000000003.pt')
        loaded = ckpt.load(model=model()).step
        ckpt.release()
        (root/'pipes2').mkdir()
        pipe(root/'pipes2'/'colab_t4_nb-manifest.json'); pipe(root/'pipes2'/'manifest.json')
        two = P.CheckpointManager('pipes2')
        two.save(1, model=model()); two.release()
        (root/'pipes3').mkdir()
        pipe(root/'pipes3'/'.colab_t4_nb-owner.json')
        owner = refused(P.CheckpointManager('pipes3').save, 1, model=model())
        return steps, why, bad_load, loaded, owner
    steps, why, bad_load, loaded, owner = bounded(saves, pipes)
    assert steps == [5] and loaded == 5, steps
    assert 'not a regular file' in why, why
    assert isinstance(bad_load, F.CheckpointCorrupt) and 'not a file' in str(bad_load), bad_load
    assert isinstance(owner, F.CheckpointWriteError) and 'not a regular file' in str(owner), owner
    assert all(p.is_fifo() for p in pipes if p.name != 'colab_t4_nb-manifest.json')  # left alone

def test_a_save_never_writes_over_a_file_that_is_not_this_runs(tree):
    "A file in a save's way (another run's checkpoint, listed or not; the user's) is set aside."
    root, allowed = tree
    allowed += ['mine', 'other']
    other = P.CheckpointManager('other', keep=5)
    theirs = {s: other.save(s, model=model(1)) for s in (3, 7, 8, 9, 4)}  # step 4: save number 5
    other.release()
    mine = P.CheckpointManager('mine', keep=2)
    for s in (1, 2): mine.save(s, model=model())
    copies = {'ckpt-000000003.pt': theirs[3].path.read_bytes(),  # older: not listed here
              'ckpt-000000004.pt': theirs[4].path.read_bytes(),  # newer: listed as another run's
              'ckpt-000000005.pt': b'a file of the user named like a checkpoint'}
    for k, v in copies.items(): (root/'mine'/k).write_bytes(v)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        assert mine.load(model=model()).step == 4  # the newest, named as another run's
        for s in (3, 4, 5): mine.save(s, model=model())  # the names the copies hold
    said = [str(x.message) for x in w]
    for k, v in copies.items():
        aside = root/'mine'/f'set-aside-{k}'
        assert aside.read_bytes() == v, k  # kept, under a new name
        assert any(str(root/'mine'/k) in m and f'moved to {aside}' in m for m in said), (k, said)
    assert [c.run for c in mine.local.checkpoints()] == [mine.last_saved.run] * 2
    mine.release()

class Jitter(torch.utils.data.Dataset):
    "Twelve samples with noise drawn where they are loaded, in the workers: a random augmentation."
    def __init__(self): self.x = torch.randn(12, 4, generator=torch.Generator().manual_seed(0))
    def __len__(self): return 12
    def __getitem__(self, i): return self.x[i] + torch.randn(4) / 10

def test_run_resumable_with_persistent_workers_stopped_and_resumed(tree):
    "Stopped in its second epoch and resumed in the user's folder: the uninterrupted run's weights."
    root, allowed = tree
    allowed += ['ck', 'ref']
    def go(folder, stop=None):
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(Jitter(), batch_size=4, shuffle=True, num_workers=2,
                                             persistent_workers=True)
        def step(i, batch):
            if i == stop: raise KeyboardInterrupt  # a kill, as far as the folder can tell
            m(batch).sum().backward(); opt.step(); opt.zero_grad()
        ckpt = P.CheckpointManager(folder, keep=2)
        try: P.run_resumable(step, ckpt, 9, m, opt, every_steps=3, loader=loader)
        except KeyboardInterrupt: pass
        finally: ckpt.release()
        return m.state_dict()
    ref = go('ref')
    go('ck', stop=4)  # after the checkpoint of step 3, the first epoch's end
    got = go('ck')  # new workers, as in a new process
    assert all(torch.equal(got[k], ref[k]) for k in ref)
