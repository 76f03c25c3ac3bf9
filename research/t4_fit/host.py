"""The card's parameters shared, the host's time per op each source's own: how much of the
leave-one-source-out error is the host that ran the figures, not the T4.

`model.py` charges every eager op one host time, `h_eager` (and every TensorFlow op `h_graph`). Here
each source gets its own host time per op instead (it replaces `h_eager` in its eager rows and
`h_graph` in its TensorFlow rows); the card's parameters (rates, bandwidths, size curve) stay shared.
Leaving one source out, the card's parameters are fitted on the other sources (each with its own host
time), and the held-out source's host time is then set from its own rows:

    --mode oracle   from all its rows (an upper bound on what knowing the host is worth)
    --mode one-row  from its fastest row only (the most host-bound), which then leaves the metric:
                    "time one small step on the runtime, predict the rest"
    --mode population  not from its rows at all: the median of the other sources' host times, eager
                    and TensorFlow sources alike (a held-out test like model.py's, with the card's
                    parameters fitted free of the hosts)

Only `population` is a leave-one-source-out test like `model.py`'s; in the other two the held-out
source's own rows set one of its numbers. Combine is 'sum', as in the headline fit.

With --gpu-factor each source also gets its own factor on the GPU time (clock, cooling, container,
library versions: whatever makes its T4 run the same work faster or slower), set like its host time
(oracle and one-row: from its rows; population: 1, the other sources' median being ~1 by the prior).
Run with `--mode oracle`, it asks how well the card's shared physics can fit the rows once everything
that is a property of the source is free: an in-sample floor for any model of this family.

Usage:
    python research/t4_fit/host.py --mode oracle --tag _all
    python research/t4_fit/host.py --mode one-row --exclude <the five DLE sources> --tag _colab1
    python research/t4_fit/host.py --mode oracle --gpu-factor --tag _gf_all
Writes CACHE/host_<mode><tag>.csv (per source: host time, rows, median |error|),
CACHE/host_<mode><tag>_rows.csv (per row: its error; empty where the row set its source's host time)
and CACHE/host_<mode><tag>.json (overall).
"""
from __future__ import annotations
import argparse, json, math, sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).parent))
import model as M

HOSTS = ('h_eager', 'h_graph')  # replaced by the per-source host time
HOST_WIDTH = 3.0  # log units (10 us x/÷ 20 at one sigma): a nuisance, kept weak
GPU_WIDTH = 0.5   # log units, --gpu-factor: a source's GPU-time factor x/÷ 1.65 at one sigma


def parts(d:M.Data, card:torch.Tensor)->tuple:
    "Per workload: seconds without the host time of kernel ops, and the (fusion-weighted) kernel-op count."
    p = M.values(card)
    p['h_eager'] = p['h_graph'] = torch.tensor(0.0)
    gpu, host = M._per_op(d, p)  # host is now h_view per view only; TF/XLA fusion already applied
    keep = torch.where(d.graph[d.w] & (d.kind == 3), p['fuse'].clamp_max(1.0), torch.ones_like(gpu))
    ops = torch.where(d.kind == 4, 0.0, keep) * d.count
    z = lambda v: torch.zeros(d.n_work).index_add_(0, d.w, v)
    return z((gpu + host) * d.count), z(ops)


def fit(d:M.Data, train:np.ndarray, srcs:list, card:torch.Tensor, lh:torch.Tensor, fixed:dict,
        card_free:bool=True, prior_weight:float=0.05, lg:torch.Tensor|None=None)->tuple:
    """Card log-parameters and per-source log host times (seconds) minimising the weighted squared log
    error of `model.fit` (each source weight 1), with its prior on the card and, on every host time, a
    log-normal prior centred on `h_eager`'s with width HOST_WIDTH (a nuisance: kept weak). With `lg`
    (per-source log GPU-time factors, --gpu-factor) those are fitted too, prior 1 with width GPU_WIDTH.
    Returns (card, lh) or, with `lg`, (card, lh, lg)."""
    c, s = M.prior(); idx = {n: i for i, n in enumerate(M.PARAMS)}
    rows = d.rows[train]
    wt = torch.tensor((1.0 / rows.groupby('source_id').source_id.transform('size')).to_numpy())
    wi = torch.tensor(rows.w.to_numpy()); y = torch.log(torch.tensor(rows.ms.to_numpy()) * 1e-3)
    si = torch.tensor(rows.source_id.map({x: i for i, x in enumerate(srcs)}).to_numpy())
    card = card.clone().requires_grad_(card_free); lh = lh.clone().requires_grad_(True)
    g = None if lg is None else lg.clone().requires_grad_(True)
    mask = torch.ones(len(M.PARAMS))
    with torch.no_grad():
        for n, v in fixed.items(): card[idx[n]] = math.log(v); mask[idx[n]] = 0
    for n in HOSTS: mask[idx[n]] = 0
    hc = math.log(M.PARAMS['h_eager'][0] * 1e-6); hs = HOST_WIDTH
    used = torch.zeros(len(srcs), dtype=torch.bool); used[si.unique()] = True
    def loss():
        A, N = parts(d, card)
        gf = 1.0 if g is None else torch.exp(g[si])
        r = torch.log(A[wi] * gf + torch.exp(lh[si]) * N[wi]) - y
        out = ((wt * r ** 2).sum() + prior_weight * ((((card - c) / s) ** 2) * mask).sum()
               + prior_weight * (((lh - hc) / hs) ** 2)[used].sum())
        if g is not None: out = out + prior_weight * ((g / GPU_WIDTH) ** 2)[used].sum()
        return out
    params = [lh] + ([card] if card_free else []) + ([] if g is None else [g])
    def step(opt):
        opt.zero_grad(); l = loss(); l.backward()
        if card.grad is not None: card.grad *= mask
        return l
    opt = torch.optim.Adam(params, lr=0.05)
    for _ in range(300): step(opt); opt.step()
    opt = torch.optim.LBFGS(params, lr=0.5, max_iter=200, line_search_fn='strong_wolfe')
    opt.step(lambda: step(opt))
    return (card.detach(), lh.detach()) if g is None else (card.detach(), lh.detach(), g.detach())


