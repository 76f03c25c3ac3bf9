"""Where published sources contradict each other: the same workload (model, precision, batch, sequence)
timed by two sources on a T4. Any model that predicts one time for that workload in one framework is
off, on one of the two rows, by at least (b - a) / (a + b), a and b the two times: the floor printed
here. Reads `rows.pkl` from `rebuild.py` (T4_FIT_CACHE).

    python research/t4_fit/conflicts.py
"""
import itertools, os, sys
from pathlib import Path
import pandas as pd
sys.path.insert(0, str(Path(__file__).parent))
from report import md  # the folder's one markdown table writer

CACHE = Path(os.environ.get('T4_FIT_CACHE', Path.home()/'.cache'/'colab_t4_nb'/'t4_fit'))

def pairs(rows:pd.DataFrame)->pd.DataFrame:
    "Every workload timed by two sources: both times, their ratio and the error floor of one prediction."
    best = rows.groupby(['source_id', 'workload'], as_index=False).agg(ms=('ms', 'min'), graph=('graph', 'first'))
    out = []
    for wl, g in best.groupby('workload'):
        for (_, x), (_, y) in itertools.combinations(g.iterrows(), 2):
            a, b = sorted([x.ms, y.ms])
            out.append(dict(workload=wl, src_a=x.source_id, src_b=y.source_id, ms_a=x.ms, ms_b=y.ms,
                            same_framework=bool(x.graph) == bool(y.graph), ratio=b / a, floor=(b - a) / (a + b)))
    return pd.DataFrame(out)

if __name__ == '__main__':
    recs = pd.read_pickle(CACHE / 'rows.pkl')
    rows = pd.DataFrame([{k: v for k, v in r.items() if k != 'ops'} for r in recs])
    p = pairs(rows)
    if p.empty: sys.exit('no workload is timed by two sources')
    s = (p.groupby(['src_a', 'src_b', 'same_framework'])
          .agg(workloads=('ratio', 'size'), ratio_median=('ratio', 'median'), ratio_max=('ratio', 'max'),
               floor_median=('floor', 'median'), over_15=('floor', lambda f: int((f > 0.15).sum())),
               over_40=('floor', lambda f: int((f > 0.40).sum())))
          .reset_index().sort_values('workloads', ascending=False))
    print(md(s))
    print(f'\n{len(p)} pairs; in {int((p.floor > 0.15).sum())} any single prediction errs by >15% on one of '
          f'the two rows, in {int((p.floor > 0.40).sum())} by >40%.')
