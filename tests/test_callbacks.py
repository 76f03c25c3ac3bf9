"""The framework callbacks on the CPU: a run interrupted between saves and started again with the
same call ends with the weights of an uninterrupted run (Trainer, Lightning, Keras); saves before a
session's end; GPU figures in the logs; nothing of the user's deleted; the module imports without
the frameworks, and its page runs without Lightning and TensorFlow."""
import contextlib, os, re, shutil, warnings
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch

from colab_t4_nb import callbacks as C
from conftest import ROOT, python
from colab_t4_nb.persistence import CheckpointManager, SessionClock, SessionEnding
from colab_t4_nb.testing import fake_clock, fake_colab, fake_nvml, h200_reading

transformers = pytest.importorskip('transformers')
from transformers import (BertConfig, BertForSequenceClassification, PrinterCallback, Trainer,
                          TrainerCallback, TrainingArguments)
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
torch.set_num_threads(1)  # models this small only lose time to threads that wait for each other

def same(a:dict, b:dict)->bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

# ---------------------------------------------------------------- Hugging Face Trainer
def sentences(n=40):
    ids = torch.randint(0, 50, (n, 10), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(10, dtype=torch.long)
    return [{'input_ids': s, 'attention_mask': mask, 'labels': int(s[0] % 2)} for s in ids]

class Disconnect(TrainerCallback):
    def __init__(self, at): self.at = at
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at: raise RuntimeError('runtime disconnected')

@contextlib.contextmanager
def on_clock(now:list):
    "Every clock read inside the block gives `now[0]` (seconds)."
    with fake_clock(lambda: now[0]): yield

class Tick(TrainerCallback):
    def __init__(self, now, s): self.now, self.s = now, s
    def on_step_end(self, args, state, control, **kwargs): self.now[0] += self.s

def hf_run(tmp:Path, run, crash_at=None, cb_kw=None, extra=(), eval_dataset=None, **args):
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32))
    cb = C.HFCallback(run, **{'every_steps': 3, **(cb_kw or {})})
    a = dict(num_train_epochs=2, per_device_train_batch_size=8, learning_rate=1e-3,
             save_strategy='no', report_to='none', disable_tqdm=True, logging_strategy='no', seed=0,
             use_cpu=True)
    callbacks = [*extra, cb] + ([Disconnect(crash_at)] if crash_at else [])
    t = Trainer(model, TrainingArguments(str(tmp/'out'), **{**a, **args}),
                train_dataset=sentences(), eval_dataset=eval_dataset, callbacks=callbacks)
    t.remove_callback(PrinterCallback)
    t.train(**cb.train_kwargs())
    return cb, {k: v.clone() for k, v in model.state_dict().items()}, t

@pytest.fixture(scope='module')
def hf_ref(tmp_path_factory):
    return hf_run(tmp_path_factory.mktemp('ref'), tmp_path_factory.mktemp('ref')/'run')[1]

@pytest.mark.parametrize('crash_at, resumed', [(4, 3), (7, 6)])  # 5 steps an epoch: mid, end
def test_hf_resume_is_bit_identical(tmp_path, hf_ref, crash_at, resumed):
    with pytest.raises(RuntimeError, match='runtime disconnected'):
        hf_run(tmp_path, tmp_path/'run', crash_at)
    cb, w, _ = hf_run(tmp_path, tmp_path/'run')
    assert cb.resumed_from == resumed and same(w, hf_ref)
    assert [c.step for c in cb.ckpt.local.checkpoints()] == [10, 9, 6]  # every 3 steps and the last

def test_hf_resume_with_gradient_accumulation(tmp_path):
    acc = dict(per_device_train_batch_size=4, gradient_accumulation_steps=2)
    ref = hf_run(tmp_path/'r', tmp_path/'ref', **acc)[1]
    with pytest.raises(RuntimeError): hf_run(tmp_path, tmp_path/'run', 5, **acc)
    cb, w, _ = hf_run(tmp_path, tmp_path/'run', **acc)
    assert cb.resumed_from == 3 and same(w, ref)

