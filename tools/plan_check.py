#!/usr/bin/env python3
"""Check `plan_run`'s memory predictions against real training steps on a CUDA GPU.

    python tools/plan_check.py OUT.jsonl            # on a CUDA machine (an H100, an H200), inside t4_rehearsal()
    python tools/plan_check.py OUT.jsonl --dry-run  # anywhere: build each setup on meta tensors, plan it
    python tools/plan_check.py OUT.jsonl --only gpt2 vit-base-ckpt   # a few setups
    python tools/plan_check.py OUT.jsonl --replan GPU.jsonl   # anywhere: GPU.jsonl's measurements beside new plans
    python tools/plan_check.py OUT.jsonl --corpus [NAME ...]  # setups of the plan's corpus (default: CORPUS's)

For each training setup (GPT-2, BERT, T5, ViT, the TinyLlama-shaped 1.1B model with LoRA through peft,
a small diffusers UNet2DConditionModel; with and without gradient checkpointing; AdamW and SGD) it
writes one JSON line to OUT.jsonl and prints a table:

- `measured_gib`: `torch.cuda.max_memory_allocated` over the second of two real training steps
  (random weights, random data, fp16 autocast with a GradScaler, as on a T4; the optimizer's state made
  beforehand, as after a first step the scaler did not skip), after `empty_cache` and
  `reset_peak_memory_stats`; `reserved_gib` is `max_memory_reserved` over the same step; `base_gib` what
  was allocated before it (weights, optimizer state, cuBLAS's workspace);
- `plan_alloc_gib`: the plan's peak without the allocator's slack and the CUDA context, which is what
  `max_memory_allocated` counts; `plan_reserved_gib`: with the slack, to set beside `reserved_gib`;
  `plan_gib`: the whole plan for a T4; `plan_parts_gib`: its parts (the context left out);
- `accelerate_gib`: `accelerate estimate-memory`'s training figure for the same model
  (`estimate_training_usage` on `calculate_maximum_sizes`, fp16: the largest of its stages);
- `largest_measured`: `find_batch_size` under the rehearsal's T4 cap (largest size that ran, each trial
  from an empty cache); `largest_planned_cap`: the plan's largest batch under that cap, which holds the
  allocator's reserved memory but not the CUDA context (the plan made without it), the allocator
  replayed as it frees its cache and retries when the cap is reached;
- cuBLAS's workspace is sized as on a T4 (`CUBLAS_WORKSPACE_CONFIG=:4096:2:16:8`, PyTorch's choice below
  compute capability 9.0), and a LoRA base is put on the card in fp16, as `from_pretrained` loads it;
- `context_mib`: device memory in use minus PyTorch's reserved memory, once, before the setups:
  the CUDA context, to calibrate `CONTEXT_MIB`; `slack` = reserved / allocated - 1;
- `grid`: [SMs, threads per SM] of the card that measured, read before the rehearsal: CUDA's reductions
  size their staging buffers from the real card (ViT-base's bias gradients at batch 192 take 132 MiB for
  an instant over an H100's or H200's 132 SMs, 20 MiB over a T4's 40), so the plan set beside the
  measurement is made with it.

With `--corpus`, the setups are the plan's corpus entries (`corpus_setup`), each built on the GPU as its users
build it (the transformers class of its task from the same config, peft's LoRA on an fp16 base, the package's
torchvision-shaped modules) and measured at its own batch, the search bounded at twice the plan's largest.
A QLoRA setup (QUANTIZED: `--corpus llama-2-7b-qlora-2048 ...`) is built in fp16 on the GPU with random weights,
its linear layers replaced by transformers' `replace_with_bnb_linear` and each weight quantized on the card as
`from_pretrained(quantization_config=BitsAndBytesConfig(...))` quantizes it (a 7B in seconds, no checkpoint
written), then peft's `prepare_model_for_kbit_training` and `get_peft_model`; 8-bit optimizers are bitsandbytes'.
An SD setup builds diffusers' `UNet2DConditionModel` from its config and runs the loop of
`train_text_to_image(_lora).py`: VAE and CLIP text encoder frozen in fp16, LoRA through `unet.add_adapter` with the
adapters cast to fp32. A paged optimizer's state lives outside PyTorch's allocator: `paged_gib` records it and is
added to `measured_gib`. `--dry-run --corpus NAME` builds these as users do on meta tensors (no weight quantized).

One setup failing does not stop the others: its line holds the error. The whole run is meant to
finish within 8 minutes on an H200; each setup's batch search is bounded.
Needs: torch with CUDA, transformers, accelerate; peft (the LoRA setups) and diffusers (the UNet
setups) where installed, else those lines record why they were skipped.
"""
from __future__ import annotations
import argparse, functools, gc, json, os, sys, time, traceback, types

