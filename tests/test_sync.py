"""The library is what the notebooks say, and the notebooks are clean."""
import filecmp, shutil, subprocess
from pathlib import Path
from conftest import ROOT, python

def _copy_project(dst:Path)->Path:
    files = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard'], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split('\n')
    for f in filter(None, files):
        src = ROOT/f
        if not src.exists() and not src.is_symlink(): continue
        (dst/f).parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink(): (dst/f).symlink_to(src.readlink())
        else: shutil.copy2(src, dst/f)
    return dst

def _tree(d:Path)->dict: return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob('*.py'))}

def test_export_leaves_library_unchanged(tmp_path):
    proj = _copy_project(tmp_path/'proj')
    shutil.rmtree(proj/'colab_t4_nb')
    r = python('from nbdev.doclinks import nbdev_export; nbdev_export.__wrapped__()', cwd=proj, timeout=None)
    assert r.returncode == 0, r.stderr
    exported, committed = _tree(proj/'colab_t4_nb'), _tree(ROOT/'colab_t4_nb')
    assert sorted(exported) == sorted(committed), 'modules differ: run nbdev_export'
    for k in exported: assert exported[k] == committed[k], f'colab_t4_nb/{k} is not what the notebooks export: run nbdev_export'

def test_notebooks_are_clean(tmp_path):
    proj = _copy_project(tmp_path/'proj')
    r = python('from nbdev.clean import nbdev_clean; nbdev_clean.__wrapped__()', cwd=proj, timeout=None)
    assert r.returncode == 0, r.stderr
    for nb in sorted((ROOT/'nbs').glob('*.ipynb')):
        assert (proj/'nbs'/nb.name).read_bytes() == nb.read_bytes(), f'{nb.name} is not clean: run nbdev_clean'
