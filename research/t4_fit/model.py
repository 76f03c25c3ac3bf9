"""A T4 time model with a few physical parameters, fitted to published figures and checked by
leaving one source out.

Every op of a rebuilt workload (see `rebuild.py`) is charged

    gpu     = max(compute, memory)
    compute = flops / rate
    rate    = R                                     convolutions (dense: R x conv16 / conv32, and
                                                    x nchw16 for fp16 convs not run channels-last;
                                                    grouped or depthwise: grp, any dtype)
            = min(R, attn)                          fused attention kernels (xFormers, SDPA, flash)
            = R * flops / (flops + f_half)          matrix products (the size curve; `--size-curve all`
                                                    applies it to every kind)
              with R = r16 (fp16, dimensions multiples of 8), u16 (fp16, a dimension that is not),
                       r32 (fp32; bf16 is counted as fp32 here)
    memory  = nbytes / bw_mm (matmul, conv, attention) or nbytes / bw_other (everything else)
    host    = h_eager per kernel op and h_view per kernel-less dispatch (view, reshape) in eager PyTorch;
              h_graph per op in TensorFlow/XLA rows, where elementwise ops also keep only a share
              `fuse` of their time (the rest is fused into their producers)

and the workload's time is, by `--combine`,
    'sum':   sum over ops of count * (gpu + host)     (host time per op added: launches serialised)
    'max':   sum over ops of count * max(gpu, host)   (host runs ahead of the GPU; a small op costs
                                                       its host time, a large one its GPU time)
    'async': max(sum of gpu, sum of host)             (the host queues the whole call ahead)
    'mix':   sum over ops of count * (max + ov * min)  (ov, fitted: the non-overlapped share; tested)
    'pnorm': (G^k + H^k)^(1/k), G and H the call's GPU and host sums, k = 1 + kp fitted (k = 1: 'sum',
             k -> infinity: 'async'; tested, not kept)
    'queue': the launch queue, from the op order rebuild.py keeps: the host issues ops in turn, the GPU
             runs each once issued and after the one before, every kernel taking g_kernel beyond its
             work (fitted; tested, not kept)

Tested and not kept (flags; each adds its parameter from OPTIONAL): --red (bw_red: softmax and
layer/group norm at their own bandwidth), --throttle (a duty-dependent fp16 clock under the 70 W cap),
--ngc (a GPU-time factor for NGC-container rows), --k1-gemm (1x1 convs at the matmul rate, no new
parameter), --combine mix (ov), --t-mm (the size curve as a fixed time per product, t_mm, instead of
the fixed size f_half), --combine pnorm (kp), --wino (wino32), --grp-tf (grp_tf), --grp-width (gw_half: grouped convs by
their width per group, in place of grp). Their LOSO results are in research/t4_fit/LOG.md.

Fit: least squares on log(predicted / published), each source weighted equally (rows of a source
share a weight of 1/n), plus a weak log-normal prior that keeps a parameter near its datasheet value
only where the data are silent (a leave-one-source-out fold can remove all rows that move it).

Usage (the headline fit of research/t4_fit/README.md):
    python research/t4_fit/model.py --combine sum --fix u16=8 --size-curve matmul --boot 30 --tag _final
Writes CACHE/rows_<tag>.csv, loso_<tag>.csv, params_<tag>.csv and overall_<tag>.json.
"""
from __future__ import annotations
import argparse, json, math, os, sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

CACHE = Path(os.environ.get('T4_FIT_CACHE', Path.home()/'.cache'/'colab_t4_nb'/'t4_fit'))
torch.set_default_dtype(torch.float64)