def test_hf_session_end_saves_stops_and_resumes(tmp_path, hf_ref):
    "Ten-minute steps, a 1.5 h session: the run stops and saves at step 9; the next one goes on."
    def run():
        now = [0.0]
        with on_clock(now), warnings.catch_warnings():
            warnings.simplefilter('ignore', SessionEnding)
            clock = SessionClock(session_h=1.5, idle_min=None)
            return hf_run(tmp_path, tmp_path/'run', cb_kw=dict(every_steps=None, every_minutes=None,
                          session=clock), extra=[Tick(now, 600)])
    first, _, t = run()
    kept = [c.step for c in first.ckpt.local.checkpoints()]
    assert (first.stopped, t.state.global_step, kept) == ('session limit', 9, [9])
    second, w, _ = run()
    assert second.resumed_from == 9 and second.stopped is None and same(w, hf_ref)

def test_hf_every_minutes_bounds_lost_work(tmp_path):
    now = [0.0]
    kw = dict(every_steps=None, every_minutes=5)
    with on_clock(now):
        cb = hf_run(tmp_path, tmp_path/'run', cb_kw=kw, extra=[Tick(now, 120)])[0]  # every 3 steps
    assert [c.step for c in cb.ckpt.local.checkpoints()] == [10, 9, 6]

def test_hf_gpu_figures_reach_the_log_history(tmp_path):
    with fake_nvml([h200_reading()]):
        mon = C.GPUMonitor(interval=1.0)
        _, _, t = hf_run(tmp_path, tmp_path/'run', cb_kw=dict(monitor=mon),
                         logging_strategy='steps', logging_steps=5)
    logged = [h for h in t.state.log_history if 'loss' in h]
    assert len(logged) == 2
    assert all(h['gpu0_util_gpu'] == 100.0 and h['gpu0_temp_c'] == 58.0 for h in logged)

def test_hf_leaves_the_users_files_alone(tmp_path):
    (tmp_path/'out').mkdir()
    (tmp_path/'out'/'notes.txt').write_text('mine')
    cb = hf_run(tmp_path, tmp_path/'run', save_total_limit=None)[0]
    assert (tmp_path/'out'/'notes.txt').read_text() == 'mine'
    trainers = {p.name for p in (tmp_path/'out').iterdir()}
    assert trainers >= {'checkpoint-3', 'checkpoint-6', 'checkpoint-10'}
    assert [c.step for c in cb.ckpt.local.checkpoints()] == [10, 9, 6]
    assert all(re.fullmatch(r'ckpt-\d{9}\.pt|colab_t4_nb-manifest\.json|\.colab_t4_nb-.*', p.name)
               for p in cb.ckpt.path.iterdir())  # the manager's folder holds only its own files

