"""The range `estimate_t4` prints, calibrated by leaving sources out, and tested nested.

The population the range is made for is the Colab-style rows: eager PyTorch as a Colab user runs it, not
NVIDIA's DeepLearningExamples containers (NGC, TensorFlow/XLA). The range is multiplicative,

    [ms / exp(q), ms * exp(q)],   q = the quantile at `level` of |log(predicted / published)|

over held-out rows, each source weighing 1 (a new user is a new source); with --conformal, at the
level (1 + 1/n) x `level` for n sources (split conformal: the held-out source is one more draw). q is taken
apart for two classes of prediction: `host` where the host time per op is at least `--split` of the
predicted time (small batches: the machine that drives the T4 decides, and the sources' machines
differ), `gpu` otherwise. A class with fewer than 3 sources takes the pooled q.

Nested test: for each Colab-style source s, the model is fitted without s (its rows' prediction), q is
calibrated on the other Colab-style sources' rows, each predicted by a fit without s *and* its own
source (one fit per pair), and the coverage is counted on s's rows. So no row of s touches its own
range. The shipped q (fit.json) comes from every Colab-style source's leave-one-source-out rows.
Rows outside the population (NVIDIA's containers) get the q of their own held-out rows, `outside`
(in the nested table: the q of the other outside sources).

Usage (fit on all rows, the shipped fit; DLE sources stay in every training set and are held out only
for the `outside` width):
    python research/t4_fit/calibrate.py --fit-on all --tag _final -- --fix u16=8 --size-curve matmul
    python research/t4_fit/calibrate.py --fit-on colab --tag _colab -- --fix u16=8,nchw16=1 --size-curve matmul
Arguments after `--` are model.py's. Writes CACHE/cal_<tag>_loso.csv (per row: held-out prediction,
host share), cal_<tag>_pairs.csv (per outer source and row of another source: the pair fit's
prediction) and cal_<tag>.json (the shipped half-widths, the nested table).
"""
from __future__ import annotations
import argparse, itertools, json, sys, time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).parent))
import model as M

DLE = ['dle-pytorch-convnets-published', 'dle-tf-bert-published', 'dle-tf-convnets-published',
       'dle-tf2-bert-published', 'dle-tf2-electra']  # NVIDIA's containers: outside the population
MIN_SOURCES = 3  # a class calibrated on fewer sources takes the pooled half-width


def parts(d:M.Data, logp:torch.Tensor, combine:str)->tuple:
    ("Per workload: predicted ms, the host time's share of it, and the share of fp16 products off a "
     "multiple of 8 (held at `u16`, which no row moves: outside what the rows check).")
    with torch.no_grad():
        ms = M.predict(d, logp, combine).numpy()
        gpu, host = M._per_op(d, M.values(logp))
        z = lambda v: torch.zeros(d.n_work).index_add_(0, d.w, v * d.count).numpy() * 1e3
        off = d.fp16 & ~d.aligned & (d.kind <= 2) & (d.flops > 0)
    return ms, z(host) / ms, z(torch.where(off, gpu + host, 0.0)) / ms


INFLATE = False  # --conformal: split conformal's (1 + 1/n); else the quantile at `level` itself


def half_width(log_err, source, level:float)->float:
    ("The quantile at `level` (with INFLATE, (1 + 1/n) x `level`) of |log error| over rows, each of the "
     "n sources weighing 1 (its rows share the weight); the largest error where that level passes 1.")
    a, s = np.abs(np.asarray(log_err, float)), pd.Series(np.asarray(source))
    w = (1.0 / s.map(s.value_counts())).to_numpy()
    o = np.argsort(a); cw = np.cumsum(w[o]) / w.sum()
    lv = level * (1 + 1 / s.nunique()) if INFLATE else level
    return float(a[o][min(np.searchsorted(cw, lv - 1e-12), len(a) - 1)])


