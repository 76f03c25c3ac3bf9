#!/usr/bin/env python
"""Plan every setup of the corpus (colab_t4_nb/files/plan/corpus.json) on this machine's CPU and record each answer.

    python tools/plan_corpus.py                  # all setups; rewrites colab_t4_nb/files/plan/answers.jsonl
    python tools/plan_corpus.py --only NAME ...  # some setups, printed, the record left as it is
    python tools/plan_corpus.py --only NAME ... --record  # those setups' answers replaced in the record

An answer is a plan (its verdict and figures) or a refusal (the package's error, its class and message).
Anything else, a traceback of another class or a setup past --hang seconds, is recorded as such and
makes the script exit 1. Each setup is timed from an empty shape cache, as in a fresh process.
"""
import argparse, json, os, platform, signal, statistics, sys, time, warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from colab_t4_nb.core import ColabT4Error, atomic_write  # noqa: E402
from colab_t4_nb import memory_model, plan  # noqa: E402

RECORD = ROOT/'colab_t4_nb'/'files'/'plan'/'answers.jsonl'

class Hang(Exception): "A setup ran past the script's own bound."

# why a setup was refused, by the words of the refusal
REASONS = {'passed its time limit': 'a step too long to trace in the time limit',
           'weights alone take': 'weights alone past the card',
           'has positions for': 'a sequence past the positions',
           'head': 'no head for the task', 'cannot be built': 'a config that cannot be built',
           'failed on meta tensors': 'an op that needs tensor values'}

def answer(name:str, hang:float=300)->dict:
    "One setup's answer: a plan's figures, or a refusal's class and message; timed from an empty shape cache."
    def stop(*_): raise Hang(f'no answer in {hang:g} s')
    memory_model.forget_shapes()
    before = signal.signal(signal.SIGALRM, stop)
    signal.alarm(int(hang))
    t = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            model, kw = plan.corpus_setup(name)
            p = plan.plan_run(model, **kw)
        d = p.as_dict()
        row = dict(answer='plan', verdict=p.verdict, setup=p.setup,
                   **{k: d[k] for k in ('fits', 'batch', 'peak_gib', 'largest_plain', 'largest_checkpointed',
                                         'step_ms', 'checkpoint_gb', 'card')})
    except ColabT4Error as e:
        reason = next((r for k, r in REASONS.items() if k in str(e)), 'other')
        row = dict(answer='refused', reason=reason, error_type=type(e).__name__, error=str(e))
    except Exception as e: row = dict(answer='traceback', error_type=type(e).__name__, error=str(e)[:2000])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    return dict(name=name, **row, seconds=round(time.perf_counter() - t, 1), made=_made())

def _made()->str:
    "Where and when an answer was made: the date, the CPUs and the versions that time it."
    import torch, transformers
    return (f'{time.strftime("%Y-%m-%d")}, {os.cpu_count()} CPUs ({platform.machine()}), '
            f'torch {torch.__version__}, transformers {transformers.__version__}')

def main(argv=None)->int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--only', nargs='+', help='these setups only; the record is not rewritten (but see --record)')
    ap.add_argument('--hang', type=float, default=300, help='seconds after which a setup counts as hung')
    ap.add_argument('--record', action='store_true', help="with --only: write those setups' answers into the record, "
                    "the others' kept, in the corpus's order")
    a = ap.parse_args(argv)
    names = [e['name'] for e in plan.corpus()]
    unknown = sorted(set(a.only or ()) - set(names))
    if unknown: sys.exit(f'unknown setups {unknown}: see colab_t4_nb/files/plan/corpus.json')
    rows = []
    for n in a.only or names:
        rows.append(answer(n, a.hang))
        r = rows[-1]
        print(f"{r['seconds']:6.1f} s  {r['answer']:9} {n}: {r.get('verdict') or r['error'][:160]}", flush=True)
    secs = [r['seconds'] for r in rows]
    print(f'{len(rows)} setups: {sum(r["answer"] == "plan" for r in rows)} planned, '
          f'{sum(r["answer"] == "refused" for r in rows)} refused, '
          f'{sum(r["answer"] == "traceback" for r in rows)} other; '
          f'median {statistics.median(secs):.1f} s, max {max(secs):.1f} s')
    if a.only and a.record:  # the new answers beside the recorded ones, every setup of the corpus once
        kept = {r['name']: r for r in map(json.loads, RECORD.read_text().splitlines()) if r['name'] in names}
        kept.update({r['name']: r for r in rows})
        rows = [kept[n] for n in names if n in kept]
    if not a.only or a.record:
        with atomic_write(RECORD) as f: f.write(''.join(json.dumps(r) + '\n' for r in rows).encode())
    return int(any(r['answer'] == 'traceback' for r in rows))

if __name__ == '__main__': sys.exit(main())