# cuBLAS's workspace as PyTorch sizes it below compute capability 9.0 (a T4's): on an H100 or H200 it
# would take 32 MiB per handle instead. Set before the first product: PyTorch reads it once.
os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:2:16:8')
from importlib.util import find_spec
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from colab_t4_nb import memory_model as mm  # noqa: E402
from colab_t4_nb.allocation import as_card  # noqa: E402
from colab_t4_nb.memory import usable_memory  # noqa: E402
from colab_t4_nb.plan import corpus, corpus_setup, model_config  # noqa: E402

GiB = 2**30

def _unet(device):
    from diffusers import UNet2DConditionModel
    with torch.device(device):
        return UNet2DConditionModel(sample_size=32, in_channels=4, out_channels=4, layers_per_block=1,
                                    block_out_channels=(128, 256, 256), cross_attention_dim=256,
                                    down_block_types=('CrossAttnDownBlock2D', 'CrossAttnDownBlock2D', 'DownBlock2D'),
                                    up_block_types=('UpBlock2D', 'CrossAttnUpBlock2D', 'CrossAttnUpBlock2D'),
                                    attention_head_dim=8)

def _unet_batch(b, device):
    return dict(sample=torch.randn(b, 4, 32, 32, device=device),
                timestep=torch.randint(0, 1000, (b,), device=device),
                encoder_hidden_states=torch.randn(b, 77, 256, device=device))

def _unet_loss(out, x): return F.mse_loss(out.sample.float(), x['sample'].float())

# name, model, task, batch, seq (or image side), optimizer, checkpointing, lora rank, search bound
SETUPS = [('gpt2', 'gpt2', 'causal-lm', 8, 512, 'adamw', False, None, 64),
          ('gpt2-ckpt', 'gpt2', 'causal-lm', 8, 512, 'adamw', True, None, 128),
          ('bert-cls', 'bert-base', 'seq-cls', 16, 256, 'adamw', False, None, 256),
          ('bert-mlm-ckpt-sgd', 'bert-base', 'masked-lm', 8, 512, 'sgd', True, None, 256),
          ('t5-small', 't5-small', 'seq2seq', 16, 256, 'adamw', False, None, 256),
          ('t5-small-ckpt-sgd', 't5-small', 'seq2seq', 16, 256, 'sgd', True, None, 512),
          ('vit-base', 'vit-base', 'image-cls', 32, 224, 'adamw', False, None, 256),
          ('vit-base-ckpt-sgd', 'vit-base', 'image-cls', 32, 224, 'sgd', True, None, 1024),
          ('llama-1b-lora', 'llama-1b', 'causal-lm', 4, 512, 'adamw', False, 8, 64),
          ('llama-1b-lora-ckpt', 'llama-1b', 'causal-lm', 8, 512, 'adamw', True, 8, 256),
          ('unet', 'unet', None, 8, 32, 'adamw', False, None, 512),
          ('unet-ckpt-sgd', 'unet', None, 8, 32, 'sgd', True, None, 1024)]

# corpus setups measured on the GPU: not in SETUPS, so not in the page's first validation table
CORPUS = ('whisper-tiny-128', 'whisper-small-128-ckpt', 'wav2vec2-base-ctc-5s', 'clip-vit-b32-contrastive',
          'deberta-v3-base-cls-512', 'deberta-v3-large-cls-512-ckpt', 'roberta-large-cls-256-ckpt',
          'distilbert-cls-512', 'albert-base-v2-cls-256', 'bart-base-512', 'mt5-small-512', 'swin-tiny-224',
          'segformer-b0-seg-512', 'resnet50-torchvision-224', 'efficientnet-b0-224', 'qwen2.5-0.5b-lora-4096',
          'mixtral-tiny-moe-full-512', 'smollm2-135m-full-2048', 'tinyllama-lora-2048', 'vit-gpt2-image-captioning',
          'gpt2-medium-full-1024', 'phi-2-lora-512', 'mamba-130m-full-512@2')

def _corpus_entry(name:str)->dict: return {e['name']: e for e in corpus()}[name.partition('@')[0]]

