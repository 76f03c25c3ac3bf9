#!/usr/bin/env python3
"""Run a notebook top to bottom in a Jupyter kernel, as Colab's "Run all" does, and stop at the first error.

    python tools/run_kernel.py NB [--timeout S]

The kernel is this interpreter's own (ipykernel through nbclient), so run it with the Python whose
packages the notebook should see; the notebook runs in its own folder. Exit status 1 prints the
failing cell and its traceback.
"""
import argparse, sys, time
from pathlib import Path

def main(argv=None)->int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('notebook', type=Path)
    ap.add_argument('--timeout', type=int, default=1800, help='seconds a cell may take (default: 1800)')
    args = ap.parse_args(argv)
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    path = args.notebook.resolve()
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=args.timeout, kernel_name='python3',
                            resources={'metadata': {'path': str(path.parent)}})
    t0 = time.time()
    try: client.execute()
    except CellExecutionError as e:
        print(f'{path.name}: FAILED in {time.time() - t0:.1f} s\n{e}', file=sys.stderr)
        return 1
    print(f'{path.name}: ok in {time.time() - t0:.1f} s')
    return 0

if __name__ == '__main__': sys.exit(main())
