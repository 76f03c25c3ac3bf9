"""Copy one fit of `model.py` into the package, where `colab_t4_nb.t4` reads it.

    python research/t4_fit/export.py sum_final "<what produced it: machine, versions, date, command>"
    python research/t4_fit/export.py --host "<what produced it>" oracle_all onerow_all population_all

Writes colab_t4_nb/files/t4_fit/fit.json (the fitted parameters with their spread, and every
bootstrap refit, for prediction ranges) and rows.csv (each published row with its in-sample and
leave-one-source-out predictions). The T4 page builds its tables from these two files.

With --host: host.json, the runs of `host.py` named (each source its own host time per op): each
run's overall errors, fitted card parameters, per source its host time and median |error|, and per
row its error (null: the row set its source's host time).
"""
from __future__ import annotations
import json, sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from model import CACHE  # noqa: E402

OUT = Path(__file__).parents[2] / 'colab_t4_nb' / 'files' / 't4_fit'
ROWS = ['row_id', 'source_id', 'family', 'mode', 'framework', 'graph', 'layout', 'precision',
        'workload', 'ms', 'pred_ms', 'fit_error', 'loso_error', 'confidence', 'note']


def main(tag:str, made:str):
    params = pd.read_csv(CACHE / f'params_{tag}.csv')
    boot = pd.read_csv(CACHE / f'boot_{tag}.csv')
    rows = pd.read_csv(CACHE / f'rows_{tag}.csv')
    OUT.mkdir(parents=True, exist_ok=True)
    fit = dict(made=made, fit=tag,
               params={r.param: dict(value=r.value, p16=r.p16, p84=r.p84, loso_min=r.loso_min,
                                     loso_max=r.loso_max, sources_moved=int(r.sources_moved),
                                     unit=r.unit, meaning=r.meaning) for r in params.itertuples()},
               boot=boot[list(params.param)].round(6).values.tolist())
    (OUT / 'fit.json').write_text(json.dumps(fit, indent=1) + '\n')
    rows[ROWS].to_csv(OUT / 'rows.csv', index=False, float_format='%.6g')
    print(f'wrote {OUT}/fit.json ({len(fit["boot"])} refits) and rows.csv ({len(rows)} rows)')


def host(made:str, *tags:str):
    runs = {}
    for tag in tags:
        o = json.loads((CACHE / f'host_{tag}.json').read_text())
        per = pd.read_csv(CACHE / f'host_{tag}.csv')
        o['per_source'] = per.round(6).to_dict(orient='records')
        rows = pd.read_csv(CACHE / f'host_{tag}_rows.csv')
        o['row_error'] = {r.row_id: (None if pd.isna(r.error) else round(float(r.error), 6)) for r in rows.itertuples()}
        runs[tag] = o
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / 'host.json').write_text(json.dumps(dict(made=made, runs=runs), indent=1) + '\n')
    print(f'wrote {OUT}/host.json ({len(runs)} runs)')


if __name__ == '__main__':
    if sys.argv[1] == '--host': host(*sys.argv[2:])
    else: main(*sys.argv[1:3])
