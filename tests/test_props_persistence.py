"""Property tests of persistence's public functions: whatever the arguments, a call either works or raises one of
the package's errors (or a ValueError / TypeError) whose message names the argument or its value; never a bare
IndexError, StopIteration, AttributeError or KeyError from inside. One argument at a time is replaced by an
arbitrary value, the others are valid; every call runs in a fresh temporary folder."""
import contextlib, copy, math, os, tempfile, threading, warnings
from pathlib import Path
from unittest import mock

import pytest
import torch
from hypothesis import given, settings, strategies as st

from colab_t4_nb import checkpoint_format as F, persistence as P
from colab_t4_nb.core import ColabT4Error
from colab_t4_nb.testing import fake_clock
from conftest import PROPS, PROPS_FILES, answers, bare

# ---------------------------------------------------------------- arbitrary values
names = st.text(alphabet='abcXYZ019_.-', min_size=1, max_size=8).filter(lambda s: s not in ('.', '..'))
junk = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6), st.just(''), st.just('\x00'), st.binary(max_size=4), names,
    st.lists(st.integers(-3, 3), max_size=3), st.tuples(st.integers(), st.text(max_size=2)),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.just(object()), st.just(lambda: 0),
    st.just(threading.Lock()), st.just({'lock': threading.Lock()}), st.just(Path('no/such/folder')),
    st.just(torch.zeros(2)))
not_callable = junk.filter(lambda v: not callable(v))

@contextlib.contextmanager
def sandbox():
    "A fresh temporary folder as the working folder and as COLAB_T4_HOME, outside Colab."
    old = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ('COLAB_RELEASE_TAG', 'COLAB_GPU')}
        env['COLAB_T4_HOME'] = str(Path(tmp)/'home')
        with mock.patch.dict(os.environ, env, clear=True), warnings.catch_warnings():
            warnings.simplefilter('ignore')  # CheckpointWarning, SessionEnding: survived problems are not errors
            os.chdir(tmp)
            try: yield Path(tmp)
            finally: os.chdir(old)

def works_or_names(fn, arg:str, value, *aliases):
    "Call `fn()`; an error must be the package's or a ValueError/TypeError, and name `arg` (or an alias, or the value)."
    shown = [str(value), repr(value)] if isinstance(value, (str, Path)) and str(value) else []
    return answers(fn, arg, *aliases, *shown, what=f' for {arg}={value!r}')

def model(): return torch.nn.Linear(3, 2)

# ---------------------------------------------------------------- checksums and files
@PROPS_FILES
@given(junk)
def test_new_hash(v): works_or_names(lambda: F.new_hash(v), 'algo', v)

@PROPS_FILES
@given(st.sampled_from(['crc1', 'crc2', 'len2']), st.one_of(junk, st.integers(0, 2**33)))
def test_crc32_combine(arg, v):
    kw = {'crc1': 1, 'crc2': 2, 'len2': 3, arg: v}
    r = works_or_names(lambda: F.crc32_combine(**kw), arg, v)
    if not isinstance(r, Exception): assert 0 <= r < 2**32

@PROPS_FILES
@given(junk)
def test_read_trailer(v):
    with sandbox(): works_or_names(lambda: P.read_trailer(v), 'path', v)

@PROPS_FILES
@given(st.sampled_from(['path', 'step', 'seq', 'size', 'checksum']), junk)
def test_checkpoint_and_verify_file(arg, v):
    with sandbox() as tmp:
        good = P.write_checkpoint(tmp/'a.pt', {'w': torch.ones(3)})
        kw = {**good.__dict__, arg: v}
        c = works_or_names(lambda: P.Checkpoint(**kw), arg, v)
        if isinstance(c, P.Checkpoint): works_or_names(lambda: P.verify_file(c), arg, v)
        works_or_names(lambda: P.verify_file(v), 'c', v)
        works_or_names(lambda: P.verify_file(good, chunk=v), 'chunk', v)

