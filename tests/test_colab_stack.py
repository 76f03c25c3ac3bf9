"""The package installs into Colab's own software without changing it, and runs there.

A virtual environment is built from `tools/colab_stack.txt`, the versions of Google's published
freeze of Colab's GPU runtime (torch 2.13.0 CPU standing in for Colab's CUDA build, tensorflow-cpu
for tensorflow, no torchvision). It is built once per pin list and kept in `~/.cache/colab_t4_nb` (or
`$COLAB_T4_STACK_CACHE`); it is never changed afterwards. Each run lays a fresh environment over it
(a `.pth` file makes the stack's packages visible), installs the wheel of this checkout there with
Colab's pip, and fails if pip installs another version of any package the stack already had. Then,
in that environment: fastai still imports, the command answers, every page's examples pass
against the installed package, and every page runs alone in a Jupyter kernel (Colab's ipykernel
and IPython) as "Run all" runs it.
"""
import hashlib, json, os, platform, shutil, subprocess, sys
from pathlib import Path
import pytest
from conftest import ROOT, NBS, CACHE, PINS, layered_venv, notebooks, pins

VERSIONS = '''import importlib.metadata as m, json
seen = {}
for d in m.distributions():  # in sys.path order: the first of a name is the one imported
    seen.setdefault(d.metadata['Name'].lower().replace('_', '-'), d.version)
print(json.dumps(seen))'''

def versions(py:Path)->dict:
    r = subprocess.run([str(py), '-c', VERSIONS], capture_output=True, text=True, check=True, cwd=py.parent)
    return json.loads(r.stdout)

def site_packages(venv:Path)->Path:
    return venv/'lib'/f'python{sys.version_info.major}.{sys.version_info.minor}'/'site-packages'

def build_stack()->Path:
    "The stack's environment for this pin list, this Python and this machine: built if missing, then reused."
    key = hashlib.sha256(PINS.read_bytes() + sys.version.encode() + platform.machine().encode()).hexdigest()[:12]
    done = CACHE/f'colab-stack-{key}'
    if (done/'complete.json').exists(): return done
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = CACHE/f'.building-{key}-{os.getpid()}'
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([sys.executable, '-m', 'venv', str(tmp)], check=True)
    r = subprocess.run([str(tmp/'bin'/'python'), '-m', 'pip', 'install', '-q', '--disable-pip-version-check',
                        '-r', str(PINS)], capture_output=True, text=True, timeout=3600)
    if r.returncode == 0:  # see the pin list: a torchvision that cannot load beside the CPU torch
        r = subprocess.run([str(tmp/'bin'/'python'), '-m', 'pip', 'uninstall', '-y', '-q', 'torchvision'],
                           capture_output=True, text=True)
    if r.returncode:
        shutil.rmtree(tmp, ignore_errors=True)
        pytest.fail(f'Colab stack could not be built from {PINS.name}:\n{r.stderr[-4000:]}')
    have = versions(tmp/'bin'/'python')
    off = {k: (v, have.get(k)) for k, v in pins().items() if have.get(k, '').split('+')[0] != v}
    if off:
        shutil.rmtree(tmp, ignore_errors=True)
        pytest.fail(f'pip did not install the pinned versions (pinned, installed): {off}')
    (tmp/'complete.json').write_text(json.dumps(have, indent=1, sort_keys=True))
    for old in CACHE.glob('colab-stack-*'): shutil.rmtree(old, ignore_errors=True)  # other pin lists
    tmp.rename(done)
    return done

@pytest.fixture(scope='module')
def colab(tmp_path_factory, wheel):
    "(python, env, versions before, versions after, pip's output): the wheel installed over the stack."
    stack = build_stack()
    venv = tmp_path_factory.mktemp('colab')/'venv'
    py = layered_venv(venv, site_packages(stack))
    env = {k: v for k, v in os.environ.items() if k not in ('VIRTUAL_ENV', 'PYTHONPATH', 'IN_TEST')}
    env.update(PATH=f"{venv/'bin'}{os.pathsep}{env['PATH']}", CUDA_VISIBLE_DEVICES='', PYTHONNOUSERSITE='1',
               PIP_DISABLE_PIP_VERSION_CHECK='1', MPLBACKEND='Agg', PYTHONUNBUFFERED='1')
    before = versions(py)
    r = subprocess.run([str(py), '-m', 'pip', 'install', str(wheel)], capture_output=True, text=True, env=env,
                       timeout=1800, cwd=venv)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return py, env, before, versions(py), r.stdout + r.stderr

def test_stack_is_colabs(colab):
    py, env, before, after, out = colab
    assert {k: before.get(k, '').split('+')[0] for k in pins()} == pins()

def test_install_changes_no_preinstalled_package(colab):
    py, env, before, after, out = colab
    changed = {k: f'{v} -> {after.get(k)}' for k, v in before.items() if after.get(k) != v}
    assert not changed, f'pip install of the package changed what Colab had: {changed}\n{out[-3000:]}'
    assert after['colab-t4-nb'] and 'colab-t4-nb' not in before
    assert 'incompatible' not in out, out

def test_fastai_still_imports(colab):
    py, env, *_ = colab
    r = subprocess.run([str(py), '-c', 'import fastai, fastcore, fastai.tabular.all; print(fastcore.__version__)'],
                       capture_output=True, text=True, env=env, timeout=600, cwd=py.parent)
    assert r.returncode == 0 and r.stdout.split()[-1] == pins()['fastcore'], r.stderr[-3000:]

def test_command_answers(colab, tmp_path):
    py, env, *_ = colab
    exe = py.parent/'colab-t4'
    r = subprocess.run([str(exe), '--version'], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith('colab-t4 '), r.stderr
    r = subprocess.run([str(exe), 'info', '--json'], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)['runtime'] == 'local', r.stderr[-3000:]

@pytest.mark.parametrize('nb', notebooks())
def test_examples_against_the_package_in_colab_stack(nb, colab, tmp_path):
    py, env, *_ = colab
    shutil.copy(NBS/nb, tmp_path/nb)
    env = {**env, 'COLAB_T4_HOME': str(tmp_path/'state')}
    r = subprocess.run([str(py), str(ROOT/'tools'/'test_installed.py'), str(tmp_path/nb)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f'{nb} in Colab\'s stack:\n{r.stdout[-2000:]}\n{r.stderr[-6000:]}'

@pytest.mark.parametrize('nb', notebooks())
def test_page_runs_alone_in_a_colab_kernel(nb, colab, tmp_path):
    py, env, *_ = colab
    work = tmp_path/'content'; work.mkdir()
    shutil.copy(NBS/nb, work/nb)
    env = {**env, 'COLAB_T4_HOME': str(tmp_path/'state')}
    r = subprocess.run([str(py), str(ROOT/'tools'/'run_kernel.py'), str(work/nb)], cwd=work, env=env,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f'{nb} under Run all in Colab\'s kernel:\n{r.stdout[-2000:]}\n{r.stderr[-6000:]}'
