"""The reader's measures of the pages, and the package's imports following the page order.

The measures come from tools/page_metrics.py; here they are checked on a notebook of known numbers.
The tool's reading goals are a report (`python tools/page_metrics.py`), not a gate.
The import graph is read with `ast` from the package's modules; each module's page is the notebook
with its `#| default_exp`. A page may only import from pages that sort before it, and no
module may reach into another's private names.
"""
from __future__ import annotations
import ast, configparser, importlib.util, json, re, types
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(path:Path)->types.ModuleType:
    "The module in the file `path`, imported under its file's stem."
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


pm = _load(ROOT/'tools'/'page_metrics.py')


def _settings()->configparser.SectionProxy:
    "The DEFAULT section of settings.ini."
    cfg = configparser.ConfigParser()
    cfg.read(ROOT/'settings.ini')
    return cfg['DEFAULT']


LIB = ROOT/_settings().get('lib_path', 'colab_t4_nb')
NBS = ROOT/_settings().get('nbs_path', 'nbs')


# ---- the measures ---------------------------------------------------------------------------

LONG_LINE = "y = '" + 'a'*114 + "'"
PROSE = '''# A title. It is not prose

Pick a library, e.g. PyTorch, for the work.
It calls `print('Done. Next')` and `code.span` at the very end! Is 3.5 ms fast? Two words.

```python
Not prose. At all here, none of it.
```
| Table row. | Not prose here at all |
<div>An HTML line. Not prose here.</div>

- A list item that counts. Second item here
> Quoted text is prose too.'''


def _cell(kind:str, src:str, outputs:list|None=None)->dict:
    "A notebook cell of `kind` with source `src`, as nbformat writes it."
    c = dict(cell_type=kind, metadata={}, source=src.splitlines(keepends=True))
    if kind == 'code': c.update(execution_count=None, outputs=outputs or [])
    return c


def _notebook(path:Path, cells:list[dict])->Path:
    "`cells` written to `path` as an nbformat 4 notebook."
    nb = dict(cells=cells, metadata={}, nbformat=4, nbformat_minor=5)
    path.write_text(json.dumps(nb, indent=1), encoding='utf-8')
    return path


def test_metrics_are_measured(tmp_path:Path, capsys:pytest.CaptureFixture)->None:
    "Each measure of a tiny notebook is exactly what its definition gives."
    assert len(LONG_LINE) == 120
    out = [dict(output_type='stream', name='stdout', text=['1\n'])]
    cells = [_cell('code', '#| export\ndef f(x):\n    return x\n\n@decorator\ndef g(): pass\n'),
             _cell('markdown', PROSE),
             _cell('code', f'x = 1\n{LONG_LINE}\n', out),
             _cell('code', '#| exports\n@patch\ndef h(self): pass')]
    _notebook(tmp_path/'01_tiny.ipynb', cells)
    _notebook(tmp_path/'index.ipynb', cells[:1])
    assert pm.sentences(PROSE) == [
        'Pick a library, e.g. PyTorch, for the work.',
        "It calls `print('Done. Next')` and `code.span` at the very end!", 'Is 3.5 ms fast?',
        'Two words.', 'A list item that counts.', 'Second item here', 'Quoted text is prose too.']
    assert pm.pages(tmp_path) == [tmp_path/'01_tiny.ipynb']
    res = pm.measure(pm.pages(tmp_path))
    want = dict(cells=4, exported_cells=2, exported_lines_median=3.0, exported_lines_p90=4,
                multi_def_share=0.5, sentences=6, sentence_words_median=5.0, sentence_words_p90=10,
                long_line_share=0.1, output_share=1/3)
    assert res == {'01_tiny.ipynb': want, 'ALL': want}
    goals = {g['metric']: (g['value'], g['met']) for g in pm.check(res['ALL'])}
    assert goals == dict(exported_lines_median=(3.0, True), multi_def_share=(0.5, False),
                         sentence_words_median=(5.0, True), long_line_share=(0.1, False),
                         output_share=(1/3, True))
    assert pm.main(['--nbs', str(tmp_path), '--json']) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed['pages'] == {'01_tiny.ipynb': want} and printed['all'] == want
    assert [g['met'] for g in printed['goals']] == [True, False, True, False, True]


# ---- the import graph -----------------------------------------------------------------------