# name: (prior centre, prior width in log units, unit, meaning)
PARAMS = {
    'r16':      (40.0, 1.0, 'TFLOP/s', 'fp16 tensor-core rate, shapes multiple of 8, large products'),
    'u16':      (8.0, 1.0, 'TFLOP/s', 'fp16 rate when a product dimension is not a multiple of 8'),
    'r32':      (4.3, 0.5, 'TFLOP/s', 'fp32 rate, large products'),
    'attn':     (10.0, 1.0, 'TFLOP/s', 'fused attention kernel ceiling (xFormers/SDPA/flash), any dtype'),
    'conv16':   (1.0, 0.5, 'x', 'dense fp16 convolution rate / fp16 matmul rate (cuDNN)'),
    'conv32':   (1.0, 0.5, 'x', 'dense fp32 convolution rate / fp32 matmul rate (cuDNN Winograd/FFT)'),
    'nchw16':   (1.0, 0.5, 'x', 'dense fp16 conv rate in NCHW layout / in NHWC (channels-last, the tensor-core layout)'),
    'grp':      (1.0, 1.0, 'TFLOP/s', 'grouped and depthwise convolution rate, any dtype'),
    'f_half':   (1.0, 2.0, 'GFLOP', 'product size at which half the rate is reached'),
    'bw_mm':    (266.0, 0.5, 'GB/s', 'bandwidth reached by matmul/conv/attention operands'),
    'bw_other': (266.0, 1.0, 'GB/s', 'bandwidth reached by elementwise/normalisation/softmax ops'),
    'h_eager':  (10.0, 1.0, 'us', 'host (or minimum) time per op, PyTorch eager'),
    'h_view':   (3.0, 1.0, 'us', 'host time per dispatched op without a kernel (view, reshape), eager'),
    'h_graph':  (5.0, 1.0, 'us', 'time per op floor in TensorFlow/XLA graphs'),
    'fuse':     (0.3, 1.0, 'x', 'share of elementwise/norm ops (time) left after TF/XLA fusion'),
}
# Tested and not kept (each enters PARAMS only with its flag; see README "Hypotheses tested"):
OPTIONAL = {
    'bw_red':   (266.0, 1.0, 'GB/s', 'bandwidth reached by row reductions: softmax, layer/group norm (fwd and bwd)'),
    'throttle': (0.3, 1.0, 'x', 'fp16 tensor-core slowdown at 100% duty (70 W cap): time x (1 + throttle * duty)'),
    'ov':       (0.5, 1.0, 'x', 'share of the smaller of host and GPU time per op not overlapped (1: sum, 0: max)'),
    't_mm':     (15.0, 1.0, 'us', 'fixed time per matrix product (tail/latency): half rate at flops = rate x t_mm'),
    'wino32':   (1.5, 1.0, 'x', 'fp32 dense 3x3 stride-1 conv rate / other fp32 dense convs (cuDNN Winograd: fewer multiplies than counted)'),
    'grp_tf':   (1.0, 1.0, 'TFLOP/s', 'grouped convolution rate in TensorFlow rows (tf.nn.conv2d with a grouped filter)'),
    'g_kernel': (4.0, 1.0, 'us', 'GPU time every kernel takes beyond its work (launch, ramp, tail); --combine queue'),
    'ngc':      (1.0, 0.5, 'x', 'GPU-time factor for rows run in an NVIDIA NGC container on a datacenter T4 (as stated)'),
    'gw_half':  (8.0, 1.0, 'x', 'grouped conv: output channels per group at which half the dense conv rate is reached (--grp-width)'),
    'kp':       (1.0, 1.0, 'x', 'overlap of host and GPU time in a call, --combine pnorm: time = (G^k + H^k)^(1/k), k = 1 + kp'),
}
SCALE = {'TFLOP/s': 1e12, 'GB/s': 1e9, 'GFLOP': 1e9, 'us': 1e-6, 'x': 1.0}
# ops that reduce along rows before writing (two passes or a block-wide reduction per row)
REDUCTIONS = ['_softmax', '_log_softmax', '_softmax_backward_data', '_log_softmax_backward_data',
              'native_layer_norm', 'native_layer_norm_backward', 'native_group_norm',
              'native_group_norm_backward']
KINDS = ['matmul', 'conv', 'attention', 'other', 'view']  # view: dispatched, no kernel


