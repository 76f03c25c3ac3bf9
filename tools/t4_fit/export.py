"""Copy one fit of `model.py` into the package, where `colab_t4_nb.t4` reads it.

    python tools/t4_fit/export.py sum_final "<what produced it: machine, versions, date, command>"

Writes colab_t4_nb/files/t4_fit/fit.json (the fitted parameters with their spread, and every
bootstrap refit, for prediction ranges) and rows.csv (each published row with its in-sample and
leave-one-source-out predictions). The T4 page builds its tables from these two files.
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


if __name__ == '__main__':
    main(*sys.argv[1:3])
