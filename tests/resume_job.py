"""One training run of the resume matrix: a framework, a data loader, a checkpoint folder, and where
to die. `python resume_job.py FRAMEWORK LOADER FOLDER [--kill-at N] [--kill-in-save N]
[--kill-at-batch N]` trains two
epochs (three for Keras) of six batches from the newest checkpoint in FOLDER and, when it gets to
the end, writes FOLDER/final.pt: the weights and the optimizer state. `--kill-at N` SIGKILLs the
process after optimizer step N; `--kill-in-save N` SIGKILLs it in the middle of writing the first
checkpoint after step N; `--kill-at-batch N` after the Nth micro-batch (with RESUME_ACCUMULATE=2,
between the micro-batches of an optimizer step). `--zygote FRAMEWORK` imports once and forks one child per run read from
stdin, as JSON, so that a matrix of runs costs one import of each framework.

The model has dropout, AdamW and a per-step warm-up/decay schedule; the data get random noise
where they are loaded (in the main process, or in the loader's workers). Frameworks: plain
(`run_resumable`), hf (the Trainer and `HFCallback`), lightning (`LightningCallback`), keras
(`KerasCallback`). Loaders: generator (shuffled by the loader's own seeded generator), global
(shuffled from the global generator), workers (two worker processes), pworkers (two persistent
worker processes, kept from one epoch to the next)."""
import argparse, os, signal, sys, threading, warnings
from pathlib import Path

import numpy as np
import torch

N, BATCH, FEATURES = 48, 8, 8
ACCUMULATE = int(os.environ.get('RESUME_ACCUMULATE', '1'))  # micro-batches per optimizer step
# save every 3 optimizer steps: at 3, 6 (an epoch's end), 9, 12; with accumulation every 2 steps
# (4 micro-batches): at 2, 4 (in the second epoch), 6
EVERY = 3 if ACCUMULATE == 1 else 2
DEVICE = os.environ.get('RESUME_DEVICE', 'cpu')
if DEVICE != 'cpu':  # deterministic kernels, so that two runs on the GPU can be compared bit for bit
    os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
    torch.use_deterministic_algorithms(True)
PRECISION = os.environ.get('RESUME_PRECISION', 'fp32')  # fp32, fp16 or bf16 (on a GPU)
NOISE = float(os.environ.get('RESUME_NOISE', '0.01'))  # the scale of the random augmentation

def data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(N, FEATURES, generator=g), torch.randn(N, 1, generator=g)

class Noisy(torch.utils.data.Dataset):
    "The samples with random noise added where they are loaded: a random augmentation."
    def __init__(self): self.x, self.y = data()
    def __len__(self): return N
    def __getitem__(self, i):
        return (self.x[i] + NOISE * torch.randn(FEATURES) if NOISE else self.x[i]), self.y[i]

def torch_loader(kind):
    kw = dict(batch_size=BATCH, shuffle=True)
    if kind == 'generator': kw['generator'] = torch.Generator().manual_seed(1)
    if kind in ('workers', 'pworkers'): kw['num_workers'] = 2
    if kind == 'pworkers': kw['persistent_workers'] = True
    return torch.utils.data.DataLoader(Noisy(), **kw)

def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                               torch.nn.Linear(32, 1))

def schedule(opt, total):
    "Linear warm-up over 3 steps, then linear decay: stepped once per optimizer step."
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / 3, (total - s) / total))

# ---------------------------------------------------------------- dying on cue
ARMED, KILL_AT, KILL_IN_SAVE, KILL_AT_BATCH, BATCHES = [False], None, None, None, [0]

def after_step(n:int):
    "Called after optimizer step `n`: die here, or arm the kill inside the next save."
    if KILL_AT is not None and n == KILL_AT: os.kill(os.getpid(), signal.SIGKILL)
    if KILL_IN_SAVE is not None and n >= KILL_IN_SAVE: ARMED[0] = True

def after_batch():
    "Called after each micro-batch: die after the `KILL_AT_BATCH`th, between optimizer steps."
    BATCHES[0] += 1
    if KILL_AT_BATCH is not None and BATCHES[0] == KILL_AT_BATCH: os.kill(os.getpid(), signal.SIGKILL)

def kill_inside_saves():
    from colab_t4_nb import checkpoint_format as F
    put, calls = F._HashingWriter._put, [0]
    def _put(self, *a, **k):
        if ARMED[0]:
            calls[0] += 1
            if calls[0] == 2: os.kill(os.getpid(), signal.SIGKILL)  # half the file is written
        return put(self, *a, **k)
    F._HashingWriter._put = _put

