"""research/t4_fit, the scripts that fit the T4 model: apart from the package, on its public names only."""
import ast, configparser, importlib, importlib.util, re
import setuptools
from conftest import ROOT

FIT = ROOT/'research'/'t4_fit'

def _package_uses(path)->list:
    "(module, name) of each name of `colab_t4_nb` a script imports or reads off an imported module."
    mods, out = {}, []
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            mods.update({a.asname: a.name for a in n.names if a.asname and a.name.startswith('colab_t4_nb.')})
        elif isinstance(n, ast.ImportFrom) and (n.module or '').startswith('colab_t4_nb'):
            for a in n.names:
                sub = f'{n.module}.{a.name}'
                if n.module == 'colab_t4_nb' and importlib.util.find_spec(sub): mods[a.asname or a.name] = sub
                else: out.append((n.module, a.name))
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in mods:
            out.append((mods[n.value.id], n.attr))
    return out

def test_the_fit_uses_only_names_the_package_keeps():
    "No private name of the package, and every name used exists (a rename there breaks the fit at once)."
    uses = [(p.name, m, a) for p in sorted(FIT.glob('*.py')) for m, a in _package_uses(p)]
    assert {u[0] for u in uses} >= {'rebuild.py', 'report.py'}, uses
    private = [u for u in uses if u[2].startswith('_')]
    assert not private, private
    missing = [u for u in uses if not hasattr(importlib.import_module(u[1]), u[2])]
    assert not missing, missing

def test_the_fit_is_neither_shipped_nor_collected():
    "The wheel takes the package alone, the sdist prunes research/, pytest does not recurse into it."
    c = configparser.ConfigParser(); c.read(ROOT/'settings.ini')
    lib = c['DEFAULT']['lib_path']
    pkgs = setuptools.find_packages(where=str(ROOT), include=[lib, lib + '.*'])
    assert pkgs and not [p for p in pkgs if not p.startswith(lib)], pkgs
    assert 'prune research' in (ROOT/'MANIFEST.in').read_text().splitlines()
    assert re.search(r'norecursedirs = \[.*"research"', (ROOT/'pyproject.toml').read_text())
    assert (FIT/'README.md').exists() and (FIT/'LOG.md').exists()

def test_no_file_points_to_the_old_place():
    "The package, its data notes, the notebooks and the scripts name research/t4_fit; the log keeps its history."
    files = [*ROOT.glob('nbs/*.ipynb'), *ROOT.glob('colab_t4_nb/*.py'), *ROOT.glob('colab_t4_nb/files/t4_fit/*.json'),
             *FIT.glob('*.py'), ROOT/'README.md']
    stale = [f.relative_to(ROOT) for f in files if 'tools/t4_fit' in f.read_text()]
    assert not stale, stale
