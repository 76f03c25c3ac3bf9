"""`colab-t4 plan` end to end, as a user runs it, and the CPU side of tools/plan_check.py."""
import json, subprocess, sys, time
from pathlib import Path
from conftest import ROOT, colab_t4

KEYS = {'fits', 'peak_gib', 'largest_batch', 'step_ms', 'run_hours', 'sessions'}

def test_plan_gpt2_json_from_a_fresh_interpreter(cpu_env):
    ("On a CPU, in a fresh interpreter: the answer parses and has the keys. It comes in about 5 s "
     "on a quiet 2-core machine, start-up included; the bound leaves room for a loaded CI machine.")
    t = time.perf_counter()
    r = colab_t4(['plan', '--model', 'gpt2', '--samples', '100000', '--epochs', '2', '--json'], cpu_env)
    wall = time.perf_counter() - t
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert KEYS <= set(d), d
    assert d['fits'] and d['largest_batch'] >= 8 and d['sessions'] >= 1 and d['step_ms'] > 0, d
    assert abs(d['peak_gib'] - sum(d['parts_gib'].values())) < 0.01, d
    assert wall < 30, f'colab-t4 plan --model gpt2 took {wall:.1f} s'

def test_plan_table_and_errors(cpu_env, tmp_path):
    "The table starts with the verdict; a bad value is one line on stderr and status 1, a missing file too."
    r = colab_t4(['plan', '--model', 't5-small', '--seq', '128', '--batch', '4', '--optimizer', 'sgd'], cpu_env)
    assert r.returncode == 0 and r.stdout.startswith('Fits a T4 at batch 4'), r.stdout + r.stderr
    assert 't5 for seq2seq, 128 tokens' in r.stdout, r.stdout
    r = colab_t4(['plan', '--model', 'gpt2', '--lora-rank', '0'], cpu_env)
    assert r.returncode == 1 and r.stderr.startswith('colab-t4 plan: lora must be'), r.stderr
    assert 'Traceback' not in r.stderr
    r = colab_t4(['plan', '--config', str(tmp_path/'config.json')], cpu_env)
    assert r.returncode == 1 and 'no such file' in r.stderr, r.stderr

def test_plan_check_dry_run(cpu_env, tmp_path):
    "tools/plan_check.py without CUDA: the setups build on meta tensors and each gets a plan and accelerate's figure."
    out = tmp_path/'check.jsonl'
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'plan_check.py'), str(out), '--dry-run',
                        '--only', 'gpt2-ckpt', 'vit-base', 'unet'],
                       capture_output=True, text=True, env=cpu_env, timeout=300)
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    assert [x['setup'] for x in rows] == ['gpt2-ckpt', 'vit-base', 'unet'], r.stdout + r.stderr
    for x in rows:
        if x['setup'] == 'unet' and 'diffusers is not installed' in x.get('error', ''): continue
        assert 'error' not in x, x
        assert x['plan_alloc_gib'] <= x['plan_reserved_gib'] < x['plan_gib'], x
        assert x['largest_planned_cap'] >= 1 and x['accelerate_gib'] > 0, x
    assert r.stdout.splitlines()[0].split()[:3] == ['setup', 'measured', 'plan'], r.stdout

def test_plan_check_refuses_without_cuda_or_with_unknown_setups(cpu_env, tmp_path):
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'plan_check.py'), str(tmp_path/'x.jsonl'), '--dry-run',
                        '--only', 'gpt5'], capture_output=True, text=True, env=cpu_env, timeout=120)
    assert r.returncode == 2 and "unknown setups ['gpt5']" in r.stderr, r.stderr

def test_plan_check_replans_a_recorded_run(cpu_env, tmp_path):
    "--replan: a recorded GPU run's measurements beside plans made now, on a CPU."
    rec = ROOT/'colab_t4_nb'/'files'/'results'/'run18.jsonl'
    out = tmp_path/'replan.jsonl'
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'plan_check.py'), str(out), '--replan', str(rec),
                        '--only', 'gpt2-ckpt', 'vit-base'], capture_output=True, text=True, env=cpu_env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    old = {x['setup']: x for x in map(json.loads, rec.read_text().splitlines())}
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    assert [x['setup'] for x in rows] == ['gpt2-ckpt', 'vit-base'], rows
    for x in rows:
        assert x['measured_gib'] == old[x['setup']]['measured_gib'] and x['measured_in'] == 'run18.jsonl', x
        assert 'torch' in x['replanned'] and abs(x['error_pct']) < 100, x
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'plan_check.py'), str(out), '--replan', str(tmp_path/'no.jsonl')],
                       capture_output=True, text=True, env=cpu_env, timeout=120)
    assert r.returncode == 2 and 'no such file' in r.stderr, r.stderr
