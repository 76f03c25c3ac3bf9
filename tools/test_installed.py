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
A DeprecationWarning or FutureWarning that pandas, numpy or PyTorch raise against the package's
own code fails the run too. It needs only IPython (no nbdev), so it also runs in Colab's own
software stack (tests/test_colab_stack.py). Exit status 1 names the cell that failed and why.
"""
import argparse, json, os, sys, types, warnings
from pathlib import Path

PKG = 'colab_t4_nb'
EXPORTS = {'export', 'exports', 'exporti'}

class Cell:
    "A notebook cell with its source, its position and its `#|` directives (read as nbdev reads them)."
    def __init__(self, d:dict, idx:int):
        self.cell_type, self.idx_ = d['cell_type'], idx
        self.source = ''.join(d['source']) if isinstance(d['source'], list) else d['source']
        self.directives_ = {}
        for line in self.source.splitlines():
            line = line.strip()
            if not line: continue
            if not line.startswith('#|'): break
            words = line[2:].split()
            if words: self.directives_[words[0].rstrip(':')] = words[1:]

def read_cells(path:Path)->list[Cell]:
    return [Cell(c, i) for i, c in enumerate(json.loads(path.read_text(encoding='utf-8'))['cells'])]

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
    cells = read_cells(path)
    default = next((c.directives_['default_exp'][0] for c in cells
                    if c.cell_type == 'code' and 'default_exp' in c.directives_), None)
    import importlib
    pkg = importlib.import_module(PKG)
    print(f'{path.name}: examples against {PKG} from {Path(pkg.__file__).parent}', flush=True)
    state = {}
    def pre(cell):
        if cell.cell_type != 'code' or 'nbdev_export' + '(' in cell.source: return True
        d = getattr(cell, 'directives_', {}) or {}
        if d.get('eval', [''])[0].lower() == 'false' or skip & d.keys(): return True
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
    from IPython.utils.capture import capture_output
    sh = _shell(path)
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        for cell in cells:
            if pre(cell): continue
            with capture_output() as out:
                r = sh.run_cell(cell.source, store_history=False)
            err = r.error_before_exec or r.error_in_exec
            if err is not None:
                sys.stderr.write(f'{path.name}, cell {cell.idx_}: FAILED against the installed package\n'
                                 f'{out.stdout[-6000:]}{out.stderr[-3000:]}\n{type(err).__name__}: {err}\n')
                return 1
            post(cell)
        return 0
    except RuntimeError as e:
        sys.stderr.write(f'{path.name}, cell {state.get("cell")}: FAILED against the installed package\n{e}\n')
        return 1
    finally: os.chdir(cwd)

def _shell(path:Path):
    "An in-process IPython shell as a notebook's kernel has it: inline plots, the notebook's folder on sys.path."
    from IPython.core.interactiveshell import InteractiveShell
    class Shell(InteractiveShell):
        def enable_gui(self, gui=None): pass  # no event loop: figures are shown inline
    sh = Shell.instance()
    sh.history_manager.enabled = False
    try: sh.enable_matplotlib('inline')
    except (ImportError, ValueError): pass  # no matplotlib-inline: figures are not drawn
    sys.path.insert(0, str(path.parent))
    # Deprecations that pandas, numpy or torch raise against this package's own code fail the run.
    for cat in (DeprecationWarning, FutureWarning):
        warnings.filterwarnings('error', category=cat, module=rf'{PKG}(\.|$)')
    return sh

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('notebook', type=Path)
    ap.add_argument('--skip', default='notest slow cuda', help='space-separated cell flags to skip')
    args = ap.parse_args(argv)
    os.environ.setdefault('IN_TEST', '1')
    return run(args.notebook.resolve(), set(args.skip.split()))

if __name__ == '__main__': sys.exit(main())
