"""`colab-t4 bench` end to end through `bench_command`, in a fresh process as a user runs it."""
import json
import pytest
import pandas as pd
from conftest import python

COLUMNS = ['card', 'torch', 'precision', 'workload', 'metric', 'value', 'unit', 'note',
           't4_estimate', 't4_low', 't4_high', 't4_method']

def bench(args, env, timeout=300):
    code = ('from colab_t4_nb.benchmarks import bench_command; '
            f'raise SystemExit(bench_command({list(map(str, args))!r}))')
    return python(code, env, timeout=timeout)

def test_quick_writes_table_csv_and_png(cpu_env, tmp_path):
    out = tmp_path/'results'
    r = bench(['--quick', '--out', out], cpu_env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert 'No CUDA GPU: running small CPU shapes' in r.stderr and 'iterations/s' in r.stdout, r.stdout
    df = pd.read_csv(out/'bench.csv')
    assert list(df.columns) == COLUMNS
    assert {'unet', 'bert'} <= set(df.workload) and df.note.str.contains('CPU quick shapes').all()
    assert {'iterations/s', 'speed-up vs fp32', 'attention speed-up vs fp32, same code', 'embedding throughput'} <= set(df.metric)
    assert not {'attention speed-up vs fp32', 'of datasheet peak'} & set(df.metric)  # meaningless on a CPU: dropped
    timed = df[df.metric == 'iterations/s']
    assert timed.t4_method.str.startswith('T4 model').all() and (timed.t4_low <= timed.t4_high).all()
    assert 'note' in r.stdout.splitlines()[1] and 'CPU quick shapes' in r.stdout
    assert (df[df.metric == 'iterations/s'].value > 0).all()
    png = (out/'bench.png').read_bytes()
    assert png[:8] == b'\x89PNG\r\n\x1a\n' and len(png) > 10_000

def test_json_output_and_nothing_overwritten(cpu_env, tmp_path):
    (tmp_path/'bench.csv').write_text('kept\n')
    r = bench(['--quick', '--models', 'unet', '--out', tmp_path, '--json'], cpu_env)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(r.stdout)
    assert rows and {row['workload'] for row in rows} == {'unet'} and set(rows[0]) == set(COLUMNS)
    assert (tmp_path/'bench.csv').read_text() == 'kept\n'
    assert len(pd.read_csv(tmp_path/'bench-2.csv')) == len(rows)

def test_as_t4_rehearses_every_row(cpu_env, tmp_path):
    r = bench(['--quick', '--models', 'unet', '--out', tmp_path, '--as-t4'], cpu_env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert 'rehearsing a T4' in r.stdout.splitlines()[0], r.stdout[:300]
    df = pd.read_csv(tmp_path/'bench.csv')
    assert df.note.str.contains('rehearsing a T4').all()
    assert set(df.precision) == {'fp32', 'fp16'}, set(df.precision)  # fp16 + GradScaler, as on a T4

def test_unknown_workload_lists_known_ones(cpu_env, tmp_path):
    r = bench(['--quick', '--models', 'unet', 'vgg', '--out', tmp_path], cpu_env)
    assert r.returncode == 2 and "Unknown workload 'vgg'" in r.stderr, r.stderr
    assert 'Known workloads: unet, bert, hf-bert, resnet50' in r.stderr, r.stderr
    assert not list(tmp_path.iterdir())

def test_unwritable_out_fails_before_any_benchmark(cpu_env, tmp_path):
    "A folder under a file, or a named pipe: refused before any benchmark, naming it and what it is."
    import os
    (tmp_path/'file').write_text('x'); os.mkfifo(tmp_path/'pipe')
    for out, said in [(tmp_path/'file'/'sub', f"Cannot write the results to out='{tmp_path/'file'/'sub'}': Not a directory"),
                      (tmp_path/'pipe', f"out='{tmp_path/'pipe'}' is a named pipe, not a folder")]:
        r = bench(['--quick', '--out', out], cpu_env, timeout=60)
        assert r.returncode == 1 and f'colab-t4 bench: {said}' in r.stderr, r.stderr
        assert 'colab-t4 bench:' in r.stderr and 'No CUDA GPU' not in r.stderr and '%|' not in r.stderr

def test_bad_flag_is_a_usage_error(cpu_env):
    r = bench(['--fast'], cpu_env, timeout=60)
    assert r.returncode == 2 and 'usage: colab-t4 bench' in r.stderr, r.stderr

@pytest.mark.parametrize('sig, said, where', [('SIGINT', 'Ctrl-C', 'measurement'), ('SIGTERM', 'SIGTERM', 'bar'),
                                              ('SIGHUP', 'SIGHUP', 'bar')])
def test_a_stop_keeps_and_saves_the_finished_measurements(cpu_env, tmp_path, sig, said, where):
    ("Ctrl-C, `timeout` (SIGTERM) or a closed notebook (SIGHUP), sent from outside during the second measurement "
     "or while the progress bar moves on to it: no traceback, the first one's rows saved, the message says so; "
     "a second Ctrl-C during the save waits for it.")
    import signal
    code = ('import os, signal, time\n'
            'from colab_t4_nb import benchmarks as B\n'
            'from colab_t4_nb.cli import main\n'
            'def wait(*a, **k): print("waiting", flush=True); time.sleep(60)\n'
            'postfix = B.tqdm.set_postfix_str\n'
            "def bar(self, s, *a, **k): return wait() if s == 'attention' else postfix(self, s, *a, **k)\n"
            f"if {where!r} == 'bar': B.tqdm.set_postfix_str = bar\n"
            'else: B.attention_speedup = wait\n'
            'save = B.save_suite\n'
            'def save_twice(*a, **k):\n'
            '    os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, in the middle of the save\n'
            '    return save(*a, **k)\n'
            'B.save_suite = save_twice\n'
            f"raise SystemExit(main(['bench', '--quick', '--models', 'bert', '--out', {str(tmp_path)!r}]))")
    p = python(code, cpu_env, popen=True)
    try:
        assert p.stdout.readline() == 'waiting\n', p.stderr.read()[-3000:]
        p.send_signal(getattr(signal, sig))
        out, err = p.communicate(timeout=120)
    finally: p.kill()
    assert p.returncode == 130 and 'Traceback' not in err, (p.returncode, err[-3000:])
    df = pd.read_csv(tmp_path/'bench.csv')
    assert set(df.workload) == {'bert'} and 'iterations/s' in set(df.metric), df
    assert f'stopped by {said} during attention: the {len(df)} row(s) measured before it are saved in' in err, err
    assert (tmp_path/'bench.png').exists() and 'iterations/s' in out, out
