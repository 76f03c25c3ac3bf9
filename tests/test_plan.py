"""`colab-t4 plan` end to end, as a user runs it, and the CPU side of tools/plan_check.py."""
import json, subprocess, sys, time
from pathlib import Path
from conftest import ROOT, colab_t4

KEYS = {'fits', 'peak_gib', 'largest_batch', 'step_ms', 'run_hours', 'sessions'}

def test_plan_gpt2_json_from_a_fresh_interpreter(cpu_env):
    ("On a CPU, in a fresh interpreter: the answer parses and has the keys. It comes in about 5 s "
     "on a quiet 2-core machine, start-up included; the bound leaves room for a loaded CI machine.")
    t = time.perf_counter()
    r = colab_t4(['plan', '--model', 'gpt2', '--samples', '100000', '--epochs', '2', '--json'], cpu_env)
    wall = time.perf_counter() - t
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert KEYS <= set(d), d
    assert d['fits'] and d['largest_batch'] >= 8 and d['sessions'] >= 1 and d['step_ms'] > 0, d
    assert abs(d['peak_gib'] - sum(d['parts_gib'].values())) < 0.01, d
    assert wall < 30, f'colab-t4 plan --model gpt2 took {wall:.1f} s'

def test_plan_with_a_measured_step(cpu_env):
    "--step-ms puts a step timed on the run's card in place of the T4 prediction: the hours follow from it."
    r = colab_t4(['plan', '--model', 'gpt2', '--samples', '1000', '--step-ms', '412', '--json'], cpu_env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d['step_ms'] == 412 and d['run_hours'] == round(-(-1000 // d['batch']) * 412 / 3.6e6, 3), d
    r = colab_t4(['plan', '--model', 'gpt2', '--step-ms', '-1'], cpu_env)
    assert r.returncode == 1 and 'step_ms must be a number > 0' in r.stderr, r.stderr

def test_plan_table_and_errors(cpu_env, tmp_path):
    "The table starts with the verdict; a bad value is one line on stderr and status 1, a missing file too."
    r = colab_t4(['plan', '--model', 't5-small', '--seq', '128', '--batch', '4', '--optimizer', 'sgd'], cpu_env)
    assert r.returncode == 0 and r.stdout.startswith('Fits a T4 at batch 4'), r.stdout + r.stderr
    assert 't5 for seq2seq, 128 tokens' in r.stdout, r.stdout
    r = colab_t4(['plan', '--model', 'gpt2', '--lora-rank', '0'], cpu_env)
    assert r.returncode == 1 and r.stderr.startswith('colab-t4 plan: lora must be'), r.stderr
    assert 'Traceback' not in r.stderr
    r = colab_t4(['plan', '--config', str(tmp_path/'config.json')], cpu_env)
    assert r.returncode == 1 and 'no such file' in r.stderr, r.stderr

def test_plan_check_dry_run(cpu_env, tmp_path):
    "tools/plan_check.py without CUDA: the setups build on meta tensors and each gets a plan and accelerate's figure."
    out = tmp_path/'check.jsonl'
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'plan_check.py'), str(out), '--dry-run',
                        '--only', 'gpt2-ckpt', 'vit-base', 'unet'],
                       capture_output=True, text=True, env=cpu_env, timeout=300)
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    assert [x['setup'] for x in rows] == ['gpt2-ckpt', 'vit-base', 'unet'], r.stdout + r.stderr
    for x in rows:
        if x['setup'] == 'unet' and 'diffusers is not installed' in x.get('error', ''): continue
        assert 'error' not in x, x
        assert x['plan_alloc_gib'] <= x['plan_reserved_gib'] < x['plan_gib'], x
        assert x['largest_planned_cap'] >= 1 and x['accelerate_gib'] > 0, x
    assert r.stdout.splitlines()[0].split()[:3] == ['setup', 'measured', 'plan'], r.stdout

def test_plan_check_refuses_without_cuda_or_with_unknown_setups(cpu_env, tmp_path):
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'plan_check.py'), str(tmp_path/'x.jsonl'), '--dry-run',
                        '--only', 'gpt5'], capture_output=True, text=True, env=cpu_env, timeout=120)
    assert r.returncode == 2 and "unknown setups ['gpt5']" in r.stderr, r.stderr

