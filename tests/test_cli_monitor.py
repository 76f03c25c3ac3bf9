"""`colab-t4 monitor`, end to end, as a user runs it: without a GPU, and with NVML missing but a
stand-in `nvidia-smi` on the PATH that prints the recorded H200 query CSV."""
import json, os, shutil
from pathlib import Path
import pytest
from conftest import colab_t4, nvml_works
from colab_t4_nb.allocation import reading

no_real_gpu = pytest.mark.skipif(nvml_works(), reason='a real GPU answers here')

@pytest.fixture
def smi_env(cpu_env, tmp_path):
    "NVML missing (the real library finds no driver here), a stand-in nvidia-smi printing the recorded busy H200."
    d = tmp_path/'bin'; d.mkdir()
    (d/'query.csv').write_text(reading('h200_query_busy.csv'))
    (d/'table.txt').write_text(reading('h200_nvidia-smi_busy.txt'))
    smi = d/'nvidia-smi'
    smi.write_text(f'#!/bin/sh\ncase "$*" in *--query-gpu*) cat {d}/query.csv;; *) cat {d}/table.txt;; esac\n')
    smi.chmod(0o755)
    return {**cpu_env, 'PATH': f"{d}{os.pathsep}{cpu_env['PATH']}"}

@no_real_gpu
def test_monitor_on_cpu_says_no_gpu(cpu_env, tmp_path):
    r = colab_t4(['monitor', '--interval', '0.2', '--duration', '1', '--csv', str(tmp_path/'gpu.csv'), '--plot', str(tmp_path/'gpu.png')], cpu_env, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout == '' and r.stderr.count('\n') == 1, r.stdout + r.stderr  # one line, on stderr
    assert r.stderr.startswith('colab-t4 monitor: No NVIDIA GPU found (nvml: NVML Shared Library Not Found; '
                               'nvidia-smi: not on the PATH): nothing was sampled, and no CSV, plot'), r.stderr
    assert not (tmp_path/'gpu.csv').exists() and not (tmp_path/'gpu.png').exists()

@no_real_gpu
def test_monitor_falls_back_to_nvidia_smi(smi_env, tmp_path):
    from colab_t4_nb.monitoring import read_csv
    csv, png = tmp_path/'out'/'gpu.csv', tmp_path/'gpu.png'
    r = colab_t4(['monitor', '--interval', '0.2', '--duration', '1.5', '--every', '0.5', '--csv', str(csv), '--plot', str(png)], smi_env, timeout=120)
    assert r.returncode == 0 and 'Traceback' not in r.stderr, r.stdout + r.stderr
    out = r.stdout.splitlines()
    assert out[0] == 'Monitoring NVIDIA H200 every 0.2 s through nvidia-smi for 1.5 s.', r.stdout
    assert 'GPU 0 NVIDIA H200: 100% busy, 0.9/140.4 GiB, 59 °C, 688/700 W, SM 1500 MHz, SwPowerCap' in out, r.stdout
    assert any(l.split()[-3:] == ['power_w', '688.5', '688.5'] for l in out), r.stdout
    df = read_csv(csv)
    assert 3 <= len(df) <= 15, len(df)
    assert set(df.name) == {'NVIDIA H200'} and set(df.reasons) == {'SwPowerCap'} and set(df.util_gpu) == {100.0}
    assert png.read_bytes()[:4] == b'\x89PNG'

@no_real_gpu
def test_monitor_appends_and_keeps_the_ledger(smi_env, tmp_path):
    csv, ledger = tmp_path/'gpu.csv', tmp_path/'drive'/'ledger.jsonl'
    for _ in range(2):
        r = colab_t4(['monitor', '--interval', '0.2', '--duration', '0.6', '--csv', str(csv), '--ledger', str(ledger)], smi_env, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
    lines = csv.read_text().splitlines()
    assert sum(l.startswith('time,gpu,name,') for l in lines) == 1 and len(lines) >= 5, lines
    recs = [json.loads(l) for l in ledger.read_text().splitlines()]
    assert len({r['session'] for r in recs}) == 2 and {r['gpu'] for r in recs} == {'NVIDIA H200'}, recs

@no_real_gpu
def test_monitor_refuses_bad_input(smi_env, tmp_path):
    (tmp_path/'file').write_text('x')
    for args, msg in [(['--interval', '0'], 'colab-t4 monitor: interval must be a number > 0 and <= 86400, got interval=0.0.'),
                      (['--interval', '1e-4'], 'colab-t4 monitor: interval=0.0001 s is too short'),
                      (['--duration', '-1'], 'colab-t4 monitor: duration must be a number > 0'),
                      (['--csv', str(tmp_path/'file'/'gpu.csv')], f"colab-t4 monitor: Cannot write the monitor CSV {tmp_path/'file'/'gpu.csv'}"),
                      (['--plot', str(tmp_path/'nowhere'/'gpu.png')], 'colab-t4 monitor: Cannot save the plot to')]:
        r = colab_t4(['monitor', '--duration', '5', *args], smi_env, timeout=120)
        assert r.returncode == 1 and r.stderr.startswith(msg), (args, r.stdout, r.stderr)
        assert 'Traceback' not in r.stderr

@no_real_gpu
@pytest.mark.parametrize('args, msg', [
    (['--plot', '/proc/x.png'], 'colab-t4 monitor: Cannot write the plot /proc/x.png'),
    (['--plot', 'm.txt'], 'colab-t4 monitor: Cannot save the plot as m.txt: name a file ending in one of'),
    (['--csv', '/proc/x/gpu.csv'], 'colab-t4 monitor: Cannot write the monitor CSV /proc/x/gpu.csv'),
    (['--ledger', '/proc/ledger.jsonl'], 'colab-t4 monitor: Cannot write the usage ledger /proc/ledger.jsonl'),
    (['--every', '-1'], 'colab-t4 monitor: every must be a number >= 0')])
def test_bad_outputs_refused_before_looking_for_a_gpu(cpu_env, tmp_path, args, msg):
    "On a machine without a GPU too: bad settings are an error (status 1), not 'No NVIDIA GPU found' and status 0."
    r = colab_t4(['monitor', '--duration', '5', *args], cpu_env, timeout=120)
    assert r.returncode == 1 and r.stderr.startswith(msg) and r.stdout == '', (r.stdout, r.stderr)

@no_real_gpu
def test_negative_every_prints_nothing(smi_env):
    r = colab_t4(['monitor', '--interval', '0.2', '--duration', '1', '--every', '-1'], smi_env, timeout=120)
    assert r.returncode == 1 and r.stdout == '' and 'every=-1.0' in r.stderr, (r.stdout, r.stderr)

@no_real_gpu
def test_samples_saved_elsewhere_when_the_plot_cannot_be_written(smi_env, tmp_path):
    "The plot's folder disappears while sampling: the samples are saved in the state folder, the message says where."
    import time
    out = tmp_path/'out'; out.mkdir()
    args = ['monitor', '--interval', '0.2', '--duration', '3', '--every', '0', '--plot', str(out/'gpu.png')]
    p = colab_t4(args, smi_env, popen=True)
    assert p.stdout.readline().startswith('Monitoring NVIDIA H200'), p.stderr.read()
    shutil.rmtree(out)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 1 and 'Traceback' not in stderr, stdout + stderr
    assert stderr.startswith(f"Could not write the plot {out/'gpu.png'} ("), stderr
    saved = Path(stderr.split(' samples are saved in ')[1].rstrip('.\n'))
    from colab_t4_nb.monitoring import read_csv
    assert saved.parent == Path(smi_env['COLAB_T4_HOME'])/'monitor' and len(read_csv(saved)) >= 3, stderr

@no_real_gpu
def test_csv_removed_mid_run_is_written_again(smi_env, tmp_path):
    "The CSV's folder is removed while sampling: the file is made again with every sample, and the message says so."
    out = tmp_path/'out'; out.mkdir()
    csv = out/'gpu.csv'
    args = ['monitor', '--interval', '0.2', '--duration', '2', '--every', '0', '--csv', str(csv)]
    p = colab_t4(args, smi_env, popen=True)
    assert p.stdout.readline().startswith('Monitoring NVIDIA H200'), p.stderr.read()
    shutil.rmtree(out)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 0 and 'Traceback' not in stderr, stdout + stderr
    from colab_t4_nb.monitoring import read_csv
    assert csv.is_file() and len(read_csv(csv)) >= 5, stdout + stderr
    assert f'{csv} was removed while monitoring; created it again' in stderr, stderr
    assert stdout.rstrip().endswith(f'Samples appended to {csv} (removed during the run: written again 1 time(s))'), stdout

@no_real_gpu
@pytest.mark.parametrize('sig', ['SIGTERM', 'SIGHUP'])
def test_signal_stops_like_ctrl_c(smi_env, tmp_path, sig):
    "`timeout` (SIGTERM) or a closed terminal (SIGHUP): every sample kept, the summary printed, the ledger written."
    import signal, time
    csv, ledger = tmp_path/'gpu.csv', tmp_path/'ledger.jsonl'
    args = ['monitor', '--interval', '0.2', '--every', '0', '--csv', str(csv), '--ledger', str(ledger)]
    p = colab_t4(args, smi_env, popen=True)
    assert p.stdout.readline().startswith('Monitoring NVIDIA H200'), p.stderr.read()
    time.sleep(1.5)
    p.send_signal(getattr(signal, sig))
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 0 and 'Traceback' not in stderr, (p.returncode, stdout, stderr)
    assert stdout.startswith(f'Stopped by {sig}.') and 'util_gpu' in stdout, stdout
    from colab_t4_nb.monitoring import read_csv
    assert len(read_csv(csv)) >= 5 and f'Samples appended to {csv}' in stdout, stdout
    assert ledger.read_text().strip(), 'no ledger record'

@no_real_gpu
def test_home_in_paths_is_expanded_once(smi_env, tmp_path):
    "Paths with ~ that the shell left alone (quoted): checked, written and reported under $HOME, all three."
    from colab_t4_nb.monitoring import read_csv
    home = tmp_path/'home'; home.mkdir()
    args = ['monitor', '--interval', '0.2', '--duration', '1', '--every', '0',
            '--csv', '~/gpu.csv', '--plot', '~/gpu.png', '--ledger', '~/ledger.jsonl']
    r = colab_t4(args, {**smi_env, 'HOME': str(home)}, timeout=120)
    assert r.returncode == 0 and r.stderr == '', r.stdout + r.stderr
    assert f"Plot saved to {home/'gpu.png'}" in r.stdout and f"Samples appended to {home/'gpu.csv'}" in r.stdout, r.stdout
    assert len(read_csv(home/'gpu.csv')) >= 3 and (home/'gpu.png').read_bytes()[:4] == b'\x89PNG'
    assert json.loads((home/'ledger.jsonl').read_text().splitlines()[0])['gpu'] == 'NVIDIA H200'

def test_help_lists_monitor(cpu_env):
    r = colab_t4(['monitor', '--help'], cpu_env, timeout=120)
    assert r.returncode == 0 and all(o in r.stdout for o in ['--interval', '--duration', '--csv', '--plot', '--ledger'])
