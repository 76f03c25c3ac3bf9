"""The package's background work has one owner: one exit hook, a close that finishes pending saves
and leaves no thread behind, and clocks that the time stand-in drives."""
import threading
import pytest
import torch
from conftest import python

from colab_t4_nb import checkpoint_format as F, persistence as P
from colab_t4_nb.core import background_work
from colab_t4_nb.monitoring import GPUMonitor, read_csv
from colab_t4_nb.testing import fake_clock, fake_nvml, h200_reading, patched, wait_for

def test_one_exit_hook_and_a_pending_save_finished_at_exit(cpu_env, tmp_path):
    "Every module imported, a monitor and a background save started: one atexit hook; at exit the save lands."
    r = python(f'''
        import atexit, importlib, pkgutil, time
        hooks, register = [], atexit.register
        def counted(f, *a, **k):
            hooks.append(getattr(f, '__module__', None) or '')
            return register(f, *a, **k)
        atexit.register = counted
        import colab_t4_nb, torch
        for m in pkgutil.iter_modules(colab_t4_nb.__path__): importlib.import_module('colab_t4_nb.' + m.name)
        from colab_t4_nb import checkpoint_format as F
        from colab_t4_nb.monitoring import GPUMonitor
        from colab_t4_nb.persistence import CheckpointManager
        from colab_t4_nb.testing import fake_nvml, h200_reading
        put, slow = F._HashingWriter._put, [0.5]
        def first_write_slow(self, b):
            time.sleep(slow.pop() if slow else 0)
            return put(self, b)
        F._HashingWriter._put = first_write_slow
        with fake_nvml([h200_reading()]):
            GPUMonitor(interval=0.05, csv={str(tmp_path/'gpu.csv')!r}).start()
            ckpt = CheckpointManager({str(tmp_path/'ck')!r})
            ckpt.save_async(5, model=torch.nn.Linear(4, 4))
            print(sum(m.startswith('colab_t4_nb') for m in hooks), ckpt.pending)
        ''', cpu_env, timeout=300)
    assert r.returncode == 0 and 'Traceback' not in r.stderr, r.stderr
    assert r.stdout.split() == ['1', 'True'], r.stdout
    c = P.CheckpointDir(tmp_path/'ck').latest()
    assert c.step == 5 and P.CheckpointManager(tmp_path/'ck').load(model=torch.nn.Linear(4, 4)).step == 5
    assert not (tmp_path/'ck'/'.colab_t4_nb-owner.json').exists()  # the folder was released
    assert len(read_csv(tmp_path/'gpu.csv')) >= 1

def test_close_finishes_a_pending_save_and_leaves_no_thread(tmp_path):
    "close(): the save pending at close is on disk and loads; the monitor, heartbeat and save threads are gone."
    before, gate = set(threading.enumerate()), threading.Event()
    held = lambda orig, *a: (gate.wait(60), orig(*a))[1]
    with fake_nvml([h200_reading()]), patched(F._HashingWriter, '_put', held):
        mon = GPUMonitor(interval=0.02, csv=tmp_path/'gpu.csv').start()
        ckpt = P.CheckpointManager(tmp_path/'ck')
        ckpt.save_async(3, model=torch.nn.Linear(4, 4))
        names = {t.name for t in background_work.alive}
        timer = threading.Timer(0.2, gate.set)
        timer.start()
        assert ckpt.pending
        background_work.close()
        background_work.close()  # a second close finds nothing to do
    assert {'GPUMonitor', 'checkpoint-3'} <= names
    left = [t for t in threading.enumerate() if t not in before and t is not timer]
    assert left == [] and background_work.alive == [], left
    assert not ckpt.pending and not mon.running
    assert len(read_csv(tmp_path/'gpu.csv')) == mon.n_samples
    assert not ckpt.local.owner_file.exists()
    assert P.CheckpointManager(tmp_path/'ck').load(model=torch.nn.Linear(4, 4)).step == 3

def test_work_started_after_a_close_is_owned_again(tmp_path):
    "After close, a new background save and a restarted monitor work, and the next close ends them."
    ckpt = P.CheckpointManager(tmp_path/'ck')
    ckpt.save(1, model=torch.nn.Linear(4, 4))
    background_work.close()
    with fake_nvml([h200_reading()]):
        mon = GPUMonitor(interval=0.02).start()
        ckpt.save_async(2, model=torch.nn.Linear(4, 4))
        assert mon.running and wait_for(ckpt.local.owner_file.exists)  # claimed again by the save
        background_work.close()
    assert background_work.alive == [] and not mon.running
    assert [c.step for c in ckpt.local.checkpoints()] == [2, 1]

def test_a_failed_save_is_raised_by_close_once(tmp_path):
    ckpt = P.CheckpointManager(tmp_path/'ck')
    full = lambda orig, *a: (_ for _ in ()).throw(OSError(28, 'No space left on device'))
    with patched(F._HashingWriter, '_put', full):
        ckpt.save_async(1, model=torch.nn.Linear(4, 4))
        with pytest.raises(P.CheckpointError, match=r'The last background checkpoint save in .* failed'):
            background_work.close()
    background_work.close()
    assert background_work.alive == []

def test_the_heartbeat_refreshes_the_owner_record_until_close(tmp_path, monkeypatch):
    monkeypatch.setattr(P, '_BEAT_S', 0.05)
    ckpt = P.CheckpointManager(tmp_path/'ck')
    ckpt.save(1, model=torch.nn.Linear(4, 4))
    rec = ckpt.local.owner_file
    t0 = rec.stat().st_mtime_ns
    assert wait_for(lambda: rec.stat().st_mtime_ns > t0, timeout=10)
    assert 'checkpoint-owner' in {t.name for t in background_work.alive}
    background_work.close()
    assert not rec.exists() and background_work.alive == []

def test_no_clock_hooks_the_time_stand_in_drives_them(tmp_path):
    "SessionClock, run_resumable and GPUMonitor read `time`, so `fake_clock` is all a test needs."
    assert not any(hasattr(o, '_clock') for o in (P.SessionClock, P.run_resumable, GPUMonitor))
    now = [0.0]
    def step(s): now[0] += 600
    with fake_clock(lambda: now[0]):
        sc = P.SessionClock(idle_min=None)
        now[0] = 3600
        assert sc.left() == {'session': 11 * 3600}
        rep = P.run_resumable(step, P.CheckpointManager(tmp_path/'ck', keep=10), 6,
                              model=torch.nn.Linear(2, 2), every_minutes=20)
    assert [c.step for c in P.CheckpointDir(tmp_path/'ck').checkpoints()] == [6, 4, 2, 0]
    with fake_nvml([h200_reading()]), fake_clock(lambda: 1.8e9):
        mon = GPUMonitor()
        rows = mon.sample_once()
        mon.close()
    assert rows[0][0] == 1.8e9
