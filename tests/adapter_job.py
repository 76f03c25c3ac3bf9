"""One adapter training run of the kill matrix: a small model whose base is frozen, trained from
the newest checkpoint in FOLDER. `python adapter_job.py FRAMEWORK FOLDER [--kill-at N]
[--kill-in-save N]` trains 12 optimizer steps (two epochs of six batches) and writes FOLDER/final.pt:
the trainable weights and the optimizer state. `--kill-at N` SIGKILLs the process after optimizer
step N; `--kill-in-save N` SIGKILLs it in the middle of writing the first checkpoint after step N.
`--zygote FRAMEWORK` imports once and forks one run per command read from stdin (see zygote.py).

Frameworks:
- qlora: a Llama-shaped causal LM, built from a config and saved once as a download would be,
  loaded in 4 bits (nf4, double quantization) where bitsandbytes is installed (else in fp32), with
  a PEFT LoRA (dropout 0.1) trained by the Trainer with `HFCallback`; bitsandbytes' 8-bit AdamW
  where bitsandbytes is installed.
- sd: a small diffusers UNet2DConditionModel, frozen, with a LoRA on its attention added as
  diffusers' train_text_to_image_lora.py adds it, trained by `run_resumable` on noised latents
  (random noise and timesteps each step) with AdamW, a warm-up schedule and a GradScaler; fp16
  autocast on a GPU (RESUME_DEVICE=cuda), fp32 on the CPU.
"""
import argparse, os, signal, sys, warnings
from importlib.util import find_spec
from pathlib import Path

import torch

STEPS, EVERY, BATCH, N = 12, 3, 4, 24  # optimizer steps, a checkpoint every 3, six batches an epoch
DEVICE = os.environ.get('RESUME_DEVICE', 'cpu')
if DEVICE != 'cpu':  # deterministic kernels, so that two runs on the GPU can be compared bit for bit
    os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
    torch.use_deterministic_algorithms(True)
BNB = find_spec('bitsandbytes') is not None and os.environ.get('ADAPTER_BNB', '1') == '1'
BASE = os.environ.get('ADAPTER_BASE')  # where the qlora base is saved, once

# ---------------------------------------------------------------- dying on cue
ARMED, KILL = [False], {'at': None, 'in_save': None}

def after_step(n:int):
    "Called after optimizer step `n`: die here, or arm the kill inside the next save."
    if KILL['at'] is not None and n == KILL['at']: os.kill(os.getpid(), signal.SIGKILL)
    if KILL['in_save'] is not None and n >= KILL['in_save']: ARMED[0] = True

def kill_inside_saves():
    "SIGKILL the process at the second write of an armed save: half a checkpoint is on disk."
    from colab_t4_nb import checkpoint_format as F
    put, calls = F._HashingWriter._put, [0]
    def _put(self, *a, **k):
        if ARMED[0]:
            calls[0] += 1
            if calls[0] == 2: os.kill(os.getpid(), signal.SIGKILL)
        return put(self, *a, **k)
    F._HashingWriter._put = _put

def write_final(folder:Path, model, optimizer:dict):
    "The trained weights (the LoRA's) and the optimizer state, for the comparison."
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    torch.save({'model': {k: v for k, v in model.state_dict().items() if k in trained},
                'optimizer': optimizer}, folder/'final.pt')

# ---------------------------------------------------------------- the runs
def make_base(folder:str):
    "A tiny Llama from a config, saved as `from_pretrained` reads it (random weights, seed 0)."
    from transformers import LlamaConfig, LlamaForCausalLM
    if (Path(folder)/'config.json').exists(): return
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    LlamaForCausalLM(cfg).save_pretrained(folder)

def qlora_model(base:str, quant_type:str='nf4', bits:int|None=None):
    "The base of `base` in 4 bits (`quant_type`) where bitsandbytes is, else fp32; a LoRA on q and v."
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import BitsAndBytesConfig, LlamaForCausalLM
    bits = bits if bits is not None else 4 if BNB else 16
    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quant_type,
                           bnb_4bit_use_double_quant=True,
                           bnb_4bit_compute_dtype=torch.float16 if DEVICE != 'cpu' else torch.float32) \
        if bits == 4 else None
    kw = dict(quantization_config=q, device_map=DEVICE) if q else {}
    model = LlamaForCausalLM.from_pretrained(base, dtype=torch.float32, **kw)
    if q: model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    else: model.to(DEVICE)
    torch.manual_seed(1)
    lora = LoraConfig(r=32, lora_alpha=32, lora_dropout=0.1, target_modules=['q_proj', 'v_proj'],
                      task_type='CAUSAL_LM')
    return get_peft_model(model, lora)

def tokens():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 128, (N, 16), generator=g)
    return [{'input_ids': s, 'labels': s} for s in ids]

