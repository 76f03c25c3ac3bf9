#!/usr/bin/env python3
"""Put an "Open in Colab" badge under the title of every notebook, its address built from settings.ini.

    python tools/colab_badges.py          # add or update the badge cells
    python tools/colab_badges.py --check  # exit 1, naming the notebooks, if a badge is missing or stale

The badge is its own markdown cell right after the `# Title` cell, so nbdev still reads the title and
subtitle from the title cell; README.md (made from index.ipynb) carries the index page's badge.
"""
import argparse, configparser, json, sys, uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BADGE_IMG = 'https://colab.research.google.com/assets/colab-badge.svg'

def colab_url(nb_name:str)->str:
    c = configparser.ConfigParser(); c.read(ROOT/'settings.ini'); d = c['DEFAULT']
    return f"https://colab.research.google.com/github/{d['user']}/{d['repo']}/blob/{d['branch']}/{d.get('nbs_path', 'nbs')}/{nb_name}"

def badge_md(nb_name:str)->str: return f'[![Open In Colab]({BADGE_IMG})]({colab_url(nb_name)})'

def _src(c)->str: return ''.join(c['source'])

def fix(path:Path, write:bool)->bool:
    "True if `path` already has the right badge; otherwise add or update it when `write`."
    nb = json.loads(path.read_text())
    cells = nb['cells']
    title = next((i for i, c in enumerate(cells) if c['cell_type'] == 'markdown' and _src(c).lstrip().startswith('# ')), None)
    if title is None: raise SystemExit(f'{path.name}: no "# Title" markdown cell')
    want = badge_md(path.name)
    nxt = cells[title + 1] if title + 1 < len(cells) else None
    if nxt is not None and nxt['cell_type'] == 'markdown' and _src(nxt).startswith('[![Open In Colab]'):
        if _src(nxt) == want: return True
        nxt['source'] = [want]
    else:
        cells.insert(title + 1, {'cell_type': 'markdown', 'id': uuid.uuid4().hex[:8], 'metadata': {}, 'source': [want]})
    if write: path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')
    return False

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--check', action='store_true')
    args = ap.parse_args(argv)
    bad = [p.name for p in sorted((ROOT/'nbs').glob('*.ipynb')) if not fix(p, write=not args.check)]
    if args.check and bad:
        print(f'Missing or stale "Open in Colab" badge in: {", ".join(bad)}. Run python tools/colab_badges.py')
        return 1
    return 0

if __name__ == '__main__': sys.exit(main())