@dataclass
class Data:
    "Op groups of all workloads, as tensors, and the rows (published figures) that use them."
    rows: pd.DataFrame       # one per published figure: source_id, family, mode, ms, workload index w
    w: torch.Tensor          # per op group: workload index
    kind: torch.Tensor       # index into KINDS
    fp16: torch.Tensor       # bool
    fp32: torch.Tensor       # bool (fp32 or bf16 emulated; int ops have no flops)
    aligned: torch.Tensor    # bool
    grouped: torch.Tensor    # bool: grouped or depthwise convolution
    red: torch.Tensor        # bool: a row reduction (softmax, layer/group norm), see REDUCTIONS
    k1: torch.Tensor         # bool: a 1x1 convolution (a GEMM over pixels)
    k3: torch.Tensor         # bool: a dense 3x3 stride-1 convolution (Winograd's shapes)
    gw: torch.Tensor         # a grouped convolution's output channels per group (0: not grouped)
    flops: torch.Tensor
    nbytes: torch.Tensor
    count: torch.Tensor
    graph: torch.Tensor      # per workload: TensorFlow/XLA row
    nhwc: torch.Tensor       # per workload: convolutions run channels-last (as the source states)
    ngc: torch.Tensor        # per workload: run in an NGC container (DLE), as the source states
    n_work: int
    q: dict | None = None    # --combine queue: the parts' op groups, call orders and each workload's parts


def load(path:Path=CACHE / 'rows.pkl', queue:bool=False)->Data:
    ("Rows from `rebuild.py`, their workloads deduplicated (same key and framework: one op table); "
     "with `queue`, also the call order `--combine queue` needs (it imports `rebuild`, so the package).")
    recs = pd.read_pickle(path)
    keys, tables, graph, nhwc, ngc, ws = {}, [], [], [], [], []
    for r in recs:
        k = (r['workload'], r['graph'], r.get('layout', 'nchw'), r['family'] == 'nvidia-dle')
        if k not in keys:
            keys[k] = len(tables); tables.append(r['ops']); graph.append(r['graph'])
            nhwc.append(r.get('layout', 'nchw') == 'nhwc'); ngc.append(r['family'] == 'nvidia-dle')
        ws.append(keys[k])
    rows = pd.DataFrame([{k: v for k, v in r.items() if k != 'ops'} for r in recs]).assign(w=ws)
    ops = pd.concat([pd.DataFrame(t).assign(w=i) for i, t in enumerate(tables)], ignore_index=True)
    ops = ops[ops['count'] != 0]
    d = Data(rows, *_groups(ops), T(graph, torch.bool), T(nhwc, torch.bool), T(ngc, torch.bool), len(tables))
    if queue and all('prog' in t.attrs or 'seq' in t.attrs for t in tables):
        d.q = _queue(tables)
        d.q['data'] = Data(rows, *d.q.pop('groups'), d.graph, d.nhwc, d.ngc, d.n_work)
    return d


T = lambda x, dt=torch.float64: torch.tensor(np.asarray(x), dtype=dt)


def _groups(ops:pd.DataFrame)->list:
    "The per-group fields of `Data`, from `w` (owner) to `count`."
    return [T(ops.w, torch.long), T(ops.kind.map(KINDS.index), torch.long),
            T(ops.dtype == 'fp16', torch.bool), T(ops.dtype.isin(['fp32', 'bf16']), torch.bool),
            T(ops.aligned, torch.bool), T(ops.grouped, torch.bool),
            T(ops.name.isin(REDUCTIONS) & (ops.kind == 'other'), torch.bool),
            T(ops['k1'] if 'k1' in ops else np.zeros(len(ops), bool), torch.bool),
            T(ops['k3'] if 'k3' in ops else np.zeros(len(ops), bool), torch.bool),
            T(ops['gw'] if 'gw' in ops else np.zeros(len(ops))),
            T(ops.flops), T(ops.nbytes), T(ops['count'])]


