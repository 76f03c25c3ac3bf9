#!/usr/bin/env python3
"""Store the outputs the docs show: a CPU run for every cell, a real GPU run for the `cuda` cells.

    python tools/store_outputs.py cpu [NB...]              # run here (no GPU), `cuda` cells skipped, save
    python tools/store_outputs.py merge GPU_DIR NOTE [NB...]  # copy the `cuda` cells' outputs from the same
                                                          # notebooks run on a GPU (in GPU_DIR), each
                                                          # followed by NOTE ("NVIDIA H200, driver ...")
    python tools/store_outputs.py check [NB...]            # exit 1 if an output holds a local path

Outputs must not carry local paths: `cpu` and `merge` replace the checkout's and the temporary
folders' paths by short placeholders, and `check` fails on any that remain. A progress bar's
redrawn line is kept as its last drawing.
"""
import json, re, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT/'nbs'
LOCAL = re.compile(r'(/work/[\w./-]+|/tmp/[\w./-]+|/root/[\w./-]+|/home/[\w./-]+|/content/[\w./-]*|/kaggle/[\w./-]*)')
KEEP = ('/content/drive', '/content', '/kaggle/working')  # Colab's and Kaggle's own folders are facts, not local paths

def _flags(cell)->set:
    return {l[2:].strip() for l in ''.join(cell['source']).splitlines() if l.startswith('#|') and ':' not in l}

def _texts(o):
    if 'text' in o: yield 'text', o
    for k, v in o.get('data', {}).items():
        if k.startswith('text/') or k == 'application/json': yield k, o['data']

def _overwritten(s:str)->str:
    "What a terminal shows of text that redraws a line with carriage returns (a progress bar): the last drawing."
    return re.sub(r'[^\n]*\r(?!\n)', '', s)

def _scrub(s:str)->str:
    def rep(m):
        p = m.group(0)
        return p if p.startswith(KEEP) else '<tmp>/' + p.rstrip('/').split('/')[-1]
    return LOCAL.sub(rep, s.replace(str(ROOT), '<checkout>'))

def scrub(nb:dict)->dict:
    for c in nb['cells']:
        for o in c.get('outputs', []):
            if o.get('output_type') == 'stream':
                o['text'] = _overwritten(''.join(o['text']) if isinstance(o['text'], list) else o['text'])
            for k, holder in _texts(o):
                v = holder[k]
                if isinstance(v, list): holder[k] = [_scrub(x) for x in v]
                elif isinstance(v, str): holder[k] = _scrub(v)
    return nb

def local_paths(nb:dict)->list[str]:
    found = []
    for c in nb['cells']:
        for o in c.get('outputs', []):
            for k, holder in _texts(o):
                v = holder[k]
                s = ''.join(v) if isinstance(v, list) else str(v)
                found += [p for p in LOCAL.findall(s.replace('<checkout>', '')) if not p.startswith(KEEP)]
    return found

def names(args): return [NBS/a if not a.endswith('.ipynb') or '/' not in a else Path(a) for a in args] if args else \
    sorted(NBS.glob('*.ipynb'))

def cpu(nbs:list[Path])->int:
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'run_nbs.py'), '--save', '--skip', 'cuda', *map(str, nbs)])
    for p in nbs: p.write_text(json.dumps(scrub(json.loads(p.read_text())), indent=1, ensure_ascii=False) + '\n')
    return r.returncode

def merge(gpu_dir:Path, note:str, nbs:list[Path])->int:
    for p in nbs:
        g = gpu_dir/p.name
        if not g.exists(): print(f'{p.name}: not in {gpu_dir}, left as it is'); continue
        nb, gnb = json.loads(p.read_text()), json.loads(g.read_text())
        gcells = {c.get('id'): c for c in gnb['cells']}
        n = 0
        for c in nb['cells']:
            if c['cell_type'] != 'code' or 'cuda' not in _flags(c): continue
            gc = gcells.get(c.get('id'))
            if gc is None or ''.join(gc['source']) != ''.join(c['source']):
                print(f'{p.name}: a cuda cell changed since the GPU run; its outputs are left empty'); c['outputs'] = []; continue
            c['outputs'] = gc.get('outputs', []) + [{'name': 'stdout', 'output_type': 'stream', 'text': [f'[{note}]\n']}]
            n += 1
        p.write_text(json.dumps(scrub(nb), indent=1, ensure_ascii=False) + '\n')
        print(f'{p.name}: {n} cuda cells take the GPU run\'s outputs')
    return 0

def check(nbs:list[Path])->int:
    bad = {p.name: ps[:3] for p in nbs if (ps := local_paths(json.loads(p.read_text())))}
    for k, v in bad.items(): print(f'{k}: local paths in outputs: {v}')
    return 1 if bad else 0

def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv: print(__doc__); return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == 'cpu': return cpu(names(rest))
    if cmd == 'merge': return merge(Path(rest[0]), rest[1], names(rest[2:]))
    if cmd == 'check': return check(names(rest))
    print(__doc__); return 2

if __name__ == '__main__': sys.exit(main())
