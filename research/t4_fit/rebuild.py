"""Rebuild published single-T4 figures as counted op lists (meta tensors, random weights).

Each kept row of `data/t4_published/{inference,training}.csv`, and each row of
`colab_t4_nb.t4.PUBLISHED` (NVIDIA DeepLearningExamples), becomes
- a *workload*: a composition of counted *parts* (one forward, one UNet step, one training step, ...),
  each part counted once with `colab_t4_nb.t4_model`'s dispatch counter on the meta device, and
- a published time converted to **ms per call of that workload**.

Op summaries are cached per part in `CACHE` (pickled DataFrames, one row per distinct op with a
`count`), so a re-run only counts parts it has not seen.  Rows that cannot be rebuilt faithfully are
listed with the reason in the `skipped` table.

Usage: `python research/t4_fit/rebuild.py` (writes `CACHE/rows.pkl`, `CACHE/skipped.csv`);
`python research/t4_fit/rebuild.py dle|inference|training` rebuilds one part (`rows_<part>.pkl`).
"""
from __future__ import annotations
import math, os, pickle, sys, time, warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get('T4_FIT_CACHE', Path.home()/'.cache'/'colab_t4_nb'/'t4_fit'))  # counted parts, results
sys.path.insert(0, str(ROOT))
warnings.filterwarnings('ignore')

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from colab_t4_nb import models, t4, t4_model

META = torch.device('meta')
COLS = ['name', 'kind', 'dtype', 'flops', 'nbytes', 'aligned', 'grouped', 'k1', 'k3', 'gw']  # an op group's key
# k1: a 1x1 convolution (a matrix product over pixels: cuDNN runs it as a GEMM)
# gw: a grouped convolution's output channels per group (0 for every other op)
# k3: a dense 3x3 convolution of stride 1 and dilation 1, not transposed (cuDNN's Winograd shapes)
F16, F32 = torch.float16, torch.float32

# --------------------------------------------------------------------------------------------
# Counting: colab_t4_nb.t4_model's counter (it keeps, per op, alignment, grouping and layout), plus k1, k3
# --------------------------------------------------------------------------------------------

def _k1(name, kind, args)->bool:
    "Whether a convolution's kernel is 1x1 (every spatial dimension of the weight is 1)."
    if kind != 'conv': return False
    try: return all(int(x) == 1 for x in t4_model.conv_args(name, args)[1].shape[2:])
    except Exception: return False


def _k3(name, kind, args)->bool:
    "Whether a convolution is dense 3x3, stride 1, dilation 1 and not transposed: the shapes Winograd takes."
    if kind != 'conv': return False
    try:
        _, w, transposed, groups = t4_model.conv_args(name, args)
        stride, dilation = (args[4], args[6]) if name == 'convolution_backward' else (args[3], args[5])
        return (tuple(int(x) for x in w.shape[2:]) == (3, 3) and int(groups) == 1 and not transposed
                and all(int(x) == 1 for x in (*stride, *dilation)))
    except Exception: return False


def _gw(name, kind, args)->int:
    "A grouped convolution's output channels per group (the width of each group's product); 0 otherwise."
    if kind != 'conv': return 0
    try:
        _, w, transposed, groups = t4_model.conv_args(name, args)
        if int(groups) == 1: return 0
        return int(w.shape[1]) if transposed else int(w.shape[0]) // int(groups)
    except Exception: return 0


