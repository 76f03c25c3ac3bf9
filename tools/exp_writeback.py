# Run from the project root: python tools/exp_writeback.py cpu|cuda ROUNDS
# CheckpointManager.save with and without the early write-back, against torch.save + fsync and
# accelerate's save_state + fsync; same state, same disk, interleaved rounds after a warm-up of each.
import json, sys, os, statistics, tempfile, functools
from pathlib import Path
from IPython.core.interactiveshell import InteractiveShell
nb = json.load(open('nbs/05_persistence.ipynb'))
sh = InteractiveShell.instance()
for c in nb['cells']:
    if c['cell_type'] != 'code': continue
    s = ''.join(c['source'])
    if 'save_throughput(model, opt, tmp)' in s: break
    if s.startswith(('#| hide\n#| eval: false', '#| cuda')): continue
    if s.startswith(('#| export', '#| hide')) or 'def save_throughput' in s or 'def bert_like' in s: sh.run_cell(s)
ns = sh.user_ns
import colab_t4_nb.persistence as P
import torch
dev = sys.argv[1] if len(sys.argv) > 1 else 'cpu'
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
model, opt = ns['bert_like'](device=dev)
st = ns['training_state'](0, model, opt)
out = {}
with tempfile.TemporaryDirectory(dir='.') as tmp:
    tmp = Path(tmp); n = iter(range(1, 10**6))
    wb, nowb = P.CheckpointManager(tmp/'wb', keep=1), P.CheckpointManager(tmp/'nowb', keep=1)
    orig = P.write_checkpoint
    def plain():
        p = tmp/f'plain{next(n):06d}.pt'; torch.save(st, p)
        fd = os.open(p, os.O_RDONLY); os.fsync(fd); os.close(fd)
    def no_wb():
        P.write_checkpoint = functools.partial(orig, writeback=None)
        try: nowb.save(next(n), model, opt)
        finally: P.write_checkpoint = orig
    acc = ns['accelerate_saver'](model, opt, tmp)
    variants = {'torch.save + fsync': plain, 'manager (write-back every 64 MiB)': lambda: wb.save(next(n), model, opt),
                'manager (writeback=None)': no_wb, 'accelerate save_state + fsync': lambda: ns['fsync_tree'](acc())}
    def tidy():
        wb.local.settle(); nowb.local.settle()
        for p in sorted(tmp.glob('plain*.pt'))[:-1]: p.unlink()
        for p in sorted(tmp.glob('accelerate*'))[:-1]: ns['shutil'].rmtree(p)
    t = {k: [] for k in variants}
    for f in variants.values(): tidy(); f()
    names = list(variants)
    for r in range(rounds):
        for k in names[r % 4:] + names[:r % 4]: tidy(); t[k].append(ns['cpu_timer'](variants[k]))
    mib = max(tmp.glob('plain*.pt')).stat().st_size / 2**20
base = statistics.median(t['torch.save + fsync'])
for k, v in t.items():
    m = statistics.median(v)
    print(f'{dev} state, {k:36s} median {m:7.0f} ms  {mib / (m / 1e3):6.0f} MiB/s  vs plain {base / m:.3f}  each {[round(x) for x in v]}')