def _queue(tables:list)->dict:
    """For --combine queue: every workload as its counted parts in call order, [(times, part)], each part
    with its op groups and the order its ops are called in (`rebuild.program`). Parts run a fractional
    number of times (a GA=2 tick's half optimizer step) enter scaled; a part both added and taken away
    (the same table twice) is merged first."""
    from rebuild import program
    leaves, seqs, parts = [], [], []
    for w, t in enumerate(tables):
        merged = {}
        for m, leaf in program(t):
            seq = leaf.attrs['seq']
            key = (len(leaf), float(leaf.flops.sum()), float(leaf.nbytes.sum()), len(seq), seq[:64].tobytes())
            if key in merged: merged[key][0] += m
            else: merged[key] = [m, leaf]
        mine = []
        for m, leaf in merged.values():
            if m <= 1e-9 or len(leaf.attrs['seq']) == 0: continue
            mine.append((m, len(leaves))); leaves.append(pd.DataFrame(leaf).assign(w=w))
            seqs.append(leaf.attrs['seq'])
        parts.append(mine)
    base = np.cumsum([0] + [len(l) for l in leaves])[:-1]  # each part's first group in the concatenation
    flat = pd.concat(leaves, ignore_index=True)
    order = np.concatenate([s + b for s, b in zip(seqs, base)])
    seg = np.concatenate([np.full(len(s), i) for i, s in enumerate(seqs)])
    P = max(len(p) for p in parts); n = len(leaves)
    leaf_of = np.full((len(tables), P), n); times = np.zeros((len(tables), P))  # n: an empty part
    for w, mine in enumerate(parts):
        for j, (m, i) in enumerate(mine): leaf_of[w, j], times[w, j] = i, m
    ends = np.cumsum([len(x) for x in seqs])
    return dict(groups=_groups(flat.assign(count=1)), order=T(order, torch.long), seg=T(seg, torch.long),
                n=n, leaf_of=T(leaf_of, torch.long), times=T(times),
                first=T(ends - [len(x) for x in seqs], torch.long), last=T(ends - 1, torch.long))


def values(logp:torch.Tensor)->dict:
    "Parameters in SI units from the fitted log-values (in their display units)."
    return {n: torch.exp(logp[i]) * SCALE[PARAMS[n][2]] for i, n in enumerate(PARAMS)}


def predict(d:Data, logp:torch.Tensor, combine:str='sum')->torch.Tensor:
    "Predicted ms per workload."
    p = values(logp)
    if combine == 'queue': return _queue_ms(d, p)
    gpu, host = _per_op(d, p)
    gpu, host = gpu * d.count, host * d.count
    z = lambda v: torch.zeros(d.n_work).index_add_(0, d.w, v) * 1e3
    if combine == 'sum': return z(gpu + host)
    if combine == 'max': return z(torch.maximum(gpu, host))
    if combine == 'mix': return z(torch.maximum(gpu, host) + p['ov'].clamp_max(1.0) * torch.minimum(gpu, host))
    if combine == 'pnorm':
        G, H, k = z(gpu), z(host), 1 + p['kp']; m = torch.maximum(G, H)
        return m * ((G / m) ** k + (H / m) ** k) ** (1 / k)
    return torch.maximum(z(gpu), z(host))  # 'async': the host queues ahead; the slower side sets the pace


def _queue_ms(d:Data, p:dict)->torch.Tensor:
    """--combine queue: eager execution as a launch queue. The host issues a part's ops one after another
    (op k is issued at c_k, the sum of host times up to it); the GPU runs op k once it is issued and the
    op before it is done. The part then ends at e = max_k (c_k + GPU time of ops k..end). A part run
    m times ends at e + (m - 1) max(host, GPU) of one run, and part B after part A at
    max(e_A + GPU_B, host_A + e_B). Exact for this queue, from the op order `rebuild.py` keeps."""
    q = d.q
    if q is None: raise SystemExit('--combine queue needs rows counted with their op order (rebuild.py)')
    g1, h1 = _per_op(q['data'], p)
    g1 = g1 + torch.where(q['data'].kind == 4, 0.0, p['g_kernel'])  # a view launches no kernel
    g, h, seg, n = g1[q['order']], h1[q['order']], q['seg'], q['n']
    csh, csg = torch.cumsum(h, 0), torch.cumsum(g, 0)
    first, last = q['first'], q['last']
    issued = csh - (csh[first] - h[first])[seg]
    rest = csg[last][seg] - csg + g
    e = torch.zeros(n).scatter_reduce(0, seg, issued + rest, 'amax', include_self=False)
    H = torch.zeros(n).index_add(0, seg, h); G = torch.zeros(n).index_add(0, seg, g)
    zero = torch.zeros(1)
    e, H, G = torch.cat([e, zero]), torch.cat([H, zero]), torch.cat([G, zero])
    L, m = q['leaf_of'], q['times']
    eL, HL, GL = e[L], H[L], G[L]
    ep = torch.where(m >= 1, eL + (m - 1).clamp_min(0) * torch.maximum(GL, HL), m * eL)
    Hp, Gp = m * HL, m * GL
    E, Hc = ep[:, 0], Hp[:, 0]
    for j in range(1, L.shape[1]):
        E, Hc = torch.maximum(E + Gp[:, j], Hc + ep[:, j]), Hc + Hp[:, j]
    return E * 1e3


