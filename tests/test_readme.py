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

def shown(block:str)->str:
    "The block with its last expression printed, as a notebook shows it."
    import ast
    tree = ast.parse(block)
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        tree.body[-1] = ast.Expr(ast.Call(ast.Name('print', ast.Load()), [tree.body[-1].value], []))
    return ast.unparse(ast.fix_missing_locations(tree))

def test_tour_runs_as_a_pasted_script(cpu_env, tmp_path):
    "The tour's code, pasted into one script and run on a CPU machine: no error, and the training shows progress."
    readme = (ROOT/'README.md').read_text()
    tour = readme[readme.index('## A short tour'):readme.index('## The pages')]
    blocks = re.findall(r'^``` ?python\n(.*?)^```', tour, flags=re.S | re.M)
    assert any('run_resumable(' in b for b in blocks) and any('ensure_gpu(' in b for b in blocks), blocks
    script = '\n'.join(map(shown, blocks))
    (tmp_path/'tour.py').write_text(script)
    r = subprocess.run([sys.executable, 'tour.py'], cwd=tmp_path, env=cpu_env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert 'Going on without a T4: ' in r.stdout and 'training: 100%' in r.stderr, r.stdout + r.stderr
    assert "RunReport(start=0, stop=120, saves=3" in r.stdout, r.stdout