def test_hf_in_colab_keeps_a_copy_on_drive(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the local copy goes to ./checkpoints/<name>, as in /content
    with fake_colab() as colab:
        cb = hf_run(tmp_path, C.drive_checkpoints('bert-run', mountpoint=tmp_path/'drive'))[0]
    assert colab.calls == [('drive.mount', str(tmp_path/'drive'))]
    assert [c.step for c in cb.ckpt.mirror.checkpoints()] == [10, 9, 6]
    assert cb.ckpt.path == tmp_path/'checkpoints'/'bert-run'

def test_a_checkpoint_of_another_framework_is_refused(tmp_path):
    hf_run(tmp_path, tmp_path/'run')
    cb = C.KerasCallback(tmp_path/'run') if C.find_spec('tensorflow') else None
    if cb is not None:
        with pytest.raises(C.CheckpointMismatch, match='was not saved by KerasCallback'): cb.fit_kwargs()

def test_card_settings():
    assert C.hf_precision('T4') == {'fp16': True, 'bf16': False}
    assert C.hf_precision('A100') == {'fp16': False, 'bf16': True}
    def probe(bs):
        if bs > 24: raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')
    got = C.hf_settings(64, probe=probe, device='T4')
    assert got == {'fp16': True, 'bf16': False, 'per_device_train_batch_size': 16,
                   'gradient_accumulation_steps': 4}
    for e, f in [(64, 24), (100, 30), (7, 3), (1, 1), (96, 95)]:
        p = C.batch_plan(e, f)
        assert p['per_device_train_batch_size'] * p['gradient_accumulation_steps'] == e
        assert p['per_device_train_batch_size'] <= f
    cards = ['T4', 'L4', 'cpu']
    assert [C.lightning_precision(c) for c in cards] == ['16-mixed', 'bf16-mixed', '32-true']
    assert [C.keras_policy(c) for c in cards] == ['mixed_float16', 'mixed_bfloat16', 'float32']

@pytest.mark.parametrize('kw, msg', [(dict(every_steps=0), 'got every_steps=0'),
                                     (dict(every_minutes=float('nan')), 'every_minutes must be a'),
                                     (dict(session='colab'), 'session must be a SessionClock'),
                                     (dict(monitor=1), 'monitor must be a GPUMonitor')])
def test_bad_settings_are_named(tmp_path, kw, msg):
    with pytest.raises((TypeError, ValueError), match=msg): C.HFCallback(tmp_path/'run', **kw)
    with pytest.raises(TypeError, match='run must be a run name'): C.HFCallback(42)

# ---------------------------------------------------------------- Lightning
def lit_run(run, crash_at=None, every=4, logger=False, cb_kw=None, extra=()):
    pl = pytest.importorskip('lightning.pytorch')
    class Small(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                           torch.nn.Dropout(0.3), torch.nn.Linear(16, 1))
        def training_step(self, b, i): return torch.nn.functional.mse_loss(self.net(b[0]), b[1])
        def configure_optimizers(self):
            opt = torch.optim.Adam(self.parameters(), lr=1e-2)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, 5, 0.5)]
    class Gone(pl.Callback):
        def on_train_batch_end(self, trainer, *a):
            if trainer.global_step == crash_at: raise RuntimeError('runtime disconnected')
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 8, generator=g), torch.randn(40, 1, generator=g)
    data = torch.utils.data.TensorDataset(x, y)
    model, cb = Small(), C.LightningCallback(run, **{'every_steps': every, **(cb_kw or {})})
    trainer = pl.Trainer(max_epochs=3, callbacks=[*extra, cb, Gone()], logger=logger,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator='cpu', log_every_n_steps=5)
    trainer.fit(model, cb.loader(torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)),
                ckpt_path=cb.ckpt_path())
    return cb, {k: v.clone() for k, v in model.state_dict().items()}

@pytest.fixture(scope='module')
def lit_ref(tmp_path_factory): return lit_run(tmp_path_factory.mktemp('lit')/'ref')[1]

@pytest.mark.parametrize('every, crash_at, resumed', [(4, 7, 4), (4, 11, 8), (5, 12, 10)])
def test_lightning_resume_is_bit_identical(tmp_path, lit_ref, every, crash_at, resumed):
    with pytest.raises(RuntimeError, match='runtime disconnected'):
        lit_run(tmp_path/'run', crash_at, every)
    with warnings.catch_warnings():
        warnings.simplefilter('error', UserWarning)  # no "dataloader is not resumable" warning
        warnings.filterwarnings('ignore', message='.*(num_workers|LeafSpec|weights_only).*')
        cb, w = lit_run(tmp_path/'run', every=every)
    assert cb.resumed_from == resumed and same(w, lit_ref)  # saving does not change training

@pytest.mark.parametrize('workers', [{}, dict(num_workers=2, persistent_workers=True)],
                         ids=['plain loader', 'persistent workers'])
def test_lightning_fit_run_again_follows_its_loader(tmp_path, workers):
    "The fit cell run again after a crash (callback, trainer, model and data as they were): it resumes."
    pl = pytest.importorskip('lightning.pytorch')
    class Small(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.3),
                                           torch.nn.Linear(8, 1))
        def training_step(self, b, i):
            if self.global_step == crash[0]: raise RuntimeError('runtime disconnected')
            return self.net(b[0]).pow(2).mean()
        def configure_optimizers(self): return torch.optim.SGD(self.parameters(), lr=0.1)
    def cell(run):
        torch.manual_seed(0)
        model, cb = Small(), C.LightningCallback(run, every_steps=3, every_minutes=None)
        trainer = pl.Trainer(max_epochs=2, callbacks=[cb], logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, accelerator='cpu')
        data = torch.utils.data.TensorDataset(torch.randn(40, 4, generator=torch.Generator().manual_seed(0)))
        dl = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True, **workers)
        return lambda: trainer.fit(model, cb.loader(dl), ckpt_path=cb.ckpt_path()) or model
    crash = [None]
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='.*(num_workers|LeafSpec|weights_only).*')
        ref = cell(tmp_path/'ref')()
        fit, crash[0] = cell(tmp_path/'run'), 7
        with pytest.raises(RuntimeError, match='runtime disconnected'): fit()
        crash[0] = None
        got = fit()  # the same cell again
    assert same(got.state_dict(), ref.state_dict())

