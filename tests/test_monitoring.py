"""GPUMonitor and UsageLedger where a notebook cell cannot look: interpreter exit with the
thread still running, kill -9 in the middle of a run, several processes writing one ledger."""
import json, signal, time
from pathlib import Path
import pytest
from conftest import ROOT, python

def test_running_monitor_never_blocks_exit(cpu_env, tmp_path):
    "A monitor left running at exit: the process ends at once and the atexit hook writes the pending rows."
    p = python(f'''
        import time
        from colab_t4_nb.monitoring import GPUMonitor
        from colab_t4_nb.testing import fake_nvml, h200_reading
        with fake_nvml([h200_reading()]):
            GPUMonitor(interval=0.05, csv={str(tmp_path/'gpu.csv')!r}, every={{'flush': 3600}}).start()
            time.sleep(0.5)
        print('leaving')
        ''', cpu_env, popen=True)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0 and out == 'leaving\n' and 'Traceback' not in err, err
    from colab_t4_nb.monitoring import read_csv
    assert len(read_csv(tmp_path/'gpu.csv')) >= 3

def test_stuck_nvml_call_does_not_hold_exit(cpu_env):
    "Even a thread stuck inside an NVML call does not keep the interpreter alive: stop() gives up after its timeout."
    p = python('''
        import time
        from colab_t4_nb.monitoring import GPUMonitor
        from colab_t4_nb.testing import fake_nvml, h200_reading
        with fake_nvml([h200_reading()]) as nv:
            nv.nvmlDeviceGetTemperature = lambda h, s: time.sleep(600)
            mon = GPUMonitor(interval=0.05).start()
            time.sleep(0.3)
        print('leaving')
        ''', cpu_env, popen=True)
    t = time.monotonic()
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0 and out == 'leaving\n', err
    assert time.monotonic() - t < 30 and 'did not end within 2 s' in err, err

def test_csv_survives_kill_9(cpu_env, tmp_path):
    "kill -9 mid-run loses at most the last flush interval; the file reads back, and the next run appends to it."
    csv = tmp_path/'gpu.csv'
    code = f'''
        import time
        from colab_t4_nb.monitoring import GPUMonitor
        from colab_t4_nb.testing import fake_nvml, h200_reading
        with fake_nvml([h200_reading()]):
            GPUMonitor(interval=0.02, csv={str(csv)!r}, every={{'flush': 0.1}}).start()
            print('started', flush=True); time.sleep(600)
        '''
    p = python(code, cpu_env, popen=True)
    assert p.stdout.readline() == 'started\n'
    time.sleep(1.5)
    p.send_signal(signal.SIGKILL); p.wait(timeout=60)
    from colab_t4_nb.monitoring import read_csv, CSV_COLUMNS
    n = len(read_csv(csv))
    assert n >= 10, n
    p = python(code, cpu_env, popen=True); assert p.stdout.readline() == 'started\n'; time.sleep(1.0)
    p.send_signal(signal.SIGKILL); p.wait(timeout=60)
    lines = csv.read_text().splitlines()
    assert lines.count(','.join(CSV_COLUMNS)) == 1 and len(read_csv(csv)) > n

def test_ledger_concurrent_processes(cpu_env, tmp_path):
    "Four processes appending to one ledger at once: every record is there and every line is whole."
    path = tmp_path/'ledger.jsonl'
    procs = [python(f'''
        from colab_t4_nb.ledger import UsageLedger
        led = UsageLedger({str(path)!r})
        for j in range(50): led.add(1.8e9, 1.8e9 + 60 * j, 'Tesla T4', 0.01 * j, session='p{k}')
        ''', cpu_env, popen=True) for k in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    recs = [json.loads(l) for l in path.read_text().splitlines()]
    assert len(recs) == 200 and {r['session'] for r in recs} == {'p0', 'p1', 'p2', 'p3'}
    from colab_t4_nb.ledger import UsageLedger
    s = UsageLedger(path).sessions()
    assert len(s) == 4 and (s.hours.round(4) == round(49 / 60, 4)).all()

def test_module_functions_and_methods():
    """`summarize`, `throttle_shares` and `plot_samples` take a table of samples; the monitor's `summary`,
    `throttle_share` and `plot` are the same for its own samples."""
    from colab_t4_nb.monitoring import GPUMonitor, plot_samples, samples_df, summarize, throttle_shares
    rows = [(1.8e9 + k, 0, 100.0, 23.0, 1500.0, 143771.0, 59.0, 688.0, 700.0, 1500.0, 3201.0, 4, float('nan'), float('nan'))
            for k in range(3)]
    df = samples_df(rows, {0: 'NVIDIA H200'})
    assert summarize(df).loc[(0, 'NVIDIA H200', 'power_w'), 'max'] == 688.0
    assert throttle_shares(df).loc[0].to_dict() == {'SwPowerCap': 1.0}
    assert plot_samples(df).axes[0].get_ylabel() == 'utilization, %'
    assert all(callable(getattr(GPUMonitor, m)) for m in ('summary', 'throttle_share', 'plot'))

def test_show_doc_in_page_order(tmp_path, nb=ROOT/'nbs'/'06a_monitoring.ipynb'):
    """The docs build runs the page's cells in order and documents each definition where it stands: `GPUMonitor`'s
    signature must resolve with only what is defined above it."""
    import runpy
    from nbdev.showdoc import show_doc
    code = []
    for c in json.loads(Path(nb).read_text())['cells']:
        s = ''.join(c['source'])
        if c['cell_type'] != 'code' or not s.startswith('#| export'): continue
        code.append(s)
        if 'class GPUMonitor' in s: break
    (tmp_path/'upto_monitor.py').write_text('\n'.join(code))
    ns = runpy.run_path(str(tmp_path/'upto_monitor.py'))
    assert 'ledger:' in str(show_doc(ns['GPUMonitor']))

def test_a_pipe_to_read_is_refused_not_waited_on(cpu_env, tmp_path):
    "A named pipe as the CSV to read or the monitor's CSV: refused at once, naming it (a plain open waits for a writer)."
    r = python(f'''
        import os
        from pathlib import Path
        from colab_t4_nb.monitoring import GPUMonitor, ArgumentError, read_csv
        from colab_t4_nb.testing import fake_nvml, h200_reading
        pipe = Path({str(tmp_path)!r})/'pipe'
        os.mkfifo(pipe)
        with fake_nvml([h200_reading()]):
            for call in (lambda: read_csv(pipe), lambda: GPUMonitor(csv=pipe).start().stop()):
                try: call(); print('accepted')
                except ArgumentError as e: print(e)
        ''', cpu_env, timeout=60)
    said = f"'{tmp_path/'pipe'}' is a named pipe, not a regular file: pass the path of a regular file instead."
    assert r.returncode == 0 and r.stdout.splitlines() == [f'path={said}', f'csv={said}'], r.stdout + r.stderr