def _per_op(d:Data, p:dict)->tuple:
    "GPU and host seconds of one op of each group of `d` (TF/XLA fusion applied to both)."
    big = torch.where(d.fp16, torch.where(d.aligned, p['r16'], p['u16']), p['r32'])
    big = torch.where(d.kind == 2, torch.minimum(big, p['attn']), big)
    kxk = (d.kind == 1) & ~(d.k1 & K1_GEMM)  # 1x1 convolutions run as GEMMs: the matmul rate
    big = torch.where(kxk, big * torch.where(d.fp16, p['conv16'], p['conv32']), big)
    nchw16 = torch.where(d.nhwc[d.w], 1.0, p['nchw16'])  # fp16 convs not channels-last: cuDNN's transposes
    big = torch.where((d.kind == 1) & d.fp16, big * nchw16, big)
    if 'wino32' in p: big = torch.where(d.k3 & d.fp32, big * p['wino32'], big)  # --wino: fp32 3x3 convs (Winograd)
    if 'gw_half' in p:  # --grp-width: grouped convs at the dense conv rate, scaled by how full each group's product is
        big = torch.where(d.grouped, big * d.gw / (d.gw + p['gw_half']), big)
    else: big = torch.where(d.grouped, p['grp'], big)
    if 'grp_tf' in p: big = torch.where(d.grouped & d.graph[d.w], p['grp_tf'], big)  # --grp-tf: TF's own grouped convs
    f_half = big * p['t_mm'] if 't_mm' in p else p['f_half']  # --t-mm: a fixed time, not a fixed size
    half = f_half if SIZE_CURVE == 'all' else torch.where(kxk, 0.0, f_half)
    rate = big * d.flops / (d.flops + half)
    compute = torch.where(d.flops > 0, d.flops / rate.clamp_min(1.0), torch.zeros_like(d.flops))
    memory = d.nbytes / torch.where(d.kind == 3, (torch.where(d.red, p['bw_red'], p['bw_other']) if 'bw_red' in p else p['bw_other']), p['bw_mm'])
    gpu = torch.maximum(compute, memory)
    if 'throttle' in p:  # sustained clock under the 70 W cap: dense fp16 tensor-core work slows with its duty
        tc = d.fp16 & (d.kind <= 2) & (compute >= memory)
        zz = lambda v: torch.zeros(d.n_work).index_add_(0, d.w, v * d.count)
        h0 = torch.where(d.kind == 4, p['h_view'], p['h_eager'])
        duty = zz(torch.where(tc, compute, 0.0)) / zz(gpu + h0).clamp_min(1e-12)
        gpu = torch.where(tc, torch.maximum(compute * (1 + p['throttle'] * duty[d.w]), memory), gpu)
    if 'ngc' in p: gpu = gpu * torch.where(d.ngc[d.w], p['ngc'], 1.0)
    graph, view = d.graph[d.w], d.kind == 4
    host = torch.where(graph, torch.where(view, 0.0, p['h_graph']), torch.where(view, p['h_view'], p['h_eager']))
    keep = torch.where(graph & (d.kind == 3), p['fuse'].clamp_max(1.0), torch.ones_like(gpu))  # XLA fusion
    return gpu * keep, host * keep


