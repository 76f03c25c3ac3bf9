"""The `colab-t4` command, end to end, as a user runs it."""
import json, os
import pytest
from conftest import colab_t4, nvml_works, python
from colab_t4_nb.allocation import reading

def test_info_json_lists_runtime_and_gpus(cpu_env):
    r = colab_t4(['info', '--json'], cpu_env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d['runtime'] == 'local' and (len(d['gpus']) > 0) == nvml_works(), d
    for g in d['gpus']: assert g['name'] and 'spec' in g
    assert (len(d['gpus']) > 0) == (len(d['why']) < 4), d  # every source that found no GPU says why

@pytest.mark.skipif(nvml_works(), reason='a real GPU answers here')
def test_info_on_cpu_says_no_gpu(cpu_env):
    r = colab_t4(['info'], cpu_env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'No NVIDIA GPU found (nvml: NVML Shared Library Not Found; torch: ' in r.stdout, r.stdout
    assert 'nvidia-smi: not on the PATH). In Colab: Runtime > Change runtime type > T4 GPU' in r.stdout, r.stdout
    assert json.loads(colab_t4(['info', '--json'], cpu_env).stdout)['gpus'] == []

@pytest.mark.skipif(nvml_works(), reason='a real GPU answers here')
def test_info_falls_back_to_nvidia_smi(cpu_env, tmp_path):
    "No NVML, no CUDA in torch: the recorded Colab T4 printed by a stand-in `nvidia-smi` is found and matched."
    table = reading('t4_colab_nvidia-smi_2023.txt')
    (tmp_path/'table.txt').write_text(table)
    smi = tmp_path/'nvidia-smi'
    smi.write_text(f'#!/bin/sh\ncase "$*" in *--query-gpu*) echo \'Field "compute_cap" is not a valid field to query.\'; exit 2;; esac\ncat {tmp_path}/table.txt\n')
    smi.chmod(0o755)
    env = {**cpu_env, 'PATH': f"{tmp_path}{os.pathsep}{cpu_env['PATH']}", 'TF_CPP_MIN_LOG_LEVEL': '3'}
    d = json.loads(colab_t4(['info', '--json'], env).stdout)
    g, = d['gpus']
    assert (g['name'], g['source'], g['mem_total'] // 2**20, g['spec']['key'], g['native_bf16']) == ('Tesla T4', 'nvidia-smi', 15360, 'T4', False)
    text = colab_t4(['info'], env).stdout
    assert 'GPU 0: Tesla T4  (read from nvidia-smi)' in text and 'spec      T4: Turing, 40 SMs' in text, text

def test_ensure_refuses_unknown_and_missing_cards(cpu_env):
    r = colab_t4(['ensure', '--want', 'T5'], cpu_env)
    assert r.returncode == 1 and "'T5' is not in the spec table. Known cards: K80" in r.stderr, r.stderr
    if not nvml_works():
        r = colab_t4(['ensure', '--want', 'T4'], cpu_env)
        assert r.returncode == 1 and 'Wanted T4, but this local machine has no GPU' in r.stderr, r.stderr
    assert 'Traceback' not in r.stderr

@pytest.mark.skipif(nvml_works(), reason='a real GPU answers here')
def test_ensure_names_the_cards_once_and_the_option(cpu_env, tmp_path):
    "A recorded Colab K80 printed by a stand-in `nvidia-smi`: the way out is the command's option, not Python."
    (tmp_path/'table.txt').write_text(reading('k80_colab_nvidia-smi_2022.txt'))
    smi = tmp_path/'nvidia-smi'
    smi.write_text(f'#!/bin/sh\ncase "$*" in *--query-gpu*) exit 2;; esac\ncat {tmp_path}/table.txt\n')
    smi.chmod(0o755)
    env = {**cpu_env, 'PATH': f"{tmp_path}{os.pathsep}{cpu_env['PATH']}", 'TF_CPP_MIN_LOG_LEVEL': '3'}
    r = colab_t4(['ensure', '--want', 'T4', 'A100'], env)
    assert r.returncode == 1 and r.stderr == ('colab-t4 ensure: Wanted T4 or A100, '
                                              'but this local machine has Tesla K80 (11 GiB). '
                                              'Run this where T4 or A100 is available, or accept the card you have: '
                                              'colab-t4 ensure --want K80.\n'), r.stderr
    assert colab_t4(['ensure', '--want', 'K80'], env).returncode == 0

def test_home_expanded_and_a_pipe_refused(cpu_env, tmp_path):
    "`~` that the shell left alone is expanded once; a named pipe (reading it would wait for a writer) is refused, saying so."
    os.mkfifo(tmp_path/'pipe')
    for args in (['plan', '--config', '~/pipe'], ['ensure', '--budget-path', '~/pipe']):
        r = colab_t4(args, {**cpu_env, 'HOME': str(tmp_path)}, timeout=60)
        said = f"{args[1]}='{tmp_path/'pipe'}' is a named pipe, not a regular file: pass the path of a regular file instead."
        assert r.returncode == 1 and r.stderr == f'colab-t4 {args[0]}: {said}\n', r.stderr

def test_version(cpu_env):
    from colab_t4_nb import __version__
    r = colab_t4(['--version'], cpu_env)
    assert r.returncode == 0 and r.stdout == f'colab-t4 {__version__}\n', r.stdout + r.stderr

def test_help_lists_the_subcommands(cpu_env):
    r = colab_t4(['--help'], cpu_env)
    assert r.returncode == 0 and 'info' in r.stdout and 'ensure' in r.stdout

PROBE = '''import sys, time
t = time.perf_counter()
from colab_t4_nb.cli import main
try: rc = main(sys.argv[1:])
except SystemExit as e: rc = e.code
print(f"torch imported: {'torch' in sys.modules}; status {rc}; {time.perf_counter() - t:.2f} s", file=sys.stderr)
'''

@pytest.mark.parametrize('args, status', [(['--version'], 0), (['--help'], 0), (['monitor', '--help'], 0),
                                          (['frobnicate'], 2), (['monitor', '--interval', 'soon'], 2), ([], 2)])
def test_quick_answers_import_no_torch(args, status, cpu_env):
    "--version, --help and argument errors answer without importing PyTorch (about 3 s of a cold start)."
    r = python(PROBE, cpu_env, args, timeout=120)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f'torch imported: False; status {status};'), r.stdout + r.stderr
    if status == 2: assert 'usage: colab-t4' in r.stderr, r.stderr
    else: assert 'colab-t4' in r.stdout, r.stdout
