#!/usr/bin/env python3
"""Build a browsable static docs site from the notebooks, without Quarto.

    python tools/build_docs.py            # _proc/ via nbdev, then the site in _site/
    python tools/build_docs.py --out DIR [--proc _proc]

Where Quarto exists, `nbdev_docs` builds the real site from `nbs/_quarto.yml`. Where it does not (these
machines), this takes the same processed notebooks that `nbdev_docs` hands to Quarto
(`nbdev.serve.proc_nbs`: front matter, `show_doc` entries, hidden cells dropped) and renders them with
smalldocs (pure Python, reads `_quarto.yml`, `sidebar.yml` and `nbdev.yml` as Quarto does): a sidebar,
an on-page table of contents, full-text search from a `search.json` built here (Fuse.js, served from
`site_libs/`, no network), code highlighted by Pygments. All assets are local.

What this adds around smalldocs, so the site matches what nbdev's links expect:
- each page under the file name nbdev gives it (`output-file`, e.g. `persistence.html`), which smalldocs
  does not read: the notebooks are staged under those names;
- links to the published site and to notebooks made relative;
- nbdev's links inside signature comments (``# from [`rng_state`](persistence.html#rng_state)``), which
  are Markdown inside a code block and would show literally, made real links;
- `__name__` in prose and headings kept as text, not read as bold;
Exit status 1 if a notebook cannot be processed or smalldocs warns about something other than the
`output-file` it does not read.
"""
import argparse, configparser, re, shutil, sys, tempfile, time
from pathlib import Path

import yaml
from execnb.nbio import read_nb, write_nb

ROOT = Path(__file__).resolve().parent.parent

def settings()->configparser.SectionProxy:
    c = configparser.ConfigParser(); c.read(ROOT/'settings.ini')
    return c['DEFAULT']

def front_matter(nb)->dict:
    for c in nb.cells:
        if c.cell_type == 'raw' and c.source.startswith('---'):
            return yaml.safe_load(c.source.strip().strip('-')) or {}
    return {}

def page_name(nb_path:Path, fm:dict)->str:
    return fm.get('output-file') or ('index.html' if nb_path.stem == 'index' else nb_path.stem + '.html')

_FENCE = re.compile(r'^(```|~~~).*?^\1\s*$', re.M | re.S)
_SPAN = re.compile(r'(`+).+?\1', re.S)
_DUNDER = re.compile(r'(?<![\w\\])__(\w+?)__(?!\w)')

def keep_dunders(md:str)->str:
    "`__call__` outside code stays `__call__`: escape its underscores (Markdown reads `__x__` as bold)."
    def prose(s): return _DUNDER.sub(lambda m: rf'\_\_{m.group(1)}\_\_', s)
    def outside(s, pat, f):
        out, i = [], 0
        for m in pat.finditer(s): out += [f(s[i:m.start()]), m.group(0)]; i = m.end()
        return ''.join(out + [f(s[i:])])
    return outside(md, _FENCE, lambda s: outside(s, _SPAN, prose))

_NB_LINK = re.compile(r'(\]\(|href=")(?:\./)?(?:nbs/)?([\w.-]+\.ipynb)(?=[#)"])')

def prepare(nb, staged:dict)->None:
    "Drop `output-file`, link notebooks under their staged names, keep dunders as text."
    def nb_links(s): return _NB_LINK.sub(lambda m: m.group(1) + staged.get(m.group(2), m.group(2)), s)
    cells = []
    for c in nb.cells:
        if c.cell_type == 'raw' and c.source.startswith('---'):
            fm = front_matter(nb); fm.pop('output-file', None)
            c.source = '---\n' + yaml.safe_dump(fm, allow_unicode=True, sort_keys=False) + '---\n'
        elif c.cell_type == 'markdown': c.source = nb_links(keep_dunders(c.source))
        elif c.cell_type == 'code':
            for o in c.get('outputs', []):
                md = o.get('data', {}).get('text/markdown')
                if md: o['data']['text/markdown'] = nb_links(keep_dunders(md if isinstance(md, str) else ''.join(md)))
        cells.append(c)
    nb.cells = cells

_CODE_LINK = re.compile(r'\[`([^`\]]+)`\]\(([^)\s]+)\)')