DEFAULT_EXP = re.compile(r'^\s*#\s*\|\s*default_exp\s+(\S+)', re.M)
SKIP = ('__init__.py', '_modidx.py')
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclass(frozen=True)
class Use:
    "One module's use of another package module: an import, or an attribute read off it."
    module: str  # the module that uses it
    target: str  # the package module used ('' for the package's __init__)
    line: int
    name: str|None = None  # the name taken from `target`; None when the module itself is imported
    lazy: bool = False  # inside a function
    attribute: bool = False  # `target.name` read as an attribute rather than imported


def modules(package_dir:Path)->dict[str, Path]:
    "The package's modules by dotted name (relative to the package), without `SKIP`."
    found = {}
    for f in sorted(package_dir.rglob('*.py')):
        if f.name not in SKIP: found['.'.join(f.relative_to(package_dir).with_suffix('').parts)] = f
    return found


def notebooks(nbs_dir:Path)->dict[str, Path]:
    "The notebook of each module, found by its `#| default_exp` cell."
    found = {}
    for nb in sorted(nbs_dir.glob('*.ipynb')):
        for cell in json.loads(nb.read_text(encoding='utf-8')).get('cells', []):
            if cell.get('cell_type') == 'code':
                for m in DEFAULT_EXP.finditer(pm.source(cell)): found.setdefault(m.group(1), nb)
    return found


def _longest(rel:str, mods:set[str])->str:
    "The longest dotted prefix of `rel` that is a module; '' (the package) when none is."
    parts = rel.split('.')
    return next(('.'.join(parts[:i]) for i in range(len(parts), 0, -1)
                 if '.'.join(parts[:i]) in mods), '')


def _from_base(pkg:str, module:str, node:ast.ImportFrom)->str|None:
    "What `from X import ...` imports from, relative to the package; None when outside it."
    if node.level:
        parts = module.split('.')[:-1]
        if node.level - 1 > len(parts): return None
        parts = parts[:len(parts) - (node.level - 1)]
        return '.'.join(parts + (node.module.split('.') if node.module else []))
    if node.module == pkg or (node.module or '').startswith(pkg + '.'):
        return node.module[len(pkg) + 1:]
    return None


def _literal_import(pkg:str, node:ast.AST)->str|None:
    "The package module of an `import_module('pkg.x')` call, relative to the package; else None."
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
        return None
    f, arg = node.func, node.args[0].value
    named = (isinstance(f, ast.Attribute) and f.attr == 'import_module') or \
            (isinstance(f, ast.Name) and f.id == 'import_module')
    if not (named and isinstance(arg, str) and (arg == pkg or arg.startswith(pkg + '.'))):
        return None
    return arg[len(pkg) + 1:]


def module_uses(pkg:str, module:str, code:str, mods:set[str])->list[Use]:
    "Every import of a package module in `code`, and every `module._name` read off one."
    tree = ast.parse(code)
    parent = {c: n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    def lazy(n:ast.AST)->bool:
        "Is `n` inside a function?"
        while n in parent:
            n = parent[n]
            if isinstance(n, FUNCTIONS): return True
        return False
    uses, bound = [], {}  # bound: a name in this file -> the package module it stands for
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and (base := _from_base(pkg, module, n)) is not None:
            for a in n.names:
                full = f'{base}.{a.name}' if base else a.name
                if full in mods:
                    uses.append(Use(module, full, n.lineno, None, lazy(n)))
                    bound[a.asname or a.name] = full
                else: uses.append(Use(module, base, n.lineno, a.name, lazy(n)))
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.name != pkg and not a.name.startswith(pkg + '.'): continue
                rel = a.name[len(pkg) + 1:]
                uses.append(Use(module, _longest(rel, mods), n.lineno, None, lazy(n)))
                if a.asname: bound[a.asname] = _longest(rel, mods)
                else: bound[pkg] = ''
        elif (rel := _literal_import(pkg, n)) is not None:
            uses.append(Use(module, _longest(rel, mods), n.lineno, None, lazy(n)))
            if isinstance(parent.get(n), ast.Assign):
                for t in parent[n].targets:
                    if isinstance(t, ast.Name): bound[t.id] = _longest(rel, mods)
    def owner(e:ast.AST)->str|None:
        "The package module that the expression `e` stands for; None when it is not one."
        if isinstance(e, ast.Name): return bound.get(e.id)
        if isinstance(e, ast.Attribute) and (base := owner(e.value)) is not None:
            full = f'{base}.{e.attr}' if base else e.attr
            return full if full in mods else None
        rel = _literal_import(pkg, e)
        return None if rel is None else _longest(rel, mods)
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Attribute) and n.attr.startswith('_')): continue
        if (o := owner(n.value)) is not None:
            uses.append(Use(module, o, n.lineno, n.attr, lazy(n), attribute=True))
    return [u for u in uses if u.target != module]