def prior()->tuple:
    c = torch.tensor([math.log(v[0]) for v in PARAMS.values()])
    s = torch.tensor([v[1] for v in PARAMS.values()])
    return c, s


K1_GEMM = False  # --k1-gemm: 1x1 convolutions at the matmul rate (tested, not kept)
SIZE_CURVE = 'all'  # 'all': the size curve slows small products of every kind; 'matmul': not convolutions
LOSS = 'l2'  # 'l2': least squares on log error; 'soft_l1': 2(sqrt(1+(r/s)^2)-1) s^2, s=0.2 (robust)


def fit(d:Data, train:np.ndarray, combine:str='sum', prior_weight:float=0.05, fixed:dict|None=None,
        start:torch.Tensor|None=None)->torch.Tensor:
    """Log-parameters minimising sum_rows w * log(pred/pub)^2 (each source weight 1) + prior.
    `train`: bool mask over rows. `fixed`: {name: value in display units} held constant."""
    c, s = prior()
    rows = d.rows[train]
    wt = torch.tensor((1.0 / rows.groupby('source_id').source_id.transform('size')).to_numpy())
    wi = torch.tensor(rows.w.to_numpy()); y = torch.log(torch.tensor(rows.ms.to_numpy()))
    logp = (start.clone() if start is not None else c.clone()).requires_grad_(True)
    mask = torch.ones(len(PARAMS))
    if fixed:
        with torch.no_grad():
            for n, v in fixed.items():
                i = list(PARAMS).index(n); logp[i] = math.log(v); mask[i] = 0
    def loss():
        r = torch.log(predict(d, logp, combine)[wi]) - y
        rho = r ** 2 if LOSS == 'l2' else 2 * 0.04 * (torch.sqrt(1 + r ** 2 / 0.04) - 1)
        return (wt * rho).sum() + prior_weight * (((logp - c) / s) ** 2).sum()
    opt = torch.optim.Adam([logp], lr=0.05)
    for _ in range(300):
        opt.zero_grad(); l = loss(); l.backward(); logp.grad *= mask; opt.step()
    opt = torch.optim.LBFGS([logp], lr=0.5, max_iter=200, line_search_fn='strong_wolfe')
    def closure():
        opt.zero_grad(); l = loss(); l.backward(); logp.grad *= mask; return l
    opt.step(closure)
    return logp.detach()


def errors(d:Data, logp, combine, rows:pd.DataFrame)->np.ndarray:
    with torch.no_grad(): pred = predict(d, logp, combine).numpy()
    return pred[rows.w.to_numpy()] / rows.ms.to_numpy() - 1


def summary(err:np.ndarray)->dict:
    a = np.abs(err)
    return dict(rows=len(a), median_abs=float(np.median(a)) if len(a) else float('nan'),
                over40=float((a > 0.4).mean()) if len(a) else float('nan'),
                signed_median=float(np.median(err)) if len(a) else float('nan'))


def weighted(err:np.ndarray, source:pd.Series)->dict:
    "Median |error| and share >40% with each source weighing 1 (rows of a source share it)."
    w = (1.0 / source.map(source.value_counts())).to_numpy(); a = np.abs(err); o = np.argsort(a)
    cw = np.cumsum(w[o]) / w.sum()
    return dict(median_abs=float(a[o][np.searchsorted(cw, 0.5)]), over40=float(w[a > 0.4].sum() / w.sum()))


def loso(d:Data, combine:str, start=None, **kw)->tuple:
    "Leave each source out: fit on the rest, predict it. (per-row errors, per-fold parameters)"
    err = np.full(len(d.rows), np.nan); folds = {}
    for sid in sorted(d.rows.source_id.unique()):
        held = (d.rows.source_id == sid).to_numpy()
        lp = fit(d, ~held, combine, start=start, **kw)
        err[held] = errors(d, lp, combine, d.rows[held])
        folds[sid] = lp
    return err, folds


