#!/usr/bin/env python3
"""Measure what a reader of the numbered notebooks meets, page by page.

Pages are the files nbs/*.ipynb whose name starts with a digit; index.ipynb is not a page.
The nbs folder is `nbs_path` in settings.ini, else nbs/.

Measures, per page and over all pages together (the ALL row pools the cells, it does not average):

- Exported cell: a code cell with an `#| export` or `#| exports` directive line.
- Lines per exported cell: its non-blank lines that are not `#|` directives.
  Reported as the median and the p90.
- Definitions: top-level def, async def and class statements of a cell (column 0).
  A decorated def counts once. They are counted with `ast`; a cell that does not parse
  counts its lines that start with `def `, `async def ` or `class `.
- Multi-definition share: the share of exported cells with 2 or more definitions.
- Prose: the markdown cells. Fenced code blocks, headings (lines starting with #),
  table rows (lines starting with |), HTML comments and HTML lines (starting with <) are dropped.
  Other HTML tags are removed. Images are removed and links keep only their text.
  List markers (-, *, +, 1. or 1)) and quote markers (>) are stripped.
- Blocks: prose is cut at blank lines, where a list item starts and where a quote starts or ends.
  A sentence never spans two blocks.
- Sentence end: `.`, `!` or `?` (closing quotes, brackets and emphasis may follow it),
  then whitespace, then an uppercase letter, a backtick or an opening parenthesis
  (emphasis or a quote may come first).
  Marks inside inline code spans, in "e.g.", "i.e." and "vs." never end a sentence.
  A decimal number (3.5) has no whitespace after its point, so it never ends one either.
- Words per sentence: its whitespace-separated tokens.
  Only sentences of 3 or more words count. Reported as the median and the p90.
- Long-line share: the share of non-blank lines of all code cells longer than 100 characters.
- Output share: the share of code cells whose `outputs` list is not empty.
- Cells: the number of cells of the page (ALL: of all pages).
- Median: `statistics.median` (the mean of the two middle values for an even count).
- p90: nearest rank, the smallest value with at least 90% of the values at or below it.
- A measure with nothing to measure (no exported cell, no sentence) is None, shown as -.

    python tools/page_metrics.py          # the table, then each goal, measured, met or not met
    python tools/page_metrics.py --json   # the same numbers as JSON
"""
from __future__ import annotations
import argparse, ast, configparser, json, math, re, statistics, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LONG = 100  # a code line longer than this is long

DIRECTIVE = re.compile(r'^\s*#\s*\|')
EXPORT = re.compile(r'^\s*#\s*\|\s*exports?(\s|$)')
DEF_LINE = re.compile(r'^(async\s+def|def|class)\s')
FENCE = re.compile(r'^\s*(```|~~~)')
LIST_ITEM = re.compile(r'^\s*([-*+]|\d+[.)])\s+')
QUOTE = re.compile(r'^\s*(>\s?)+')
CODE_SPAN = re.compile(r'(`+)(.+?)\1', re.S)
ABBREV = re.compile(r'\b(e\.g\.|i\.e\.|vs\.)', re.I)
SENTENCE_END = re.compile(r'[.!?][)\]"\'*_]*(?=\s+[*_"\']*[A-Z`(])')
CUT = '\x03'  # where one block of prose ends and the next begins
KEEP = {'.': '\x00', '!': '\x01', '?': '\x02'}  # stand-ins for marks that cannot end a sentence


def nbs_dir(root:Path=ROOT)->Path:
    "The notebooks folder: `nbs_path` in settings.ini, else nbs/."
    cfg = configparser.ConfigParser()
    cfg.read(root/'settings.ini')
    return root/cfg['DEFAULT'].get('nbs_path', 'nbs')


def pages(nbs:Path)->list[Path]:
    "The numbered notebooks of `nbs`, in file name order."
    return sorted(p for p in nbs.glob('*.ipynb') if p.name[:1].isdigit())


def source(cell:dict)->str:
    "A cell's source as one string."
    src = cell.get('source', '')
    return ''.join(src) if isinstance(src, list) else src


def is_exported(cell:dict)->bool:
    "Is this a code cell with an `#| export` or `#| exports` directive?"
    if cell.get('cell_type') != 'code': return False
    return any(EXPORT.match(l) for l in source(cell).splitlines())


