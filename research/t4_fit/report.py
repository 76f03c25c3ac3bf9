"""Write CACHE/report.md from the outputs of `rebuild.py` and `model.py` runs.

Usage: python research/t4_fit/report.py [TAG ...]   (TAG as model.py writes it, e.g. sum_final sum_robust)
The first TAG is the headline fit; the others are shown as alternatives.
       python research/t4_fit/report.py --colab TAG   (the Colab-style section, e.g. sum_colab)
       python research/t4_fit/report.py --summary TAG ...   (one line per fit)
"""
from __future__ import annotations
import json, math, os, sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
CACHE = Path(os.environ.get('T4_FIT_CACHE', Path.home()/'.cache'/'colab_t4_nb'/'t4_fit'))


# The T4 page's model before it took this fit (commit 7a19df5): the geometric middle of best-of ranges,
# with the published cuBLAS fp16 sweep (github.com/NVIDIA/cutlass/issues/106) as the size curve.
FORMER = dict(fp16=math.sqrt(25.0 * 42.7), fp32=math.sqrt(4.17 * 4.43), bf16=math.sqrt(2.01 * 2.46),  # TFLOP/s
              bw=math.sqrt(0.722 * 320 * 0.832 * 320), launch=math.sqrt(5.0 * 25.0))  # GB/s, us
LARGE = 2 * 4096**3  # FLOPs from which the large-size fp16 rate held


def _former_share(flops:float)->float:
    "The former page's share of the large-size fp16 rate for a product of `flops`."
    from colab_t4_nb import t4_model
    by = {}
    for m, n, k, ms in t4_model.T4_FP16_GEMM: by.setdefault(2 * m * n * k, []).append(2 * m * n * k / ms / 1e9)
    pts = [(f, math.exp(np.mean(np.log(r)))) for f, r in sorted(by.items())] + [(LARGE, FORMER['fp16'])]
    if flops >= LARGE: return 1.0
    if flops <= pts[0][0]: return pts[0][1] / FORMER['fp16']
    (f0, r0), (f1, r1) = next((a, b) for a, b in zip(pts, pts[1:]) if flops <= b[0])
    return (r0 + (r1 - r0) * math.log(flops / f0) / math.log(f1 / f0)) / FORMER['fp16']


def baseline(rows:pd.DataFrame)->pd.Series:
    """The prediction of the T4 page's former model (`FORMER`: best-of matmul rates with the published fp16
    size curve, copy bandwidth, a launch per kernel op) for each kept row."""
    recs = {r['row_id']: r for r in pd.read_pickle(CACHE / 'rows.pkl')}
    bw, launch = FORMER['bw'] * 1e9, FORMER['launch'] * 1e-6
    out = {}
    for rid in rows.row_id:
        ops = recs[rid]['ops']; ops = ops[ops.kind != 'view']
        t = 0.0
        for o in ops.itertuples():
            rate = FORMER.get(o.dtype, FORMER['fp32']) * 1e12
            if o.kind == 'matmul' and o.dtype == 'fp16' and o.flops: rate *= _former_share(o.flops)
            comp = o.flops / rate if o.flops else 0.0
            t += o.count * (max(comp, o.nbytes / bw) + launch)
        out[rid] = t * 1e3
    return rows.row_id.map(out)


def md(df:pd.DataFrame, fmt='{:.3g}')->str:
    cols = list(df.columns)
    f = lambda v: fmt.format(v) if isinstance(v, (float, np.floating)) and not math.isnan(v) else str(v)
    lines = ['| ' + ' | '.join(cols) + ' |', '|' + '---|' * len(cols)]
    lines += ['| ' + ' | '.join(f(v) for v in r) + ' |' for r in df.itertuples(index=False)]
    return '\n'.join(lines)


def colab(tag:str)->str:
    "The Colab-style section (CACHE/report_colab.md) from a fit run with the DLE sources excluded."
    o = json.loads((CACHE / f'overall_{tag}.json').read_text())
    params = pd.read_csv(CACHE / f'params_{tag}.csv'); loso = pd.read_csv(CACHE / f'loso_{tag}.csv')
    a, w, t = o['all'], o['source_weighted'], o['training']
    out = [f'## Colab-style sources only ({tag})', '',
           f"{a['rows']} rows, {o['sources']} source_ids, {o['families']} families. LOSO: median |error| "
           f"{a['median_abs']:.1%}, >40%: {a['over40']:.1%}, signed median {a['signed_median']:+.1%}; "
           f"source-weighted {w['median_abs']:.1%} / {w['over40']:.1%}; training {t['median_abs']:.1%} / "
           f"{t['over40']:.1%}; in-sample {o['fit_all']['median_abs']:.1%}.", '',
           md(params[['param', 'value', 'p16', 'p84', 'loso_min', 'loso_max', 'unit', 'sources_moved']]), '',
           md(loso), '']
    (CACHE / 'report_colab.md').write_text('\n'.join(out) + '\n')
    return '\n'.join(out)


