"""colab_t4_nb.amp from outside a notebook: a fresh import starts nothing, and where TensorFlow is
absent (a torch-only runtime, as many GPU servers are) the Keras parts skip or fail clearly."""
import json, shutil, subprocess, sys, textwrap
from conftest import ROOT, NBS, python

HIDE_TF = textwrap.dedent('''
    import importlib.abc, importlib.util, sys
    def _tf(name): return name == 'tensorflow' or name.startswith('tensorflow.')
    _find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, package=None: None if _tf(name) else _find_spec(name, package)
    class _HideTF(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if _tf(name): raise ModuleNotFoundError(f'No module named {name!r}', name=name)
    sys.meta_path.insert(0, _HideTF())
''')

def _no_tf_env(tmp_path, env):
    site = tmp_path/'no_tf'; site.mkdir()
    (site/'sitecustomize.py').write_text(HIDE_TF)
    return {**env, 'PYTHONPATH': f'{site}:{ROOT}'}

def test_import_starts_nothing(tmp_path, cpu_env):
    r = python('''
        import sys, torch
        import colab_t4_nb.amp
        assert 'tensorflow' not in sys.modules, 'TensorFlow imported at import time'
        assert not torch.cuda.is_initialized(), 'CUDA started at import time'
        print('ok')''', cpu_env, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == 'ok', r.stderr

def test_keras_parts_without_tensorflow(tmp_path, cpu_env):
    r = python('''
        from importlib.util import find_spec
        assert find_spec('tensorflow') is None
        from colab_t4_nb.amp import keras_amp, MissingPackage
        from colab_t4_nb.core import needs
        assert needs('a Keras fit', package='tensorflow') is False
        try:
            with keras_amp(): pass
        except MissingPackage as e: print('error:', e)''', _no_tf_env(tmp_path, cpu_env), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ['Skipped on this runtime (tensorflow is not installed: pip install tensorflow): a Keras fit.',
                                     'error: TensorFlow is not installed: `pip install tensorflow` (Colab has it).'], r.stdout

def test_run_all_without_tensorflow(tmp_path, cpu_env):
    "Every cell of the notebook, flagged ones too, on a CPU runtime without TensorFlow: skip lines, no traceback."
    work = tmp_path/'nbs'
    shutil.copytree(NBS, work, symlinks=True)
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'run_nbs.py'), '--save', str(work/'01_amp.ipynb')], cwd=tmp_path,
                       env=_no_tf_env(tmp_path, cpu_env), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    assert 'Traceback' not in r.stdout + r.stderr, r.stderr[-3000:]
    cells = json.loads((work/'01_amp.ipynb').read_text())['cells']
    printed = [''.join(o.get('text', '')) for c in cells if c['cell_type'] == 'code' for o in c['outputs']]
    assert sum(p.startswith('Skipped on this runtime (tensorflow is not installed') for p in printed) == 2, printed
    assert sum(p.startswith('Skipped on this runtime (no CUDA GPU)') for p in printed) == 3, printed
