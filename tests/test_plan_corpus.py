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

def test_many_ops_traced_as_copies(monkeypatch):
    ("A step past OPS_LIMIT ops (Mamba's reference scan loops per token) is planned from copies of 2 and 3 layers: "
     "the weights, the T4 time and the peak as the whole model's trace gives them.")
    from transformers import GPT2Config
    from colab_t4_nb import memory_model, plan
    config = GPT2Config(n_layer=6, n_embd=64, n_head=4, n_positions=128, vocab_size=512)
    whole = plan.plan_run(config, batch=4, seq=64)
    monkeypatch.setattr(memory_model, 'OPS_LIMIT', 500)
    copies = plan.plan_run(config, batch=4, seq=64)
    assert 'traced as copies of 2 and 3 layers' in copies.setup and 'copies' not in whole.setup
    assert copies.parts['weights'] == whole.parts['weights'] and copies.checkpoint_bytes == whole.checkpoint_bytes
    assert math.isclose(copies.step_ms, whole.step_ms, rel_tol=1e-6)
    held = lambda p: p.peak - p.parts['context']
    assert math.isclose(held(copies), held(whole), rel_tol=0.1), (copies.parts, whole.parts)

def test_a_plan_does_not_depend_on_the_random_state():
    ("LayerDrop and SpecAugment draw on the CPU's generators: the plan traces the step that drops no layer, with the "
     "same draws each time, and leaves the caller's generators as they were.")
    import random
    import numpy as np, torch
    from transformers import Wav2Vec2Config
    from colab_t4_nb.plan import plan_run
    config = Wav2Vec2Config(hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64,
                            conv_dim=(32, 32), conv_kernel=(10, 3), conv_stride=(5, 2), num_feat_extract_layers=2,
                            vocab_size=16, layerdrop=0.5, mask_time_prob=0.5)
    plans = []
    draws = lambda: (torch.rand(1).item(), np.random.rand(), random.random())
    def seed(n): torch.manual_seed(n); np.random.seed(n); random.seed(n)
    for n in (0, 1, 2):
        seed(n)
        plans.append(plan_run(config, batch=4, seq=16000, task='ctc').parts)
        after = draws()
        seed(n)
        assert after == draws()  # the generators as the caller left them
    assert plans[0] == plans[1] == plans[2], plans

# what each QLoRA and Stable Diffusion setup's recorded plan says it planned
QUANTIZED = {'llama-3.2-1b-qlora-2048': 'on an nf4 base, double-quantized', 'llama-3.2-3b-qlora-2048': 'nf4 base',
             'llama-2-7b-qlora-2048': 'LoRA r=64 on an nf4 base', 'mistral-7b-qlora-2048': 'nf4 base',
             'llama-3.1-8b-qlora-2048': 'on an nf4 base)', 'opt-6.7b-int8-lora-256': 'on an int8 base',
             'sd15-unet-lora-512': '512x512 images (64x64 latents)', 'sd15-unet-full-512-8bit-ckpt': '8-bit AdamW'}

def test_qlora_and_stable_diffusion_setups():
    ("The corpus holds QLoRA of 1 to 8 billion parameters, LoRA on an int8 base and SD 1.5's UNet; each setup builds "
     "with its BitsAndBytesConfig or UNet config, and its recorded answer is a plan of it.")
    rows = {r['name']: r for r in map(json.loads, plan_corpus.RECORD.read_text().splitlines())}
    for name, said in QUANTIZED.items():
        assert rows[name]['answer'] == 'plan' and said in rows[name]['setup'], rows[name]
    assert rows['llama-2-7b-qlora-2048']['fits'] and rows['llama-2-7b-qlora-2048']['checkpoint_gb'] < 1
    model, kw = plan_corpus.plan.corpus_setup('llama-2-7b-qlora-2048')
    assert kw['quantization'].bnb_4bit_use_double_quant and kw['optimizer'] == 'paged_adamw8bit', kw
    model, kw = plan_corpus.plan.corpus_setup('sd15-unet-lora-512')
    assert model['_class_name'] == 'UNet2DConditionModel' and model['cross_attention_dim'] == 768, model

def test_record_answers_of_some_setups(tmp_path, monkeypatch):
    "`--only NAME --record` replaces those setups' answers in the record and keeps the others', in the corpus's order."
    record, recorded = tmp_path/'answers.jsonl', plan_corpus.RECORD.read_text()
    record.write_text(recorded)
    monkeypatch.setattr(plan_corpus, 'RECORD', record)
    assert plan_corpus.main(['--only', 'gpt2-seq-4096', '--record']) == 0
    before = [json.loads(l) for l in recorded.splitlines()]
    after = [json.loads(l) for l in record.read_text().splitlines()]
    assert [r['name'] for r in after] == [r['name'] for r in before]
    changed = [a['name'] for a, b in zip(after, before) if a != b]
    assert set(changed) <= {'gpt2-seq-4096'}
    assert {r['name']: r for r in after}['gpt2-seq-4096']['answer'] == 'refused'