def write_final(folder:Path, model:dict, optimizer:dict):
    torch.save({'model': model, 'optimizer': optimizer}, folder/'final.pt')

# ---------------------------------------------------------------- the frameworks
def plain(kind, folder):
    from colab_t4_nb.persistence import CheckpointManager, run_resumable
    model, dl = net().to(DEVICE), torch_loader(kind)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    total = 2 * len(dl)
    sched = schedule(opt, total)
    dtype = {'fp16': torch.float16, 'bf16': torch.bfloat16}.get(PRECISION)
    scaler = torch.amp.GradScaler(DEVICE, enabled=PRECISION == 'fp16')
    def step(s, batch):
        x, y = (t.to(DEVICE) for t in batch)
        with torch.autocast(DEVICE, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        sched.step()
        after_step(s + 1)
    run_resumable(step, CheckpointManager(folder/'ckpt'), total, model=model, optimizer=opt,
                  scaler=scaler, scheduler=sched, every_steps=EVERY, loader=dl)
    write_final(folder, model.state_dict(), opt.state_dict())

def hf(kind, folder):
    import transformers
    from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments
    from colab_t4_nb.callbacks import HFCallback
    transformers.utils.logging.set_verbosity_error()
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net()
        def forward(self, x, labels):
            return {"loss": torch.nn.functional.mse_loss(self.net(x).float(), labels)}
    class Items(torch.utils.data.Dataset):
        def __init__(self): self.d = Noisy()
        def __len__(self): return N
        def __getitem__(self, i):
            x, y = self.d[i]
            return {'x': x, 'labels': y}
    class Step(TrainerCallback):
        def on_substep_end(self, args, state, control, **kw): after_batch()
        def on_step_end(self, args, state, control, **kw):
            after_batch()
            after_step(state.global_step)
    args = dict(num_train_epochs=2, per_device_train_batch_size=BATCH, learning_rate=1e-2,
                lr_scheduler_type='linear', warmup_steps=3, save_strategy='no', report_to='none',
                disable_tqdm=True, logging_strategy='no', seed=0, use_cpu=DEVICE == 'cpu',
                gradient_accumulation_steps=ACCUMULATE,
                fp16=PRECISION == 'fp16', bf16=PRECISION == 'bf16', full_determinism=DEVICE != 'cpu')
    if kind == 'generator': args['data_seed'] = 1
    if kind == 'global': args['accelerator_config'] = {'use_seedable_sampler': False}
    if kind in ('workers', 'pworkers'): args['dataloader_num_workers'] = 2
    if kind == 'pworkers': args['dataloader_persistent_workers'] = True
    model, cb = Model(), HFCallback(folder/'ckpt', every_steps=EVERY, every_minutes=None)
    t = Trainer(model, TrainingArguments(str(folder/'out'), **args), train_dataset=Items(),
                callbacks=[cb, Step()])
    t.remove_callback(PrinterCallback)
    t.train(**cb.train_kwargs())
    write_final(folder, model.net.state_dict(), t.optimizer.state_dict())

def lightning(kind, folder):
    import lightning.pytorch as pl
    from colab_t4_nb.callbacks import LightningCallback
    class Small(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = net()
        def training_step(self, batch, i):
            return torch.nn.functional.mse_loss(self.net(batch[0]).float(), batch[1])
        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
            sched = schedule(opt, self.trainer.estimated_stepping_batches)
            return [opt], [{'scheduler': sched, 'interval': 'step'}]
    class Step(pl.Callback):
        def on_train_batch_end(self, trainer, *a):
            after_batch()
            after_step(trainer.global_step)
    cb = LightningCallback(folder/'ckpt', every_steps=EVERY, every_minutes=None)
    precision = {'fp16': '16-mixed', 'bf16': 'bf16-mixed'}.get(PRECISION, '32-true')
    trainer = pl.Trainer(max_epochs=2, callbacks=[cb, Step()], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator='gpu' if DEVICE != 'cpu' else 'cpu',
                         devices=1, precision=precision, deterministic=DEVICE != 'cpu',
                         accumulate_grad_batches=ACCUMULATE)
    model = Small()
    trainer.fit(model, cb.loader(torch_loader(kind)), ckpt_path=cb.ckpt_path())
    write_final(folder, model.net.state_dict(), trainer.optimizers[0].state_dict())

def keras(kind, folder):
    import tensorflow as tf
    tf.config.set_visible_devices([], 'GPU')  # the CPU, where TensorFlow is deterministic
    import keras
    from colab_t4_nb.callbacks import KerasCallback
    keras.utils.set_random_seed(0)
    tf.config.experimental.enable_op_determinism()
    x, y = (t.numpy() for t in data())
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(32, activation='relu'),
                              keras.layers.Dropout(0.2), keras.layers.Dense(1)])
    lr = keras.optimizers.schedules.CosineDecay(0.0, 18, warmup_target=1e-2, warmup_steps=3)
    model.compile(keras.optimizers.AdamW(lr), 'mse')
    class Step(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            after_step(int(self.model.optimizer.iterations.numpy()))
    class Batches(keras.utils.PyDataset):  # loaded by two worker threads; shuffled each epoch
        def __init__(self):
            super().__init__(workers=2)
            self.order, self.drawn = np.arange(N), threading.Event()
        def __len__(self): return N // BATCH
        def __getitem__(self, i):
            # Keras starts the workers before it calls on_epoch_begin (keras-team/keras#23283): they wait for
            # the epoch's order; Keras's own look at a first batch, before training, comes from the main thread
            if threading.current_thread() is not threading.main_thread(): self.drawn.wait()
            idx = self.order[i * BATCH:(i + 1) * BATCH]
            return x[idx], y[idx]
        def on_epoch_begin(self):
            self.order = np.random.permutation(N)
            self.drawn.set()
        def on_epoch_end(self): self.drawn.clear()
    cb = KerasCallback(folder/'ckpt')
    early = keras.callbacks.EarlyStopping('loss', patience=5)
    step, fit = Step(), dict(epochs=3, verbose=0)
    if kind == 'generator':  # early stopping's counters resume too; a tf.data pipeline's order
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(N, seed=1).batch(BATCH)
        model.fit(ds, **cb.fit_kwargs(early, step), **fit)
    elif kind == 'global':
        model.fit(x, y, batch_size=BATCH, shuffle=True, callbacks=[cb, step], **fit, **cb.fit_kwargs())
    else: model.fit(Batches(), callbacks=[cb, step], **fit, **cb.fit_kwargs())
    write_final(folder, {str(i): torch.from_numpy(np.array(w)) for i, w in enumerate(model.get_weights())},
                {str(i): torch.from_numpy(np.array(v.numpy()))
                 for i, v in enumerate(model.optimizer.variables)})

FRAMEWORKS = {'plain': plain, 'hf': hf, 'lightning': lightning, 'keras': keras}

def run(framework, loader, folder, kill_at=None, kill_in_save=None, kill_at_batch=None):
    global KILL_AT, KILL_IN_SAVE, KILL_AT_BATCH
    KILL_AT, KILL_IN_SAVE, KILL_AT_BATCH, ARMED[0] = kill_at, kill_in_save, kill_at_batch, False
    kill_inside_saves()
    warnings.filterwarnings('ignore')
    FRAMEWORKS[framework](loader, Path(folder))

def warm(framework):
    "Import what a run of `framework` imports, before forking."
    import colab_t4_nb.callbacks, colab_t4_nb.persistence
    if framework == 'hf': import transformers, transformers.trainer
    if framework == 'lightning': import lightning.pytorch
    if framework == 'keras': import tensorflow, keras

def zygote(framework):
    "Import `framework` once, then fork one run per command read from stdin (see zygote.py)."
    torch.set_num_threads(1)  # no thread pools in the forking process
    warm(framework)
    sys.path.insert(0, str(Path(__file__).parent))
    from zygote import serve
    serve(run)

if __name__ == '__main__':
    p = argparse.ArgumentParser()
    p.add_argument('framework', nargs='?')
    p.add_argument('loader', nargs='?')
    p.add_argument('folder', nargs='?')
    p.add_argument('--kill-at', type=int)
    p.add_argument('--kill-in-save', type=int)
    p.add_argument('--kill-at-batch', type=int)
    p.add_argument('--zygote')
    a = p.parse_args()
    if a.zygote: zygote(a.zygote)
    else:
        torch.set_num_threads(1)
        run(a.framework, a.loader, a.folder, a.kill_at, a.kill_in_save, a.kill_at_batch)
