# The training recipe on Hugging Face BERT-base at sequence 512, at batch 32, 48 and 64 (one GPU call):
#   python tools/exp_recipe_batch.py OUT.json
import sys, json, torch
from colab_t4_nb.benchmarks import recipe, context
ctx = context()
out = {}
for batch, comp in [(32, False), (64, False), (48, False)]:
    r = recipe('hf-bert', ctx, batch=batch, compile=comp, warmup=5, repeats=15)
    g = r.set_index('metric').value
    out[f'b{batch}'] = {k: float(v) for k, v in g.items() if 'recipe' in k or 'plain' in k or 'ceiling' in k}
    print(batch, comp, {k: round(float(v), 3) for k, v in g.items() if ('of measured' in k or 'speed-up' in k or k == 'matmul ceiling')}, flush=True)
json.dump(out, open(sys.argv[1], 'w'), indent=1)