def package_uses(package_dir:Path)->list[Use]:
    "The uses of package modules in every module of the package."
    mods = modules(package_dir)
    return [u for m, f in mods.items()
            for u in module_uses(package_dir.name, m, f.read_text(encoding='utf-8'), set(mods))]


def _file(module:str)->str:
    "The file of a dotted module name, relative to the package."
    return module.replace('.', '/') + '.py'


def _page(module:str, nbs_dir:Path, nbs:dict[str, Path])->str:
    "The module's notebook as `nbs/NAME.ipynb`."
    return f'{nbs_dir.name}/{nbs[module].name}' if module in nbs else 'no notebook'


def _where(uses:list[Use])->str:
    "The lines of `uses`, each marked when it is inside a function."
    lines = sorted({(u.line, u.lazy) for u in uses})
    says = [f'{l} (inside a function)' if z else str(l) for l, z in lines]
    return ('line ' if len(says) == 1 else 'lines ') + ', '.join(says)


def _imports(package_dir:Path)->dict[tuple[str, str], list[Use]]:
    "The import edges between the package's modules: (importer, imported) -> its imports."
    mods, edges = modules(package_dir), {}
    for u in package_uses(package_dir):
        if not u.attribute and u.target in mods:
            edges.setdefault((u.module, u.target), []).append(u)
    return edges


def _components(graph:dict[str, set[str]])->list[set[str]]:
    "The strongly connected components of `graph` with more than one module (Tarjan)."
    index, low, stack, on, out = {}, {}, [], set(), []
    def visit(v:str)->None:
        "Tarjan's step for `v`."
        index[v] = low[v] = len(index)
        stack.append(v); on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop(); on.discard(w); comp.add(w)
                if w == v: break
            if len(comp) > 1: out.append(comp)
    for v in sorted(graph):
        if v not in index: visit(v)
    return out


def _elementary_cycles(graph:dict[str, set[str]], comp:set[str])->list[list[str]]:
    "Every cycle inside the component `comp`, each starting from its smallest module."
    found = []
    def walk(start:str, path:list[str])->None:
        "Extend `path` by each next module that keeps it simple."
        for nxt in sorted(graph.get(path[-1], set()) & comp):
            if nxt == start: found.append(path + [start])
            elif nxt > start and nxt not in path: walk(start, path + [nxt])
    for s in sorted(comp): walk(s, [s])
    return found


def cycles(package_dir:Path, nbs_dir:Path)->list[str]:
    "Each import cycle of the package, with the imports that close it."
    edges = _imports(package_dir)
    graph = {}
    for a, b in edges: graph.setdefault(a, set()).add(b)
    found = []
    for comp in _components(graph):
        for c in _elementary_cycles(graph, comp):
            links = '; '.join(f'{_file(a)} {_where(edges[a, b])} imports {b}'
                              for a, b in zip(c, c[1:]))
            found.append(f"cycle: {' -> '.join(c)} ({links})")
    return found


def higher_page_imports(package_dir:Path, nbs_dir:Path)->list[str]:
    "Each import of a module whose notebook sorts after the importer's; each module without one."
    nbs, found = notebooks(nbs_dir), []
    for m in modules(package_dir):
        if m not in nbs: found.append(f'{_file(m)} has no notebook with `#| default_exp {m}`')
    for (a, b), us in sorted(_imports(package_dir).items()):
        if a in nbs and b in nbs and nbs[b].name > nbs[a].name:
            found.append(f'{_file(a)} ({_page(a, nbs_dir, nbs)}) imports {b} '
                         f'({_page(b, nbs_dir, nbs)}): {_where(us)}')
    return found