@PROPS_FILES
@given(st.sampled_from(['path', 'obj', 'step', 'seq', 'checksum', 'writeback']), junk)
def test_write_checkpoint(arg, v):
    with sandbox():
        kw = {'path': 'x.pt', 'obj': {'w': torch.ones(3)}, 'step': 1, 'seq': 1, 'checksum': 'crc32', 'writeback': None,
              arg: v}
        c = works_or_names(lambda: P.write_checkpoint(**kw), arg, v)
        if isinstance(c, P.Checkpoint): assert P.verify_file(c) is None

# ---------------------------------------------------------------- training state
@PROPS_FILES
@given(junk)
def test_set_rng_state(v):
    before = P.rng_state()
    try: works_or_names(lambda: P.set_rng_state(v), 'st', v)
    finally: P.set_rng_state(before)

@PROPS_FILES
@given(st.sampled_from(['step', 'model', 'optimizer', 'scaler', 'scheduler', 'extras']), junk)
def test_training_state(arg, v):
    kw = {'step': 0, 'model': model(), arg: v}
    works_or_names(lambda: P.training_state(**kw), arg, v)

# ---------------------------------------------------------------- folders and managers
@PROPS_FILES
@given(st.sampled_from(['path', 'keep', 'checksum']), junk)
def test_checkpoint_dir(arg, v):
    with sandbox():
        kw = {'path': 'ck', 'keep': 2, 'checksum': 'crc32', arg: v}
        d = works_or_names(lambda: P.CheckpointDir(**kw), arg, v)
        if isinstance(d, P.CheckpointDir):
            for s in (1, 2, 3): d.save({'s': s}, s)
            d.wait()
            assert [c.step for c in d.checkpoints()][:1] == [3] and d.latest().step == 3

@PROPS_FILES
@given(st.sampled_from(['obj', 'step', 'seq']), junk)
def test_checkpoint_dir_save(arg, v):
    with sandbox():
        d = P.CheckpointDir('ck')
        kw = {'obj': {'w': torch.ones(2)}, 'step': 4, 'seq': None, arg: v}
        works_or_names(lambda: d.save(**kw), arg, v, 'extras')
        works_or_names(lambda: d.file_for(v), 'step', v)
        works_or_names(lambda: d.verify(v), 'c', v)

@PROPS_FILES
@given(st.sampled_from(['path', 'keep', 'mirror', 'checksum', 'name']), junk)
def test_checkpoint_manager(arg, v):
    with sandbox():
        # a folder is named by path or by name, not both
        kw = {'path': None if arg == 'name' else 'ck', 'keep': 2, 'mirror': None, 'checksum': 'crc32',
              'name': None, arg: v}
        m = works_or_names(lambda: P.CheckpointManager(**kw), arg, v)
        if isinstance(m, P.CheckpointManager):
            m.save(1, model=model()); m.save_async(2, model=model())
            assert m.wait().step == 2 and m.load(model=model()).step == 2

@PROPS_FILES
@given(st.sampled_from(['step', 'model', 'optimizer', 'scaler', 'scheduler', 'note']), junk, st.booleans())
def test_manager_save(arg, v, background):
    with sandbox():
        m = P.CheckpointManager('ck')
        kw = {'step': 3, 'model': model(), arg: v}
        r = works_or_names(lambda: (m.save_async if background else m.save)(**kw), arg, v, 'extra')
        if not isinstance(r, Exception): works_or_names(m.wait, arg, v, 'extra')  # a background save's error comes here

LOAD_ARGS = ['model', 'optimizer', 'scaler', 'scheduler', 'checkpoint', 'strict', 'restore_rng', 'weights_only']

@PROPS_FILES
@given(st.sampled_from(LOAD_ARGS), junk)
def test_manager_load(arg, v):
    with sandbox():
        m = P.CheckpointManager('ck')
        lin = model()
        m.save(3, model=lin, optimizer=torch.optim.SGD(lin.parameters(), lr=0.1))
        kw = {'model': model(), arg: v}
        r = works_or_names(lambda: m.load(**kw), arg, v)
        if isinstance(r, P.Resumed): assert r.step == 3

@PROPS_FILES
@given(st.sampled_from(['name', 'keep', 'mountpoint', 'folder', 'local']), junk)
def test_drive_checkpoints_and_flush(arg, v):
    with sandbox():
        kw = {'name': 'run', arg: v}
        with contextlib.redirect_stdout(None): works_or_names(lambda: P.drive_checkpoints(**kw), arg, v)
        with contextlib.redirect_stdout(None): works_or_names(lambda: P.flush_drive(v), 'mountpoint', v)

