"""Packaging and docs-site configuration, as nbdev 2 and Quarto read them."""
import configparser, json, re
import yaml
from conftest import ROOT, notebooks, pins

def cfg(): c = configparser.ConfigParser(); c.read(ROOT/'settings.ini'); return c['DEFAULT']

def test_settings():
    c = cfg()
    assert c['tst_flags'].split() == ['notest', 'slow', 'cuda']
    assert c['readme_nb'] == 'index.ipynb'
    assert c['console_scripts'] == 'colab-t4=colab_t4_nb.cli:main'
    reqs = c['requirements'].split()
    assert any(r.startswith('nvidia-ml-py') for r in reqs) and not any(r.startswith('pynvml') for r in reqs)
    assert any(re.fullmatch(r'torch>=[\d.]+', r) for r in reqs), 'torch needs a loose lower bound only'
    dev = c['dev_requirements'].split()
    for pin in ['nbdev>=2.4.14,<3', 'fastcore<2', 'execnb>=0.1.12,<0.2', 'ghapi<2', 'fastgit<0.1.2', 'tensorflow-cpu']:
        assert pin in dev, pin
    assert 'fastcore>=1.12.3' in reqs, "the runtime takes any fastcore from 1.12.3, Colab's 2.x included"
    assert 'tensorflow' in c['tf_requirements'].split()

def test_runtime_requirements_admit_what_colab_ships():
    "Every lower bound is at most Colab's version (tools/colab_stack.txt), and no upper bound excludes it."
    from packaging.requirements import Requirement
    colab = pins()
    for r in map(Requirement, cfg()['requirements'].split()):
        assert r.name in colab, f'{r.name} is not in the Colab pin list'
        assert r.specifier.contains(colab[r.name]), f'{r} excludes Colab\'s {r.name} {colab[r.name]}'

def test_one_quarto_config_read_from_both_places():
    top, nbs = ROOT/'_quarto.yml', ROOT/'nbs'/'_quarto.yml'
    assert nbs.is_symlink() and nbs.resolve() == top.resolve()
    q = yaml.safe_load(top.read_text())
    assert q['project']['type'] == 'website'
    for f in q['metadata-files']: assert (ROOT/'nbs'/f).exists(), f
    assert (ROOT/'nbs'/q['format']['html']['css']).exists()

def test_sidebar_lists_every_page():
    side = yaml.safe_load((ROOT/'nbs'/'sidebar.yml').read_text())['website']['sidebar']['contents']
    assert sorted(side) == notebooks()
    assert side[0] == 'index.ipynb'

def test_nbdev_yml_matches_settings():
    ny = yaml.safe_load((ROOT/'nbs'/'nbdev.yml').read_text())
    c = cfg()
    assert ny['website']['title'] == c['repo'] and ny['project']['output-dir'] == c['doc_path']

def _cells(nb): return [(c['cell_type'], ''.join(c['source'])) for c in json.loads(nb.read_text())['cells']]

def test_notebooks_follow_the_house_layout():
    for nb in sorted((ROOT/'nbs').glob('*.ipynb')):
        cells = _cells(nb)
        if nb.name != 'index.ipynb':
            assert cells[0][1].startswith('#| default_exp '), nb.name
            assert "if Path('../settings.ini').exists(): import nbdev; nbdev.nbdev_export()" in cells[-1][1], nb.name
            assert cells[-2][1].startswith('## ') and cells[-2][1].rstrip().endswith(' -'), nb.name
        assert any("'-m', 'pip', 'install'" in s for t, s in cells[:3]), f'{nb.name}: no install cell for Colab'
        assert not any('nbdev.showdoc' in s for t, s in cells), f'{nb.name}: Colab has no nbdev'
        for t, s in cells:
            if t == 'code' and s.startswith('#| cuda'):
                assert re.search(r'\bneeds\(.*gpu=True', s, re.S), \
                    f'{nb.name}: a cuda cell must skip with one line on CPU:\n{s[:200]}'

