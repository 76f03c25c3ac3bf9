"""Property tests: the public functions of allocation, timing and monitoring, and the `colab-t4` command's
arguments, answer any input either with a result or with a clear error.

A clear error is one of the package's (`ColabT4Error`) or a `ValueError` / `TypeError`, and its message
names the argument or the value given; never a bare `IndexError`, `StopIteration`, `AttributeError` or
`KeyError` from inside. No GPU is needed: NVML is made to fail as on a machine without a driver."""
import contextlib, io, json, math, os, tempfile
from unittest import mock
from pathlib import Path
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from colab_t4_nb.allocation import (GPU, SPECS, SOURCES, Budget, compare, ensure_gpu, gpu_search,
                                    native_bf16, parse_smi_csv, parse_smi_table, parse_tf_devices,
                                    reading, readings, spec_for, wanted_specs)
from colab_t4_nb.core import oom_kind, runtime, state_dir
from colab_t4_nb.timing import benchmark
from colab_t4_nb.core import record
from colab_t4_nb.monitoring import (FIELDS, GPUMonitor, check_outputs, decode_reasons, read_csv, samples_df, smi_values,
                                    status_text, summarize, throttle_shares)
from colab_t4_nb.ledger import UsageLedger, advice
from colab_t4_nb.testing import fake_clock, fake_env, fake_nvml, missing_nvml, t4_reading
from colab_t4_nb.cli import main
from conftest import PROPS, answers

@pytest.fixture(autouse=True, scope='module')
def state_home(tmp_path_factory):
    "Default files (the ledger, the budget) go to a temporary state folder."
    old = os.environ.get('COLAB_T4_HOME')
    os.environ['COLAB_T4_HOME'] = str(tmp_path_factory.mktemp('state'))
    yield
    if old is None: os.environ.pop('COLAB_T4_HOME', None)
    else: os.environ['COLAB_T4_HOME'] = old

anything = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
                     st.lists(st.text(max_size=6), max_size=3), st.tuples(st.integers(), st.integers()))
card_names = st.one_of(st.sampled_from([*SPECS, 'A100', 'V100', 'Tesla T4', 'NVIDIA H200', 'Tesla K80']),
                       st.text(max_size=12))

@PROPS
@given(card_names)
def test_spec_for(name): answers(lambda: spec_for(name), repr(name))

@PROPS
@given(anything)
def test_native_bf16(cc): answers(lambda: native_bf16(cc), 'cc=')

@PROPS
@given(st.one_of(anything, st.lists(card_names, max_size=3)))
def test_wanted_specs(want):
    answers(lambda: wanted_specs(want), 'want=', repr(want) if isinstance(want, str) else 'is not in')

@PROPS
@given(card_names, card_names)
def test_compare(a, b): answers(lambda: compare(a, b), repr(a), repr(b))

@PROPS
@given(st.one_of(anything, st.lists(st.sampled_from([*SOURCES, 'bogus', '']), max_size=3)))
def test_gpu_info_sources(sources):
    with missing_nvml(): answers(lambda: gpu_search(sources), 'sources=')

@PROPS
@given(st.text(max_size=300), st.one_of(st.none(), st.lists(st.text(max_size=8), max_size=4)))
def test_parsers(text, columns):
    assert isinstance(parse_smi_csv(text, columns), list)
    for g in parse_smi_table(text) + parse_tf_devices(text): assert isinstance(g, GPU)

@PROPS
@given(st.text(max_size=60))
def test_oom_kind(msg):
    for e in (RuntimeError(msg), ValueError(msg), MemoryError(msg)):
        assert oom_kind(e) in (None, 'cuda', 'cudnn', 'cublas', 'cpu', 'mps', 'tf')

@PROPS
@given(st.dictionaries(st.sampled_from(['COLAB_RELEASE_TAG', 'KAGGLE_KERNEL_RUN_TYPE', 'COLAB_T4_HOME', 'X']),
                       st.text(st.characters(blacklist_categories=('Cs',), blacklist_characters='\x00'),
                               max_size=8)))