def test_hf_persistent_workers_are_refused(tmp_path):
    "A resumed Trainer starts new workers: persistent ones are refused before the first step."
    with pytest.raises(C.ArgumentError, match='Leave dataloader_persistent_workers=False'):
        hf_run(tmp_path, tmp_path/'run', dataloader_num_workers=2, dataloader_persistent_workers=True)

def session(now):
    with on_clock(now): return SessionClock(session_h=1.5, idle_min=None)

def test_lightning_session_end_saves_stops_and_resumes(tmp_path, lit_ref):
    "Ten-minute steps, a 1.5 h session: the run stops and saves at step 9, in its second epoch."
    pl = pytest.importorskip('lightning.pytorch')
    class Tick(pl.Callback):
        def __init__(self, now): self.now = now
        def on_train_batch_end(self, *a): self.now[0] += 600
    def run():
        now = [0.0]
        with warnings.catch_warnings(), on_clock(now):
            warnings.simplefilter('ignore', SessionEnding)
            kw = dict(session=session(now), every_minutes=None)
            return lit_run(tmp_path/'run', every=None, cb_kw=kw, extra=[Tick(now)])
    first = run()[0]
    assert first.stopped == 'session limit'
    assert [c.step for c in first.ckpt.local.checkpoints()] == [9]
    second, w = run()
    assert second.resumed_from == 9 and second.stopped is None and same(w, lit_ref)

def test_lightning_gpu_figures_reach_the_logger(tmp_path):
    "Every `log_every_n_steps` steps the monitor's figures go to the trainer's logger."
    seen = []
    class Logger:
        def log_metrics(self, metrics, step=None): seen.append((step, dict(metrics)))
    class Trainer:  # the attributes of a Lightning trainer the callback reads at a step
        logger, log_every_n_steps, global_step = Logger(), 5, 0
        accumulate_grad_batches, num_training_batches = 1, 10
    pytest.importorskip('lightning')
    with fake_nvml([h200_reading()]):
        mon = C.GPUMonitor(interval=1.0)
        cb = C.LightningCallback(tmp_path/'run', every_minutes=None, monitor=mon)
        for step in range(1, 11):
            Trainer.global_step = step
            cb.on_train_batch_end(Trainer, None, None, None, step - 1)
    assert [(s, m['gpu0_util_gpu']) for s, m in seen] == [(5, 100.0), (10, 100.0)]

# ---------------------------------------------------------------- Keras
def keras_run(run, crash_at=None, shuffle=True, cb_kw=None, extra=(), tracked=False, lr=None):
    tf = pytest.importorskip('tensorflow')
    try: tf.config.set_visible_devices([], 'GPU')  # the CPU, where TensorFlow is deterministic
    except RuntimeError: pass  # TensorFlow has started: the first call chose
    import keras
    class Cut(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == crash_at:
                raise RuntimeError('runtime disconnected')
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation='relu'),
                              keras.layers.Dropout(0.3), keras.layers.Dense(1)])
    schedule = keras.optimizers.schedules.ExponentialDecay(1e-2, 5, 0.5)
    model.compile(keras.optimizers.Adam(schedule if lr is None else lr), 'mse')
    g = np.random.default_rng(0)
    x, y = g.normal(size=(40, 8)).astype('float32'), g.normal(size=(40, 1)).astype('float32')
    cb = C.KerasCallback(run, **(cb_kw or {}))
    if tracked:  # `extra` resumes with the run
        model.fit(x, y, batch_size=8, epochs=4, verbose=0, shuffle=shuffle,
                  **cb.fit_kwargs(*extra, Cut()))
    else:
        model.fit(x, y, batch_size=8, epochs=4, verbose=0, shuffle=shuffle,
                  callbacks=[*extra, cb, Cut()], **cb.fit_kwargs())
    return cb, model.get_weights()