def test_cells_with_imports_hold_only_imports():
    "nbdev's docs build runs every cell holding an import (and no others but exports): such cells must stand alone."
    import ast
    for nb in sorted((ROOT/'nbs').glob('*.ipynb')):
        for t, s in _cells(nb):
            dirs = [l.replace(' ', '') for l in s.splitlines() if l.startswith('#|')]
            if t != 'code' or 'nbdev_export()' in s or '#|eval:false' in dirs or any(d.startswith('#|export') for d in dirs): continue
            tree = ast.parse('\n'.join(l for l in s.splitlines() if not l.lstrip().startswith(('%', '!'))))
            if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree)):
                assert all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body), f'{nb.name}: imports mixed with code:\n{s[:300]}'

def test_every_page_has_its_colab_badge_and_its_install_cell():
    "Colab runs the first cell of a page opened alone; `#| hide` keeps it off the site, which is read, not run."
    import subprocess, sys
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'colab_badges.py'), '--check'], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'install_cell.py'), '--check'], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for nb in sorted((ROOT/'nbs').glob('*.ipynb')):
        install = next(s for t, s in _cells(nb)[:3] if "'-m', 'pip', 'install'" in s)
        assert install.startswith('#| hide\n'), f'{nb.name}: the install cell is hidden from the site'

def test_every_deliberate_error_is_a_colab_t4_error():
    "Core's promise: what the package raises on purpose is a `ColabT4Error` (ArgumentError is also a ValueError)."
    import ast
    bare = []
    for f in sorted((ROOT/'colab_t4_nb').glob('*.py')):
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call) and isinstance(n.exc.func, ast.Name) \
               and n.exc.func.id in ('ValueError', 'TypeError', 'RuntimeError', 'Exception'):
                bare.append(f'{f.name}:{n.lineno} {n.exc.func.id}')
    assert not bare, bare

def test_the_error_family_stays_small():
    "At most 15 public error and warning classes, one per way out; every error is a `ColabT4Error`."
    import importlib, inspect, pkgutil, colab_t4_nb
    from colab_t4_nb.core import ColabT4Error
    found = set()
    for m in pkgutil.iter_modules(colab_t4_nb.__path__):
        for k, v in vars(importlib.import_module(f'colab_t4_nb.{m.name}')).items():
            if inspect.isclass(v) and issubclass(v, BaseException) and not k.startswith('_') \
               and v.__module__.startswith('colab_t4_nb'): found.add(v)
    assert len(found) <= 15, sorted(c.__name__ for c in found)
    stray = [c.__name__ for c in found if not issubclass(c, (ColabT4Error, Warning))]
    assert not stray, stray

def test_no_private_method_is_added_with_patch():
    "A private method lives in its class's body; `@patch` is for a public method with its own place on the page."
    found = []
    for nb in sorted((ROOT/'nbs').glob('*.ipynb')):
        for t, s in _cells(nb):
            if t == 'code' and '#| export' in s:
                found += [f'{nb.name}: {m[1]}.{m[0]}' for m in
                          re.findall(r'@patch(?:\([^)]*\))?\s*\n(?:@[^\n]+\n)*def (_\w+)\(self:(\w+)', s)]
    assert not found, found

def test_the_public_api_stays_small_enough_to_hold():
    "What a user calls from a page is exported (`__all__`); helpers the package uses itself are `#| exporti`."
    import importlib, pkgutil, colab_t4_nb
    mods = [m.name for m in pkgutil.iter_modules(colab_t4_nb.__path__) if not m.name.startswith('_')]
    names = {m: importlib.import_module(f'colab_t4_nb.{m}').__all__ for m in mods}
    # 190 names before one owner of the background work (`background_work`) joined core
    assert sum(map(len, names.values())) <= 195, {m: len(v) for m, v in names.items()}
