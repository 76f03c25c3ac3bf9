"""Checkpoints of adapters on a frozen base hold what trains (the adapters, their optimizer state with
bitsandbytes' 8-bit state, the scaler, scheduler and random states), never the frozen base. They record
the base's fingerprint, and a resume onto another base (other weights, another quantization) is
refused, naming the saved and the found value. The kill matrix: a QLoRA run of the Trainer with
`HFCallback` (a 4-bit nf4 base where bitsandbytes is installed) and a diffusers UNet LoRA loop under
`run_resumable`, each killed with SIGKILL once, in the middle of a save, and twice, end with the
adapters and optimizer state of an uninterrupted run, bit for bit (the runs are `adapter_job.py`).
The batch search of a 4-bit model runs in training mode and leaves no gradient or tensor behind."""
import gc, os, sys
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
from torch import nn
from zygote import Zygote

from colab_t4_nb.checkpoint_format import CheckpointMismatch, CheckpointWarning
from colab_t4_nb import persistence as P
from colab_t4_nb.persistence import CheckpointManager

JOB = Path(__file__).parent/'adapter_job.py'
sys.path.insert(0, str(JOB.parent))
import adapter_job  # the models of the runs, for the tests that build them in this process
from test_resume_matrix import job_env, same

BNB = find_spec('bitsandbytes') is not None
needs_bnb = pytest.mark.skipif(not BNB, reason='bitsandbytes is not installed')
pytest.importorskip('peft')

def frozen_model(seed:int=0, dtype=torch.float32)->nn.Module:
    "A frozen layer (the base) under a small head that trains."
    torch.manual_seed(seed)
    base = nn.Linear(4, 8).to(dtype).requires_grad_(False)
    return nn.Sequential(base, nn.BatchNorm1d(8), nn.Linear(8, 2))

# ---------------------------------------------------------------- what a checkpoint holds
class _manager:
    "A CheckpointManager released on exit."
    def __init__(self, path): self.m = CheckpointManager(path)
    def __enter__(self): return self.m
    def __exit__(self, *exc): self.m.release()

def test_a_checkpoint_holds_what_trains_and_the_buffers(tmp_path):
    m = frozen_model()
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad])
    m(torch.randn(4, 4)).sum().backward()
    opt.step()
    with _manager(tmp_path) as ckpt: c = ckpt.save(1, model=m, optimizer=opt)
    st = torch.load(c.path, weights_only=True)
    assert sorted(st['model']) == ['1.bias', '1.num_batches_tracked', '1.running_mean',
                                   '1.running_var', '1.weight', '2.bias', '2.weight']
    assert st['base'] == P.model_state(m)[1] and st['base']['tensors'] == 2

def test_a_lora_checkpoint_leaves_the_base_out(tmp_path):
    "A tiny Llama with a PEFT LoRA: the checkpoint holds the adapters, a tenth of the whole model."
    from transformers import LlamaConfig, LlamaForCausalLM
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4)
    m = get_peft_model(LlamaForCausalLM(cfg), LoraConfig(r=4, target_modules=['q_proj', 'v_proj']))
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad])
    x = torch.randint(0, 256, (2, 8))
    m(input_ids=x, labels=x).loss.backward()
    opt.step()
    with _manager(tmp_path) as ckpt: c = ckpt.save(1, model=m, optimizer=opt)
    st = torch.load(c.path, weights_only=True)
    assert all('lora_' in k for k in st['model']) and len(st['model']) == 8, list(st['model'])[:5]
    whole = sum(v.numel() * v.element_size() for v in m.state_dict().values())
    assert c.size < whole / 5, (c.size, whole)

@needs_bnb
def test_a_4bit_base_never_enters_the_checkpoint_and_another_is_refused(tmp_path):
    "nf4 saved; the same base loads; fp4, no quantization and other weights are refused by name."
    base = tmp_path/'base'
    adapter_job.make_base(str(base))
    m = adapter_job.qlora_model(str(base)).train()  # (an eval forward on a CPU repacks 4-bit weights)
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad])
    x = torch.randint(0, 128, (2, 8))
    m(input_ids=x, labels=x).loss.backward()
    opt.step()
    with _manager(tmp_path/'ckpt') as ckpt:
        c = ckpt.save(1, model=m, optimizer=opt)
        st = torch.load(c.path, weights_only=True)
        assert all('lora_' in k for k in st['model']), [k for k in st['model'] if 'lora_' not in k]
        assert st['base']['quantization'] == 'bitsandbytes 4-bit nf4, blocksize 64, double quant'
        assert st['base']['dtypes'].get('uint8'), st['base']
        assert ckpt.load(model=adapter_job.qlora_model(str(base))).step == 1
        with pytest.raises(CheckpointMismatch, match="quantization: saved 'bitsandbytes 4-bit nf4, "
                           "blocksize 64, double quant', found 'bitsandbytes 4-bit fp4"):
            ckpt.load(model=adapter_job.qlora_model(str(base), 'fp4'))
        with pytest.raises(CheckpointMismatch, match="found 'none'"):
            ckpt.load(model=adapter_job.qlora_model(str(base), bits=16))
        other = adapter_job.qlora_model(str(base))
        with torch.no_grad(): other.base_model.model.lm_head.weight[0, 0] += 1
        with pytest.raises(CheckpointMismatch, match=r"differs in weights \(hash\): saved '"):
            ckpt.load(model=other)

