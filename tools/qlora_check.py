#!/usr/bin/env python3
"""Adapter runs on a GPU: killed, resumed, compared bit for bit; their checkpoints; a 4-bit batch search.

Runs killed with SIGKILL and resumed are compared bit for bit with runs never killed; each check says
what the checkpoints hold; a batch search of a 4-bit model must leave no memory behind.

    python tools/qlora_check.py            # on a CUDA machine with bitsandbytes and peft, diffusers
    python tools/qlora_check.py --all      # also a kill in the middle of a save, and two kills

The runs are tests/adapter_job.py with RESUME_DEVICE=cuda (deterministic kernels, fp16):
- qlora: a Llama-shaped causal LM from a config (random weights, saved as a Hub download would be),
  loaded in 4 bits (nf4, double quantization, fp16 products) with a PEFT LoRA (dropout 0.1),
  bitsandbytes' 8-bit AdamW, trained by the Trainer in fp16 (its GradScaler) with `HFCallback`;
- sd: a small diffusers UNet2DConditionModel, its base frozen in fp16 and a LoRA on its attention in
  fp32 (as diffusers' train_text_to_image_lora.py has it), trained by `run_resumable` under fp16
  autocast with a GradScaler, on noised latents drawn each step.
Each is run once uninterrupted and once killed after optimizer step 5 and started again; the final
adapter weights and optimizer state must be equal bit for bit. Then, in this process:
- base-change: a checkpoint of the nf4 model refuses to load into the same base in fp4;
- batch-search: `find_batch_size` on a 4-bit model with a vocabulary of Llama's size under
  `t4_rehearsal` (a T4's memory): `torch.cuda.memory_allocated()` before and after must be equal;
- fingerprint: the time to fingerprint 4 GiB of frozen weights (a 7B base in 4 bits).

Each check prints one JSON line {"check": ..., "ok": ...}. Exit status 1 if one failed. About two
minutes on one H100 (three and a half with --all).
"""
import argparse, json, os, signal, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT/'tests'/'adapter_job.py'
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(JOB.parent))

def say(**rec):
    print(json.dumps(rec, default=str), flush=True)
    return rec['ok']

def env(base:Path)->dict:
    e = {**os.environ, 'RESUME_DEVICE': 'cuda', 'ADAPTER_BASE': str(base), 'PYTHONUNBUFFERED': '1',
         'PYTHONPATH': os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')])}
    for k in ('IN_TEST', 'COLAB_RELEASE_TAG', 'KAGGLE_KERNEL_RUN_TYPE'): e.pop(k, None)
    return e

def start(framework:str, folder:Path, base:Path, **kill)->subprocess.Popen:
    folder.mkdir(parents=True, exist_ok=True)
    args = [f'--{k.replace("_", "-")}={v}' for k, v in kill.items()]
    return subprocess.Popen([sys.executable, str(JOB), framework, str(folder), *args], env=env(base),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

def finish(p:subprocess.Popen)->tuple:
    out, _ = p.communicate()
    return p.returncode, out[-2000:]

def same(a, b)->bool:
    import torch
    if isinstance(a, torch.Tensor): return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict): return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)): return len(a) == len(b) and all(map(same, a, b))
    return a == b

def tensor_bytes(o)->int:
    import torch
    if isinstance(o, torch.Tensor): return o.numel() * o.element_size()
    if isinstance(o, dict): return sum(map(tensor_bytes, o.values()))
    if isinstance(o, (list, tuple)): return sum(map(tensor_bytes, o))
    return 0

def holds(folder:Path)->dict:
    "The newest checkpoint of `folder`: its size, what each part holds (bytes of tensors), the base's fingerprint."
    import torch
    from colab_t4_nb.persistence import CheckpointManager
    ckpt = CheckpointManager(folder)
    c = ckpt.latest()
    st = torch.load(c.path, weights_only=True)
    ckpt.release()
    if 'files' in st['extras']:  # the Trainer's files, packed by HFCallback
        parts = {k: t.numel() for k, t in st['extras']['files'].items()}
        base, left = st['extras']['base'], st['extras'].get('left_out')
    else:
        parts = {'model': tensor_bytes(st['model']), 'model_tensors': len(st['model']),
                 'lora_only': all('lora' in k for k in st['model']),
                 'optimizer': tensor_bytes(st['optimizer']), 'scaler': st['scaler'],
                 'scheduler_step': (st['scheduler'] or {}).get('last_epoch'),
                 'rng': tensor_bytes(st['rng'])}
        base, left = st['base'], None
    return {'checkpoint_bytes': c.size, 'step': c.step, 'holds': parts, 'base': base, 'left_out': left}