def test_runtime_and_state_dir(env):
    unset = dict.fromkeys(['COLAB_RELEASE_TAG', 'KAGGLE_KERNEL_RUN_TYPE', 'COLAB_T4_HOME', 'X'])
    with fake_env({**unset, **env}, {'google.colab': None}):
        assert runtime() in ('colab', 'kaggle', 'local')
        answers(lambda: state_dir(create=False), 'COLAB_T4_HOME')

@PROPS
@given(st.one_of(st.text(max_size=20), st.sampled_from(readings())))
def test_reading(name): answers(lambda: reading(name), repr(name))

@PROPS
@given(st.one_of(st.integers(-3, 10), anything))
def test_budget(per_day):
    answers(lambda: Budget('budget.json', per_day=per_day), 'per_day')

@PROPS
@given(st.one_of(st.none(), st.sampled_from(['T4', 'A100']), st.lists(card_names, max_size=2), anything),
       st.one_of(st.integers(-2, 6), anything),
       st.lists(st.sampled_from(['Tesla T4', 'Tesla K80', 'NVIDIA H200', 'Mystery GPU']), max_size=2))
def test_ensure_gpu_outside_colab(want, budget, names):
    with fake_nvml([{**t4_reading(), 'name': n} for n in names]):
        r = answers(lambda: ensure_gpu(want, budget=budget, ledger=False),
                    'want=', 'budget=', 'Wanted', 'is not in')
    if not isinstance(r, Exception): assert [g.name for g in r] == names

@PROPS
@given(st.one_of(st.dictionaries(st.text(max_size=4), st.just(lambda: None), max_size=3), anything),
       st.one_of(st.integers(-1, 3), anything), st.one_of(st.integers(-1, 2), anything),
       st.one_of(st.sampled_from(['cpu', 'auto']), anything))
def test_benchmark(variants, repeats, warmup, device):
    if device == 'auto': device = 'cpu'
    answers(lambda: benchmark(variants, repeats=repeats, warmup=warmup, device=device),
            'variants', 'repeats', 'warmup', 'device')

@PROPS
@given(st.text(max_size=12), st.floats())
def test_record(name, v):
    "A blank name is refused by name; otherwise the figures read back as written (NaN as NaN)."
    with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(os.environ):
        out = os.environ['COLAB_T4_BENCH_OUT'] = f'{tmp}/bench.jsonl'
        if not name.strip():
            with pytest.raises(ValueError, match='name='): record(name, v=v)
            return
        assert record(name, v=v) == out
        back = json.loads(Path(out).read_text())
    assert back['name'] == name and (back['v'] == v or math.isnan(v) and math.isnan(back['v']))

@PROPS
@given(st.one_of(st.integers(-5, 2**70), st.floats(), st.text(max_size=20), st.none()))
def test_decode_reasons(mask): answers(lambda: decode_reasons(mask), 'mask=')

@PROPS
@given(st.dictionaries(st.sampled_from(['index', 'name', 'utilization.gpu', 'memory.used', 'power.draw',
                                        'clocks_event_reasons.active']),
                       st.text(max_size=20)))
def test_smi_values(row): assert len(smi_values(row)) == len(FIELDS)

field = st.one_of(st.floats(min_value=-1e6, max_value=1e6), st.just(float('nan')), st.integers(0, 10**6))
sample = st.builds(lambda t, g, vals, thr: (t, g, *vals[:9], thr, *vals[9:]),
                   st.floats(1.7e9, 1.9e9), st.integers(0, 3),
                   st.lists(field, min_size=11, max_size=11), st.one_of(st.integers(0, 2**40), st.just(float('nan'))))

@PROPS
@given(st.lists(sample, max_size=6))
def test_samples_tables(rows):
    df = samples_df(rows, {0: 'NVIDIA H200'})
    assert len(df) == len(rows) and list(df.columns) == ['gpu', 'name', *FIELDS, 'reasons']
    summarize(df); throttle_shares(df)
    assert len(status_text(rows).splitlines()) == len(rows)

@PROPS
@given(st.text(max_size=200))
def test_read_csv_of_anything(tmp_path, text):
    p = tmp_path/'x.csv'; p.write_text(text)
    answers(lambda: read_csv(p), str(p))