# ---------------------------------------------------------------- the session clock and the loops
@PROPS_FILES
@given(st.sampled_from(['session_h', 'idle_min', 'warn_min', 'margin_min', 'used_min']),
       st.one_of(junk, st.lists(junk, max_size=3)))
def test_session_clock(arg, v):
    now = [0.0]
    with fake_clock(lambda: now[0]):
        sc = works_or_names(lambda: P.SessionClock(**{arg: v}), arg, v)
        if isinstance(sc, P.SessionClock):
            with warnings.catch_warnings():
                warnings.simplefilter('ignore', P.SessionEnding)
                for t in (0, 3600, 13 * 3600): now[0] = t; sc.due(); sc.left(); repr(sc)

RUN_ARGS = ['step_fn', 'ckpt', 'steps', 'every_steps', 'steps_per_epoch', 'every_minutes', 'session', 'max_oom',
            'on_oom', 'background', 'model', 'optimizer']

@PROPS_FILES
@given(st.sampled_from(RUN_ARGS), st.one_of(junk, st.integers(-3, 6)))
def test_run_resumable(arg, v):
    with sandbox():
        lin = model()
        kw = {'step_fn': lambda s: None, 'ckpt': P.CheckpointManager('ck'), 'steps': 4, 'model': lin, arg: v}
        if arg in ('step_fn', 'on_oom') and callable(v): return  # any function is a valid step or hook
        r = works_or_names(lambda: P.run_resumable(**kw), arg, v)
        if isinstance(r, P.RunReport): assert r.stop == kw['steps']

@settings(PROPS, max_examples=15, derandomize=True)
@given(st.sampled_from(['cmd', 'max_restarts', 'env', 'cwd', 'echo', 'tail']), junk)
def test_run_with_restarts(arg, v):
    with sandbox():
        kw = {'cmd': ['true'], 'max_restarts': 0, 'echo': False, arg: v}
        with contextlib.redirect_stdout(None): works_or_names(lambda: P.run_with_restarts(**kw), arg, v)

def _loader():
    ds = torch.utils.data.TensorDataset(torch.arange(8.))
    return P.ResumableLoader(torch.utils.data.DataLoader(ds, 2, shuffle=True))

def _paths(d:dict, path=())->list:
    "The key paths of a nested dict: its keys, and those of the dicts inside."
    return [p for k, v in d.items()
            for p in [path + (k,), *(_paths(v, path + (k,)) if isinstance(v, dict) else [])]]

GONE = object()  # the entry removed

@PROPS
@given(st.sampled_from([2, 4]), st.data(), st.one_of(junk, st.just(GONE)))
def test_resumable_loader_state(batches, data, v):
    "One entry of a loader's state changed or removed: refused at load, naming it, or the epoch runs."
    rl = _loader()
    it = iter(rl)
    for _ in range(batches): next(it)  # in the epoch, or at its end
    state = copy.deepcopy(rl.state_dict())
    path = data.draw(st.sampled_from(_paths(state)))
    inner = state
    for k in path[:-1]: inner = inner[k]
    if v is GONE: del inner[path[-1]]
    else: inner[path[-1]] = v
    # 'batches' made positive asks for the entries of a position inside an epoch
    said = [repr(path[-1]), *(["'start'"] if path[-1] == 'batches' else [])]
    again = _loader()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', F.CheckpointWarning)  # a changed 'length' is warned of
        r = answers(lambda: again.load_state_dict(state), *said, what=f' for state{list(path)}={v!r}')
    if isinstance(r, Exception): return
    try: list(again)
    except Exception as e:  # what load_state_dict cannot see, such as a random state's contents
        assert isinstance(e, ColabT4Error) and not bare(e), f'{type(e).__name__}: {e}'

@PROPS_FILES
@given(junk)
def test_error_predicates(v):
    assert P.oom_kind(v) in (None, "cuda", "cudnn", "cublas", "cpu", "mps") and P.is_context_lost(v) in (True, False)