def qlora(folder:Path):
    import transformers
    from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments
    from colab_t4_nb.callbacks import HFCallback
    transformers.utils.logging.set_verbosity_error()
    model = qlora_model(BASE)
    class Step(TrainerCallback):
        def on_step_end(self, args, state, control, **kw): after_step(state.global_step)
    args = TrainingArguments(str(folder/'out'), num_train_epochs=2, per_device_train_batch_size=BATCH,
                             learning_rate=1e-3, lr_scheduler_type='linear', warmup_steps=3,
                             optim='adamw_bnb_8bit' if BNB else 'adamw_torch', save_strategy='no',
                             report_to='none', disable_tqdm=True, logging_strategy='no', seed=0,
                             data_seed=1, use_cpu=DEVICE == 'cpu', fp16=DEVICE != 'cpu',
                             full_determinism=DEVICE != 'cpu')
    cb = HFCallback(folder/'ckpt', every_steps=EVERY, every_minutes=None)
    t = Trainer(model, args, train_dataset=tokens(), callbacks=[cb, Step()])
    t.remove_callback(PrinterCallback)
    t.train(**cb.train_kwargs())
    write_final(folder, model, t.optimizer.state_dict())

def unet():
    "A small SD-shaped UNet, frozen, with a LoRA on its attention as train_text_to_image_lora.py adds it."
    from diffusers import UNet2DConditionModel
    from peft import LoraConfig
    torch.manual_seed(0)
    u = UNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
                             block_out_channels=(16, 32), norm_num_groups=8, cross_attention_dim=16,
                             attention_head_dim=8, down_block_types=('CrossAttnDownBlock2D', 'DownBlock2D'),
                             up_block_types=('UpBlock2D', 'CrossAttnUpBlock2D'))
    u.requires_grad_(False)
    u.add_adapter(LoraConfig(r=4, lora_alpha=4, init_lora_weights='gaussian',
                             target_modules=['to_k', 'to_q', 'to_v', 'to_out.0']))
    fp16 = DEVICE != 'cpu'
    for p in u.parameters():  # the frozen base in fp16 on a GPU, the LoRA in fp32, as the script does
        if fp16 and not p.requires_grad: p.data = p.data.half()
    return u.to(DEVICE)

def latents():
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(torch.randn(N, 4, 8, 8, generator=g),
                                          torch.randn(N, 4, 16, generator=g))

def sd(folder:Path):
    from diffusers import DDPMScheduler
    from colab_t4_nb.persistence import CheckpointManager, run_resumable
    model, noise_sched = unet(), DDPMScheduler(num_train_timesteps=1000)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / 3, 1.0))
    scaler = torch.amp.GradScaler(DEVICE)
    dl = torch.utils.data.DataLoader(latents(), batch_size=BATCH, shuffle=True,
                                     generator=torch.Generator().manual_seed(1))
    def step(s, batch):
        lat, text = (t.to(DEVICE) for t in batch)
        noise = torch.randn_like(lat)
        t = torch.randint(0, 1000, (lat.shape[0],), device=DEVICE)
        with torch.autocast(DEVICE, dtype=torch.float16, enabled=DEVICE != 'cpu'):
            pred = model(noise_sched.add_noise(lat, noise, t), t, text).sample
        loss = torch.nn.functional.mse_loss(pred.float(), noise.float())
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        sched.step()
        after_step(s + 1)
    run_resumable(step, CheckpointManager(folder/'ckpt'), STEPS, model=model, optimizer=opt,
                  scaler=scaler, scheduler=sched, every_steps=EVERY, loader=dl)
    write_final(folder, model, opt.state_dict())

FRAMEWORKS = {'qlora': qlora, 'sd': sd}

def run(framework, folder, kill_at=None, kill_in_save=None):
    KILL.update(at=kill_at, in_save=kill_in_save)
    ARMED[0] = False
    kill_inside_saves()
    warnings.filterwarnings('ignore')
    FRAMEWORKS[framework](Path(folder))

def warm(framework):
    "Import what a run of `framework` imports (and save the qlora base), before forking."
    import colab_t4_nb.callbacks, colab_t4_nb.persistence, peft
    if framework == 'qlora':
        import transformers, transformers.trainer
        make_base(BASE)
        qlora_model(BASE)  # what the first model imports on its way
    if framework == 'sd': unet()

def zygote(framework):
    "Import `framework` once, then fork one run per command read from stdin (see zygote.py)."
    torch.set_num_threads(1)  # no thread pools in the forking process
    warm(framework)
    sys.path.insert(0, str(Path(__file__).parent))
    from zygote import serve
    serve(run)

if __name__ == '__main__':
    p = argparse.ArgumentParser()
    p.add_argument('framework', nargs='?')
    p.add_argument('folder', nargs='?')
    p.add_argument('--kill-at', type=int)
    p.add_argument('--kill-in-save', type=int)
    p.add_argument('--zygote')
    a = p.parse_args()
    if a.zygote: zygote(a.zygote)
    else:
        torch.set_num_threads(1)
        if a.framework == 'qlora': make_base(BASE)
        run(a.framework, a.folder, a.kill_at, a.kill_in_save)
