#!/usr/bin/env python3
"""Execute notebooks top to bottom, as "Run all" does, and optionally keep the outputs.

    python tools/run_nbs.py NB...                    # run every cell, like Colab's "Run all"
    python tools/run_nbs.py --skip "slow cuda" NB... # skip cells carrying these test flags
    python tools/run_nbs.py --save NB...             # write the outputs back into the notebooks
    python tools/run_nbs.py --test --skip "" NB...   # as `nbdev_test` runs them: no `eval: false` or
                                                     # `notest` cells, IN_TEST set

Each notebook runs in the folder it lives in, in this process, through execnb (the engine
`nbdev_test` uses). Exit status 1 names the first notebook with a failing cell.
"""
import argparse, os, re, sys, time
from pathlib import Path

from execnb.nbio import read_nb, write_nb
from execnb.shell import CaptureShell

def flags_of(cell)->set:
    return {l[2:].strip() for l in cell.source.splitlines() if l.startswith('#|') and ':' not in l}

def evaluated(cell)->bool:
    return not any(re.match(r'^#\|\s*eval:\s*false', l) for l in cell.source.splitlines())

def run(path:Path, skip:set, save:bool, test:bool=False)->bool:
    nb = read_nb(path)
    def _pre(cell):  # True: do not run
        if test and (not evaluated(cell) or 'notest' in flags_of(cell) or 'nbdev_export(' in cell.source): return True
        return cell.cell_type != 'code' or bool(flags_of(cell) & skip)
    sh = CaptureShell(path)
    cwd = os.getcwd()
    os.chdir(path.parent)
    t0 = time.time()
    try:
        sh.run_all(nb, exc_stop=True, preproc=_pre)
        ok = True
    except Exception:
        sys.stderr.write(sh.prettytb(fname=path) + '\n')
        ok = False
    finally: os.chdir(cwd)
    print(f'{path.name}: {"ok" if ok else "FAILED"} in {time.time() - t0:.1f} s', flush=True)
    if save and ok: write_nb(nb, path)
    return ok

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('notebooks', nargs='+', type=Path)
    ap.add_argument('--skip', default='', help='space-separated cell flags to skip')
    ap.add_argument('--save', action='store_true', help='write outputs back into the notebooks')
    ap.add_argument('--test', action='store_true', help='skip the cells nbdev_test skips, set IN_TEST')
    args = ap.parse_args(argv)
    if args.test: os.environ['IN_TEST'] = '1'
    ok = all([run(p.resolve(), set(args.skip.split()), args.save, args.test) for p in args.notebooks])
    return 0 if ok else 1

if __name__ == '__main__': sys.exit(main())