def summary(tags)->str:
    "One line per fit (TAG): rows, sources, LOSO median |error|, >40%, signed median, source-weighted, training."
    rows = []
    for t in tags:
        o = json.loads((CACHE / f'overall_{t}.json').read_text())
        a, w, tr = o['all'], o['source_weighted'], o['training']
        rows.append(dict(fit=t, rows=a['rows'], sources=o['sources'], loso_median=f"{a['median_abs']:.1%}",
                         over40=f"{a['over40']:.1%}", signed=f"{a['signed_median']:+.1%}",
                         src_weighted=f"{w['median_abs']:.1%} / {w['over40']:.1%}",
                         training=f"{tr['median_abs']:.1%} ({tr['rows']})", in_sample=f"{o['fit_all']['median_abs']:.1%}"))
    return md(pd.DataFrame(rows))


def main(tags):
    if tags and tags[0] == '--summary':
        print(summary(tags[1:])); return
    if tags and tags[0] == '--colab':
        print(colab(tags[1])); return
    head = tags[0]
    rows = pd.read_csv(CACHE / f'rows_{head}.csv')
    loso = pd.read_csv(CACHE / f'loso_{head}.csv')
    params = pd.read_csv(CACHE / f'params_{head}.csv')
    overall = json.loads((CACHE / f'overall_{head}.json').read_text())
    skipped = pd.read_csv(CACHE / 'skipped.csv')
    rows['baseline_ms'] = baseline(rows)
    rows['baseline_error'] = rows.baseline_ms / rows.ms - 1
    out = [f'# T4 model fitted to published figures: leave-one-source-out report ({head})', '']
    out += ['## Rows used per source', '',
            md(rows.groupby(['source_id', 'family', 'mode']).size().rename('rows').reset_index()), '',
            f"**{len(rows)} rows from {rows.source_id.nunique()} source_ids and {rows.family.nunique()} families; "
            f"{int((rows['mode'] == 'training').sum())} training rows.**", '',
            '### Skipped rows (by source and reason)', '',
            md(skipped.groupby(['source_id', 'why']).size().rename('rows').reset_index()), '']
    out += ['## Fitted parameters', '',
            'value: fit on all rows; p16-p84: spread over bootstrap refits (sources drawn with replacement); '
            'loso_min-loso_max: range over the leave-one-source-out folds; sources_moved: sources with a row '
            'whose prediction moves >5% when the parameter doubles (a parameter moved by <2 sources is not identified).', '',
            md(params[['param', 'value', 'p16', 'p84', 'loso_min', 'loso_max', 'unit', 'sources_moved', 'meaning']]), '']
    out += ['## Leave-one-source-out, per source', '', md(loso), '']
    o = overall
    out += ['## Overall', '',
            f"- LOSO, all rows: median |error| {o['all']['median_abs']:.1%}, rows off by >40%: {o['all']['over40']:.1%}, "
            f"signed median {o['all']['signed_median']:+.1%}",
            f"- LOSO, each source weighing 1: median |error| {o['source_weighted']['median_abs']:.1%}, "
            f">40%: {o['source_weighted']['over40']:.1%}; median of per-source medians {o['median_of_source_medians']:.1%}",
            f"- LOSO, training rows: median |error| {o['training']['median_abs']:.1%}, >40%: {o['training']['over40']:.1%} "
            f"({o['training']['rows']} rows)",
            f"- LOSO, inference rows: median |error| {o['inference']['median_abs']:.1%}, >40%: {o['inference']['over40']:.1%}",
            f"- In-sample fit, all rows: median |error| {o['fit_all']['median_abs']:.1%}, >40%: {o['fit_all']['over40']:.1%}",
            f"- The T4 page's former constants on the same rows (no fit): median |error| "
            f"{np.median(np.abs(rows.baseline_error)):.1%}, >40%: {(np.abs(rows.baseline_error) > 0.4).mean():.1%}, "
            f"signed median {np.median(rows.baseline_error):+.1%}", '']
    for t in tags[1:]:
        ov = json.loads((CACHE / f'overall_{t}.json').read_text())
        out += [f"- Alternative `{t}`: LOSO median |error| {ov['all']['median_abs']:.1%}, >40% {ov['all']['over40']:.1%}; "
                f"source-weighted {ov['source_weighted']['median_abs']:.1%} / {ov['source_weighted']['over40']:.1%}; "
                f"training {ov['training']['median_abs']:.1%}"]
    out += ['', '## Worst rows (LOSO)', '',
            md(rows.assign(a=rows.loso_error.abs()).sort_values('a', ascending=False).head(25)
               [['source_id', 'workload', 'ms', 'pred_ms', 'loso_error', 'baseline_error']]), '']
    (CACHE / 'report_tables.md').write_text('\n'.join(out) + '\n')
    rows.to_csv(CACHE / f'rows_{head}_with_baseline.csv', index=False)
    print('\n'.join(out))


if __name__ == '__main__':
    if sys.argv[1:2] in (['-h'], ['--help']): print(__doc__); sys.exit()
    main(sys.argv[1:] or ['sum_final'])
