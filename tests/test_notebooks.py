"""Every notebook runs top to bottom, every cell included (as Colab's "Run all" does), in a
fresh process on a CPU-only runtime, from a folder outside the project (as a notebook opened on
its own is), with no traceback."""
import shutil, subprocess, sys
import pytest
from conftest import ROOT, NBS, notebooks

@pytest.mark.parametrize('nb', notebooks())
def test_run_all_on_cpu(nb, tmp_path, cpu_env):
    work = tmp_path/'nbs'
    shutil.copytree(NBS, work, symlinks=True)
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'run_nbs.py'), str(work/nb)], cwd=tmp_path, env=cpu_env,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f'{nb} failed under Run all on CPU:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}'
    assert 'Traceback' not in r.stdout + r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