@pytest.fixture(scope='module')
def keras_ref(tmp_path_factory):
    pytest.importorskip('tensorflow')
    return keras_run(tmp_path_factory.mktemp('keras')/'ref')[1]

@pytest.mark.parametrize('crash_at, resumed', [(7, 1), (17, 3)])
def test_keras_resume_is_bit_identical(tmp_path, keras_ref, crash_at, resumed):
    with pytest.raises(RuntimeError, match='runtime disconnected'):
        keras_run(tmp_path/'run', crash_at)
    cb, w = keras_run(tmp_path/'run')
    assert cb.resumed_from == resumed and all(np.array_equal(a, b) for a, b in zip(w, keras_ref))
    assert [c.step for c in cb.ckpt.local.checkpoints()] == [4, 3, 2]

def test_keras_session_end_stops_and_resumes_from_the_last_epoch_end(tmp_path, keras_ref):
    "Ten-minute batches, a 1.5 h session: training stops in its second epoch, which is not saved."
    keras = pytest.importorskip('keras')
    class Tick(keras.callbacks.Callback):
        def __init__(self, now): super().__init__(); self.now = now
        def on_train_batch_end(self, batch, logs=None): self.now[0] += 600
    def run():
        now = [0.0]
        with warnings.catch_warnings(), on_clock(now):
            warnings.simplefilter('ignore', SessionEnding)
            return keras_run(tmp_path/'run', cb_kw=dict(session=session(now)), extra=[Tick(now)])
    first = run()[0]
    assert first.stopped == 'session limit'
    assert [c.step for c in first.ckpt.local.checkpoints()] == [1]
    second, w = keras_run(tmp_path/'run')  # a new session
    assert second.resumed_from == 1 and all(np.array_equal(a, b) for a, b in zip(w, keras_ref))

