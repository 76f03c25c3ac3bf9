# Run from the project root: python tools/exp_writeback.py cpu|cuda ROUNDS
# CheckpointManager.save with and without the early write-back, against torch.save + fsync and
# accelerate's save_state + fsync; same state, same disk, interleaved rounds after a warm-up of each.
import json, sys, os, statistics, tempfile, functools
from pathlib import Path
import colab_t4_nb.persistence as P
from colab_t4_nb.acceptance import accelerate_saver, bert_like, fsync_tree
from colab_t4_nb.timing import cpu_timer
import shutil
import torch
dev = sys.argv[1] if len(sys.argv) > 1 else 'cpu'
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
model, opt = bert_like(device=dev)
st = P.training_state(0, model, opt)
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
    acc = accelerate_saver(model, opt, tmp)
    variants = {'torch.save + fsync': plain, 'manager (write-back every 64 MiB)': lambda: wb.save(next(n), model, opt),
                'manager (writeback=None)': no_wb, 'accelerate save_state + fsync': lambda: fsync_tree(acc())}
    def tidy():
        wb.local.settle(); nowb.local.settle()
        for p in sorted(tmp.glob('plain*.pt'))[:-1]: p.unlink()
        for p in sorted(tmp.glob('accelerate*'))[:-1]: shutil.rmtree(p)
    t = {k: [] for k in variants}
    for f in variants.values(): tidy(); f()
    names = list(variants)
    for r in range(rounds):
        for k in names[r % 4:] + names[:r % 4]: tidy(); t[k].append(cpu_timer(variants[k]))
    mib = max(tmp.glob('plain*.pt')).stat().st_size / 2**20
base = statistics.median(t['torch.save + fsync'])
for k, v in t.items():
    m = statistics.median(v)
    print(f'{dev} state, {k:36s} median {m:7.0f} ms  {mib / (m / 1e3):6.0f} MiB/s  vs plain {base / m:.3f}  each {[round(x) for x in v]}')