def bootstrap(d:Data, combine:str, n:int, start=None, seed:int=0, **kw)->list:
    "Refit on sources drawn with replacement (a source drawn k times weighs k)."
    rng = np.random.default_rng(seed); srcs = np.array(sorted(d.rows.source_id.unique())); out = []
    for _ in range(n):
        pick = pd.Series(rng.choice(srcs, len(srcs))).value_counts()
        dd = Data(**{**d.__dict__})
        reps = [d.rows[d.rows.source_id == s].assign(source_id=f'{s}#{k}') for s, m in pick.items() for k in range(m)]
        dd.rows = pd.concat(reps, ignore_index=True)
        out.append(fit(dd, np.ones(len(dd.rows), bool), combine, start=start, **kw))
    return out


def table(logps:dict|list, base:torch.Tensor)->pd.DataFrame:
    "Fitted parameters in display units, with the spread (16th-84th percentile) across refits."
    arr = torch.stack(list(logps.values()) if isinstance(logps, dict) else logps).exp().numpy()
    rows = []
    for i, (n, (c, s, unit, what)) in enumerate(PARAMS.items()):
        rows.append(dict(param=n, value=float(base[i].exp()), p16=float(np.percentile(arr[:, i], 16)),
                         p84=float(np.percentile(arr[:, i], 84)), unit=unit, prior=c, meaning=what))
    return pd.DataFrame(rows)


def sensitivity(d:Data, logp, combine)->pd.Series:
    "Per parameter: how many sources have a row whose prediction moves >5% when it doubles."
    with torch.no_grad():
        base = predict(d, logp, combine).numpy()[d.rows.w.to_numpy()]
        out = {}
        for i, n in enumerate(PARAMS):
            lp = logp.clone(); lp[i] += math.log(2)
            p = predict(d, lp, combine).numpy()[d.rows.w.to_numpy()]
            moved = np.abs(p / base - 1) > 0.05
            out[n] = d.rows.source_id[moved].nunique()
    return pd.Series(out, name='sources_moved')


def parser()->argparse.ArgumentParser:
    "The model's options, shared by the scripts that fit it."
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--combine', default='sum', choices=['sum', 'max', 'async', 'mix', 'queue', 'pnorm'])
    ap.add_argument('--boot', type=int, default=0, help='bootstrap refits over sources')
    ap.add_argument('--prior', type=float, default=0.05, help='weight of the log-normal prior')
    ap.add_argument('--exclude', default='', help='comma-separated source_ids left out entirely')
    ap.add_argument('--tag', default='', help='suffix of the output files')
    ap.add_argument('--size-curve', default='all', choices=['all', 'matmul'])
    ap.add_argument('--k1-gemm', action='store_true', help='1x1 convs at the matmul rate (tested: worse)')
    ap.add_argument('--red', action='store_true', help='fit bw_red, the bandwidth of row reductions (tested)')
    ap.add_argument('--wino', action='store_true', help='fit wino32, the fp32 3x3 convs\' own rate (Winograd)')
    ap.add_argument('--grp-tf', action='store_true', help="fit grp_tf, TensorFlow's grouped convolution rate")
    ap.add_argument('--grp-width', action='store_true', help='grouped convs by width per group (gw_half) instead of one rate (grp)')
    ap.add_argument('--ngc', action='store_true', help='fit ngc, a GPU-time factor for NGC-container rows (tested)')
    ap.add_argument('--t-mm', action='store_true', help='size curve as a fixed time per product (t_mm) instead of f_half')
    ap.add_argument('--throttle', action='store_true', help='fit throttle, the load-dependent fp16 clock (tested)')
    ap.add_argument('--loss', default='l2', choices=['l2', 'soft_l1'])
    ap.add_argument('--fix', default='', help="parameters held, e.g. 'u16=8,bw_other=266' (display units)")
    return ap


