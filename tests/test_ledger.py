"""The usage ledger keeps what it cannot read: compaction, like reading, sets a damaged file aside
before it rewrites it."""
import json, warnings
from colab_t4_nb.ledger import UsageLedger

def test_compaction_keeps_unreadable_lines_in_a_copy(tmp_path):
    path = tmp_path/'ledger.jsonl'
    led = UsageLedger(path)
    s = led.begin('Tesla T4')
    for h in (0.1, 0.2): s.update(h)
    with open(path, 'a') as f: f.write('{"kind": "session", "start": \n')  # a line cut short
    text = path.read_text()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        kept = led.compact()
    copies = list(tmp_path.glob('ledger.jsonl.corrupt-*'))
    assert kept == 1 and len(copies) == 1 and copies[0].read_text() == text
    assert any('1 unreadable line' in str(x.message) for x in w)
    assert [json.loads(l)['busy_h'] for l in path.read_text().splitlines()] == [0.2]