def body_lines(src:str)->list[str]:
    "The non-blank lines of `src` that are not `#|` directives."
    return [l for l in src.splitlines() if l.strip() and not DIRECTIVE.match(l)]


def definitions(src:str)->int:
    "How many top-level def, async def and class statements `src` has."
    code = '\n'.join(l for l in src.splitlines() if not DIRECTIVE.match(l))
    try: tree = ast.parse(code)
    except SyntaxError: return sum(bool(DEF_LINE.match(l)) for l in code.splitlines())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return sum(isinstance(n, kinds) for n in tree.body)


def _shield(m:re.Match)->str:
    "The matched text with its sentence marks replaced by their `KEEP` stand-ins."
    return re.sub(r'[.!?]', lambda c: KEEP[c.group(0)], m.group(0))


def prose_blocks(md:str)->list[str]:
    "The prose of a markdown cell, as blocks of text that no sentence crosses."
    md = re.sub(r'<!--.*?-->', ' ', md, flags=re.S)
    parts, fenced, quoted = [], False, False
    for line in md.splitlines():
        s = line.strip()
        if FENCE.match(s): fenced = not fenced
        if fenced or FENCE.match(s) or not s or s.startswith(('#', '|', '<')):
            parts.append(CUT)
            continue
        was, quoted = quoted, bool(QUOTE.match(s))
        s = QUOTE.sub('', s)
        if quoted != was or LIST_ITEM.match(s): parts.append(CUT)
        parts.append(LIST_ITEM.sub('', s))
    return [b.strip() for b in ' '.join(parts).split(CUT) if b.strip()]


def clean(text:str)->str:
    "Text without HTML tags or images, links reduced to their text."
    text = re.sub(r'!\[[^\]]*\]\([^)]*\)', ' ', text)
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', text)
    return re.sub(r'</?[A-Za-z][^>]*>', ' ', text)


def split_sentences(text:str)->list[str]:
    "`text` cut at each sentence end (see the module docstring)."
    text = CODE_SPAN.sub(_shield, text)
    text = ABBREV.sub(_shield, text)
    out, start = [], 0
    for m in SENTENCE_END.finditer(text):
        out.append(text[start:m.end()])
        start = m.end()
    out.append(text[start:])
    back = str.maketrans({v: k for k, v in KEEP.items()})
    return [s.translate(back).strip() for s in out if s.strip()]


def sentences(md:str)->list[str]:
    "The sentences of a markdown cell's prose."
    return [s for b in prose_blocks(md) for s in split_sentences(clean(b))]


def sentence_words(md:str)->list[int]:
    "Words per sentence of a markdown cell, for sentences of 3 or more words."
    return [n for n in (len(s.split()) for s in sentences(md)) if n >= 3]


def raw(nb:dict)->dict:
    "The counts and value lists of one notebook that the measures are made from."
    r = dict(cells=0, exported_lines=[], exported_defs=[], sentence_words=[],
             code_lines=0, long_lines=0, code_cells=0, with_output=0)
    for cell in nb.get('cells', []):
        r['cells'] += 1
        src = source(cell)
        if cell.get('cell_type') == 'markdown': r['sentence_words'] += sentence_words(src)
        if cell.get('cell_type') != 'code': continue
        r['code_cells'] += 1
        r['with_output'] += bool(cell.get('outputs'))
        lines = [l for l in src.splitlines() if l.strip()]
        r['code_lines'] += len(lines)
        r['long_lines'] += sum(len(l) > LONG for l in lines)
        if is_exported(cell):
            r['exported_lines'].append(len(body_lines(src)))
            r['exported_defs'].append(definitions(src))
    return r


def merge(raws:list[dict])->dict:
    "The raw counts of several notebooks pooled into one."
    out = raw({})
    for r in raws:
        for k, v in r.items(): out[k] = out[k] + v
    return out


def median(xs:list[int])->float|None:
    "The median of `xs`; None when empty."
    return statistics.median(xs) if xs else None


def p90(xs:list[int])->int|None:
    "The nearest-rank 90th percentile of `xs`; None when empty."
    return sorted(xs)[math.ceil(0.9*len(xs)) - 1] if xs else None


def share(n:int, d:int)->float|None:
    "n/d; None when d is 0."
    return n/d if d else None


