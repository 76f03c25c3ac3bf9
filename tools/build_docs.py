#!/usr/bin/env python3
"""Build a browsable static docs site from the notebooks, without Quarto.

    python tools/build_docs.py            # _proc/ via nbdev, then the site in _site/
    python tools/build_docs.py --out DIR

Where Quarto exists, `nbdev_docs` builds the real site from `_quarto.yml`. Where it does not (these
machines), this takes the same processed notebooks that `nbdev_docs` hands to Quarto
(`nbdev.serve.proc_nbs`: front matter, `show_doc` entries, hidden cells dropped), renders each with
nbconvert's HTML exporter, and lays them out with the sidebar of `nbs/sidebar.yml`: one page per
notebook under the file name nbdev gives it, links between pages made relative. Exit status 1 if a notebook cannot be processed.
"""
import argparse, configparser, html, json, re, shutil, sys, time
from pathlib import Path

import nbformat, yaml
from nbconvert import HTMLExporter
from traitlets.config import Config

ROOT = Path(__file__).resolve().parent.parent

def settings()->configparser.SectionProxy:
    c = configparser.ConfigParser(); c.read(ROOT/'settings.ini')
    return c['DEFAULT']

def directives(src:str)->dict:
    d = {}
    for line in src.splitlines():
        m = re.match(r'^#\|\s*([\w-]+):?\s*(.*)$', line)
        if not m: break
        d[m.group(1)] = m.group(2).strip()
    return d

def front_matter(nb)->dict:
    for c in nb.cells:
        if c.cell_type == 'raw' and c.source.startswith('---'):
            return yaml.safe_load(c.source.strip().strip('-')) or {}
    return {}

_QUARTO_ATTRS = re.compile(r'\{(?:target|\.|#)[^}\n]*\}')  # Quarto's link/span attributes

def prepare(nb)->None:
    "Drop the front matter and hidden cells, hide inputs marked `echo: false`, strip `#|` lines."
    cells = []
    for c in nb.cells:
        if c.cell_type == 'raw': continue
        d = directives(c.source) if c.cell_type == 'code' else {}
        if 'hide' in d or d.get('include') == 'false': continue
        if c.cell_type == 'code':
            tags = c.metadata.setdefault('tags', [])
            if d.get('echo') == 'false': tags.append('remove_input')
            if d.get('output') == 'false': tags.append('remove_output')
            c.source = '\n'.join(l for l in c.source.splitlines() if not l.startswith('#|')).strip('\n')
            for o in c.get('outputs', []):
                md = o.get('data', {}).get('text/markdown')
                if md: o['data']['text/markdown'] = _QUARTO_ATTRS.sub('', md if isinstance(md, str) else ''.join(md))
            if not c.source and not c.get('outputs'): continue
        cells.append(c)
    nb.cells = cells

def exporter()->HTMLExporter:
    c = Config()
    c.TagRemovePreprocessor.enabled = True
    c.TagRemovePreprocessor.remove_input_tags = ('remove_input',)
    c.TagRemovePreprocessor.remove_all_outputs_tags = ('remove_output',)
    return HTMLExporter(config=c, template_name='basic', exclude_input_prompt=True, exclude_output_prompt=True)

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} – {site}</title><link rel="icon" href="data:,"><link rel="stylesheet" href="site.css"></head>
<body><nav class="sidebar"><a class="site" href="index.html">{site}</a><ul>{nav}</ul></nav>
<main><header><h1 class="title">{title}</h1><p class="description">{description}</p></header>
{body}</main></body></html>
"""

CSS = """body{margin:0;font-family:system-ui,sans-serif;display:flex;line-height:1.5}
nav.sidebar{width:16rem;min-height:100vh;padding:1rem;background:#f6f7f9;border-right:1px solid #ddd;flex:none}
nav.sidebar a.site{font-weight:bold;display:block;margin-bottom:.5rem}nav.sidebar ul{list-style:none;padding:0}
nav.sidebar li.current a{font-weight:bold}main{padding:1rem 2rem;max-width:60rem;overflow-x:auto}
pre{background:#f4f4f4;padding:.5rem;overflow-x:auto}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 6px}img{max-width:100%}.description{color:#555}
"""

def page_name(nb_path:Path, fm:dict)->str:
    return fm.get('output-file') or ('index.html' if nb_path.stem == 'index' else nb_path.stem + '.html')

def relink(text:str, pages:dict, doc_url:str)->str:
    "Links to the published site and to notebooks become links to pages of this site."
    if doc_url: text = text.replace(doc_url.rstrip('/') + '/', '')
    def nb_link(m):
        target = pages.get(m.group(2))
        return f'{m.group(1)}{target}{m.group(3)}' if target else m.group(0)
    return re.sub(r'(href=")(?:\./)?(?:nbs/)?([\w.-]+\.ipynb)((?:#[^"]*)?")', nb_link, text)

def quarto_ids(text:str)->str:
    "Heading ids in lower case, as Quarto makes them (nbdev's links to API entries expect that)."
    text = re.sub(r'(<h[1-6][^>]* id=")([^"]+)"', lambda m: m.group(1) + m.group(2).lower() + '"', text)
    return re.sub(r'(<a class="anchor-link" href="#)([^"]+)"', lambda m: m.group(1) + m.group(2).lower() + '"', text)

def build(out:Path, proc:Path|None=None)->list[Path]:
    cfg = settings()
    if proc is None:
        from nbdev.serve import proc_nbs
        proc = Path(proc_nbs(n_workers=2))
    side = yaml.safe_load((ROOT/'nbs'/'sidebar.yml').read_text())['website']['sidebar']['contents']
    missing = [n for n in side if not (proc/n).exists()]
    if missing: raise SystemExit(f'Not processed (see the errors above): {", ".join(missing)}')
    nbs = {n: nbformat.read(proc/n, as_version=4) for n in side}
    fms = {n: front_matter(nb) for n, nb in nbs.items()}
    pages = {n: page_name(Path(n), fms[n]) for n in side}
    doc_url = f"{cfg['doc_host']}{cfg['doc_baseurl']}".replace('%(user)s', cfg['user']).replace('%(repo)s', cfg['repo'])
    if out.exists(): shutil.rmtree(out)
    out.mkdir(parents=True)
    (out/'site.css').write_text(CSS + (ROOT/'nbs'/'styles.css').read_text())
    ex, written = exporter(), []
    for n in side:
        nb, fm = nbs[n], fms[n]
        prepare(nb)
        body, _ = ex.from_notebook_node(nb)
        nav = ''.join(f'<li{" class=current" if m == n else ""}><a href="{pages[m]}">{html.escape(fms[m].get("title", m))}'
                      f'</a></li>' for m in side)
        text = PAGE.format(title=html.escape(fm.get('title', n)), site=html.escape(cfg['repo']), nav=nav,
                           description=html.escape(fm.get('description', '')), body=body)
        (out/pages[n]).write_text(quarto_ids(relink(text, pages, doc_url)))
        written.append(out/pages[n])
    return written

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', type=Path, default=ROOT/'_site')
    ap.add_argument('--proc', type=Path, default=None, help='already processed notebooks (default: run proc_nbs)')
    args = ap.parse_args(argv)
    t0 = time.time()
    pages = build(args.out.resolve(), args.proc)
    print(f'{len(pages)} pages in {args.out} in {time.time() - t0:.1f} s')
    return 0

if __name__ == '__main__': sys.exit(main())