def test_plan_check_replans_a_recorded_run(cpu_env, tmp_path):
    "--replan: a recorded GPU run's measurements beside plans made now, on a CPU."
    rec = ROOT/'colab_t4_nb'/'files'/'results'/'run18.jsonl'
    out = tmp_path/'replan.jsonl'
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'plan_check.py'), str(out), '--replan', str(rec),
                        '--only', 'gpt2-ckpt', 'vit-base'], capture_output=True, text=True, env=cpu_env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    old = {x['setup']: x for x in map(json.loads, rec.read_text().splitlines())}
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    assert [x['setup'] for x in rows] == ['gpt2-ckpt', 'vit-base'], rows
    for x in rows:
        assert x['measured_gib'] == old[x['setup']]['measured_gib'] and x['measured_in'] == 'run18.jsonl', x
        assert 'torch' in x['replanned'] and abs(x['error_pct']) < 100, x
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'plan_check.py'), str(out), '--replan', str(tmp_path/'no.jsonl')],
                       capture_output=True, text=True, env=cpu_env, timeout=120)
    assert r.returncode == 2 and 'no such file' in r.stderr, r.stderr

# ---------------------------------------------------------------- every model gets an answer
import types
import pytest
import torch
from torch import nn

def tiny(cls, **kw):
    "A transformers config of class `cls` (its name), small enough to plan in a second."
    import transformers
    return getattr(transformers, cls)(**kw)

LLAMA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, max_position_embeddings=256)

def test_task_from_the_model_type():
    "A config saved without `architectures` is planned with its model's own head, not as a causal LM."
    from colab_t4_nb.memory_model import _task
    got = {c: _task(tiny(c)) for c in ('DistilBertConfig', 'AlbertConfig', 'DebertaV2Config', 'ResNetConfig',
                                       'SegformerConfig', 'WhisperConfig', 'CLIPConfig', 'Wav2Vec2Config',
                                       'GPT2Config', 'T5Config')}
    assert got == {'DistilBertConfig': 'masked-lm', 'AlbertConfig': 'masked-lm', 'DebertaV2Config': 'masked-lm',
                   'ResNetConfig': 'image-cls', 'SegformerConfig': 'semantic-seg', 'WhisperConfig': 'speech-seq2seq',
                   'CLIPConfig': 'contrastive', 'Wav2Vec2Config': 'ctc', 'GPT2Config': 'causal-lm',
                   'T5Config': 'seq2seq'}, got

@pytest.mark.parametrize('config, kw, said', [
    (('GPT2Config', {}), dict(seq=4096), 'has positions for 1024 tokens: pass seq <= 1024'),
    (('GPT2Config', {}), dict(task='image-cls'), 'gpt2 has no image-cls head'),
    (('GPT2Config', {'n_embd': -1}), {}, 'n_embd=-1 cannot be negative'),
    (('GPT2Config', {'n_layer': 5000}), {}, 'does not fit even at batch 1. Instead, plan LoRA'),
    (('LlavaConfig', {}), {}, 'plan its language model, plan_run(config.text_config'),
], ids=['positions', 'no-head', 'negative-width', 'absurd-size', 'llava'])
def test_refusals_name_the_way_out(config, kw, said):
    "What cannot be planned is refused by the package's error, in words that say what to do instead."
    from colab_t4_nb.core import ColabT4Error
    from colab_t4_nb.plan import plan_run
    with pytest.raises(ColabT4Error) as e: plan_run(tiny(config[0], **config[1]), **kw)
    assert said in str(e.value), e.value

def test_time_limit_stops_a_trace():
    "A step too long to trace in the time given stops with an error that says so, instead of hanging."
    from colab_t4_nb.core import ColabT4Error
    from colab_t4_nb.plan import plan_run
    t = time.perf_counter()
    with pytest.raises(ColabT4Error) as e: plan_run(tiny('LlamaConfig', **LLAMA), seq=64, time_limit=0.01)
    assert 'passed its time limit (0.01 s)' in str(e.value) and time.perf_counter() - t < 30, e.value

def test_no_batch_fits_is_said_in_words():
    "A plan where not even batch 1 fits says so, and never prints a largest batch of 0."
    from colab_t4_nb.plan import RunPlan
    p = RunPlan('x', 'T4', 4, 'fp16', False, dict(weights=20 * 2**30), 15 * 2**30, 0, 2, 0, 0, 1.0, 1.0, 1.0,
                'compute', None, 1, 12, 1, 10)
    assert p.verdict.endswith('it does not fit even at batch 1; largest batch 2 with gradient checkpointing.'), p.verdict
    assert 'largest batch 0' not in p.verdict and 'none (not even batch 1)' in dict(p.as_rows())['largest batch']

