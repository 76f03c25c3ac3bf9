"""Copy one fit of `model.py` into the package, where `colab_t4_nb.t4_model` reads it.

    python research/t4_fit/export.py sum_final "<what produced it: machine, versions, date, command>"
    python research/t4_fit/export.py --range sum_final "<what produced it>"
    python research/t4_fit/export.py --host "<what produced it>" oracle_all onerow_all population_all

Writes colab_t4_nb/files/t4_fit/fit.json (the fitted parameters with their spread, and every
bootstrap refit) and rows.csv (each published row with its in-sample and leave-one-source-out
predictions). The T4 page builds its tables from these two files.

With --range: the range of `calibrate.py`'s run of that tag (the fit's own options): fit.json gains
`range` (its level, class split and half-widths), rows.csv gains per row its population, host share,
share in unaligned fp16 products and the range calibrated without its source, and nested.csv holds
the pair fits' held-out rows the nested ranges come from (a test recomputes them).

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


RANGE_COLS = ['population', 'host_share', 'unaligned_share', 'range_low_ms', 'range_high_ms']


def range_(tag:str, made:str):
    cal = json.loads((CACHE / f'cal_{tag}.json').read_text())
    nested = pd.read_csv(CACHE / f'cal_{tag}_nested.csv')
    pairs = pd.read_csv(CACHE / f'cal_{tag}_pairs.csv')
    loso = pd.read_csv(CACHE / f'cal_{tag}_loso.csv')
    share = float(loso.unaligned_share[loso.population].max())
    outside_share = 0.1  # a call with more of its time in unaligned fp16 (or bf16) products is not validated
    assert share < outside_share, f'a Colab-style row has {share:.1%} of its time in unaligned fp16 products'
    fit = json.loads((OUT / 'fit.json').read_text())
    fit['range'] = dict(made=made, level=cal['level'], split=cal['split'], conformal=cal['inflate'],
                        outside_share=outside_share, half_width={k: round(v, 6) for k, v in cal['half_width'].items()},
                        nested=cal['nested'], nested_outside=cal['outside'])
    (OUT / 'fit.json').write_text(json.dumps(fit, indent=1) + '\n')
    rows = pd.read_csv(OUT / 'rows.csv')
    extra = nested.set_index('row_id').rename(columns={'low_ms': 'range_low_ms', 'high_ms': 'range_high_ms'})
    rows = rows.drop(columns=[c for c in RANGE_COLS if c in rows]).join(extra[RANGE_COLS], on='row_id')
    assert rows.range_low_ms.notna().all(), 'rows without a range: calibrate.py ran on other rows'
    rows.to_csv(OUT / 'rows.csv', index=False, float_format='%.6g')
    pairs[['held', 'row_id', 'error', 'host_share']].to_csv(OUT / 'nested.csv', index=False, float_format='%.6g')
    print(f'wrote the range into {OUT}/fit.json, rows.csv ({len(rows)} rows) and nested.csv ({len(pairs)} rows)')


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
    elif sys.argv[1] == '--range': range_(*sys.argv[2:4])
    else: main(*sys.argv[1:3])
