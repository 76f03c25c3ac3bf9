#!/usr/bin/env python3
"""Run a notebook's examples against the installed `colab_t4_nb`, as a user of the package gets it.

    python tools/test_installed.py NB [--skip "notest slow cuda"]

`nbdev_test` runs the examples in the notebook's own namespace, where a definition that lives only in
the notebook (a `@patch` in a cell that is not exported, a helper defined beside a test) makes them
pass although `pip install` never delivers it. Here every exported cell is replaced by the whole
namespace of the module it exports to (private names included), imported from the installed
package, and after each remaining cell any attribute that cell added to a class or module of the
package is reported: the examples then see exactly what users get. Cells carrying a skipped flag,
`#| eval: false` cells and the `nbdev_export()` cell do not run, as under `nbdev_test`.
Exit status 1 names the cell that failed and why.
"""
import argparse, os, sys, types
from pathlib import Path

from execnb.shell import CaptureShell
from nbdev.process import NBProcessor
from nbdev.frontmatter import FrontmatterProc

PKG = 'colab_t4_nb'
EXPORTS = {'export', 'exports', 'exporti'}

def _mod_name(cell, default:str|None)->str|None:
    "The module an exported cell goes to, or None for a cell that is not exported."
    d = getattr(cell, 'directives_', {}) or {}
    for k in EXPORTS & d.keys():
        arg = d[k][0] if d[k] else default
        return f'{PKG}.{arg}' if arg else None
    return None

def _namespace_source(mod:str, future:bool)->str:
    return ('from __future__ import annotations\n' if future else '') + (
        f"import importlib as _nbi\n"
        f"globals().update({{k: v for k, v in vars(_nbi.import_module({mod!r})).items()\n"
        f"                  if not (k.startswith('__') and k.endswith('__'))}})\n"
        f"del _nbi")

def _dunder(k:str)->bool: return k.startswith('__') and k.endswith('__')

def snapshot()->dict:
    "Names held by each module of the package and by each class it defines."
    snap = {}
    for name, mod in list(sys.modules.items()):
        if name != PKG and not name.startswith(PKG + '.'): continue
        snap[name] = {k for k, v in vars(mod).items() if not isinstance(v, types.ModuleType) and not _dunder(k)}
        for k, v in list(vars(mod).items()):
            if isinstance(v, type) and v.__module__ == name: snap[f'{name}.{k}'] = {a for a in vars(v) if not _dunder(a)}
    return snap

def added(before:dict, after:dict)->list[str]:
    "Names present in `after` but not `before`, for the modules and classes `before` knew."
    return [f'{owner}.{n}' for owner, names in after.items() if owner in before for n in sorted(names - before[owner])]

def run(path:Path, skip:set)->int:
    nb = NBProcessor(path, procs=FrontmatterProc, process=True).nb
    default = next((c.directives_['default_exp'][0] for c in nb.cells
                    if c.cell_type == 'code' and 'default_exp' in (getattr(c, 'directives_', {}) or {})), None)
    import importlib
    pkg = importlib.import_module(PKG)
    print(f'{path.name}: examples against {PKG} from {Path(pkg.__file__).parent}', flush=True)
    state = {}
    def pre(cell):
        if cell.cell_type != 'code' or 'nbdev_export' + '(' in cell.source: return True
        d = getattr(cell, 'directives_', {}) or {}
        if d.get('eval:', [''])[0].lower() == 'false' or skip & d.keys(): return True
        mod = _mod_name(cell, default)
        if mod: cell.source = _namespace_source(mod, 'from __future__ import annotations' in cell.source)
        state['cell'], state['export'], state['before'] = cell.idx_, bool(mod), snapshot()
        return False
    def post(cell):
        if state['export']: return
        new = added(state['before'], snapshot())
        if new: raise RuntimeError(
            f'cell {state["cell"]} of {path.name} adds {", ".join(new)} to the package, but that cell is not exported: '
            f'users of the installed package do not have it. Put the definition in an `#| export` cell.')
    sh = CaptureShell(path)
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        sh.run_all(nb, exc_stop=True, preproc=pre, postproc=post)
        return 0
    except Exception as e:
        tb = sh.prettytb(fname=path) if sh.exc else f'{type(e).__name__}: {e}'
        sys.stderr.write(f'{path.name}, cell {state.get("cell")}: FAILED against the installed package\n{tb}\n')
        return 1
    finally: os.chdir(cwd)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('notebook', type=Path)
    ap.add_argument('--skip', default='notest slow cuda', help='space-separated cell flags to skip')
    args = ap.parse_args(argv)
    os.environ.setdefault('IN_TEST', '1')
    return run(args.notebook.resolve(), set(args.skip.split()))

if __name__ == '__main__': sys.exit(main())
