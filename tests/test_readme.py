"""README.md is generated from nbs/index.ipynb; CI runs its test command."""
import re, subprocess, sys
from conftest import ROOT

def test_readme_in_sync():
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'make_readme.py'), '--check'], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:]

def test_two_setup_commands_and_ci_runs_the_test_one():
    readme = (ROOT/'README.md').read_text()
    cmds = [l for l in readme.splitlines() if l.startswith('python3 -m venv')]
    assert len(cmds) == 2, cmds
    use, test = cmds
    assert use.endswith('colab-t4 bench --quick') and '[dev]' not in use
    assert 'torch==2.13.0' in use and 'torch==2.13.0' in test, 'both commands install the same PyTorch'
    assert '[dev]' in test and re.search(r'&& nbdev_test && pytest tests$', test)
    ci = (ROOT/'.ci'/'run').read_text()
    pattern = re.search(r"grep -E '([^']+)' README.md", ci).group(1)
    assert [l for l in readme.splitlines() if re.search(pattern, l)] == [test]