def _corpus_setup(name:str)->tuple:
    "`corpus_setup` of 'NAME' or 'NAME@BATCH' (the setup at another batch: one that fits, to measure it)."
    base, _, b = name.partition('@')
    model, kw = corpus_setup(base)
    if b: kw['batch'] = int(b)
    return model, kw

# the corpus's QLoRA and Stable Diffusion setups, measured with `--corpus NAME ...` (each builds billions of weights)
QUANTIZED = ('llama-3.2-1b-qlora-2048', 'llama-3.2-3b-qlora-2048', 'llama-2-7b-qlora-2048',
             'mistral-7b-qlora-2048', 'llama-3.1-8b-qlora-2048@1', 'opt-6.7b-int8-lora-256', 'sd15-unet-lora-512',
             'sd15-unet-full-512-8bit-ckpt')

def corpus_row(name:str)->tuple:
    "(model, task, batch, size, optimizer, checkpointing, lora rank) of a corpus setup, as SETUPS gives them."
    e, (model, kw) = _corpus_entry(name), _corpus_setup(name)
    task = None if 'module' in e or 'diffusers' in e else mm.setup_inputs(model, kw.get('task'))[0]
    size = e.get('image') or kw.get('image_size') or kw.get('seq')
    lora = kw.get('lora')
    return (name, task, kw.get('batch', 8), size, kw.get('optimizer', 'adamw'), kw.get('checkpointing', False),
            getattr(lora, 'r', None))

def _peft_config(lora):
    "peft's LoraConfig of a corpus setup's LoRA (its rank, alpha and targets)."
    from peft import LoraConfig
    return LoraConfig(r=lora.r, lora_alpha=getattr(lora, 'lora_alpha', 2 * lora.r),
                      lora_dropout=getattr(lora, 'lora_dropout', 0.0) or 0.0,
                      target_modules=getattr(lora, 'target_modules', None))

def corpus_plan(name:str, grid=None):
    "The plan of a corpus setup (see `planned`), its LoRA given as peft's LoraConfig where peft is installed."
    model, kw = _corpus_setup(name)
    if kw.get('lora') is not None and find_spec('peft'): kw['lora'] = _peft_config(kw['lora'])
    return planned(model, grid, **kw)

def _real(t:torch.Tensor, hi:int, device)->torch.Tensor:
    "A real tensor shaped as the meta `t`: token ids and labels below `hi`, values from a normal distribution."
    if t.dtype == torch.long: return torch.randint(0, max(1, hi), t.shape, device=device)
    return torch.randn(t.shape, dtype=t.dtype, device=device)