@PROPS
@given(st.one_of(st.floats(), anything), st.one_of(st.integers(-2, 5), anything))
def test_monitor_settings(interval, max_rows):
    answers(lambda: GPUMonitor(interval=interval, max_rows=max_rows), 'interval', 'max_rows')

@PROPS
@given(st.one_of(st.floats(), st.integers(-5, 5)), st.one_of(st.floats(), st.integers(-5, 5)),
       st.one_of(st.floats(), anything))
def test_ledger_add(tmp_path, start, end, busy):
    led = UsageLedger(tmp_path/'l.jsonl')
    answers(lambda: led.add(start, end, 'Tesla T4', busy), 'start=', 'end=', 'busy_h=')

@PROPS
@given(anything)
def test_ledger_path(path):
    answers(lambda: UsageLedger(path if path is not None else 'l.jsonl'), 'path=', 'Cannot write')

@PROPS
@given(st.one_of(anything, st.dictionaries(st.sampled_from(['streak_h', 'pause_h', 'session_cap_h', 'nope']), anything,
                                           max_size=2)),
       st.one_of(st.none(), st.floats()))
def test_advice_limits(tmp_path, limits, open_min):
    led = UsageLedger(tmp_path/'adv.jsonl')
    led.add(1.8e9 - 7200, 1.8e9 - 60, 'Tesla T4', 1.0, session='s')
    with fake_clock(lambda: 1.8e9):
        answers(lambda: advice(led, open_min=10 if open_min is None else open_min, limits=limits),
                'limits', 'open_min=')

paths = st.text(st.sampled_from('ab./\x00 '), max_size=8)

@PROPS
@given(st.one_of(st.none(), paths), st.one_of(st.none(), paths.map(lambda p: p + '.png'), paths),
       st.one_of(st.none(), paths))
def test_check_outputs(tmp_path, csv, plot, ledger):
    old = os.getcwd(); os.chdir(tmp_path)
    named = [str(Path(p)) for p in (csv, plot, ledger) if p is not None]
    try: answers(lambda: check_outputs(csv, plot, ledger), *named, 'usage ledger', 'csv=', 'plot_path=', 'ledger=')
    finally: os.chdir(old)

number = st.one_of(st.floats(), st.integers(-3, 3)).map(str) | st.sampled_from(['', 'x', '1e400', 'nan'])

@settings(PROPS, max_examples=30)
@given(st.lists(st.tuples(st.sampled_from(['--interval', '--duration', '--every', '--plot', '--csv']), number),
                max_size=3))
def test_cli_monitor_arguments(tmp_path, opts):
    "Any `colab-t4 monitor` options: 1 with a message (a bad value, or no GPU here), or argparse's 2."
    path = lambda o, v: str(tmp_path/v) if o in ('--plot', '--csv') else v
    argv = ['monitor', '--duration', '0.05'] + [x for o, v in opts for x in (o, path(o, v))]
    out, err = io.StringIO(), io.StringIO()
    old, env = os.getcwd(), dict(os.environ)
    os.chdir(tmp_path); os.environ['PATH'] = ''
    try:
        with missing_nvml(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try: rc = main(argv)
            except SystemExit as e: rc = e.code
    finally: os.chdir(old); os.environ.clear(); os.environ.update(env)
    assert rc in (1, 2), (argv, rc)
    if rc == 1:
        msg = err.getvalue()
        assert msg.startswith('colab-t4 monitor: ') and 'Traceback' not in msg, msg
    if rc == 2: assert 'usage: colab-t4 monitor' in err.getvalue()
    assert out.getvalue() == '', out.getvalue()

@settings(PROPS, max_examples=25)
@given(st.lists(card_names, min_size=1, max_size=3), st.one_of(st.integers(-2, 6).map(str), st.text(max_size=4)))
def test_cli_ensure_arguments(want, budget):
    err = io.StringIO()
    with missing_nvml(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try: rc = main(['ensure', '--budget', budget, '--want', *want])
        except SystemExit as e: rc = e.code
    assert rc in (0, 1, 2), (want, budget, rc)
    if rc == 1: assert err.getvalue().startswith('colab-t4 ensure: ') and 'Traceback' not in err.getvalue()