def resume(framework:str, tmp:Path, base:Path, kills:list, name:str)->bool:
    "A run killed at `kills` and resumed, against an uninterrupted one started beside the first."
    t0 = time.perf_counter()
    ref, run = tmp/f'{framework}-{name}-ref', tmp/f'{framework}-{name}-run'
    pr, pk = start(framework, ref, base), start(framework, run, base, **kills[0])
    (rc_ref, out_ref), (rc_kill, out_kill) = finish(pr), finish(pk)
    codes = [rc_kill]
    for k in kills[1:]: codes.append(finish(start(framework, run, base, **k))[0])
    rc, out = finish(start(framework, run, base))
    ok = rc_ref == 0 and rc == 0 and all(c == -signal.SIGKILL for c in codes)
    rec = dict(check=f'{framework}-resume-{name}', kills=kills, killed=codes, ok=ok)
    if ok:
        import torch
        a, b = (torch.load(f/'final.pt', weights_only=True) for f in (run, ref))
        rec.update(adapters_equal=same(a['model'], b['model']),
                   optimizer_equal=same(a['optimizer'], b['optimizer']),
                   adapter_tensors=len(a['model']), **holds(run/'ckpt'))
        rec['ok'] = rec['adapters_equal'] and rec['optimizer_equal']
    else: rec['output'] = (out if rc else out_kill if rc_kill != -signal.SIGKILL else out_ref)[-1500:]
    rec['seconds'] = round(time.perf_counter() - t0, 1)
    return say(**rec)

def small_llama(folder:Path)->Path:
    "A Llama of 4 layers with Llama's vocabulary (its logits take memory), random weights, saved."
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1408,
                                 num_hidden_layers=4, num_attention_heads=4,
                                 num_key_value_heads=4)).save_pretrained(folder)
    return folder

def qlora(base:Path, quant_type:str='nf4'):
    import torch
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quant_type,
                           bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.float16)
    m = AutoModelForCausalLM.from_pretrained(base, quantization_config=q, device_map={'': 0})
    m = prepare_model_for_kbit_training(m)
    torch.manual_seed(1)
    return get_peft_model(m, LoraConfig(r=16, lora_alpha=32, task_type='CAUSAL_LM',
                                        target_modules=['q_proj', 'k_proj', 'v_proj', 'o_proj']))

def base_change(base:Path, tmp:Path)->bool:
    from colab_t4_nb.checkpoint_format import CheckpointMismatch
    from colab_t4_nb.persistence import CheckpointManager
    ckpt = CheckpointManager(tmp/'base-change')
    ckpt.save(1, model=qlora(base))
    try: ckpt.load(model=qlora(base, 'fp4')); why = None
    except CheckpointMismatch as e: why = str(e)
    same_base = ckpt.load(model=qlora(base)).step == 1
    ckpt.release()
    return say(check='base-change', ok=bool(why and 'quantization' in why) and same_base,
               refused=why, same_base_loads=same_base)

def batch_search(base:Path)->bool:
    "`find_batch_size` of a 4-bit model under a T4's memory: memory allocated after it as before it."
    import gc, torch
    from colab_t4_nb.memory import find_batch_size
    from colab_t4_nb.t4 import t4_rehearsal
    model = qlora(base).train()  # as the Trainer trains it: gradient checkpointing on
    def probe(bs):
        x = torch.randint(0, 32000, (bs, 2048), device='cuda')
        try:
            with torch.autocast('cuda', dtype=torch.float16): loss = model(input_ids=x, labels=x).loss
            loss.backward()
        finally: model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    with t4_rehearsal(verbose=False):
        gc.collect(); torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        res = find_batch_size(probe, start=1, max_size=512)
        after = torch.cuda.memory_allocated()
    del model
    return say(check='batch-search', ok=after == before and res.smallest_oom is not None,
               allocated_before=before, allocated_after=after, batch=res.batch_size,
               largest_ok=res.largest_ok, smallest_oom=res.smallest_oom,
               trials=[(t.size, t.ok) for t in res.trials],
               seconds=round(time.perf_counter() - t0, 1))

def fingerprint()->bool:
    import torch
    from colab_t4_nb.persistence import model_state
    frozen = torch.nn.Module()
    frozen.weight = torch.nn.Parameter(torch.randint(0, 255, (4 * 2**30,), dtype=torch.uint8,
                                                     device='cuda'), requires_grad=False)
    first = model_state(frozen)[1]  # starts the kernels
    t0 = time.perf_counter()
    fp = model_state(frozen)[1]  # reading the hash back waits for the GPU
    s = time.perf_counter() - t0
    del frozen
    torch.cuda.empty_cache()
    return say(check='fingerprint', ok=fp == first, gib=4, seconds=round(s, 4),
               gb_per_s=round(4 * 2**30 / s / 1e9, 1), fingerprint=fp)

def main(argv=None)->int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--all', action='store_true', help='also a kill in a save, and two kills')
    a = ap.parse_args(argv)
    import torch
    import adapter_job  # on the CPU here: only to save the base the runs load
    say(check='device', ok=True, card=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        torch=torch.__version__, bitsandbytes=__import__('bitsandbytes').__version__)
    tmp = Path(tempfile.mkdtemp(prefix='qlora-check-'))
    base = tmp/'base'
    adapter_job.make_base(str(base))
    kills = {'once': [dict(kill_at=5)]}
    if a.all: kills.update(save=[dict(kill_in_save=8)], twice=[dict(kill_at=4), dict(kill_at=10)])
    ok = [resume(f, tmp, base, k, name) for f in ('qlora', 'sd') for name, k in kills.items()]
    lm = small_llama(tmp/'base-lm')
    ok += [base_change(lm, tmp), batch_search(lm), fingerprint()]
    return 0 if all(ok) else 1

if __name__ == '__main__': sys.exit(main())
