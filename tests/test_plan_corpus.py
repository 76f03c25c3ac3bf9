"""The corpus of what people train on a free T4: every setup gets a plan or a named refusal, never a traceback or a hang."""
import importlib.util, json, math
import pytest
from conftest import ROOT

spec = importlib.util.spec_from_file_location('plan_corpus', ROOT/'tools'/'plan_corpus.py')
plan_corpus = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plan_corpus)

# one setup for each way planning used to fail, each answered in seconds on a CPU
CI = {'gpt2-seq-4096': 'refused',               # a sequence past the positions
      'gpt2-image-cls-task': 'refused',         # a task the model has no head for
      'gpt2-5000-layers': 'refused',            # an absurd size, weighed before it is built
      'gpt2-negative-width': 'refused',         # a config that cannot be built
      'llava-1.5-7b': 'refused',                # a model of images and text: plan its language model
      'distilbert-no-architectures': 'plan',    # the task from the model type
      'mixtral-tiny-moe-full-512': 'plan',      # MoE routing, as transformers runs it on a T4
      'efficientnet-b0-224': 'plan'}            # in-place SiLU after BatchNorm, checkpointed blockwise

def check(row:dict):
    "A plan with figures, or a refusal of the package's that says what to do instead."
    assert row['answer'] in ('plan', 'refused'), row
    if row['answer'] == 'plan':
        assert row['peak_gib'] > 0 and row['largest_plain'] is not None, row
        assert 'largest batch 0' not in row['verdict'], row
    else:
        assert row['error_type'] in ('ArgumentError', 'NothingFits', 'ColabT4Error'), row
        assert any(w in row['error'] for w in ('pass ', 'plan ', 'Plan ', 'Check ', 'Instead', 'measure ')), row

@pytest.mark.parametrize('name', CI)
def test_ci_subset(name):
    row = plan_corpus.answer(name, hang=120)
    check(row)
    assert row['answer'] == CI[name], row

def test_record_covers_the_corpus():
    "The recorded answers (tools/plan_corpus.py) cover every setup, each a plan or a named refusal."
    rows = [json.loads(l) for l in plan_corpus.RECORD.read_text().splitlines()]
    names = [e['name'] for e in plan_corpus.plan.corpus()]
    assert [r['name'] for r in rows] == names
    for r in rows: check(r)
    assert len(names) >= 50 and all(e['source'] for e in plan_corpus.plan.corpus())

@pytest.mark.slow
@pytest.mark.parametrize('name', [e['name'] for e in plan_corpus.plan.corpus()])
def test_whole_corpus(name):
    "Every setup, planned now: minutes in all (pytest --slow)."
    check(plan_corpus.answer(name, hang=300))