def main(argv=None):
    global HOST_WIDTH
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--mode', default='oracle', choices=['oracle', 'one-row', 'population'])
    ap.add_argument('--exclude', default='', help='comma-separated source_ids left out entirely')
    ap.add_argument('--fix', default='u16=8', help="card parameters held (display units)")
    ap.add_argument('--size-curve', default='matmul', choices=['all', 'matmul'])
    ap.add_argument('--host-width', type=float, default=HOST_WIDTH, help='prior width of a host time (log units)')
    ap.add_argument('--gpu-factor', action='store_true', help="each source its own GPU-time factor too")
    ap.add_argument('--tag', default='')
    a = ap.parse_args(argv)
    M.SIZE_CURVE, HOST_WIDTH = a.size_curve, a.host_width
    fixed = {k: float(v) for k, v in (x.split('=') for x in a.fix.split(',') if x)}
    d = M.load()
    if a.exclude: d.rows = d.rows[~d.rows.source_id.isin(a.exclude.split(','))].reset_index(drop=True)
    srcs = sorted(d.rows.source_id.unique())
    c, _ = M.prior(); lh0 = torch.full((len(srcs),), math.log(20e-6))
    lg0 = torch.zeros(len(srcs)) if a.gpu_factor else None
    card, lh, *lg = fit(d, np.ones(len(d.rows), bool), srcs, c, lh0, fixed, lg=lg0)
    lg = lg[0] if lg else None
    err = np.full(len(d.rows), np.nan); calib = np.zeros(len(d.rows), bool); held_h = {}; held_g = {}
    for sid in srcs:
        held = (d.rows.source_id == sid).to_numpy()
        cf, lf, *gf = fit(d, ~held, srcs, card, lh, fixed, lg=lg)
        gf = gf[0] if gf else None
        cal = held
        if a.mode == 'one-row':  # the fastest row sets the host time and leaves the metric
            hr = np.where(held)[0]; first = hr[np.argmin(d.rows.ms.to_numpy()[hr])]
            cal = np.zeros_like(held); cal[first] = calib[first] = True
        if a.mode == 'population':  # the other sources' median host time (and a GPU factor of 1)
            lf = lf.clone(); lf[srcs.index(sid)] = torch.median(lf[[j for j, x in enumerate(srcs) if x != sid]])
            if gf is not None: gf = gf.clone(); gf[srcs.index(sid)] = 0.0
        else: _, lf, *g2 = fit(d, cal, srcs, cf, lf, fixed, card_free=False, lg=gf); gf = g2[0] if g2 else None
        i = srcs.index(sid); held_h[sid] = math.exp(float(lf[i])) * 1e6
        held_g[sid] = 1.0 if gf is None else math.exp(float(gf[i]))
        with torch.no_grad():
            A, N = parts(d, cf); w = d.rows.w.to_numpy()[held]
            err[held] = (A[w] * held_g[sid] + math.exp(float(lf[i])) * N[w]).numpy() / (d.rows.ms.to_numpy()[held] * 1e-3) - 1
    err[calib] = np.nan
    r = d.rows.assign(error=err)
    per = r.groupby('source_id').agg(
        family=('family', 'first'), rows=('error', 'count'),
        median_abs=('error', lambda e: float(np.nanmedian(np.abs(e))) if e.notna().any() else np.nan))
    per['host_us_all_rows'] = [math.exp(float(lh[srcs.index(x)])) * 1e6 for x in per.index]
    per['host_us_held_out'] = [held_h[x] for x in per.index]
    if a.gpu_factor:
        per['gpu_factor_all_rows'] = [math.exp(float(lg[srcs.index(x)])) for x in per.index]
        per['gpu_factor_held_out'] = [held_g[x] for x in per.index]
    ok = ~np.isnan(err)
    summ = lambda m: M.summary(err[ok & m])
    overall = dict(mode=a.mode, exclude=a.exclude, gpu_factor=a.gpu_factor, all=summ(np.ones(len(err), bool)),
                   training=summ((r['mode'] == 'training').to_numpy()),
                   source_weighted=M.weighted(err[ok], r.source_id[ok]),
                   sources=int(r.source_id[ok].nunique()),
                   card={n: float(card[i].exp()) for i, n in enumerate(M.PARAMS) if n not in HOSTS})
    tag = a.mode.replace('-', '') + a.tag
    per.to_csv(M.CACHE / f'host_{tag}.csv')
    r[['row_id', 'source_id', 'family', 'mode', 'workload', 'ms', 'error']].to_csv(M.CACHE / f'host_{tag}_rows.csv', index=False)
    (M.CACHE / f'host_{tag}.json').write_text(json.dumps(overall, indent=1))
    pd.set_option('display.width', 200)
    print(per.to_string(float_format=lambda x: f'{x:.3g}'))
    print(json.dumps(overall, indent=1))


if __name__ == '__main__':
    main()