def test_another_base_is_refused_before_anything_changes(tmp_path):
    with _manager(tmp_path) as ckpt:
        ckpt.save(1, model=frozen_model())
        other = frozen_model(seed=1)
        before = {k: v.clone() for k, v in other.state_dict().items()}
        with pytest.raises(CheckpointMismatch, match='strict=False loads it anyway'):
            ckpt.load(model=other)
        assert all(torch.equal(v, before[k]) for k, v in other.state_dict().items())
        with pytest.raises(CheckpointMismatch, match="saved {'float32': 2}, found {'float16': 2}"):
            ckpt.load(model=frozen_model(dtype=torch.float16))
        with pytest.warns(CheckpointWarning, match='loaded anyway'):
            assert ckpt.load(model=other, strict=False).step == 1
        unfrozen = frozen_model().requires_grad_(True)
        with pytest.raises(CheckpointMismatch, match='nothing is frozen here'):
            ckpt.load(model=unfrozen)

def test_a_whole_model_checkpoint_still_loads_into_a_frozen_one(tmp_path):
    "A checkpoint saved before the base was frozen (or by an older version) holds it all: it loads."
    with _manager(tmp_path) as ckpt:
        ckpt.save(1, model=frozen_model().requires_grad_(True))
        m = frozen_model(seed=1)
        assert ckpt.load(model=m).step == 1
        assert torch.equal(m[0].weight, frozen_model()[0].weight)

def test_the_hash_is_the_same_in_slices_and_at_any_offset(monkeypatch):
    w = torch.randn(1001)
    whole = P._digest(w).item()
    monkeypatch.setattr(P, '_WORDS', 7)
    assert P._digest(w).item() == whole
    for t in (w[1:], w[3:].half(), torch.ones(5, dtype=torch.bool), w.reshape(7, 143).t()):
        assert P._digest(t).item() == P._digest(t.clone().contiguous()).item()
    assert P._digest(torch.empty(3, device='meta')).item() == 0

def test_base_change_names_the_first_difference():
    a = P.model_state(frozen_model())[1]
    assert P.base_change(a, dict(a)) is None and P.base_change(None, a) is None
    assert P.base_change(a, {**a, 'tensors': 3}) == \
        'its frozen base differs in number of frozen tensors: saved 2, found 3'

# ---------------------------------------------------------------- HFCallback on a PEFT model
def _hf_lora(folder:Path, base:Path, other=False, max_steps=4):
    "Four Trainer steps of a LoRA on the tiny Llama of `base` (one weight nudged when `other`)."
    from transformers import PrinterCallback, Trainer, TrainingArguments
    from colab_t4_nb.callbacks import HFCallback
    m = adapter_job.qlora_model(str(base), bits=16)
    if other:
        with torch.no_grad(): m.base_model.model.model.norm.weight[0] += 1e-3
    cb = HFCallback(folder/'ckpt', every_steps=2, every_minutes=None)
    t = Trainer(m, TrainingArguments(str(folder/'out'), max_steps=max_steps, per_device_train_batch_size=4,
                                     save_strategy='no', report_to='none', disable_tqdm=True,
                                     logging_strategy='no', use_cpu=True),
                train_dataset=adapter_job.tokens(), callbacks=[cb])
    t.remove_callback(PrinterCallback)
    t.train(**cb.train_kwargs())
    return cb

def test_hf_records_the_base_and_refuses_another(tmp_path):
    pytest.importorskip('transformers')
    adapter_job.make_base(str(tmp_path/'base'))
    cb = _hf_lora(tmp_path, tmp_path/'base', max_steps=2)
    st = torch.load(cb.ckpt.latest().path, weights_only=True)['extras']
    assert st['base']['tensors'] == 21 and not st['left_out'], st['base']
    assert not any(n.startswith('model') for n in st['files']), list(st['files'])  # the adapter alone
    with pytest.raises(CheckpointMismatch, match=r"differs in weights \(hash\).*before trainer.train\(\)"):
        _hf_lora(tmp_path, tmp_path/'base', other=True)
    assert _hf_lora(tmp_path, tmp_path/'base').resumed_from == 2

# ---------------------------------------------------------------- the kill matrix
_ZYGOTES, _REFS = {}, {}

