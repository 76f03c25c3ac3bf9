import os, shutil, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT/'nbs'

PINS = ROOT/'tools'/'colab_stack.txt'  # Colab's published package versions
CACHE = Path(os.environ.get('COLAB_T4_STACK_CACHE') or Path.home()/'.cache'/'colab_t4_nb')  # environments built from them

def notebooks(): return sorted(p.name for p in NBS.glob('*.ipynb'))

def pins()->dict:
    "Colab's version of each package in tools/colab_stack.txt, by normalised name."
    lines = [l.split('#')[0].strip() for l in PINS.read_text().splitlines()]
    return {k.lower().replace('_', '-'): v for k, v in (l.split('==') for l in lines if l)}

@pytest.fixture
def cpu_env(tmp_path):
    "Environment of a CPU-only runtime: CUDA hidden, state kept in a temporary folder."
    env = {**os.environ, 'CUDA_VISIBLE_DEVICES': '', 'COLAB_T4_HOME': str(tmp_path/'state'), 'PYTHONUNBUFFERED': '1'}
    for k in ('IN_TEST', 'COLAB_RELEASE_TAG', 'KAGGLE_KERNEL_RUN_TYPE'): env.pop(k, None)
    return env

def nvml_works()->bool:
    "True where a real NVIDIA driver answers (a GPU machine)."
    r = subprocess.run([sys.executable, '-c', 'import pynvml; pynvml.nvmlInit()'], capture_output=True)
    return r.returncode == 0

@pytest.fixture(scope='session')
def wheel(tmp_path_factory)->Path:
    "A wheel of this checkout, as `pip install` of the repository would build it."
    out = tmp_path_factory.mktemp('wheel')
    r = subprocess.run([sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps', '--no-build-isolation', '-w', str(out),
                        str(ROOT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return next(out.glob('colab_t4_nb-*.whl'))

def layered_venv(dest:Path, sees:Path, python:str=sys.executable)->Path:
    "A venv without pip at `dest` whose Python also sees the packages in `sees` (through a .pth file); its python."
    subprocess.run([python, '-m', 'venv', '--without-pip', str(dest)], check=True)
    py = dest/'bin'/'python'
    purelib = subprocess.run([str(py), '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                             capture_output=True, text=True, check=True, cwd=dest).stdout.strip()
    Path(purelib, 'sees.pth').write_text(f'{sees}\n')
    return py