def half_widths(rows:pd.DataFrame, level:float, split:float)->dict:
    ("{'gpu': q, 'host': q, 'pooled': q} from held-out rows (columns `error`, `source_id`, `host_share`); "
     "a class of fewer than MIN_SOURCES sources takes the pooled q.")
    le = np.log1p(rows.error.to_numpy())
    out = {'pooled': half_width(le, rows.source_id, level)}
    for cls, m in (('gpu', rows.host_share < split), ('host', rows.host_share >= split)):
        m = m.to_numpy()
        ok = split > 0 and rows.source_id[m].nunique() >= MIN_SOURCES
        out[cls] = half_width(le[m], rows.source_id[m], level) if ok else out['pooled']
    return out


def cls_of(host_share, split:float)->np.ndarray:
    return np.where(np.asarray(host_share) >= split, 'host', 'gpu') if split > 0 else np.full(len(host_share), 'gpu')


def nested(loso:pd.DataFrame, pairs:pd.DataFrame, level:float, split:float)->pd.DataFrame:
    ("Each row with the range calibrated without its source: q, low, high, inside (population rows: "
     "from the pair fits; outside rows: from the other outside sources' held-out rows).")
    pop = loso[loso.population].copy()
    q = {s: half_widths(pairs[pairs.held == s], level, split) for s in pop.source_id.unique()}
    pop['cls'] = cls_of(pop.host_share, split)
    pop['q'] = [q[s][c] for s, c in zip(pop.source_id, pop.cls)]
    out = loso[~loso.population].copy()
    out['cls'] = 'outside'
    out['q'] = [half_width(np.log1p(out.error[out.source_id != s]), out.source_id[out.source_id != s], level)
                for s in out.source_id]
    both = pd.concat([pop, out], ignore_index=True)
    both['low_ms'], both['high_ms'] = both.pred_ms / np.exp(both.q), both.pred_ms * np.exp(both.q)
    both['inside'] = (both.ms >= both.low_ms) & (both.ms <= both.high_ms)
    return both


def former(loso:pd.DataFrame)->pd.DataFrame:
    ("The range the T4 page printed before this calibration, tested the same way: [ms x p16, ms x p84], "
     "p16 and p84 the percentiles of published / predicted over the other Colab-style sources' rows.")
    pop = loso[loso.population].copy()
    ratio = pop.ms / pop.pred_ms
    ends = {s: np.percentile(ratio[pop.source_id != s], [16, 84]) for s in pop.source_id.unique()}
    pop['low_ms'] = [p * ends[s][0] for p, s in zip(pop.pred_ms, pop.source_id)]
    pop['high_ms'] = [p * ends[s][1] for p, s in zip(pop.pred_ms, pop.source_id)]
    pop['inside'] = (pop.ms >= pop.low_ms) & (pop.ms <= pop.high_ms)
    return pop


