"""The notebooks' examples pass against the installed package, not only in the notebooks' own namespace.

Each notebook is copied alone into an empty folder (as Colab opens it) and run by
`tools/test_installed.py`: exported cells are replaced by the installed module's namespace, and a
cell that adds a name to the package without being exported fails the run."""
import importlib.util, shutil, subprocess, sys
from pathlib import Path
import pytest
from conftest import ROOT, NBS, notebooks

@pytest.mark.parametrize('nb', notebooks())
def test_examples_against_installed_package(nb, tmp_path, cpu_env):
    shutil.copy(NBS/nb, tmp_path/nb)
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'test_installed.py'), str(tmp_path/nb)], cwd=tmp_path,
                       env=cpu_env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f'{nb} fails against the installed package:\n{r.stdout[-2000:]}\n{r.stderr[-6000:]}'

def test_notebook_only_definition_fails(tmp_path, cpu_env):
    "The check itself: a method added with `@patch` in a cell that is not exported makes it fail."
    import json
    nb = {'cells': [{'cell_type': 'code', 'metadata': {}, 'outputs': [], 'execution_count': None, 'source': s} for s in [
            '#| default_exp allocation', '#| export\nfrom fastcore.basics import patch',
            '@patch\ndef only_here(self:Budget): return 1', 'assert Budget(".b.json").only_here() == 1']],
          'metadata': {'kernelspec': {'name': 'python3', 'display_name': 'Python 3', 'language': 'python'}},
          'nbformat': 4, 'nbformat_minor': 5}
    (tmp_path/'x.ipynb').write_text(json.dumps(nb))
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'test_installed.py'), str(tmp_path/'x.ipynb')], cwd=tmp_path,
                       env=cpu_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert 'adds colab_t4_nb.allocation.Budget.only_here to the package, but that cell is not exported' in r.stderr, r.stderr

def test_deprecation_raised_against_package_code_fails(tmp_path, cpu_env):
    "The check itself: a FutureWarning attributed to a module of the package (as pandas attributes its own) fails it."
    import json
    warn = ("import colab_t4_nb.timing as t\n"
            "exec('import warnings\\nwarnings.warn(\"fill value changes in pandas 4\", FutureWarning)', vars(t))")
    nb = {'cells': [{'cell_type': 'code', 'metadata': {}, 'outputs': [], 'execution_count': None, 'source': s}
                    for s in ['#| default_exp timing', warn]],
          'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5}
    (tmp_path/'w.ipynb').write_text(json.dumps(nb))
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'test_installed.py'), str(tmp_path/'w.ipynb')], cwd=tmp_path,
                       env=cpu_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and 'FutureWarning: fill value changes in pandas 4' in r.stderr, r.stdout + r.stderr
