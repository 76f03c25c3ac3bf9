#!/usr/bin/env python3
"""Record a GPU monitor run for the docs: idle, then a training loop, then idle again.

    python tools/record_monitor.py OUT.csv [--train-s 45] [--idle-s 8]

`GPUMonitor(interval=0.25, csv=OUT.csv, torch_memory=True)` samples the GPU while the package's
segmentation UNet (`colab_t4_nb.models.UNet`, base 64, 512 x 512 images, batch 16) trains with
`amp_choice()`'s precision for the card. The CSV is what `monitoring.read_csv` reads back; the
monitoring page opens with its plot. Needs a CUDA GPU.
"""
import argparse, time
import torch
import torch.nn.functional as F
from colab_t4_nb.amp import amp_choice
from colab_t4_nb.models import UNet, seg_batch
from colab_t4_nb.monitoring import GPUMonitor

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('csv'); ap.add_argument('--train-s', type=float, default=45)
    ap.add_argument('--idle-s', type=float, default=8)
    a = ap.parse_args()
    if not torch.cuda.is_available(): raise SystemExit('record_monitor: needs a CUDA GPU')
    model = UNet(base=64).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    choice = amp_choice()
    scaler = torch.amp.GradScaler('cuda', enabled=choice.scaler)
    x, y = seg_batch(16, 512, device='cuda')
    steps = 0
    with GPUMonitor(interval=0.25, csv=a.csv, torch_memory=True) as mon:
        time.sleep(a.idle_s)
        t0 = time.monotonic()
        while time.monotonic() - t0 < a.train_s:
            with choice.autocast(): loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
            opt.zero_grad(set_to_none=True); steps += 1
        torch.cuda.synchronize()
        del model, opt, x, y
        torch.cuda.empty_cache()
        time.sleep(a.idle_s)
    print(f'{len(mon.df)} samples of {torch.cuda.get_device_name()}; {steps} training steps '
          f'({choice.name}) in {a.train_s:g} s; written to {a.csv}')

if __name__ == '__main__': main()