def test_another_card_gets_no_t4_time():
    "The time model is a T4's: another card's plan gives no step time, and says why."
    from colab_t4_nb.plan import plan_run
    p = plan_run(tiny('LlamaConfig', **LLAMA), batch=2, seq=64, device='H200')
    assert p.step_ms is None and p.sessions is None and "no step time (the time model is a T4's)" in p.verdict, p.verdict
    assert p.as_dict()['step_ms'] is None

def test_lora_checkpoint_holds_the_adapters():
    "A LoRA run saves its adapters and their optimizer state, not the frozen base; peft's 'all-linear' is accepted."
    from colab_t4_nb.plan import plan_run
    lora = types.SimpleNamespace(r=4, target_modules='all-linear')
    p = plan_run(tiny('LlamaConfig', **LLAMA), batch=2, seq=64, lora=lora)
    linear = 2 * (4 * (64 + 64) * 2 + 4 * (64 + 32) * 2 + 4 * (64 + 128) * 3)  # q, o; k, v; gate, up, down
    rng = p.checkpoint_bytes - 3 * 4 * linear  # fp32 adapters, AdamW's two states; the random generators' states
    assert 0 < rng < 64 * 1024, (p.checkpoint_bytes, linear)
    assert p.checkpoint_holds.startswith('the adapters (') and 'never the frozen base' in p.checkpoint_holds, p
    assert 'the adapters (' in dict(p.as_rows())['checkpoint']

def test_lora_defaults_follow_the_layer_names():
    "Without target_modules, LoRA finds the attention projections under their names in this transformers (ViT)."
    from colab_t4_nb.plan import plan_run
    vit = tiny('ViTConfig', hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
               image_size=32, patch_size=8)
    p = plan_run(vit, batch=2, lora=types.SimpleNamespace(r=4, target_modules=None))
    assert '(2.0K trainable: LoRA r=4)' in p.setup, p.setup  # q and v of 2 layers: 2 * 2 * 4 * (64 + 64)

@pytest.mark.parametrize('cls, kw, task', [
    ('DistilBertConfig', dict(dim=64, hidden_dim=128, n_layers=2, n_heads=4, vocab_size=256), 'token-cls'),
    ('Wav2Vec2Config', dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                            conv_dim=(32,) * 7, vocab_size=32), 'ctc'),
    ('WhisperConfig', dict(d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                           max_source_positions=100), 'speech-seq2seq'),
    ('CLIPConfig', dict(text_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                         num_attention_heads=4, vocab_size=256),
                        vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                           num_attention_heads=4, image_size=32, patch_size=8),
                        projection_dim=32), 'contrastive'),
    ('SegformerConfig', dict(hidden_sizes=[8, 16, 32, 64], decoder_hidden_size=32, num_labels=3), 'semantic-seg'),
])
def test_the_heads_people_train(cls, kw, task):
    "Token classification, CTC, speech seq2seq, contrastive and semantic segmentation: one step of each traces."
    from colab_t4_nb.memory_model import _prepare, _trace
    config = tiny(cls, **kw)
    s, what = _prepare(config, 16000 if task == 'ctc' else None, 64 if task == 'semantic-seg' else None, task,
                       None, None, 'adamw', torch.float16, True, None)
    parts, _ = _trace(s, 2)
    assert what.startswith(f'{config.model_type} for {task}'), what
    assert parts['activations'] > 0 and parts['gradients'] + parts['optimizer'] > 0, parts

def test_vit_at_another_image_size():
    "A ViT planned at another image size interpolates its position embeddings, as `interpolate_pos_encoding=True` does."
    from colab_t4_nb.plan import plan_run
    vit = tiny('ViTConfig', hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
               image_size=32, patch_size=8)
    assert plan_run(vit, batch=2, image_size=64).fits

def test_inplace_relu_after_batchnorm_checkpointed():
    "ReLU(inplace=True) after BatchNorm, as torchvision builds it, plans with and without checkpointing."
    from colab_t4_nb.plan import plan_run
    with torch.device('meta'):
        net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                            nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    p = plan_run(net, batch=4, example=lambda b: torch.empty(b, 3, 32, 32, device='meta'), checkpointing=True)
    assert p.largest_checkpointed and p.largest_plain, p