def configure(a:argparse.Namespace)->dict:
    "Apply the options `a` (from `parser`) to the model; return the parameters held fixed."
    global LOSS, SIZE_CURVE, K1_GEMM
    LOSS, SIZE_CURVE, K1_GEMM = a.loss, a.size_curve, a.k1_gemm
    for n in ('bw_red', 'throttle', 'ngc'):
        if getattr(a, n.replace('bw_', '')): PARAMS[n] = OPTIONAL[n]
    if a.wino: PARAMS['wino32'] = OPTIONAL['wino32']
    if a.grp_tf: PARAMS['grp_tf'] = OPTIONAL['grp_tf']
    if a.grp_width: PARAMS['gw_half'] = OPTIONAL['gw_half']; del PARAMS['grp']
    if a.combine == 'mix': PARAMS['ov'] = OPTIONAL['ov']
    if a.combine == 'pnorm': PARAMS['kp'] = OPTIONAL['kp']
    if a.combine == 'queue': PARAMS['g_kernel'] = OPTIONAL['g_kernel']
    if a.t_mm: PARAMS['t_mm'] = OPTIONAL['t_mm']; del PARAMS['f_half']
    return {k: float(v) for k, v in (x.split('=') for x in a.fix.split(',') if x)}


def main(argv=None):
    a = parser().parse_args(argv)
    fixed = configure(a)
    d = load(queue=a.combine == 'queue')
    if a.exclude:
        keep = ~d.rows.source_id.isin(a.exclude.split(','))
        d.rows = d.rows[keep].reset_index(drop=True)
    allrows = np.ones(len(d.rows), bool)
    lp = fit(d, allrows, a.combine, a.prior, fixed=fixed)
    fit_err = errors(d, lp, a.combine, d.rows)
    err, folds = loso(d, a.combine, start=lp, prior_weight=a.prior, fixed=fixed)
    r = d.rows.assign(fit_error=fit_err, loso_error=err)
    with torch.no_grad(): r['pred_ms'] = predict(d, lp, a.combine).numpy()[r.w]
    per = r.groupby('source_id').apply(lambda g: pd.Series(dict(
        family=g.family.iloc[0], mode=g['mode'].iloc[0], rows=len(g),
        fit_median_abs=np.median(np.abs(g.fit_error)),
        loso_median_abs=np.median(np.abs(g.loso_error)), loso_signed_median=np.median(g.loso_error),
        loso_over40=(np.abs(g.loso_error) > 0.4).mean())), include_groups=False)
    # each source counts equally in the headline too: per-source medians, then their median
    overall = dict(all=summary(err), training=summary(err[(r['mode'] == 'training').to_numpy()]),
                   inference=summary(err[(r['mode'] == 'inference').to_numpy()]),
                   fit_all=summary(fit_err), median_of_source_medians=float(per.loso_median_abs.median()),
                   source_weighted=weighted(err, r.source_id),
                   sources=int(r.source_id.nunique()), families=int(r.family.nunique()))
    spread = bootstrap(d, a.combine, a.boot, start=lp, prior_weight=a.prior, fixed=fixed) if a.boot else folds
    params = table(spread, lp)
    fold = torch.stack(list(folds.values())).exp().numpy()
    params['loso_min'], params['loso_max'] = fold.min(0), fold.max(0)
    params['sources_moved'] = sensitivity(d, lp, a.combine).values
    tag = a.combine + a.tag
    r.to_csv(CACHE / f'rows_{tag}.csv', index=False)
    per.to_csv(CACHE / f'loso_{tag}.csv')
    params.to_csv(CACHE / f'params_{tag}.csv', index=False)
    if a.boot:  # the refits themselves, for prediction ranges (display units)
        pd.DataFrame(torch.stack(spread).exp().numpy(), columns=list(PARAMS)).to_csv(
            CACHE / f'boot_{tag}.csv', index=False)
    (CACHE / f'overall_{tag}.json').write_text(json.dumps(overall, indent=1))
    pd.set_option('display.width', 200)
    print(params.to_string(index=False, float_format=lambda x: f'{x:.4g}'))
    print(per.to_string(float_format=lambda x: f'{x:.3f}'))
    print(json.dumps(overall, indent=1))


if __name__ == '__main__':
    main()
