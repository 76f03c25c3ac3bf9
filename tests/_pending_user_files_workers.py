"""One test for tests/test_user_files.py: it uses that file's `tree` fixture and `model` helper."""
import torch

from colab_t4_nb import persistence as P

class Jitter(torch.utils.data.Dataset):
    "Twelve samples with noise drawn where they are loaded, in the workers: a random augmentation."
    def __init__(self): self.x = torch.randn(12, 4, generator=torch.Generator().manual_seed(0))
    def __len__(self): return 12
    def __getitem__(self, i): return self.x[i] + torch.randn(4) / 10

def test_run_resumable_with_persistent_workers_stopped_and_resumed(tree):
    "Stopped in its second epoch and resumed in the user's folder: the uninterrupted run's weights."
    root, allowed = tree
    allowed += ['ck', 'ref']
    def go(folder, stop=None):
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(Jitter(), batch_size=4, shuffle=True, num_workers=2,
                                             persistent_workers=True)
        def step(i, batch):
            if i == stop: raise KeyboardInterrupt  # a kill, as far as the folder can tell
            m(batch).sum().backward(); opt.step(); opt.zero_grad()
        ckpt = P.CheckpointManager(folder, keep=2)
        try: P.run_resumable(step, ckpt, 9, m, opt, every_steps=3, loader=loader)
        except KeyboardInterrupt: pass
        finally: ckpt.release()
        return m.state_dict()
    ref = go('ref')
    go('ck', stop=4)  # after the checkpoint of step 3, the first epoch's end
    got = go('ck')  # new workers, as in a new process
    assert all(torch.equal(got[k], ref[k]) for k in ref)