def test_data_dependent_ops_as_cuda_runs_them():
    "DeBERTa-v3's `nonzero` over its labels runs as with every label kept; MoE routing is planned and said."
    from colab_t4_nb.plan import plan_run
    deberta = tiny('DebertaV2Config', hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=128, vocab_size=256, relative_attention=True, position_buckets=32,
                   pos_att_type=['p2c', 'c2p'], position_biased_input=False, norm_rel_ebd='layer_norm')
    assert plan_run(deberta, batch=2, seq=64, task='seq-cls').fits
    moe = tiny('MixtralConfig', **LLAMA, num_local_experts=4, num_experts_per_tok=2)
    p = plan_run(moe, batch=2, seq=64)
    assert p.fits and '4 experts (2 a token)' in p.setup and 'every routing, the worst included' in p.setup, p.setup

def test_plan_a_corpus_setup_from_the_shell(cpu_env):
    "`colab-t4 plan --model NAME` plans a corpus setup with its own batch and sizes; a refusal is one line, status 1."
    r = colab_t4(['plan', '--model', 'gpt2-seq-4096'], cpu_env)
    assert r.returncode == 1 and r.stderr.startswith('colab-t4 plan: seq=4096: gpt2 has positions for 1024'), r.stderr
    assert 'Traceback' not in r.stderr
    r = colab_t4(['plan', '--model', 'distilbert-ner-128', '--batch', '4', '--json'], cpu_env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d['batch'] == 4 and d['fits'] and d['largest_batch'] > 4, d

# ---------------------------------------------------------------- QLoRA and Stable Diffusion
NF4 = dict(load_in_4bit=True, bnb_4bit_quant_type='nf4', bnb_4bit_use_double_quant=True,
           bnb_4bit_compute_dtype='float16')

def test_qlora_plans_a_4bit_base():
    ("A base quantized by bitsandbytes trains the same adapters, checkpointed by default as "
     "prepare_model_for_kbit_training does; its checkpoint is the LoRA run's.")
    from transformers import BitsAndBytesConfig
    from colab_t4_nb.plan import plan_run
    lora = types.SimpleNamespace(r=4, target_modules='all-linear')
    q = plan_run(tiny('LlamaConfig', **LLAMA), batch=2, seq=64, lora=lora, quantization=BitsAndBytesConfig(**NF4))
    assert 'LoRA r=4 on an nf4 base, double-quantized' in q.setup and q.checkpointing and q.largest_checkpointed, q
    linear = 2 * (4 * (64 + 64) * 2 + 4 * (64 + 32) * 2 + 4 * (64 + 128) * 3)  # the adapters, as a LoRA run's
    assert 0 < q.checkpoint_bytes - 3 * 4 * linear < 64 * 1024 and 'never the frozen base' in q.checkpoint_holds, q
    int8 = plan_run(tiny('LlamaConfig', **LLAMA), batch=2, seq=64, lora=lora, quantization='int8')
    assert 'on an int8 base' in int8.setup and int8.fits, int8.setup

@pytest.mark.parametrize('kw, said', [
    (dict(quantization='nf3', lora=types.SimpleNamespace(r=4, target_modules=None)),
     "quantization='nf3': pass 'nf4'"),
    (dict(quantization='nf4'), 'bitsandbytes cannot train 4-bit weights'),
    (dict(quantization='int8'), 'cannot train 8-bit weights'),
], ids=['nf3', 'nf4-full', 'int8-full'])
def test_quantization_refusals(kw, said):
    "A format bitsandbytes does not have, and a full fine-tune of a quantized base, are refused with the way out."
    from colab_t4_nb.core import ArgumentError
    from colab_t4_nb.plan import plan_run
    with pytest.raises(ArgumentError) as e: plan_run(tiny('LlamaConfig', **LLAMA), seq=64, **kw)
    assert said in str(e.value), e.value

def test_quant_from_the_shell(capsys, tmp_path):
    "--quant with --lora-rank plans QLoRA; --quant alone, or --double-quant with int8, is one line and status 1."
    from colab_t4_nb.cli import main
    tiny('LlamaConfig', **LLAMA).save_pretrained(tmp_path)
    assert main(['plan', '--config', str(tmp_path), '--seq', '64', '--batch', '2', '--lora-rank', '4', '--quant', 'nf4',
                 '--double-quant', '--no-checkpointing', '--json']) == 0
    d = json.loads(capsys.readouterr().out)
    assert not d['checkpointing'] and d['checkpoint_holds'].startswith('the adapters'), d
    assert main(['plan', '--model', 'gpt2', '--quant', 'nf4']) == 1
    assert 'pass --lora-rank R to train adapters' in capsys.readouterr().err
    assert main(['plan', '--model', 'gpt2', '--lora-rank', '4', '--quant', 'int8', '--double-quant']) == 1
    assert '--double-quant quantizes the scales of a 4-bit base' in capsys.readouterr().err

def test_paged_state_is_counted_on_the_card():
    ("bitsandbytes' paged 8-bit AdamW holds its state in unified memory: counted on the card, as 8-bit AdamW's is, "
     "outside PyTorch's allocator.")
    from colab_t4_nb.plan import plan_run
    config = tiny('LlamaConfig', **{**LLAMA, 'vocab_size': 2048})  # an embedding past 100,000 values: paged
    plans = {o: plan_run(config, batch=2, seq=64, optimizer=o) for o in ('adamw8bit', 'paged_adamw8bit')}
    assert plans['adamw8bit'].parts['optimizer'] == plans['paged_adamw8bit'].parts['optimizer'] > 0
    assert 'paged 8-bit AdamW' in plans['paged_adamw8bit'].setup

UNET = dict(_class_name='UNet2DConditionModel', block_out_channels=[32, 64], layers_per_block=1,
            attention_head_dim=8, down_block_types=['CrossAttnDownBlock2D', 'DownBlock2D'],
            up_block_types=['UpBlock2D', 'CrossAttnUpBlock2D'], cross_attention_dim=32, sample_size=8,
            norm_num_groups=32)
VAE = dict(_class_name='AutoencoderKL', block_out_channels=[32, 32], down_block_types=['DownEncoderBlock2D'] * 2,
           up_block_types=['UpDecoderBlock2D'] * 2, layers_per_block=1, latent_channels=4, norm_num_groups=32,
           sample_size=32)
TEXT = dict(architectures=['CLIPTextModel'], hidden_size=32, intermediate_size=64, num_hidden_layers=1,
            num_attention_heads=2, max_position_embeddings=77, vocab_size=1000, projection_dim=32)

def test_diffusers_unet_from_its_pipeline_folder(tmp_path, capsys):
    ("`colab-t4 plan --config unet/config.json` plans diffusers' text-to-image step with the VAE and text encoder "
     "found beside it; LoRA trains the attention by default, and the checkpoint holds the adapters.")
    pytest.importorskip('diffusers')
    from colab_t4_nb.cli import main
    for part, config in (('unet', UNET), ('vae', VAE), ('text_encoder', TEXT)):
        (tmp_path/part).mkdir()
        (tmp_path/part/'config.json').write_text(json.dumps(config))
    assert main(['plan', '--config', str(tmp_path/'unet'/'config.json'), '--batch', '2', '--lora-rank', '4']) == 0
    out = capsys.readouterr().out
    assert 'UNet2DConditionModel for text-to-image, 16x16 images (8x8 latents)' in out, out
    assert "SD 1.5's" not in out and 'frozen in fp16' in out and 'the adapters (' in out, out

def test_diffusers_unet_config_alone():
    "A UNet config alone gets SD 1.5's VAE and text encoder, said in the setup; a full fine-tune saves the UNet alone."
    pytest.importorskip('diffusers')
    from colab_t4_nb.plan import plan_run
    p = plan_run({**UNET, 'cross_attention_dim': 768}, batch=1, image_size=64, optimizer='adamw8bit',
                 checkpointing=True)
    assert "(SD 1.5's, built in)" in p.setup and '8-bit AdamW' in p.setup, p.setup
    assert p.checkpoint_holds.startswith('the weights') and 'never the frozen parts' in p.checkpoint_holds, p

def test_plan_check_builds_qlora_and_sd_as_users_do():
    ("tools/plan_check.py's CPU side: an SD setup builds through diffusers' add_adapter, a QLoRA one through "
     "replace_with_bnb_linear, prepare_model_for_kbit_training and get_peft_model, on meta tensors.")
    pytest.importorskip('diffusers')
    pytest.importorskip('peft')
    import importlib.util
    spec = importlib.util.spec_from_file_location('plan_check', ROOT/'tools'/'plan_check.py')
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    assert check._built('sd15-unet-lora-512') == 'UNet2DConditionModel, 0.8M trainable'
    assert check._built('gpt2-full-1024') is None
    pytest.importorskip('bitsandbytes')
    assert check._built('llama-3.2-1b-qlora-2048') == 'PeftModel, 11.3M trainable'
