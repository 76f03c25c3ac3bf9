"""The range `estimate_t4` prints: recomputed from the shipped held-out rows, and widened outside them."""
import json, math
from importlib import resources
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from colab_t4_nb import t4

FILES = resources.files('colab_t4_nb')/'files'/'t4_fit'

def half_width(rows:pd.DataFrame, level:float)->float:
    "The quantile at `level` of |log(1 + error)| over `rows`, each source weighing 1."
    a = np.log1p(rows.error.to_numpy()).__abs__()
    w = (1 / rows.source_id.map(rows.source_id.value_counts())).to_numpy()
    o = np.argsort(a)
    return float(a[o][min(np.searchsorted(np.cumsum(w[o]) / w.sum(), level - 1e-12), len(a) - 1)])

def widths(rows:pd.DataFrame, r:dict)->dict:
    "Half-widths by class, as the range is calibrated: a class of fewer than 3 sources takes the pooled one."
    out = {'pooled': half_width(rows, r['level'])}
    for cls, m in (('gpu', rows.host_share < r['split']), ('host', rows.host_share >= r['split'])):
        out[cls] = half_width(rows[m], r['level']) if rows.source_id[m].nunique() >= 3 else out['pooled']
    return out

def test_the_held_out_range_holds_the_published_figures():
    "Each Colab-style row's range, recomputed from the pair fits without its source, holds >= `level` of the rows."
    r = json.loads((FILES/'fit.json').read_text())['range']
    rows, pairs = pd.read_csv(FILES/'rows.csv'), pd.read_csv(FILES/'nested.csv')
    colab = rows[rows.population].assign(error=lambda d: d.loso_error)
    assert len(colab) >= 80 and colab.source_id.nunique() >= 6, len(colab)
    q = {s: widths(pairs[pairs.held == s].merge(rows[['row_id', 'source_id']], on='row_id'), r)
         for s in colab.source_id.unique()}
    w = [q[s]['host' if h >= r['split'] else 'gpu'] for s, h in zip(colab.source_id, colab.host_share)]
    pred = colab.ms * (1 + colab.loso_error)
    low, high = pred / np.exp(w), pred * np.exp(w)
    np.testing.assert_allclose(low, colab.range_low_ms, rtol=1e-4)
    np.testing.assert_allclose(high, colab.range_high_ms, rtol=1e-4)
    coverage = colab.ms.between(low, high).mean()
    assert coverage >= r['level'], coverage
    shipped = widths(colab, r)  # the range estimate_t4 prints: every Colab-style source's held-out rows
    assert all(math.isclose(shipped[k], r['half_width'][k], rel_tol=1e-4) for k in shipped), (shipped, r)

def test_outside_the_validated_rows_the_range_widens_and_says_so():
    "Eager fp16 attention over 1001 tokens runs unaligned products no published row checks: wider range, a note."
    attend = lambda q: (q @ q.transpose(-2, -1)).softmax(-1) @ q
    est = {n: t4.estimate_t4(attend, torch.empty(8, 12, n, 64, dtype=torch.float16, device='meta'), repeats=0)
           for n in (1000, 1001)}
    assert est[1000].validated and not est[1001].validated
    assert 'Outside what was validated' in est[1001].note and 'Outside' in est[1001]._repr_markdown_()
    assert est[1001].high_ms / est[1001].ms > est[1000].high_ms / est[1000].ms

def test_attention_is_counted_as_a_t4_runs_it():
    "fp16 head size 36: the math path's products; a boolean mask over 77 keys: still one fused kernel."
    q36 = torch.empty(2, 8, 77, 36, dtype=torch.float16, device='meta')
    q64 = torch.empty(2, 8, 77, 64, dtype=torch.float16, device='meta')
    mask = torch.ones(2, 1, 77, 77, dtype=torch.bool, device='meta')
    kinds = lambda fn: [o.kind for o in t4.count_work(fn) if o.kind != 'view']
    assert kinds(lambda: F.scaled_dot_product_attention(q36, q36, q36)).count('matmul') == 2
    masked = kinds(lambda: F.scaled_dot_product_attention(q64, q64, q64, attn_mask=mask))
    assert masked.count('attention') == 1 and 'matmul' not in masked, masked