def corpus_model(name:str, device):
    ("(model, example(batch), loss_fn) of a corpus setup on `device`, built as users build it: the transformers "
     "class of the plan's task from the same config (peft's LoRA on an fp16 base), a module of `models`.")
    import transformers
    e, (config, kw) = _corpus_entry(name), _corpus_setup(name)
    if 'module' in e:
        from colab_t4_nb import models
        with torch.device(device): m = getattr(models, e['module'])()
        n = e['image']
        return m, lambda b: torch.randn(b, 3, n, n, device=device), lambda out, x: out.float().mean()
    if 'diffusers' in e: return _sd_model(config, kw.get('lora'), device)
    # the plan's own config (no cache, a pad token) and batch, on meta tensors
    task, built, meta, vocab = mm.setup_inputs(config, kw.get('task'), kw.get('seq'), kw.get('image_size'))
    quant = kw.get('quantization')
    with torch.device(device):  # a quantized base is loaded in fp16, then quantized
        m = getattr(transformers, mm.TASKS[task]).from_config(built, **({'dtype': torch.float16} if quant else {}))
    m = m.to(device)  # a weight made by a legacy constructor (Wav2Vec2's masked_spec_embed) ignores the device
    if quant is not None:
        from peft import get_peft_model, prepare_model_for_kbit_training
        m = prepare_model_for_kbit_training(_quantized(m, quant), kw.get('checkpointing', False))
        m = get_peft_model(m, _peft_config(kw['lora']))
    elif kw.get('lora') is not None:
        from peft import get_peft_model
        m = get_peft_model(m.half(), _peft_config(kw['lora']))
    vocab, classes = vocab or 2, getattr(config, 'num_labels', 2)
    if task == 'ctc':  # the model's own CTC loss from labels: one per 3 frames, as the plan counts it
        seq = frames = kw.get('seq') or 160_000
        for k, s in zip(config.conv_kernel, config.conv_stride): frames = (frames - k) // s + 1
        def example(b):
            return dict(input_values=torch.randn(b, seq, device=device),
                        labels=torch.randint(1, config.vocab_size, (b, max(1, frames // 3)), device=device))
        return m, example, lambda out, x: out.loss
    def example(b):
        x = meta(b)
        return {k: _real(v, classes if k == 'labels' and task in ('seq-cls', 'token-cls', 'image-cls', 'semantic-seg')
                         else vocab, device) if isinstance(v, torch.Tensor) else v for k, v in x.items()}
    return m, example, lambda out, x: out.loss

def _quantized(m, quant):
    ("`m`, built in fp16, with its linear layers bitsandbytes' (transformers' `replace_with_bnb_linear`, the modules "
     "`get_keys_to_not_convert` names left out), each weight quantized on its device as `from_pretrained` "
     "quantizes it (`Bnb4bitQuantize`, `Bnb8bitQuantize`).")
    import bitsandbytes as bnb
    from transformers.integrations.bitsandbytes import replace_with_bnb_linear
    from transformers.quantizers.base import get_keys_to_not_convert
    skip = (list(quant.llm_int8_skip_modules) if quant.llm_int8_skip_modules is not None
            else get_keys_to_not_convert(m)) + list(getattr(m, '_keep_in_fp32_modules', None) or [])
    old = {n: (mod.weight.data, mod.bias) for n, mod in m.named_modules() if type(mod) is torch.nn.Linear}
    replace_with_bnb_linear(m, modules_to_not_convert=skip, quantization_config=quant)
    for n, mod in m.named_modules():
        if not isinstance(mod, (bnb.nn.Linear4bit, bnb.nn.Linear8bitLt)): continue
        w, bias = old.pop(n)
        if isinstance(mod, bnb.nn.Linear4bit):
            mod.weight = bnb.nn.Params4bit(w, requires_grad=False, **mod.weight.__dict__).to(w.device)
        elif w.device.type != 'meta':  # an int8 weight is quantized on its way to the card
            kw = {k: v for k, v in mod.weight.__dict__.items() if k != 'SCB'}
            mod.weight = bnb.nn.Int8Params(w.to('cpu'), requires_grad=False, **kw).to(w.device)
        if bias is not None: mod.bias = torch.nn.Parameter(bias.data, requires_grad=False)
    del old
    m.is_loaded_in_4bit, m.is_loaded_in_8bit = quant.load_in_4bit, quant.load_in_8bit
    m.config.quantization_config = quant
    _free()
    return m

def _sd_model(config, lora, device):
    ("(UNet, example(batch), loss_fn) of an SD setup as diffusers' train_text_to_image(_lora).py builds and runs "
     "it: the VAE and CLIP text encoder frozen in fp16, the latents and text embeddings made without gradients, "
     "noise added by DDPMScheduler; LoRA on the UNet held in fp16, its adapters cast to fp32.")
    import diffusers, transformers
    unet_config, vae_config, text_config, _ = mm._parts(config)
    with torch.device(device):
        unet = diffusers.UNet2DConditionModel.from_config(unet_config)
        vae = diffusers.AutoencoderKL.from_config(vae_config).half().requires_grad_(False).eval()
        text = transformers.CLIPTextModel(transformers.CLIPTextConfig(**text_config))
    text = text.half().requires_grad_(False).eval()
    if lora is not None:
        from diffusers.training_utils import cast_training_params
        from peft import LoraConfig
        unet.requires_grad_(False).half()
        unet.add_adapter(LoraConfig(r=lora.r, lora_alpha=lora.lora_alpha, init_lora_weights='gaussian',
                                    target_modules=lora.target_modules))
        cast_training_params(unet, dtype=torch.float32)
    scheduler, noise = diffusers.DDPMScheduler(num_train_timesteps=1000), {}
    side = vae_config.get('sample_size', 512)
    def example(b):
        with torch.no_grad():
            pixels = torch.randn(b, 3, side, side, device=device)
            latents = vae.encode(pixels.half()).latent_dist.sample() * vae.config.scaling_factor
            ids = torch.randint(0, text.config.vocab_size, (b, text.config.max_position_embeddings), device=device)
            states = text(ids, return_dict=False)[0]
        noise['now'] = torch.randn_like(latents)
        t = torch.randint(0, 1000, (b,), device=device)
        return dict(sample=scheduler.add_noise(latents, noise['now'], t), timestep=t, encoder_hidden_states=states)
    unet.frozen_parts = (vae, text)  # held on the card for the run, as the script holds them
    return unet, example, lambda out, x: F.mse_loss(out.sample.float(), noise['now'].float())

def _built(name:str)->str|None:
    ("A QLoRA or SD corpus setup built as users build it, on meta tensors (no weight quantized): its class and "
     "trainable parameters, in words; None for the other setups. The CPU side of the GPU run.")
    e = _corpus_entry(name)
    if 'diffusers' not in e and 'quantization' not in e['plan']: return None
    m, _, _ = corpus_model(name, 'meta')
    trainable = sum(p.numel() for p in m.parameters() if p.requires_grad)
    return f'{type(m).__name__}, {trainable / 1e6:.1f}M trainable'

def _optimizer(name:str, params:list):
    "The optimizer a user's run makes: PyTorch's AdamW, SGD (momentum 0.9), or bitsandbytes' 8-bit AdamW, paged or not."
    if name == 'adamw': return torch.optim.AdamW(params, lr=1e-4)
    if name == 'sgd': return torch.optim.SGD(params, lr=1e-2, momentum=0.9)
    import bitsandbytes as bnb
    return (bnb.optim.PagedAdamW8bit if name == 'paged_adamw8bit' else bnb.optim.AdamW8bit)(params, lr=1e-4)

def _paged_bytes(opt)->int:
    "Bytes of an optimizer's paged state (bitsandbytes', in unified memory), which PyTorch's allocator does not count."
    return sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
               if isinstance(t, torch.Tensor) and getattr(t, 'is_paged', False))

def _lora_config(r:int):
    "peft's LoraConfig (default targets for the architecture) where peft is installed, else r alone."
    if find_spec('peft'):
        from peft import LoraConfig
        return LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0)
    return types.SimpleNamespace(r=r, target_modules=None, lora_alpha=2 * r)

def planned(model, grid=None, batch=8, seq=None, image_size=None, task=None, example=None, loss_fn=None,
            optimizer='adamw', checkpointing=False, lora=None, quantization=None)->types.SimpleNamespace:
    """The plan of one setup for a T4 in fp16 with a GradScaler (on meta tensors, any machine), made without the CUDA
    context: the rehearsal's cap holds PyTorch's reserve to what it can reserve on a T4
    (`usable_memory('T4', reserve=True)`) and the context sits outside it, so the largest batch that leaves that much
    for the step is the one to compare with find_batch_size's under the cap. The peak and its parts leave the
    context out. `grid`: (SMs, threads per SM) of the card that measured: CUDA's reductions size their staging
    buffers from the real card's, which the rehearsal cannot change (None: a T4's, the plan's own)."""
    context = mm.CONTEXT_MIB * 2**20
    c = mm.count_run(model, batch, seq, image_size, task, example, loss_fn, optimizer, torch.float16, True, lora,
                     checkpointing, as_card('T4'), usable_memory('T4', reserve=True) + context, 600,
                     grid=None if grid is None else tuple(grid), quantization=quantization)
    parts = {k: v for k, v in c.parts.items() if k != 'context'}
    return types.SimpleNamespace(parts=parts, peak=sum(parts.values()), step_ms=c.t4.ms if c.t4 else None,
                                 largest_plain=c.largest_plain, largest_checkpointed=c.largest_checkpointed)

def plan_for(name, model, task, batch, size, optimizer, ckpt, rank, grid=None):
    "The plan of a setup of SETUPS or of the corpus (`model` 'corpus'), as `planned` makes it."
    if model == 'corpus': return corpus_plan(name, grid)
    kw = dict(batch=batch, optimizer=optimizer, checkpointing=ckpt)
    if model == 'unet':
        if not find_spec('diffusers'): raise ModuleNotFoundError('diffusers is not installed')
        return planned(_unet('meta'), grid, example=lambda b: _unet_batch(b, 'meta'), loss_fn=_unet_loss, **kw)
    config, _ = model_config(model)
    kw.update(image_size=size) if task == 'image-cls' else kw.update(seq=size)
    return planned(config, grid, task=task, lora=None if rank is None else _lora_config(rank), **kw)

def _hf_model(model, task, rank, device):
    import transformers
    TASKS = mm.TASKS
    config, _ = model_config(model)
    if task == 'seq-cls' and config.pad_token_id is None: config.pad_token_id = 0
    if hasattr(config, 'use_cache'): config.use_cache = False
    if rank is None:
        with torch.device(device): return getattr(transformers, TASKS[task]).from_config(config), config
    # as users train LoRA on a T4: the base loaded in fp16 (`from_pretrained(dtype=torch.float16)`), so the
    # card never holds its fp32 weights, whose freed blocks would stay between the fp16 ones; adapters in fp32
    from peft import get_peft_model
    m = getattr(transformers, TASKS[task]).from_config(config).half().to(device)
    m = get_peft_model(m, _lora_config(rank))
    return m, config

def _hf_batch(config, task, size, device):
    def batch(b):
        if task == 'image-cls':
            return dict(pixel_values=torch.randn(b, 3, size, size, device=device),
                        labels=torch.randint(0, config.num_labels, (b,), device=device))
        ids = torch.randint(0, config.vocab_size, (b, size), device=device)
        labels = torch.randint(0, config.num_labels, (b,), device=device) if task == 'seq-cls' else ids
        return dict(input_ids=ids, labels=labels)
    return batch

def _enable_ckpt(m):
    if hasattr(m, 'gradient_checkpointing_enable') and not hasattr(m, 'enable_gradient_checkpointing'):
        on = getattr(m, 'activation_checkpointing_enable', m.gradient_checkpointing_enable)
        on({'use_reentrant': False})
    else: m.enable_gradient_checkpointing()

def measure(name, model, task, batch, size, optimizer, ckpt, rank, bound, plan):
    "Two real steps on the GPU (peak of the second) and find_batch_size under the rehearsal's cap."
    from colab_t4_nb.memory import find_batch_size
    dev = 'cuda'
    if model == 'corpus':
        m, example, loss_fn = corpus_model(name, dev)
    elif model == 'unet':
        m, example, loss_fn = _unet(dev), lambda b: _unet_batch(b, dev), _unet_loss
    else:
        m, config = _hf_model(model, task, rank, dev)
        example, loss_fn = _hf_batch(config, task, size, dev), lambda out, x: out.loss
    m.train()
    if ckpt: _enable_ckpt(m)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = _optimizer(optimizer, params)
    scaler = [torch.amp.GradScaler('cuda')]
    for p in params: p.grad = torch.zeros_like(p)  # the optimizer's state, as after the first step
    opt.step()                                      # the scaler did not skip (the plan counts it)
    opt.zero_grad(set_to_none=True)
    def step(b):
        ok = False
        try:
            x = example(b)
            with torch.autocast('cuda', dtype=torch.float16):
                out = m(**x) if isinstance(x, dict) else m(x)
                loss = loss_fn(out, x)
            scaler[0].scale(loss).backward()  # `out` stays referenced through backward, as in the plan
            scaler[0].step(opt)
            scaler[0].update()
            ok = True
        finally:
            opt.zero_grad(set_to_none=True)
            if not ok: scaler[0] = torch.amp.GradScaler('cuda')  # a step cut short leaves it mid-step
    step(batch)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # the second step starts from a clean cache, as each of find_batch_size's tries does
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step(batch)
    torch.cuda.synchronize()
    paged = _paged_bytes(opt)  # on the card, outside PyTorch's allocator
    got = dict(base_gib=base / GiB, measured_gib=(torch.cuda.max_memory_allocated() + paged) / GiB,
               reserved_gib=(torch.cuda.max_memory_reserved() + paged) / GiB, paged_gib=paged / GiB)
    planned = (plan.largest_checkpointed if ckpt else plan.largest_plain) or 1
    bound = bound or min(2048, 2 * planned + 16)
    start = max(1, min(bound, planned))
    t = time.perf_counter()
    r = find_batch_size(step, start=start, max_size=bound, steps=1, margin=0.0, tol=0.0)
    got.update(largest_measured=r.largest_ok, largest_oom=r.smallest_oom, search_s=time.perf_counter() - t)
    del m, opt, params
    return got

def _free():
    gc.collect()
    if torch.cuda.is_available(): torch.cuda.empty_cache()

def _accelerate(name, model, task, rank):
    "accelerate estimate-memory's training figure (GiB) for the same model, built on meta tensors."
    from accelerate.commands.estimate import calculate_maximum_sizes, estimate_training_usage
    if model == 'corpus':
        e, (config, kw) = _corpus_entry(name), _corpus_setup(name)
        if 'module' in e:
            from colab_t4_nb import models
            with torch.device('meta'): m = getattr(models, e['module'])()
        elif 'diffusers' in e:
            import diffusers
            with torch.device('meta'): m = diffusers.UNet2DConditionModel.from_config(mm._parts(config)[0])
        else:
            import transformers
            task, built, _, _ = mm.setup_inputs(config, kw.get('task'), kw.get('seq'), kw.get('image_size'))
            with torch.device('meta'): m = getattr(transformers, mm.TASKS[task]).from_config(built)
    elif model == 'unet': m = _unet('meta')
    else: m, _ = _hf_model(model, task, None, 'meta')
    total, _ = calculate_maximum_sizes(m)
    return max(estimate_training_usage(total, 'float16').values()) / GiB

def context_mib()->float:
    "Device memory in use minus PyTorch's reserved memory, after cuBLAS is loaded: the CUDA context."
    a = torch.randn(1024, 1024, device='cuda')
    (a @ a).sum().item()
    free, total = torch.cuda.mem_get_info()
    return (total - free - torch.cuda.memory_reserved()) / 2**20

MEASURED = ('context_mib', 'device', 'grid', 'base_gib', 'measured_gib', 'reserved_gib', 'paged_gib',
            'largest_measured', 'largest_oom', 'search_s')

def real_grid()->list:
    "[SMs, threads per SM] of the GPU here, read before the rehearsal makes it answer as a T4."
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return [p.multi_processor_count, p.max_threads_per_multi_processor]

def run(out:Path, dry:bool, only:list|None, measured:dict|None=None, grid:list|None=None,
        corpus:list|None=None)->list:
    """One row per setup; with `measured` ({setup: row} of an earlier GPU run) its measurements beside a new plan.
    `grid`: the measuring card's [SMs, threads per SM] (see `plan_for`); on a GPU, its own."""
    rows, t0 = [], time.perf_counter()
    setups = [s for s in SETUPS if (not only or s[0] in only) and (measured is None or s[0] in measured)]
    if corpus:  # corpus setups: their plan's own batch; the search bounded at twice the plan's largest
        setups = []
        for n in (n for n in corpus if measured is None or n in measured):
            name, task, batch, size, optimizer, ckpt, rank = corpus_row(n)
            setups.append((name, 'corpus', task, batch, size, optimizer, ckpt, rank, None))
    ctx = None if dry else context_mib()
    if not dry: grid = real_grid()
    rehearsal = None
    if not dry:
        from colab_t4_nb.t4 import t4_rehearsal
        rehearsal = t4_rehearsal()
        rehearsal.__enter__()
    try:
        for name, model, task, batch, size, optimizer, ckpt, rank, bound in setups:
            row = dict(setup=name, model=model, task=task, batch=batch, size=size, optimizer=optimizer,
                       checkpointing=ckpt, lora_rank=rank, context_mib=ctx, device=None if dry else torch.cuda.get_device_name(),
                       grid=grid)
            t = time.perf_counter()
            try:
                g = measured[name].get('grid') or grid if measured is not None else grid
                p = plan_for(name, model, task, batch, size, optimizer, ckpt, rank, g)
                row['grid'] = g
                alloc = sum(v for k, v in p.parts.items() if k not in ('slack', 'context'))
                row.update(plan_gib=p.peak / GiB + mm.CONTEXT_MIB / 1024, plan_alloc_gib=alloc / GiB,
                           plan_reserved_gib=p.peak / GiB,
                           plan_parts_gib={k: v / GiB for k, v in p.parts.items()},
                           step_ms_t4=p.step_ms, plan_s=time.perf_counter() - t,
                           largest_planned_cap=p.largest_checkpointed if ckpt else p.largest_plain)
                row['accelerate_gib'] = _accelerate(name, model, task, rank)
                if measured is not None:
                    row.update({k: measured[name][k] for k in MEASURED if k in measured[name]},
                               measured_in=measured[name]['_file'], replanned=_versions())
                elif not dry:
                    if rank is not None and not find_spec('peft'): raise ModuleNotFoundError('peft is not installed')
                    row.update(measure(name, model, task, batch, size, optimizer, ckpt, rank, bound, p))
                elif model == 'corpus': row['built'] = _built(name)
                if 'measured_gib' in row:
                    row['slack'] = row['reserved_gib'] / row['measured_gib'] - 1
                    row['error_pct'] = 100 * (row['plan_alloc_gib'] / row['measured_gib'] - 1)
            except Exception as e:  # one setup failing must not stop the others: its line says why
                row['error'] = f'{type(e).__name__}: {e}'[:500]
                row['traceback'] = traceback.format_exc()[-2000:]
            finally: _free()
            row['seconds'] = time.perf_counter() - t
            rows.append(row)
            with out.open('a') as f: f.write(json.dumps(row) + '\n')
            print(_line(row), flush=True)
    finally:
        if rehearsal is not None: rehearsal.__exit__(None, None, None)
    print(f'{len(rows)} setups in {time.perf_counter() - t0:.0f} s; {sum("error" in r for r in rows)} failed', flush=True)
    return rows

def _versions()->str:
    import platform, transformers
    return (f'{time.strftime("%Y-%m-%d")}, {platform.machine()} CPU, torch {torch.__version__}, '
            f'transformers {transformers.__version__}')

HEAD = f"{'setup':<20} {'measured':>9} {'plan':>7} {'err%':>6} {'accel':>7} {'reserved':>9} {'largest':>8} {'planned':>8} {'s':>5}"

def _line(r:dict)->str:
    f = lambda k, fmt='.2f': '-' if r.get(k) is None else format(r[k], fmt)
    if 'error' in r: return f"{r['setup']:<20} ERROR {r['error'][:90]}"
    return (f"{r['setup']:<20} {f('measured_gib'):>9} {f('plan_alloc_gib'):>7} {f('error_pct', '.1f'):>6} "
            f"{f('accelerate_gib'):>7} {f('reserved_gib'):>9} {f('largest_measured', 'd'):>8} "
            f"{f('largest_planned_cap', 'd'):>8} {r['seconds']:>5.0f}")

def main(argv=None)->int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('out', help='JSON lines file to append one line per setup to')
    ap.add_argument('--dry-run', action='store_true', help='no CUDA: build and plan each setup only')
    ap.add_argument('--only', nargs='+', help='setup names to run (default: all)')
    ap.add_argument('--corpus', nargs='*', metavar='NAME',
                    help="setups of the plan's corpus (colab_t4_nb/files/plan/corpus.json) instead of SETUPS, "
                         "NAME@B at batch B; no name: those of CORPUS")
    ap.add_argument('--replan', metavar='MEASURED.jsonl', type=Path,
                    help="no CUDA: plan again the setups measured in an earlier run's file, and write its "
                         'measurements beside the new plans (after the plan changed, without a GPU)')
    ap.add_argument('--measured-on', metavar='CARD',
                    help="with --replan or --dry-run: the card (a spec-table name, 'H200') whose SMs size the "
                         "reductions' buffers, where the measured rows do not record them (default: a T4's)")
    a = ap.parse_args(argv)
    measured, grid = None, None
    if a.measured_on is not None:
        from colab_t4_nb.allocation import as_card
        from colab_t4_nb.core import ColabT4Error
        try: grid = list(mm.card_grid(as_card(a.measured_on)))
        except ColabT4Error as e:
            print(f'plan_check: --measured-on {a.measured_on!r}: {e}', file=sys.stderr)
            return 2
    if a.replan is not None:
        if not a.replan.is_file():
            print(f'plan_check: --replan {a.replan}: no such file', file=sys.stderr)
            return 2
        rows = [json.loads(l) for l in a.replan.read_text().splitlines() if l.strip()]
        measured = {r['setup']: {**r, '_file': a.replan.name} for r in rows if 'measured_gib' in r}
        if not measured:
            print(f'plan_check: --replan {a.replan}: no measured setups in it', file=sys.stderr)
            return 2
        a.dry_run = True
    if not a.dry_run and not torch.cuda.is_available():
        print('plan_check: no CUDA GPU here; use --dry-run to check the setups and plans.', file=sys.stderr)
        return 2
    if a.corpus is not None:
        a.corpus = a.corpus or list(CORPUS)
        bad = sorted({n for n in a.corpus if n.partition('@')[0] not in {e['name'] for e in corpus()}})
        if bad:
            print(f'plan_check: --corpus {bad}: not in the corpus (colab_t4_nb/files/plan/corpus.json)', file=sys.stderr)
            return 2
    unknown = set(a.only or []) - {s[0] for s in SETUPS}
    if unknown:
        print(f'plan_check: unknown setups {sorted(unknown)}; known: {[s[0] for s in SETUPS]}', file=sys.stderr)
        return 2
    print(HEAD, flush=True)
    rows = run(Path(a.out), a.dry_run, a.only, measured, grid, a.corpus)
    return 1 if any('error' in r for r in rows) else 0

if __name__ == '__main__': sys.exit(main())