class ShapeCounter(t4_model.WorkCounter):
    "`t4_model.WorkCounter` that also keeps, per op, a convolution's shape flags: 1x1, dense 3x3, width per group."
    def __init__(self):
        super().__init__()
        self.k1, self.k3, self.gw = [], [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        o = self.ops[-1]
        self.k1.append(_k1(o.name, o.kind, args)); self.k3.append(_k3(o.name, o.kind, args))
        self.gw.append(_gw(o.name, o.kind, args))
        return out


def count_ops(fn, *args)->pd.DataFrame:
    """Ops of one call of `fn(*args)` (as `t4_model.count_work` counts them), grouped: one row per
    distinct (name, kind, dtype, flops, nbytes, aligned, grouped) with its `count`."""
    with t4_model.sdpa_t4(), t4_model.fused_attention(), t4_model.dropout_as_on_gpu(), ShapeCounter() as wc: fn(*args)
    d = pd.DataFrame([(o.name, o.kind, o.dtype, o.flops, o.nbytes, o.aligned, o.grouped, k, k3, gw)
                      for o, k, k3, gw in zip(wc.ops, wc.k1, wc.k3, wc.gw)], columns=COLS)
    g = d.groupby(COLS, as_index=False).size().rename(columns={'size': 'count'})
    g.attrs['seq'] = d.groupby(COLS).ngroup().to_numpy(np.int32)  # each op's row of g, in call order
    return g


def _leaf(d:pd.DataFrame)->pd.DataFrame:
    "`d` with its ops' call order (`attrs['seq']`); a table written by hand runs its rows in turn."
    if 'seq' in d.attrs: return d
    d = d.copy(); d.attrs = {'seq': np.repeat(np.arange(len(d)), d['count'].astype(int)).astype(np.int32)}
    return d


def program(d:pd.DataFrame)->list:
    "The counted parts of a workload in call order, [(times run, part with its op order)]: for --combine queue."
    return d.attrs.get('prog') or [(1.0, _leaf(d))]


def cached(key:str, make)->pd.DataFrame:
    "The op summary of part `key`, counted with `make()` -> DataFrame once and kept in CACHE/parts."
    p = CACHE / 'parts' / f'{key}.pkl'
    if p.exists():
        d = pd.read_pickle(p)
        if set(COLS) <= set(d.columns) and d.attrs: return d  # else counted by an older version: count again
    t = time.time()
    d = make()
    p.parent.mkdir(parents=True, exist_ok=True)
    d.to_pickle(p)
    print(f'  counted {key}: {int(d["count"].sum())} ops in {time.time() - t:.1f}s', flush=True)
    return d


def synthetic(name, kind, dtype, nbytes, count=1, flops=0.0)->pd.DataFrame:
    "Ops that cannot be counted on meta (GradScaler, 8-bit Adam, schedulers), written out by hand."
    return pd.DataFrame([dict(name=name, kind=kind, dtype=dtype, flops=float(flops), nbytes=float(nbytes),
                              aligned=True, grouped=False, k1=False, k3=False, gw=0, count=count)])


def combine(parts)->pd.DataFrame:
    "Sum of (multiplier, op summary) parts: one workload."
    prog = [(m * k, leaf) for m, d in parts if m for k, leaf in program(d)]
    ds = [pd.DataFrame(d).assign(count=d['count'] * m) for m, d in parts if m]
    for x in ds: x.attrs = {}
    out = pd.concat(ds, ignore_index=True).groupby(COLS, as_index=False)['count'].sum()
    out.attrs['prog'] = prog
    return out

# --------------------------------------------------------------------------------------------
# Emulated autocast (autocast does nothing on meta tensors)
# --------------------------------------------------------------------------------------------

# T4_FIT_AUTOCAST=meta: the training rows' fp16 autocast is the package's `t4_model.MetaAutocast` (CUDA's fp32 ops in fp32 too),
# counted into parts of their own (tested: see README, "Training steps"); default: Autocast16 below
META_AUTOCAST = os.environ.get('T4_FIT_AUTOCAST', '') == 'meta'


class Autocast16(torch.overrides.TorchFunctionMode):
    """fp16 autocast for meta tensors: inputs of linear/conv/matmul/attention are cast to fp16
    (the casts are counted, and their backward too), everything else runs as given."""
    CAST = {F.linear, F.conv1d, F.conv2d, F.conv_transpose2d, torch.matmul, torch.bmm, torch.baddbmm,
            torch.einsum, F.scaled_dot_product_attention, torch.Tensor.matmul, torch.Tensor.__matmul__}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.CAST:
            c = lambda x: x.to(F16) if isinstance(x, torch.Tensor) and x.dtype == F32 else x
            args = tuple(c(a) if not isinstance(a, (list, tuple)) else type(a)(c(b) for b in a) for a in args)
            kwargs = {k: c(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)

# --------------------------------------------------------------------------------------------
# transformers models (configs written out, random weights, eager attention as in 2021-2023)
# --------------------------------------------------------------------------------------------

def _hf(cls, cfg, dtype):
    cfg._attn_implementation = 'eager'
    with torch.device(META): m = cls(cfg)
    return m.to(dtype).eval()


def hf_text(kind:str, batch:int, seq:int, dtype):
    "A text encoder's forward: kind in bert-base, minilm, roberta-base, roberta-large, electra-base."
    import transformers as tr
    if kind == 'bert-base': m = _hf(tr.BertModel, tr.BertConfig(), dtype)
    elif kind == 'minilm':
        m = _hf(tr.BertForSequenceClassification, tr.BertConfig(hidden_size=384, num_hidden_layers=6,
                num_attention_heads=12, intermediate_size=1536, num_labels=2), dtype)
    elif kind == 'roberta-base':
        m = _hf(tr.RobertaForSequenceClassification, tr.RobertaConfig(vocab_size=50265,
                max_position_embeddings=514, type_vocab_size=1, num_labels=3), dtype)
    elif kind == 'roberta-large':
        m = _hf(tr.RobertaForSequenceClassification, tr.RobertaConfig(vocab_size=50265, hidden_size=1024,
                num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                max_position_embeddings=514, type_vocab_size=1, num_labels=3), dtype)
    elif kind == 'electra-base':
        m = _hf(tr.ElectraForQuestionAnswering, tr.ElectraConfig(embedding_size=768, hidden_size=768,
                num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072), dtype)
    else: raise KeyError(kind)
    ids = torch.zeros(batch, seq, dtype=torch.long, device=META)
    def fwd():  # no padding: no mask (all ones), as the benchmarks' fixed-shape inputs
        with torch.no_grad(): m(input_ids=ids)
    return fwd


def hf_vision(kind:str, batch:int, size:int, dtype):
    "A vision model's forward: vit-base, beit-base, convnext-large, resnet-50, segformer-b0."
    import transformers as tr
    if kind == 'vit-base': m = _hf(tr.ViTForImageClassification, tr.ViTConfig(num_labels=1000), dtype)
    elif kind == 'beit-base':
        m = _hf(tr.BeitForImageClassification, tr.BeitConfig(use_relative_position_bias=True,
                use_mean_pooling=True, layer_scale_init_value=0.1, num_labels=1000), dtype)
    elif kind == 'convnext-large':
        m = _hf(tr.ConvNextForImageClassification, tr.ConvNextConfig(hidden_sizes=[192, 384, 768, 1536],
                depths=[3, 3, 27, 3], num_labels=1000), dtype)
    elif kind == 'resnet-50': m = _hf(tr.ResNetForImageClassification, tr.ResNetConfig(num_labels=1000), dtype)
    elif kind == 'segformer-b0':
        m = _hf(tr.SegformerForSemanticSegmentation, tr.SegformerConfig(num_labels=150), dtype)
    else: raise KeyError(kind)
    x = torch.zeros(batch, 3, size, size, dtype=dtype, device=META)
    def fwd():
        with torch.no_grad(): m(pixel_values=x)
    return fwd

# --------------------------------------------------------------------------------------------
# Stable Diffusion (diffusers UNet2DConditionModel / AutoencoderKL / CLIP text encoders, configs here)
# --------------------------------------------------------------------------------------------

SD1_UNET = dict(sample_size=64, in_channels=4, out_channels=4, layers_per_block=2,
                block_out_channels=(320, 640, 1280, 1280), cross_attention_dim=768, attention_head_dim=8,
                down_block_types=('CrossAttnDownBlock2D',) * 3 + ('DownBlock2D',),
                up_block_types=('UpBlock2D',) + ('CrossAttnUpBlock2D',) * 3)
SD2_UNET = dict(SD1_UNET, cross_attention_dim=1024, attention_head_dim=(5, 10, 20, 20),
                use_linear_projection=True)
SDXL_UNET = dict(sample_size=128, in_channels=4, out_channels=4, layers_per_block=2,
                 block_out_channels=(320, 640, 1280), cross_attention_dim=2048,
                 attention_head_dim=(5, 10, 20), transformer_layers_per_block=(1, 2, 10),
                 down_block_types=('DownBlock2D', 'CrossAttnDownBlock2D', 'CrossAttnDownBlock2D'),
                 up_block_types=('CrossAttnUpBlock2D', 'CrossAttnUpBlock2D', 'UpBlock2D'),
                 use_linear_projection=True, addition_embed_type='text_time', addition_time_embed_dim=256,
                 projection_class_embeddings_input_dim=2816)
SD_VAE = dict(in_channels=3, out_channels=3, latent_channels=4, layers_per_block=2,
              block_out_channels=(128, 256, 512, 512), down_block_types=('DownEncoderBlock2D',) * 4,
              up_block_types=('UpDecoderBlock2D',) * 4)
CLIP_L = dict(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
              num_attention_heads=12, max_position_embeddings=77, hidden_act='quick_gelu')
CLIP_H = dict(CLIP_L, hidden_size=1024, intermediate_size=4096, num_hidden_layers=23,  # SD2: penultimate
              num_attention_heads=16, hidden_act='gelu')
CLIP_G = dict(CLIP_L, hidden_size=1280, intermediate_size=5120, num_hidden_layers=32,
              num_attention_heads=20, hidden_act='gelu')
UNETS = dict(sd1=SD1_UNET, sd2=SD2_UNET, sdxl=SDXL_UNET)


def _unet(arch:str, dtype, attn:str):
    "attn: 'vanilla' (materialised softmax) or 'fused' (xFormers / SDPA / flash: one kernel)."
    from diffusers import UNet2DConditionModel
    from diffusers.models.attention_processor import AttnProcessor, AttnProcessor2_0
    with torch.device(META): u = UNet2DConditionModel(**UNETS[arch])
    u = u.to(dtype)
    u.set_attn_processor(AttnProcessor() if attn.startswith('vanilla') else AttnProcessor2_0())
    if attn == 'vanilla32':  # under torch.autocast the softmax runs in fp32: cast up, softmax, cast down
        for m in u.modules():
            if hasattr(m, 'upcast_softmax'): m.upcast_softmax = True
    return u


def _unet_inputs(arch, batch, res, dtype):
    lat = res // 8
    x = torch.zeros(batch, 4, lat, lat, dtype=dtype, device=META)
    ctx = torch.zeros(batch, 77, UNETS[arch]['cross_attention_dim'], dtype=dtype, device=META)
    t = torch.zeros(batch, dtype=torch.long, device=META)
    extra = {}
    if arch == 'sdxl':
        extra = dict(added_cond_kwargs=dict(text_embeds=torch.zeros(batch, 1280, dtype=dtype, device=META),
                                            time_ids=torch.zeros(batch, 6, dtype=dtype, device=META)))
    return x, t, ctx, extra


def unet_step(arch, batch, res, dtype, attn):
    "One UNet forward at `batch` (for CFG pass 2x the images)."
    u = _unet(arch, dtype, attn.replace('sliced', 'vanilla'))
    x, t, ctx, extra = _unet_inputs(arch, batch, res, dtype)
    def fwd():
        with torch.no_grad(): u(x, t, ctx, **extra)
    return fwd


def vae_decode(batch, res, dtype):
    from diffusers import AutoencoderKL
    with torch.device(META): v = AutoencoderKL(**SD_VAE)
    v = v.to(dtype).eval()
    z = torch.zeros(batch, 4, res // 8, res // 8, dtype=dtype, device=META)
    def fwd():
        with torch.no_grad(): v.decode(z)
    return fwd


def clip_text(cfg:dict, batch, dtype):
    import transformers as tr
    m = _hf(tr.CLIPTextModel, tr.CLIPTextConfig(**cfg), dtype)
    ids = torch.zeros(batch, 77, dtype=torch.long, device=META)
    def fwd():
        with torch.no_grad(): m(input_ids=ids)
    return fwd


def _dt(dtype): return 'fp16' if dtype == F16 else 'fp32'


def sd_step(arch, images, res, dtype, attn, cfg=True):
    """One denoising iteration as a progress bar counts it: UNet at 2x images (CFG), the guidance
    combination and a scheduler step (~12 elementwise ops on the latents, written out)."""
    b = images * (2 if cfg else 1)
    key = f'unet_{arch}_{_dt(dtype)}_b{b}_r{res}_{attn}'
    u = cached(key, lambda: count_ops(unet_step(arch, b, res, dtype, attn)))
    lat_bytes = images * 4 * (res // 8) ** 2 * (2 if dtype == F16 else 4)
    sched = synthetic('scheduler_elementwise', 'other', _dt(dtype), 3 * lat_bytes, count=12)
    return combine([(1, u), (1, sched)])


def sd_pipeline(arch, images, res, dtype, attn, steps=50, cfg=True):
    "A whole txt2img call: text encoder(s), `steps` denoising iterations, VAE decode."
    d = _dt(dtype)
    texts = {'sd1': [CLIP_L], 'sd2': [CLIP_H], 'sdxl': [CLIP_L, CLIP_G]}[arch]
    parts = [(steps, sd_step(arch, images, res, dtype, attn, cfg))]
    for i, c in enumerate(texts):
        b = images * (2 if cfg else 1)
        parts.append((1, cached(f'clip{c["hidden_size"]}_{d}_b{b}', lambda c=c, b=b: count_ops(clip_text(c, b, dtype)))))
    vdt = F32 if arch == 'sdxl' else dtype  # SDXL's VAE is upcast to fp32 (force_upcast)
    parts.append((1, cached(f'vae_{_dt(vdt)}_b{images}_r{res}', lambda: count_ops(vae_decode(images, res, vdt)))))
    return combine(parts)

# --------------------------------------------------------------------------------------------
# Training steps
# --------------------------------------------------------------------------------------------

def _params(m): return [p for p in m.parameters() if p.requires_grad]


def optimizer_ops(params, kind:str)->pd.DataFrame:
    """The optimizer step: 'adamw' (torch AdamW, foreach, counted on meta) or 'adam8bit'
    (bitsandbytes: one fused kernel per tensor; reads the fp32 grad, reads and writes the fp32
    weight and two 8-bit states with their block scales: ~17 bytes per parameter)."""
    if kind == 'adam8bit':
        return pd.concat([synthetic('bnb_adam8bit', 'other', 'fp32', 17 * p.numel()) for p in params])
    for p in params: p.grad = torch.zeros_like(p)
    opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
    opt.step()  # the first step makes the state (two zeroed moments a tensor); a run repeats the steps after it
    return count_ops(opt.step)


def grad_scaler_ops(params)->pd.DataFrame:
    """GradScaler in fp16 AMP: scale the loss, unscale + inf check of every grad (multi-tensor kernels,
    ~110 tensors a launch, read and write each grad), scale update and a host sync."""
    n = sum(p.numel() for p in params)
    launches = math.ceil(len(params) / 110)
    return combine([(1, synthetic('_amp_foreach_non_finite_check_and_unscale_', 'other', 'fp32',
                                  8 * n / launches, count=launches)),
                    (1, synthetic('grad_scaler_misc', 'other', 'fp32', 64, count=6))])


def add_lora(model, rank:int, names=('to_q', 'to_k', 'to_v', 'to_out.0'))->list:
    "Freeze `model` and add LoRA adapters (fp32, rank `rank`) to the named attention linears."
    for p in model.parameters(): p.requires_grad_(False)
    class LoRA(nn.Module):
        def __init__(self, base):
            super().__init__()
            self.base = base
            self.down = nn.Linear(base.in_features, rank, bias=False, device=META)
            self.up = nn.Linear(rank, base.out_features, bias=False, device=META)
        def forward(self, x, *a, **k): return self.base(x) + self.up(self.down(x))
    for mod_name, mod in list(model.named_modules()):
        for n in names:
            parent_name, _, attr = (mod_name + '.' + n).rpartition('.')
            try: target = model.get_submodule(mod_name + '.' + n if mod_name else n)
            except AttributeError: continue
            if isinstance(target, nn.Linear):
                parent = model.get_submodule(parent_name) if parent_name else model
                setattr(parent, attr, LoRA(target))
    return _params(model)


def sd_train_step(arch, batch, res, precision, ckpt:bool, opt:str, lora_rank:int=0, micro:int=1):
    """A DreamBooth/LoRA UNet training step (latents and text embeddings cached): `micro` forward
    + backward passes (fused attention, as xFormers), gradient checkpointing as one more forward,
    GradScaler in fp16 AMP, one optimizer step.  precision: 'fp32' or 'amp' (fp32 master weights,
    emulated autocast) or 'amp16' (fp16 frozen weights + fp32 LoRA, autocast)."""
    key = (f'sdtrain_{arch}_b{batch}_r{res}_{precision}_lora{lora_rank}_{opt}'  # the optimizer's ops are a part
           + ('_mac' if META_AUTOCAST and precision != 'fp32' else ''))
    autocast = (lambda: t4_model.MetaAutocast('fp16')) if META_AUTOCAST else Autocast16
    def parts():
        wdt = F16 if precision == 'amp16' else F32
        u = _unet(arch, wdt, 'fused')
        u.train()
        params = add_lora(u, lora_rank) if lora_rank else _params(u)
        x, t, ctx, extra = _unet_inputs(arch, batch, res, wdt)
        def fwd():
            out = u(x, t, ctx, **extra).sample
            return F.mse_loss(out.float(), torch.zeros_like(out, dtype=F32))
        def fwd_bwd():
            if precision == 'fp32': fwd().backward()
            else:
                with autocast(): loss = fwd()
                (loss * 1024.0).backward()
        def fwd_only():
            with torch.no_grad():
                if precision == 'fp32': fwd()
                else:
                    with autocast(): fwd()
        fb = count_ops(fwd_bwd)
        f = count_ops(fwd_only)
        o = optimizer_ops(params, opt)
        s = grad_scaler_ops(params) if precision != 'fp32' else synthetic('noop', 'other', 'fp32', 0, 0)
        return dict(fb=fb, f=f, opt=o, scaler=s)
    p = CACHE / 'parts' / f'{key}.pkl'
    d = pickle.loads(p.read_bytes()) if p.exists() else None
    if d is not None and not all(set(COLS) <= set(v.columns) for v in d.values()): d = None  # older version
    if d is not None and 'seq' not in d['fb'].attrs: d = None  # counted before the op order was kept
    if d is None:
        t = time.time()
        d = parts()
        p.parent.mkdir(parents=True, exist_ok=True); p.write_bytes(pickle.dumps(d))
        print(f'  counted {key} in {time.time() - t:.1f}s', flush=True)
    # micro-steps each do forward+backward (+ recompute); one optimizer + scaler step per `micro`
    return combine([(micro, d['fb']), (micro if ckpt else 0, d['f']), (1, d['opt']), (1, d['scaler'])])

# --------------------------------------------------------------------------------------------
# NVIDIA DeepLearningExamples rows already in colab_t4_nb.t4.PUBLISHED
# --------------------------------------------------------------------------------------------

DLE_BUILD = 2  # raised when PUBLISHED's builds change (2: PyTorch ConvNets as their validation step), so parts are counted again


def dle_rows()->list:
    "One record per PUBLISHED row, the counted work of the row's own `build('meta')`."
    out = []
    for m in t4.PUBLISHED:
        framework = 'tf' if m.run.startswith('TensorFlow') else 'pytorch'
        table = 'bert' if 'BERT' in m.workload else 'convnets'
        sid = f"dle-{'tf2' if m.run.startswith('TensorFlow2') else framework}-{table}-published"
        key = 'dle_' + ''.join(ch if ch.isalnum() else '_' for ch in m.workload)
        # the part's key names the framework: since DLE_BUILD 2 PyTorch and TensorFlow rows of a workload differ
        ops = cached(f'dle{DLE_BUILD}_{framework}_{key[4:]}', lambda m=m: count_ops(*_build_dle(m)))
        # conv layout, as the sources state it: DLE PyTorch ConvNets configs.yml runs T4 AMP with
        # `memory_format: nhwc` (FP32: default NCHW); DLE TensorFlow ConvNets `--data_format` defaults
        # to NHWC. Every other rebuilt row runs NCHW (diffusers, transformers defaults).
        nhwc = table == 'convnets' and (framework == 'tf' or 'AMP' in m.run)
        out.append(dict(row_id=f'PUBLISHED:{m.workload}|{m.run}', source_id=sid, family='nvidia-dle',
                        mode='inference', framework=framework, graph=framework == 'tf', compiled=False,
                        layout='nhwc' if nhwc else 'nchw',
                        precision='fp16' if 'fp16' in m.workload else 'fp32',
                        workload=key, ms=m.ms, note=m.run, confidence='high', ops=ops))
    return out


def _build_dle(m):
    fn, args = m.build(META)
    return (lambda: fn(*args)),

# --------------------------------------------------------------------------------------------
# The CSV rows
# --------------------------------------------------------------------------------------------

def _attn_of(settings:str, framework:str)->str|None:
    s = (settings + ' ' + framework).lower()
    if 'compile' in s and 'no compile' not in s: return None
    if 'vanilla' in s or 'naive' in s or 'sdpa math' in s or 'no xformers' in s or 'default attention' in s:
        return 'vanilla'
    if any(k in s for k in ('xformers', 'sdpa', 'attnprocessor2_0', 'flash', 'mem-efficient')): return 'fused'
    return None


def inference_rows(d:pd.DataFrame):
    "Yield (row, workload key, op summary or None, ms per call, why skipped)."
    for i, r in d.iterrows():
        sid, fw, s = r.source_id, str(r.framework), str(r.settings)
        compiled = 'compile' in fw or 'torch.compile' in s and 'no compile' not in s
        base = dict(row_id=f'inference:{i}', source_id=sid, family=r.family, mode='inference',
                    framework='tf' if 'tensorflow' in fw else 'pytorch', graph='tensorflow' in fw,
                    compiled=compiled, precision=r.precision, note=f'{r.model} | {fw} | {s[:80]}',
                    confidence=r.confidence)
        dtype = F16 if 'fp16' in str(r.precision) else F32
        try:
            if sid == 'hf-transformers-torchcompile-doc':
                kind = {'vit-base-patch16-224': 'vit-base', 'beit-base-patch16-224': 'beit-base',
                        'convnext-large-224': 'convnext-large', 'resnet-50 (HF)': 'resnet-50',
                        'segformer-b0-ade-512': 'segformer-b0'}.get(r.model)
                if kind is None: yield base, None, None, 'model not rebuilt (DETR/OwlViT/DeepLab: no time)'; continue
                if compiled: yield base, None, None, 'torch.compile row'; continue
                key = f'{kind}_{_dt(dtype)}_b{r.batch}_{int(r.image_size)}'
                ops = cached(key, lambda: count_ops(hf_vision(kind, int(r.batch), int(r.image_size), dtype)))
                yield base, key, ops, float(r.value)
            elif sid == 'hf-bettertransformer-blog-draft':
                if 'BetterTransformer' in fw: yield base, None, None, 'BetterTransformer fused fastpath'; continue
                key = f'bert-base_{_dt(dtype)}_b{r.batch}_s{int(r.seq_len)}'
                ops = cached(key, lambda: count_ops(hf_text('bert-base', int(r.batch), int(r.seq_len), dtype)))
                yield base, key, ops, float(r.value)
            elif sid == 'els-rd-transformer-deploy':
                if 'onnxruntime' in fw: yield base, None, None, 'ONNX Runtime row'; continue
                kind = 'minilm' if 'MiniLM' in r.model else 'roberta-large' if 'large' in r.model else 'roberta-base'
                key = f'{kind}_{_dt(dtype)}_b{r.batch}_s{int(r.seq_len)}'
                ops = cached(key, lambda: count_ops(hf_text(kind, int(r.batch), int(r.seq_len), dtype)))
                yield base, key, ops, float(r.value)
            elif sid == 'dle-tf2-electra':
                key = f'electra-base_fp16_b{r.batch}_s{int(r.seq_len)}'
                ops = cached(key, lambda: count_ops(hf_text('electra-base', int(r.batch), int(r.seq_len), F16)))
                yield base, key, ops, float(r.value)
            elif sid in ('hf-diffusers-pt2-doc-mar2023', 'stochasticai-x-stable-diffusion',
                         'hf-diffusers-sd101-guide', 'pytorch-blog-accelerated-diffusion', 'hf-blog-lcm-lora'):
                arch = 'sd2' if sid.startswith('pytorch-blog') else 'sdxl' if 'lcm' in sid else 'sd1'
                attn = 'fused' if arch == 'sdxl' else _attn_of(s, fw)
                if sid == 'hf-diffusers-sd101-guide' and attn is None: attn = 'vanilla'  # diffusers 0.11 default
                # materialised attention run under torch.autocast (ldm's txt2img, stochasticai's pipeline):
                # autocast puts softmax on its fp32 list, so the score matrix is cast up and back down
                # (not SDPA's math backend: autocast runs scaled_dot_product_attention in fp16 throughout)
                if attn == 'vanilla' and 'autocast' in s.lower() and 'sdpa' not in s.lower() and dtype == F16:
                    attn = 'vanilla32'
                if 'TorchScript' in fw: yield base, None, None, 'TorchScript + nvFuser'; continue
                if 'enable_attention_slicing' in s: yield base, None, None, 'attention slicing'; continue
                if attn is None: yield base, None, None, 'torch.compile row' if compiled else 'attention unknown'; continue
                steps = 20 if '20 steps' in r.timed else 4 if 'lcm' in r.model.lower() else \
                    25 if arch == 'sdxl' else 50
                cfg = not (arch == 'sdxl' and steps == 4)  # LCM-LoRA runs guidance_scale=1
                res = 1024 if arch == 'sdxl' else 512
                b = int(r.batch)
                key = f'pipe_{arch}_{_dt(dtype)}_b{b}_{attn}_{steps}{"" if cfg else "_nocfg"}'
                p = CACHE / 'parts' / f'{key}.pkl'
                ops = cached(key, lambda: sd_pipeline(arch, b, res, dtype, attn, steps, cfg))
                ms = {'s_per_batch': 1000 * r.value, 's_per_image': 1000 * r.value * b,
                      's_per_2_batches': 500 * r.value}[r.metric]
                yield base, key, ops, ms
            elif sid in ('hf-diffusers-pt2-doc-may2023', 'gh-issue-a1111-1078-lagnet0', 'gh-issue-fast-sd-755-mawfox'):
                # the May-2023 doc runs AttnProcessor2_0 (SDPA) throughout; the webui issues say xformers or not
                attn = 'fused' if sid.endswith('may2023') else ('vanilla' if 'no xformers' in s else 'fused')
                if compiled: yield base, None, None, 'torch.compile row'; continue
                b = int(r.batch)
                key = f'step_sd1_{_dt(dtype)}_b{b}_{attn}'
                ops = cached(key, lambda: sd_step('sd1', b, 512, dtype, attn))
                ms = 1000 / r.value if r.metric == 'it_per_s' else 1000 * r.value
                yield base, key, ops, ms
            elif sid == 'pytorch-torchbench-gpu-util-prs' and r.model == 'resnext50_32x4d':
                b = int(r.batch)
                key = f'resnext50_fp32_b{b}'
                def mk(b=b):
                    with torch.device(META): net = models.resnet((3, 4, 6, 3), 128, 32, 2, False, 1000).eval()
                    x = torch.zeros(b, 3, 224, 224, device=META)
                    def fwd():
                        with torch.no_grad(): net(x)
                    return count_ops(fwd)
                yield base, key, cached(key, mk), float(r.value)
            else:
                yield base, None, None, 'not rebuilt (model family not implemented: see report)'
        except Exception as e:
            yield base, None, None, f'rebuild failed: {type(e).__name__}: {str(e)[:120]}'


def training_rows(d:pd.DataFrame):
    for i, r in d.iterrows():
        sid, s = r.source_id, str(r.settings)
        base = dict(row_id=f'training:{i}', source_id=sid, family=r.family, mode='training',
                    framework='pytorch', graph=False, compiled=False, precision=r.precision,
                    note=f'{r.model} | {s[:100]}', confidence=r.confidence)
        try:
            if sid == 'shivamshrirao-diffusers-dreambooth':
                # The table sits above the README's "Training on a 16GB GPU" commands, which (like the
                # Colab notebook) pass --with_prior_preservation: instance and class images are
                # concatenated, so the UNet batch is twice train_batch_size (PRIOR = 1 to drop this).
                prior = int(os.environ.get('T4_FIT_PRIOR', '2'))
                prec = 'fp32' if r.precision == 'fp32' else 'amp'
                ckpt = 'gradient_checkpointing=TRUE' in s
                opt = 'adam8bit' if 'use_8bit_adam=TRUE' in s else 'adamw'
                ga = 2 if 'gradient_accumulation_steps=2' in s else 1
                # the progress bar of a GA=2 run ticks per micro-step (1.0 it/s against 0.93 at GA=1):
                # one micro-step plus half an optimizer step per tick
                b = prior * int(r.batch)
                ops = sd_train_step('sd1', b, 512, prec, ckpt, opt, micro=1)
                if ga == 2:
                    o = sd_train_step('sd1', b, 512, prec, ckpt, opt, micro=0)
                    ops = combine([(1, ops), (-0.5, o)])
                key = f'dreambooth_sd1_b{b}_{prec}_ckpt{int(ckpt)}_{opt}_ga{ga}'
                yield base, key, ops, 1000 / r.value
            elif sid == 'thelastben-fast-sd-issue2330':
                key = 'dreambooth_sd1_b1_r640_amp_ckpt1_adam8bit'
                yield base, key, sd_train_step('sd1', 1, 640, 'amp', True, 'adam8bit'), 1000 / r.value
            elif sid == 'hf-notebooks-sdxl-dreambooth-lora':
                b = int(r.batch)
                ga = 3 if b == 1 else 2
                key = f'lora_sdxl_b{b}_ga{ga}'
                # s/it = one optimizer step = `ga` micro-batches with checkpointing
                ops = sd_train_step('sdxl', b, 1024, 'amp16', True, 'adam8bit', lora_rank=4, micro=ga)
                yield base, key, ops, 1000 * r.value
            else:
                yield base, None, None, 'not rebuilt (4-bit/8-bit LLM, YOLO, TF, dataloader-bound or unspecified)'
        except Exception as e:
            yield base, None, None, f'rebuild failed: {type(e).__name__}: {str(e)[:160]}'


def main(only:str|None=None):
    CACHE.mkdir(parents=True, exist_ok=True)
    data = ROOT / 'data' / 't4_published'
    rows, skipped = [], []
    gens = []
    if only in (None, 'dle'): rows += dle_rows()
    if only in (None, 'inference'): gens.append(inference_rows(pd.read_csv(data / 'inference.csv')))
    if only in (None, 'training'): gens.append(training_rows(pd.read_csv(data / 'training.csv')))
    for g in gens:
        for base, key, ops, ms in g:
            if key is None: skipped.append(dict(base, why=ms)); continue
            rows.append(dict(dict(layout='nchw', **base), workload=key, ms=ms, ops=ops))
    out = CACHE / f'rows{"_" + only if only else ""}.pkl'
    pd.to_pickle(rows, out)
    pd.DataFrame(skipped).to_csv(CACHE / f'skipped{"_" + only if only else ""}.csv', index=False)
    print(f'{len(rows)} rows kept, {len(skipped)} skipped -> {out}')


if __name__ == '__main__':
    arg = sys.argv[1] if len(sys.argv) > 1 else None
    if arg in ('-h', '--help'): print(__doc__); sys.exit()
    if arg not in (None, 'dle', 'inference', 'training'):
        sys.exit(f'unknown part {arg!r}: give none (every row), dle, inference or training')
    main(arg)
