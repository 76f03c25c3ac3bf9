"""The T4 pages: the model behind the estimate on a page of its own, read before the page a Colab user opens,
and every name users import from `colab_t4_nb.t4` still there."""
import json
import yaml
from conftest import NBS

PAGES = {'t4_model': '03b_t4_model.ipynb', 't4': '03c_t4.ipynb'}  # module: its page, in reading order
# public names of `colab_t4_nb.t4` from before the model had its own page, now defined in `t4_model`
MOVED = ['MetaAutocast', 'Op', 'T4Constant', 'T4_CLOCKS', 'T4_CONSTANTS', 'T4_FP16_GEMM', 'T4_FP16_GEMM_SOURCE',
         'WorkCounter', 'bert_qa', 'conv_args', 'count_work', 'cuda_dropout', 'dropout_as_on_gpu',
         'fused_attention', 'sdpa_t4', 'tensors_in', 'T4_TABLES']
STAYED = ['PUBLISHED', 'Rehearsal', 'T4Estimate', 'T4Measurement', 'estimate_t4', 't4_rehearsal', 'validation_table']

def _sources(page:str)->list[str]: return [''.join(c['source']) for c in json.loads((NBS/page).read_text())['cells']]

def test_each_module_has_its_page_and_the_model_page_comes_first():
    for mod, page in PAGES.items(): assert _sources(page)[0] == f'#| default_exp {mod}', page
    side = yaml.safe_load((NBS/'sidebar.yml').read_text())['website']['sidebar']['contents']
    assert side.index(PAGES['t4_model']) + 1 == side.index(PAGES['t4']), side
    index = '\n'.join(_sources('index.ipynb'))
    assert 0 < index.index(f"({PAGES['t4_model']})") < index.index(f"({PAGES['t4']})")

def test_what_users_imported_from_t4_still_imports():
    from colab_t4_nb import t4, t4_model
    assert not [n for n in STAYED if getattr(t4, n, None) is None]
    assert not [n for n in MOVED if getattr(t4, n, None) is not getattr(t4_model, n)]

def test_no_cell_on_the_t4_pages_runs_over_60_lines():
    long = [(page, s.splitlines()[0], len(s.splitlines())) for page in PAGES.values() for s in _sources(page)
            if len(s.splitlines()) > 60]
    assert not long, long