@pytest.fixture(scope='module')
def zygotes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('adapter-zygotes')
    def get(framework):
        if framework not in _ZYGOTES:
            env = job_env(ADAPTER_BASE=str(tmp/'base'))
            # the runs import the package these tests import
            env['PYTHONPATH'] = os.pathsep.join([str(Path(P.__file__).parent.parent), env['PYTHONPATH']])
            _ZYGOTES[framework] = Zygote([sys.executable, str(JOB), '--zygote', framework], env,
                                         tmp/f'{framework}.err', cwd=tmp)
        return _ZYGOTES[framework]
    yield get
    for z in _ZYGOTES.values(): z.close()
    _ZYGOTES.clear()

def final(folder:Path)->dict: return torch.load(folder/'final.pt', weights_only=True)

def reference(z:Zygote, framework:str, tmp:Path)->dict:
    if framework not in _REFS:
        folder = tmp/f'ref-{framework}'
        folder.mkdir()
        assert z.run(framework=framework, folder=str(folder)) == {'signal': 0, 'code': 0}, z.errors()
        _REFS[framework] = final(folder)
    return _REFS[framework]

KILLS = {'once': [dict(kill_at=5)], 'save': [dict(kill_in_save=8)],
         'twice': [dict(kill_at=4), dict(kill_at=10)]}

@pytest.mark.parametrize('kill', list(KILLS))
@pytest.mark.parametrize('framework', ['qlora', 'sd'])
def test_adapter_resume_is_bit_identical(framework, kill, zygotes, tmp_path, tmp_path_factory):
    pytest.importorskip('transformers' if framework == 'qlora' else 'diffusers')
    z = zygotes(framework)
    ref = reference(z, framework, tmp_path_factory.getbasetemp())
    for k in KILLS[kill]:
        r = z.run(framework=framework, folder=str(tmp_path), **k)
        assert r['signal'] == 9, f'the run was not killed ({r}): {z.errors()}'
        if 'kill_in_save' in k:  # the kill came in the middle of writing a checkpoint
            assert list((tmp_path/'ckpt').glob('.*.tmp')), sorted(p.name for p in (tmp_path/'ckpt').iterdir())
    assert z.run(framework=framework, folder=str(tmp_path)) == {'signal': 0, 'code': 0}, z.errors()
    got = final(tmp_path)
    assert got['model'] and all('lora' in k for k in got['model']), list(got['model'])[:5]
    assert same(got['model'], ref['model']), 'adapter weights differ from the uninterrupted run'
    assert same(got['optimizer'], ref['optimizer']), 'optimizer state differs'
    st = torch.load(CheckpointManager(tmp_path/'ckpt').latest().path, weights_only=True)
    base = st['base'] if framework == 'sd' else st['extras']['base']
    assert base['tensors'] > 20, base  # recorded, and left out
    if framework == 'sd': assert all('lora' in k for k in st['model'])
    if framework == 'qlora' and BNB:
        assert base['quantization'].startswith('bitsandbytes 4-bit nf4'), base
        opt = st['extras']['files']['optimizer.pt']  # bitsandbytes' 8-bit state of the adapters
        assert b'__bnb_optimizer_quant_state__' in opt.numpy().tobytes()

# ---------------------------------------------------------------- the batch search on a 4-bit model
def _oom_late_in_backward(module:nn.Module, above:int)->list:
    "`module`'s output raises an out-of-memory error in the backward pass of batches over `above`; its modes."
    modes = []
    def check(grad):
        if grad.shape[0] > above: raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2 GiB')
    def watch(m, args, out):
        modes.append(m.training)
        out.register_hook(check)
    module.register_forward_hook(watch)
    return modes

@needs_bnb
def test_batch_search_on_a_4bit_model_leaves_nothing_behind(tmp_path):
    """A 4-bit model in eval mode, as `from_pretrained` gives it, runs out of memory above 12 samples once
    the later layers' gradients are made: the search ran in training mode; afterwards the model is in
    eval mode, and no gradient and no tensor of the trials is alive."""
    from colab_t4_nb.callbacks import hf_settings
    adapter_job.make_base(str(tmp_path/'base'))
    m = adapter_job.qlora_model(str(tmp_path/'base')).eval()
    modes = _oom_late_in_backward(m.base_model.model.model.layers[0].self_attn.q_proj.lora_A['default'], 12)
    def alive(): gc.collect(); return sum(isinstance(o, torch.Tensor) for o in gc.get_objects())
    before = alive()
    got = hf_settings(64, model=m, dataset=adapter_job.tokens())
    assert got['per_device_train_batch_size'] <= 12, got
    assert (set(modes), m.training) == ({True}, False)
    assert [n for n, p in m.named_parameters() if p.grad is not None] == []
    assert alive() == before
