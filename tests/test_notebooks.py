"""Every notebook runs top to bottom as Colab's "Run all" runs it: opened alone in an empty folder, on a
CPU-only runtime, in a fresh environment where `colab_t4_nb` is not installed, so its first cell has to
install the package. The install cell is pointed at a wheel built from this checkout instead of
GitHub; the environment sees every other installed package (PyTorch, pandas...), as Colab's does."""
import os, re, shutil, site, subprocess, sys, sysconfig
from pathlib import Path
import pytest
from conftest import ROOT, NBS, layered_venv, notebooks

GITHUB = 'git+https://github.com/colab-t4-nb/colab_t4_nb'

@pytest.fixture(scope='module')
def others(tmp_path_factory):
    "A folder that shows every installed package except colab_t4_nb."
    d = tmp_path_factory.mktemp('site')
    for p in Path(sysconfig.get_paths()['purelib']).iterdir():
        if p.name.startswith(('colab_t4_nb', '__editable__', '__editable___colab')) or p.suffix == '.pth': continue
        (d/p.name).symlink_to(p)
    return d

def fresh_python(tmp:Path, others:Path)->Path:
    return layered_venv(tmp/'venv', others)  # pip, like the rest, comes from `others`

def test_fresh_environment_lacks_the_package(tmp_path, others, cpu_env):
    py = fresh_python(tmp_path, others)
    env = {k: v for k, v in cpu_env.items() if k != 'VIRTUAL_ENV'}
    r = subprocess.run([str(py), '-c', 'import importlib.util as u; print(u.find_spec("colab_t4_nb"), u.find_spec("torch") is not None)'],
                       cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.stdout.split() == ['None', 'True'], r.stdout + r.stderr

@pytest.mark.parametrize('nb', notebooks())
def test_run_all_alone_in_a_fresh_cpu_runtime(nb, tmp_path, wheel, others, cpu_env):
    py = fresh_python(tmp_path, others)
    work = tmp_path/'content'; work.mkdir()
    text = (NBS/nb).read_text()
    assert GITHUB in text, f'{nb}: no install cell pointing at {GITHUB}'
    (work/nb).write_text(text.replace(GITHUB, str(wheel)))
    env = {**cpu_env, 'PIP_NO_INDEX': '1', 'PIP_DISABLE_PIP_VERSION_CHECK': '1'}
    env.pop('VIRTUAL_ENV', None)  # else IPython puts the activated environment's packages on the path
    r = subprocess.run([str(py), str(ROOT/'tools'/'run_nbs.py'), '--save', str(work/nb)], cwd=work, env=env,
                       capture_output=True, text=True, timeout=1800)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f'{nb} failed under Run all, alone, in a fresh CPU runtime:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}'
    assert 'Traceback' not in out, out[-6000:]
    installed = subprocess.run([str(py), '-c', 'import colab_t4_nb; print(colab_t4_nb.__file__)'], cwd=tmp_path,
                               env=env, capture_output=True, text=True).stdout
    assert str(tmp_path/'venv') in installed, f'{nb}: the install cell did not install the package ({installed!r})'

def test_every_page_has_the_same_install_cell():
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'install_cell.py'), '--check'], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr

RUN_CELL = '''import sys
from IPython.core.interactiveshell import InteractiveShell
r = InteractiveShell.instance().run_cell(sys.stdin.read())
print('STOPPED:', type(r.error_in_exec).__name__, file=sys.stderr)
'''

@pytest.mark.parametrize('src, cause', [('/nowhere/colab_t4_nb-0.0.1-py3-none-any.whl', 'ERROR: '),
                                        ('git+https://github.com/colab-t4-nb/no-such-repository', 'fatal: ')])
def test_failed_install_stops_with_its_cause_in_one_line(src, cause, tmp_path, others, cpu_env):
    "A bad address, or no network (none reaches GitHub here): the cell stops and says why in one line."
    import importlib.util
    spec = importlib.util.spec_from_file_location('install_cell', ROOT/'tools'/'install_cell.py')
    tool = importlib.util.module_from_spec(spec); spec.loader.exec_module(tool)
    cell = tool.source().replace(GITHUB, src)
    py = fresh_python(tmp_path, others)
    env = {k: v for k, v in cpu_env.items() if k != 'VIRTUAL_ENV'}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK='1', GIT_TERMINAL_PROMPT='0')
    r = subprocess.run([str(py), '-c', RUN_CELL], input=cell, cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.stderr.strip().splitlines()[-1] == 'STOPPED: InstallError', r.stdout + r.stderr
    shown = r.stdout.strip().splitlines()
    assert len(shown) == 1 and shown[0].startswith(f'InstallError: pip could not install {src}: {cause}'), r.stdout