# ---------------------------------------------------------------- without the frameworks
def test_module_imports_without_the_frameworks():
    code = ("import sys\n"
            "for m in ('transformers', 'lightning', 'tensorflow', 'keras'): sys.modules[m] = None\n"
            "import colab_t4_nb.callbacks as C\n"
            "for cls, pkg in [(C.HFCallback, 'transformers'), (C.LightningCallback, 'lightning'),\n"
            "                 (C.KerasCallback, 'tensorflow')]:\n"
            "    try: cls('run-name')\n"
            "    except C.MissingPackage as e: assert f'`pip install {pkg}`' in str(e), e\n"
            "    else: raise SystemExit(f'{cls.__name__} made without {pkg}')\n"
            "print('ok')\n")
    env = {**os.environ, 'CUDA_VISIBLE_DEVICES': ''}
    r = python(code, env, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == 'ok', r.stderr[-3000:]

def test_page_runs_without_lightning_and_tensorflow(tmp_path):
    "Colab has no Lightning, some GPU images no TensorFlow: their cells say so in one line."
    page = tmp_path/'06b_callbacks.ipynb'
    shutil.copy(ROOT/'nbs'/page.name, page)
    code = ("import sys, runpy\n"
            "for m in ('lightning', 'tensorflow', 'keras'): sys.modules[m] = None\n"
            f"sys.argv = ['run_nbs', '--test', '--skip', 'cuda slow', {str(page)!r}]\n"
            f"runpy.run_path({str(ROOT/'tools'/'run_nbs.py')!r}, run_name='__main__')\n")
    env = {**os.environ, 'CUDA_VISIBLE_DEVICES': ''}
    r = python(code, env, cwd=tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]

# ---------------------------------------------------------------- one folder, one live training
def test_a_second_callback_while_the_first_trains_is_refused(tmp_path):
    "Two trainers of one process on one folder: the second waits for the first's training to end."
    import threading
    pl = pytest.importorskip('lightning.pytorch')
    class Small(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 1)
        def training_step(self, b, i): return self.net(b[0]).pow(2).mean()
        def configure_optimizers(self): return torch.optim.SGD(self.parameters(), lr=0.1)
    started, go_on = threading.Event(), threading.Event()
    class Hold(pl.Callback):
        def on_train_batch_end(self, *a):
            started.set()
            go_on.wait(60)
    data = torch.utils.data.TensorDataset(torch.randn(8, 4))
    def fit(cb, extra=()):
        trainer = pl.Trainer(max_epochs=1, callbacks=[cb, *extra], logger=False,
                             enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, accelerator='cpu')
        trainer.fit(Small(), cb.loader(torch.utils.data.DataLoader(data, batch_size=4)))
    first = C.LightningCallback(tmp_path/'run', every_minutes=None)
    t = threading.Thread(target=fit, args=(first, [Hold()]))
    t.start()
    try:
        assert started.wait(60)
        with pytest.raises(C.CheckpointError, match='training is still running'):
            C.LightningCallback(tmp_path/'run')
    finally:
        go_on.set()
        t.join(60)
    second = C.LightningCallback(tmp_path/'run', every_minutes=None)  # the first has ended
    fit(second)
    assert second.saves == 1 and [c.step for c in second.ckpt.local.checkpoints()] == [2]

def test_a_cell_run_again_replaces_its_failed_callback(tmp_path):
    "A training that failed in this thread is over: a new callback takes its folder."
    pytest.importorskip('transformers')
    with pytest.raises(RuntimeError, match='runtime disconnected'):
        hf_run(tmp_path, tmp_path/'run', crash_at=4)
    cb, _, _ = hf_run(tmp_path, tmp_path/'run')
    assert cb.resumed_from == 3

# ---------------------------------------------------------------- early stopping's counters
def test_hf_early_stopping_counter_resumes(tmp_path):
    "The Trainer's EarlyStoppingCallback keeps its patience counter across a resume."
    from transformers import EarlyStoppingCallback
    def run(folder, crash_at=None):
        es = EarlyStoppingCallback(early_stopping_patience=20)
        # a lower loss counts as no improvement, so the counter grows at every evaluation
        kw = dict(eval_strategy='steps', eval_steps=3, save_strategy='steps', save_steps=3,
                  load_best_model_at_end=True, metric_for_best_model='loss', greater_is_better=True)
        try:
            _, w, t = hf_run(tmp_path, folder, crash_at, extra=[es], eval_dataset=sentences(8), **kw)
        except RuntimeError: return None, None
        es = next(c for c in t.callback_handler.callbacks if isinstance(c, EarlyStoppingCallback))
        return es.early_stopping_patience_counter, w  # the Trainer's own: a resume makes a new one
    ref_count, ref_w = run(tmp_path/'ref')
    run(tmp_path/'run', crash_at=7)
    count, w = run(tmp_path/'run')
    assert ref_count >= 2 and count == ref_count and same(w, ref_w)

def test_lightning_early_stopping_resumes(tmp_path):
    "Lightning keeps EarlyStopping's state in its checkpoint; it comes back through the callback."
    pl = pytest.importorskip('lightning.pytorch')
    def run(folder, crash_at=None):
        # no loss falls by 10: patience runs down at each epoch's end after the first
        es = pl.callbacks.EarlyStopping('loss', patience=20, min_delta=10, check_on_train_epoch_end=True)
        class Logged(pl.Callback):
            def on_train_batch_end(self, trainer, module, outputs, *a):
                module.log('loss', outputs['loss'])  # the step's loss: no mean over a resumed epoch
        cb, w = lit_run(folder, crash_at, extra=[es, Logged()])
        return es.wait_count, float(es.best_score), w
    ref = run(tmp_path/'ref')
    with pytest.raises(RuntimeError, match='disconnected'): run(tmp_path/'run', crash_at=11)
    got = run(tmp_path/'run')
    assert ref[0] > 0 and got[:2] == ref[:2] and same(got[2], ref[2])

def test_keras_early_stopping_and_lr_plateau_resume(tmp_path):
    "EarlyStopping's and ReduceLROnPlateau's counters, given to fit_kwargs, come back on resume."
    keras = pytest.importorskip('keras')
    pytest.importorskip('tensorflow')
    def run(folder, crash_at=None):
        es = keras.callbacks.EarlyStopping('loss', patience=20, mode='max')  # waits every epoch
        plateau = keras.callbacks.ReduceLROnPlateau('loss', mode='max', patience=1, factor=0.5,
                                                    cooldown=1)
        try: _, w = keras_run(folder, crash_at, extra=[es, plateau], tracked=True, lr=1e-2)
        except RuntimeError: return None
        return es.wait, es.best, plateau.wait, plateau.cooldown_counter, w
    ref = run(tmp_path/'ref')
    run(tmp_path/'run', crash_at=12)
    got = run(tmp_path/'run')
    assert ref[0] == 3 and got[:4] == ref[:4]
    assert all(np.array_equal(a, b) for a, b in zip(got[4], ref[4]))

# ---------------------------------------------------------------- crafted and mismatched checkpoints
@pytest.mark.parametrize('name', ['../../outside.txt', '/tmp/colab_t4_nb_outside.txt', 'a/../../x'])
def test_a_crafted_file_name_is_refused_and_nothing_written(tmp_path, name):
    "A checkpoint that loads with weights_only=True may still name any file: it must stay inside."
    C.CheckpointManager(tmp_path/'run').save(3, framework='transformers',
                                            files={name: C._bytes_tensor(b'gotcha')})
    before = sorted(p for p in tmp_path.rglob('*'))
    with pytest.raises(C.CheckpointCorrupt, match='not a file inside its folder'):
        C.HFCallback(tmp_path/'run').train_kwargs()
    assert sorted(p for p in tmp_path.rglob('*')) == before
    assert not Path('/tmp/colab_t4_nb_outside.txt').exists()
    C.CheckpointManager(tmp_path/'lit').save(3, framework='lightning', rng=C.rng_state())  # no files
    if C.find_spec('lightning'):
        with pytest.raises(C.CheckpointCorrupt, match='holds no framework files'):
            C.LightningCallback(tmp_path/'lit').ckpt_path()

def test_keras_resume_with_another_optimizer_changes_nothing(tmp_path):
    "All or nothing: a resume that refuses the optimizer leaves the model's weights as they were."
    keras = pytest.importorskip('keras')
    pytest.importorskip('tensorflow')
    keras_run(tmp_path/'run')
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation='relu'),
                              keras.layers.Dropout(0.3), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(1e-2, momentum=0.9), 'mse')  # not the Adam it was saved with
    before = [w.copy() for w in model.get_weights()]
    cb = C.KerasCallback(tmp_path/'run')
    x, y = np.zeros((8, 8), 'float32'), np.zeros((8, 1), 'float32')
    with pytest.raises(C.CheckpointMismatch, match='Nothing was changed'):
        model.fit(x, y, epochs=5, verbose=0, callbacks=[cb], **cb.fit_kwargs())
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), before))