def table(pop:pd.DataFrame)->pd.DataFrame:
    "Per source and overall: rows, median |error|, share >40%, coverage of the range, median width."
    def one(g):
        a = g.error.abs()
        return pd.Series(dict(rows=len(g), median_abs_error=a.median(), over_40=(a > 0.4).mean(),
                              coverage=g.inside.mean(),
                              median_width=((g.high_ms - g.low_ms) / g.pred_ms).median()))
    per = pop.groupby('source_id').apply(one, include_groups=False)
    per.loc['all rows'] = one(pop)
    return per


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    mine, theirs = (argv[:argv.index('--')], argv[argv.index('--') + 1:]) if '--' in argv else (argv, [])
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--fit-on', default='all', choices=['all', 'colab'])
    ap.add_argument('--level', type=float, default=0.8, help='the share of held-out rows the range should hold')
    ap.add_argument('--split', type=float, default=0.2, help="host share from which a prediction is 'host' (0: one class)")
    ap.add_argument('--tag', default='')
    ap.add_argument('--conformal', action='store_true', help='the quantile at (1 + 1/n) x --level')
    ap.add_argument('--reuse', action='store_true', help='read the fits of an earlier run (cal_<tag>_*.csv)')
    ap.add_argument('--former', action='store_true', help='also test the former range (16th-84th percentile of all rows)')
    ap.add_argument('--reuse-pairs', action='store_true', help="refit the held-out sources, read an earlier run's pair fits")
    a = ap.parse_args(mine)
    global INFLATE
    INFLATE = a.conformal
    ma = M.parser().parse_args(theirs)
    fixed = M.configure(ma)
    tag = f'{ma.combine}{a.tag}'
    fl, fp = M.CACHE / f'cal_{tag}_loso.csv', M.CACHE / f'cal_{tag}_pairs.csv'
    if a.reuse: loso, pairs = pd.read_csv(fl), pd.read_csv(fp)
    else:
        d = M.load(queue=ma.combine == 'queue')
        if ma.exclude: d.rows = d.rows[~d.rows.source_id.isin(ma.exclude.split(','))].reset_index(drop=True)
        if a.fit_on == 'colab': d.rows = d.rows[~d.rows.source_id.isin(DLE)].reset_index(drop=True)
        src = d.rows.source_id.to_numpy()
        pop_sources = sorted(set(src) - set(DLE))
        kw = dict(combine=ma.combine, prior_weight=ma.prior, fixed=fixed)
        t0 = time.time()
        lp = M.fit(d, np.ones(len(src), bool), **kw)

        def held_out(without:list)->tuple:
            lpw = M.fit(d, ~np.isin(src, without), start=lp, **kw)
            return parts(d, lpw, ma.combine)
        recs = []
        for s in sorted(set(src)):
            ms, hs, us = held_out([s])
            for i in np.flatnonzero(src == s):
                w = d.rows.w.iloc[i]
                recs.append(dict(row_id=d.rows.row_id.iloc[i], source_id=s, population=s not in DLE,
                                 ms=d.rows.ms.iloc[i], pred_ms=ms[w], host_share=hs[w], unaligned_share=us[w]))
        loso = pd.DataFrame(recs).assign(error=lambda r: r.pred_ms / r.ms - 1)
        print(f'{len(set(src))} leave-one-source-out fits: {time.time() - t0:.0f} s', flush=True)
        recs = []
        for s, t in ([] if a.reuse_pairs else itertools.combinations(pop_sources, 2)):
            ms, hs, _ = held_out([s, t])
            for held, other in ((s, t), (t, s)):
                for i in np.flatnonzero(src == other):
                    w = d.rows.w.iloc[i]
                    recs.append(dict(held=held, row_id=d.rows.row_id.iloc[i], source_id=other,
                                     ms=d.rows.ms.iloc[i], pred_ms=ms[w], host_share=hs[w]))
        pairs = (pd.read_csv(fp) if a.reuse_pairs else
                 pd.DataFrame(recs).assign(error=lambda r: r.pred_ms / r.ms - 1))
        print(f'{len(pop_sources) * (len(pop_sources) - 1) // 2} pair fits: {time.time() - t0:.0f} s', flush=True)
        loso.to_csv(fl, index=False); pairs.to_csv(fp, index=False)
    both = nested(loso, pairs, a.level, a.split)
    pop = both[both.population]
    per = table(pop)
    q = half_widths(loso[loso.population], a.level, a.split)
    out = loso[~loso.population]
    q['outside'] = half_width(np.log1p(out.error), out.source_id, a.level) if len(out) else None
    res = dict(fit_on=a.fit_on, model_args=' '.join(theirs), level=a.level, split=a.split, inflate=INFLATE,
               min_sources=MIN_SOURCES, half_width=q, nested=per.loc['all rows'].to_dict(),
               sources=int(pop.source_id.nunique()),
               outside=table(both[~both.population]).loc['all rows'].to_dict() if len(out) else None)
    (M.CACHE / f'cal_{tag}.json').write_text(json.dumps(res, indent=1))
    both.to_csv(M.CACHE / f'cal_{tag}_nested.csv', index=False)
    pd.set_option('display.width', 200)
    if a.former: print('former range:', table(former(loso)).loc['all rows'].round(3).to_dict())
    print(per.to_string(float_format=lambda x: f'{x:.3f}'))
    print(json.dumps(res, indent=1))


if __name__ == '__main__':
    main()