def summarise(r:dict)->dict:
    "The measures made from one notebook's (or the pooled) raw counts."
    lines, defs, words = r['exported_lines'], r['exported_defs'], r['sentence_words']
    return dict(cells=r['cells'], exported_cells=len(lines),
                exported_lines_median=median(lines), exported_lines_p90=p90(lines),
                multi_def_share=share(sum(d >= 2 for d in defs), len(defs)),
                sentences=len(words), sentence_words_median=median(words),
                sentence_words_p90=p90(words),
                long_line_share=share(r['long_lines'], r['code_lines']),
                output_share=share(r['with_output'], r['code_cells']))


def measure(paths:list[Path])->dict:
    "The measures of each notebook in `paths`, by file name, and of all of them under 'ALL'."
    raws = {p.name: raw(json.loads(p.read_text(encoding='utf-8'))) for p in paths}
    res = {k: summarise(r) for k, r in raws.items()}
    res['ALL'] = summarise(merge(list(raws.values())))
    return res


def targets()->list[dict]:
    "The goals: the measure each is about, how it is compared, the limit and a description."
    return [dict(metric='exported_lines_median', op='<=', limit=8,
                 goal='median exported cell <= 8 lines'),
            dict(metric='multi_def_share', op='<=', limit=0.06,
                 goal='<= 6% of exported cells with 2+ definitions'),
            dict(metric='sentence_words_median', op='<=', limit=16,
                 goal='median prose sentence <= 16 words'),
            dict(metric='long_line_share', op='<=', limit=0.05,
                 goal=f'<= 5% of code lines over {LONG} characters'),
            dict(metric='output_share', op='>=', limit=0.25,
                 goal='>= 25% of code cells with an output')]


def check(all_row:dict)->list[dict]:
    "Each goal with the measured value and whether it is met (an unmeasured value is not met)."
    out = []
    for t in targets():
        v = all_row[t['metric']]
        met = v is not None and (v <= t['limit'] if t['op'] == '<=' else v >= t['limit'])
        out.append({**t, 'value': v, 'met': met})
    return out


COLUMNS = [('page', 'page'), ('cells', 'cells'), ('exported_cells', 'exp'),
           ('exported_lines_median', 'lines med'), ('exported_lines_p90', 'lines p90'),
           ('multi_def_share', '2+defs'), ('sentences', 'sents'),
           ('sentence_words_median', 'words med'), ('sentence_words_p90', 'words p90'),
           ('long_line_share', f'>{LONG}ch'), ('output_share', 'output')]


def fmt(key:str, v)->str:
    "A measure as the table shows it: shares in %, None as -."
    if v is None: return '-'
    if key.endswith('_share'): return f'{100*v:.1f}%'
    if isinstance(v, float): return f'{v:g}'
    return str(v)


def table(res:dict)->str:
    "The measures as a text table, one row per page and an ALL row."
    rows = [[h for _, h in COLUMNS]]
    rows += [[name] + [fmt(k, m[k]) for k, _ in COLUMNS[1:]] for name, m in res.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    line = lambda r: '  '.join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths)))
    return '\n'.join([line(rows[0]), '-'*len(line(rows[0]))] + [line(r) for r in rows[1:]])


def goal_lines(goals:list[dict])->str:
    "One line per goal: the goal, the measured value, met or not met."
    key = lambda g: g['metric']
    return '\n'.join(f"{g['goal']}: measured {fmt(key(g), g['value'])}, "
                     f"{'met' if g['met'] else 'not met'}" for g in goals)


def main(argv:list[str]|None=None)->int:
    "Print the table and the goals, or the numbers as JSON with --json."
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--json', action='store_true', help='print the numbers as JSON')
    ap.add_argument('--nbs', type=Path, default=None, help='notebooks folder (default: nbs_path)')
    a = ap.parse_args(argv)
    res = measure(pages(a.nbs or nbs_dir()))
    goals = check(res['ALL'])
    if a.json:
        every = res.pop('ALL')
        print(json.dumps(dict(pages=res, all=every, goals=goals), indent=1))
    else: print(f"{table(res)}\n\nGoals (ALL):\n{goal_lines(goals)}")
    return 0


if __name__ == '__main__': sys.exit(main())
