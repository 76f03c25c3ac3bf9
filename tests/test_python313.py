"""Colab runs Python 3.13; this machine's default is 3.11. The package declares 3.10 to 3.13.

What is checked, and how:
- no module or name that Python 3.12 or 3.13 removed is used (PEP 594's dead batteries, distutils,
  imp, asyncore, and the removed functions listed below), by reading the source's syntax tree;
- under a real Python 3.13 (pyenv's, where this machine has one): every file compiles with warnings
  as errors (invalid escapes are a SyntaxWarning there), the modules that need no PyTorch import with
  deprecation warnings as errors, and `colab-t4` answers. PyTorch has no CPU build for 3.13 on this
  machine's disk, so the modules that import it are compiled, not imported.
"""
import ast, glob, hashlib, os, shutil, subprocess
from pathlib import Path
import pytest
from conftest import ROOT
from conftest import CACHE, layered_venv, pins

REMOVED_MODULES = {'aifc', 'asynchat', 'asyncore', 'audioop', 'cgi', 'cgitb', 'chunk', 'crypt', 'distutils', 'imghdr',
                   'imp', 'lib2to3', 'mailcap', 'msilib', 'nis', 'nntplib', 'ossaudiodev', 'pipes', 'smtpd', 'sndhdr',
                   'spwd', 'sunau', 'telnetlib', 'tkinter.tix', 'uu', 'xdrlib'}
REMOVED_NAMES = {('locale', 'resetlocale'), ('unittest', 'makeSuite'), ('unittest', 'findTestCases'),
                 ('unittest', 'getTestCaseNames'), ('typing', 'io'), ('typing', 're'), ('configparser', 'SafeConfigParser'),
                 ('configparser', 'readfp'), ('ssl', 'wrap_socket'), ('ssl', 'match_hostname'), ('inspect', 'getargspec'),
                 ('gettext', 'lgettext'), ('pathlib', 'link_to'), ('unittest', 'assertEquals'), ('unittest', 'assertNotEquals'),
                 ('unittest', 'assertRegexpMatches'), ('importlib', 'find_loader'), ('pkgutil', 'ImpImporter')}
TORCH_FREE = ['allocation', 'timing', 'kernels', 'monitoring', 'ledger', 'results', 'cli']
SOURCES = sorted([*ROOT.glob('colab_t4_nb/*.py'), *ROOT.glob('tools/*.py'), *ROOT.glob('tests/*.py')])

def test_no_module_or_name_that_python_313_removed():
    found = []
    for f in SOURCES:
        for n in ast.walk(ast.parse(f.read_text(), str(f))):
            mods = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ''] if isinstance(n, ast.ImportFrom) else []
            found += [f'{f.name}:{n.lineno} imports {m}' for m in mods if m in REMOVED_MODULES or m.split('.')[0] in REMOVED_MODULES]
            if isinstance(n, ast.ImportFrom): found += [f'{f.name}:{n.lineno} {n.module}.{a.name}' for a in n.names
                                                        if (n.module, a.name) in REMOVED_NAMES]
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and (n.value.id, n.attr) in REMOVED_NAMES:
                found.append(f'{f.name}:{n.lineno} {n.value.id}.{n.attr}')
            if isinstance(n, ast.Attribute) and n.attr in {'assertEquals', 'assertNotEquals', 'assertRegexpMatches'}:
                found.append(f'{f.name}:{n.lineno} .{n.attr}')
    assert not found, found

def python313()->str|None:
    "A Python 3.13 interpreter on this machine: one of pyenv's, or one on the PATH (pyenv's shims need a choice)."
    cands = [*sorted(glob.glob(os.path.expanduser('~/.pyenv/versions/3.13*/bin/python3.13'))), shutil.which('python3.13')]
    return next((c for c in cands if c and '/shims/' not in c), None)

@pytest.fixture(scope='module')
def py313(wheel):
    "Python 3.13 with Colab's versions of the package's PyTorch-free requirements, and the package (cached venv)."
    exe = python313()
    if exe is None: pytest.skip('no Python 3.13 on this machine (pyenv install 3.13 provides one)')
    want = [f'{k}=={pins()[k]}' for k in ('fastcore', 'pandas', 'numpy', 'matplotlib', 'nvidia-ml-py', 'tqdm')]
    key = hashlib.sha256(' '.join([exe, *want]).encode()).hexdigest()[:12]
    venv = CACHE/f'py313-{key}'
    if not (venv/'complete').exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([exe, '-m', 'venv', str(venv)], check=True)
        r = subprocess.run([str(venv/'bin'/'python'), '-m', 'pip', 'install', '-q', '--disable-pip-version-check', *want],
                           capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, r.stderr[-3000:]
        (venv/'complete').write_text(' '.join(want))
    layer = wheel.parent/'py313'
    if not layer.exists():
        layered_venv(layer, next((venv/'lib').glob('python3.13*'))/'site-packages', python=exe)
        r = subprocess.run([str(layer/'bin'/'python'), '-m', 'pip', 'install', '-q', '--no-deps', str(wheel)],
                           capture_output=True, text=True, cwd=layer)
        assert r.returncode == 0, r.stderr[-3000:]
    return layer/'bin'/'python'

def run313(py, *args, **kw):
    env = {k: v for k, v in os.environ.items() if k not in ('VIRTUAL_ENV', 'PYTHONPATH')}
    env.update(CUDA_VISIBLE_DEVICES='', PATH=f'{py.parent}{os.pathsep}{env["PATH"]}')
    env.update(kw.pop('env', {}))
    return subprocess.run([str(py), *args], capture_output=True, text=True, env=env, timeout=300, cwd=py.parent, **kw)

def test_runs_on_python_313(py313):
    assert run313(py313, '-c', 'import sys; print(sys.version_info[:2])').stdout.strip() == '(3, 13)'

def test_every_file_compiles_under_313_with_warnings_as_errors(py313, tmp_path):
    for f in SOURCES:
        r = run313(py313, '-W', 'error', '-c', f'compile(open({str(f)!r}).read(), {str(f)!r}, "exec")')
        assert r.returncode == 0, f'{f.name}: {r.stderr[-2000:]}'

@pytest.mark.parametrize('mod', TORCH_FREE)
def test_module_imports_under_313_without_deprecations(py313, mod):
    r = run313(py313, '-W', 'error::DeprecationWarning', '-W', 'error::FutureWarning', '-c',
               f'import colab_t4_nb.{mod}, sys; print("torch" in sys.modules)')
    assert r.returncode == 0 and r.stdout.split()[-1] == 'False', r.stderr[-3000:]

def test_command_answers_under_313(py313, tmp_path):
    exe = py313.parent/'colab-t4'
    r = run313(exe, '--version')
    assert r.returncode == 0 and r.stdout.startswith('colab-t4 '), r.stderr
    r = run313(exe, 'monitor', '--duration', '1', env={'COLAB_T4_HOME': str(tmp_path), 'PATH': str(py313.parent)})
    assert r.returncode == 1 and 'No NVIDIA GPU found' in r.stderr and r.stderr.count('\n') == 1, r.stdout + r.stderr
