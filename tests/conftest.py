import os, shutil, subprocess, sys, textwrap
from pathlib import Path
from subprocess import PIPE
import pytest
from hypothesis import HealthCheck, Phase, settings

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
    return python('import pynvml; pynvml.nvmlInit()').returncode == 0

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

# ---------------------------------------------------------------- child processes
def with_root(env)->dict:
    "A copy of `env` with this checkout first on PYTHONPATH, so a child imports this package."
    rest = [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p]
    return {**env, 'PYTHONPATH': os.pathsep.join([str(ROOT), *rest])}

def python(code:str, env:dict|None=None, args=(), timeout:float|None=300, popen=False, **kw):
    "Run `code` (dedented) in a fresh Python on this checkout, output as text; `popen`: start."
    cmd = [sys.executable, '-c', textwrap.dedent(code), *map(str, args)]
    env = with_root(os.environ if env is None else env)
    if popen:
        kw = {'stdout': PIPE, 'stderr': PIPE, **kw}
        return subprocess.Popen(cmd, env=env, text=True, **kw)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, **kw)

EXE = shutil.which('colab-t4')  # the command as `pip install -e .` installs it

def colab_t4(args, env:dict, timeout:float=300, popen:bool=False):
    "Run the `colab-t4` command on this checkout, plots off screen, output as text; `popen`: start."
    assert EXE, 'colab-t4 is not on the PATH: pip install -e .'
    cmd, env = [EXE, *args], {**with_root(env), 'MPLBACKEND': 'Agg'}
    if popen: return subprocess.Popen(cmd, env=env, text=True, stdout=PIPE, stderr=PIPE)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)

# ---------------------------------------------------------------- argument errors
# Errors from inside a function that its argument checks should have turned into a clear one.
FORBIDDEN = (IndexError, StopIteration, AttributeError, KeyError, ZeroDivisionError, OverflowError,
             RecursionError)

def bare(e:BaseException)->bool:
    "True for one of the FORBIDDEN errors that is not one of the package's own (`ColabT4Error`)."
    from colab_t4_nb.core import ColabT4Error
    return isinstance(e, FORBIDDEN) and not isinstance(e, ColabT4Error)

def assert_clear(e:BaseException, said, what:str=''):
    "Assert `e` is the package's error or a ValueError/TypeError, not bare, naming one of `said`."
    from colab_t4_nb.core import ColabT4Error
    allowed = isinstance(e, (ColabT4Error, ValueError, TypeError)) and not bare(e)
    assert allowed, f'{type(e).__name__}: {e}'
    said = [str(s) for s in said]
    assert any(s in str(e) for s in said), f'{type(e).__name__}{what} names none of {said}: {e}'

def answers(f, *said, what:str=''):
    "`f()`, or the error it raised if that is clear (`assert_clear`) and names one of `said`."
    try: return f()
    except Exception as e:
        assert_clear(e, said, what)
        return e

# ---------------------------------------------------------------- Hypothesis
# The property tests: no deadline (a first call imports and allocates), slow data and
# function-scoped fixtures allowed. Variants differ in how many examples a call's cost allows.
PROPS = settings(max_examples=40, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
PROPS_TINY = settings(PROPS, max_examples=60)  # tiny CPU models: quick calls, more examples
# Every call writes files: fewer examples, the same ones each run, a failure reported as found
# (not shrunk).
PROPS_FILES = settings(PROPS, max_examples=25, derandomize=True,
                       phases=[Phase.explicit, Phase.reuse, Phase.generate])

# ---------------------------------------------------------------- slow tests
# A test marked `slow` takes minutes (the whole plan corpus): it runs only with `pytest --slow`.
def pytest_addoption(parser):
    parser.addoption('--slow', action='store_true', help='also run the tests marked slow')

def pytest_configure(config):
    config.addinivalue_line('markers', 'slow: takes minutes; runs only with --slow')

def pytest_collection_modifyitems(config, items):
    if config.getoption('--slow'): return
    skip = pytest.mark.skip(reason='slow: pass --slow to run it')
    for item in items:
        if 'slow' in item.keywords: item.add_marker(skip)
