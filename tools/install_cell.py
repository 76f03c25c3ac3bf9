#!/usr/bin/env python3
"""Give every notebook the same first install cell, the one Colab runs when a page is opened alone.

    python tools/install_cell.py          # write the cell into every notebook that has one
    python tools/install_cell.py --check  # exit 1, naming the notebooks, if a cell differs

The cell installs the package from the repository named in settings.ini when it is missing. It is
`#| hide`: Colab shows and runs it, the docs site (read, not run) leaves it out like any hidden cell. When pip
fails (no network, a bad address), the cell stops "Run all" with pip's reason in one line, instead of
letting the page fail later on a missing module.
"""
import argparse, configparser, json, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = "find_spec('colab_t4_nb') is None"

def source()->str:
    c = configparser.ConfigParser(); c.read(ROOT/'settings.ini'); d = c['DEFAULT']
    url = f"git+https://github.com/{d['user']}/{d['repo']}"
    return f'''#| hide
#| eval: false
import importlib.util, subprocess, sys
if importlib.util.find_spec('colab_t4_nb') is None:  # a notebook opened on its own, e.g. in Colab
    src = '{url}'
    pip = subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', src],
                         capture_output=True, text=True)
    if pip.returncode:  # stop "Run all" here, with pip's reason in one line
        why = [l.strip() for l in pip.stderr.splitlines() if l.strip()] or ['pip gave no reason']
        why = next((l for l in why if l.startswith(('fatal:', 'ERROR:'))), why[-1])
        class InstallError(Exception): _render_traceback_ = lambda self: [f'InstallError: {{self}}']
        raise InstallError(f'pip could not install {{src}}: {{why}}')'''

def lines(s:str)->list: return [l + '\n' for l in s.split('\n')[:-1]] + [s.split('\n')[-1]]

def fix(path:Path, write:bool)->bool:
    "True if `path`'s install cell is the canonical one; otherwise rewrite it when `write`."
    nb = json.loads(path.read_text(encoding='utf-8'))
    cells = [c for c in nb['cells'] if c['cell_type'] == 'code' and MARK in ''.join(c['source'])]
    if len(cells) != 1: raise SystemExit(f'{path.name}: {len(cells)} install cells (want 1)')
    if ''.join(cells[0]['source']) == source(): return True
    if write:
        cells[0]['source'] = lines(source())
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n', encoding='utf-8')
    return False

def main(argv=None)->int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--check', action='store_true', help='only report notebooks whose cell differs')
    args = ap.parse_args(argv)
    stale = [p.name for p in sorted((ROOT/'nbs').glob('*.ipynb')) if not fix(p, not args.check)]
    if args.check and stale: print('install cell differs in: ' + ', '.join(stale), file=sys.stderr); return 1
    if stale: print('install cell written in: ' + ', '.join(stale))
    return 0

if __name__ == '__main__': sys.exit(main())