def test_a_batch_size_changed_at_resume_is_named(tmp_path):
    "Resuming with another batch size skips other samples than those trained: the Trainer and Lightning warn."
    with pytest.raises(RuntimeError, match='runtime disconnected'):
        hf_run(tmp_path, tmp_path/'run', crash_at=4)
    with pytest.warns(C.CheckpointWarning, match='batches of 8 x 1 accumulated x 1 processes; this run has 4 x 1'):
        hf_run(tmp_path, tmp_path/'run', per_device_train_batch_size=4)
    pl = pytest.importorskip('lightning.pytorch')
    def fit(batch, crash=False):
        class Small(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Linear(4, 1)
            def training_step(self, b, i):
                if crash and self.global_step == 3: raise RuntimeError('runtime disconnected')
                return self.net(b[0]).pow(2).mean()
            def configure_optimizers(self): return torch.optim.SGD(self.parameters(), lr=0.1)
        cb = C.LightningCallback(tmp_path/'lit', every_steps=2, every_minutes=None)
        trainer = pl.Trainer(max_epochs=1, callbacks=[cb], logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, accelerator='cpu')
        data = torch.utils.data.TensorDataset(torch.randn(32, 4))
        trainer.fit(Small(), cb.loader(torch.utils.data.DataLoader(data, batch_size=batch)),
                    ckpt_path=cb.ckpt_path())
    with pytest.raises(RuntimeError, match='disconnected'): fit(4, crash=True)
    with pytest.warns(C.CheckpointWarning, match="loader gave 8 batches of 4 an epoch; this one gives 4 of 8"):
        fit(8)