def code_links(text:str)->str:
    "Markdown links that nbdev put into comments of signatures become links (inside highlighted comments)."
    def comment(m): return _CODE_LINK.sub(lambda l: f'<a href="{l.group(2)}"><code>{l.group(1)}</code></a>', m.group(0))
    return re.sub(r'<span class="co">.*?</span>', comment, text, flags=re.S)

def relink(text:str, pages:dict, doc_url:str)->str:
    "Links to the published site and to notebooks become links to pages of this site."
    if doc_url: text = text.replace(doc_url.rstrip('/') + '/', '')
    def nb_link(m):
        target = pages.get(m.group(2))
        return f'{m.group(1)}{target}{m.group(3)}' if target else m.group(0)
    return re.sub(r'(href=")(?:\./)?(?:nbs/)?([\w.-]+\.ipynb)((?:#[^"]*)?")', nb_link, text)

def build(out:Path, proc:Path|None=None)->list[Path]:
    from smalldocs.site import build as sd_build
    cfg = settings()
    if proc is None:
        from nbdev.serve import proc_nbs
        proc = Path(proc_nbs(n_workers=2))
    side = yaml.safe_load((ROOT/'nbs'/'sidebar.yml').read_text())['website']['sidebar']['contents']
    missing = [n for n in side if not (proc/n).exists()]
    if missing: raise SystemExit(f'Not processed (see the errors above): {", ".join(missing)}')
    nbs = {n: read_nb(proc/n) for n in side}
    pages = {n: page_name(Path(n), front_matter(nb)) for n, nb in nbs.items()}
    doc_url = f"{cfg['doc_host']}{cfg['doc_baseurl']}".replace('%(user)s', cfg['user']).replace('%(repo)s', cfg['repo'])
    if out.exists(): shutil.rmtree(out)
    with tempfile.TemporaryDirectory(prefix='docs-stage-') as tmp:
        stage = Path(tmp)
        quarto = yaml.safe_load((ROOT/'nbs'/'_quarto.yml').read_text())
        quarto.setdefault('project', {})['output-dir'] = str(out)
        fmt = quarto.get('format', {})  # Quarto's Markdown copies (`commonmark`, `keep-md`) have no use here
        fmt.pop('commonmark', None); fmt.get('html', {}).pop('keep-md', None)
        (stage/'_quarto.yml').write_text(yaml.safe_dump(quarto, sort_keys=False))
        meta = yaml.safe_load((ROOT/'nbs'/'nbdev.yml').read_text())
        meta.get('project', {}).pop('output-dir', None)  # the staged _quarto.yml names the output folder
        (stage/'nbdev.yml').write_text(yaml.safe_dump(meta, sort_keys=False))
        staged = {n: Path(pages[n]).with_suffix('.ipynb').name for n in side}
        (stage/'sidebar.yml').write_text(yaml.safe_dump({'website': {'sidebar': {'contents': [staged[n] for n in side]}}}))
        shutil.copy(ROOT/'nbs'/'styles.css', stage/'styles.css')
        for n in side:
            prepare(nbs[n], staged); write_nb(nbs[n], stage/staged[n])
        site = sd_build(stage, quiet=True)
    bad = [w for w in site.warnings if 'output-file' not in w]
    if bad: raise SystemExit('smalldocs: ' + '\n'.join(bad))
    for f in out.glob('*.html'):
        text = code_links(relink(f.read_text(), pages, doc_url))
        if 'rel="icon"' not in text: text = text.replace('<head>', '<head><link rel="icon" href="data:,">', 1)  # no favicon.ico 404
        f.write_text(text)
    idx = out/'search.json'
    if idx.exists(): idx.write_text(relink(idx.read_text(), pages, doc_url))
    return [out/pages[n] for n in side]

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', type=Path, default=ROOT/'_site')
    ap.add_argument('--proc', type=Path, default=None, help='already processed notebooks (default: run proc_nbs)')
    args = ap.parse_args(argv)
    t0 = time.time()
    pages = build(args.out.resolve(), args.proc)
    missing = [p.name for p in pages if not p.exists()]
    if missing: raise SystemExit(f'pages not written: {", ".join(missing)}')
    print(f'{len(pages)} pages in {args.out} in {time.time() - t0:.1f} s')
    return 0

if __name__ == '__main__': sys.exit(main())