def private_uses(package_dir:Path, nbs_dir:Path)->list[str]:
    "Each private name (`_x`, not a dunder) that a module imports from, or reads off, another."
    nbs, groups = notebooks(nbs_dir), {}
    for u in package_uses(package_dir):
        dunder = u.name and u.name.startswith('__') and u.name.endswith('__')
        if u.name and u.name.startswith('_') and not dunder:
            groups.setdefault((u.module, u.attribute, u.target, u.name), []).append(u)
    found = []
    for (m, attr, t, name), us in sorted(groups.items()):
        t = t or '__init__'
        did = f'reads {t}.{name}' if attr else f'imports private {name} from {t}'
        found.append(f'{_file(m)} ({_page(m, nbs_dir, nbs)}) {did}: {_where(us)}')
    return found


def _fail(title:str, found:list[str])->None:
    "Fail with `title` and each of `found` on a line of its own."
    pytest.fail(f'{len(found)} {title}:\n' + '\n'.join(found), pytrace=False)


def test_package_graph_flows_one_way()->None:
    "No import cycle; no module imports one whose notebook sorts after its own."
    found = cycles(LIB, NBS) + higher_page_imports(LIB, NBS)
    if found: _fail('imports against the page order', found)


def test_no_private_names_across_modules()->None:
    "No module imports, or reads as an attribute, another package module's private names."
    found = private_uses(LIB, NBS)
    if found: _fail("uses of another module's private names", found)


TOY = {'a.py': 'from .b import thing\nfrom . import __version__\n',
       'b.py': 'thing = 1\ndef f():\n    from toypkg.c import g\n    return g\n',
       'c.py': 'import toypkg.b as bb\nfrom .core import x\ndef g(): return bb.thing\n',
       'core.py': 'x = 1\ndef _hidden(): pass\n_SECRET = 2\n',
       'd.py': ('from .core import _SECRET, x\nimport toypkg.core\nfrom toypkg import core\n'
                'import importlib\n'
                'def f(): return core._hidden(), toypkg.core._hidden, core.__name__\n'
                "w = importlib.import_module('toypkg.core')._SECRET\n"),
       'e.py': 'from .core import x\n', '__init__.py': "__version__ = '1'\n",
       '_modidx.py': 'd = {}\n'}


def _toy(tmp_path:Path)->tuple[Path, Path]:
    "A tiny package with a cycle, higher-page imports and private uses, and its notebooks."
    pkg, nbs = tmp_path/'toypkg', tmp_path/'nbs'
    pkg.mkdir(); nbs.mkdir()
    for name, code in TOY.items(): (pkg/name).write_text(code)
    for nb in ['00_core', '01_a', '02_b', '03_c', '04_d']:
        mod = nb.split('_', 1)[1]
        cells = [_cell('code', f'#| default_exp {mod}'), _cell('markdown', '# Hi')]
        _notebook(nbs/f'{nb}.ipynb', cells)
    _notebook(nbs/'index.ipynb', [_cell('markdown', '# Index')])
    return pkg, nbs


def test_graph_checker_on_a_toy_package(tmp_path:Path)->None:
    "The checker finds the toy package's cycle, higher-page imports and private uses, and no more."
    pkg, nbs = _toy(tmp_path)
    assert cycles(pkg, nbs) == ['cycle: b -> c -> b (b.py line 3 (inside a function) imports c; '
                                'c.py line 1 imports b)']
    assert higher_page_imports(pkg, nbs) == [
        'e.py has no notebook with `#| default_exp e`',
        'a.py (nbs/01_a.ipynb) imports b (nbs/02_b.ipynb): line 1',
        'b.py (nbs/02_b.ipynb) imports c (nbs/03_c.ipynb): line 3 (inside a function)']
    assert private_uses(pkg, nbs) == [
        'd.py (nbs/04_d.ipynb) imports private _SECRET from core: line 1',
        'd.py (nbs/04_d.ipynb) reads core._SECRET: line 6',
        'd.py (nbs/04_d.ipynb) reads core._hidden: line 5 (inside a function)']


def test_graph_checker_passes_a_clean_package(tmp_path:Path)->None:
    "Imports that follow the page order, public names only: nothing to report."
    pkg, nbs = _toy(tmp_path)
    (pkg/'b.py').write_text('thing = 1\n')
    (pkg/'a.py').write_text('from .core import x\nfrom . import __version__\n')
    (pkg/'d.py').write_text('from toypkg import core, c\ndef f(): return core.x, c.__name__\n')
    (pkg/'e.py').unlink()
    assert cycles(pkg, nbs) == higher_page_imports(pkg, nbs) == private_uses(pkg, nbs) == []
