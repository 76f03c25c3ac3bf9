"""The usage ledger keeps what it cannot read: compaction, like reading, sets a damaged file aside
before it rewrites it. It refuses a path that is not a regular file instead of waiting on it."""
import json, os, stat, threading, warnings
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

def test_a_named_pipe_is_refused_not_waited_on(tmp_path):
    "Every entry point refuses a pipe at once: a wait for the other end would hang the run."
    from colab_t4_nb.core import ArgumentError
    led = UsageLedger(tmp_path/'ledger.jsonl')
    os.mkfifo(led.path)  # the file becomes a pipe after the ledger was made
    calls = {'UsageLedger': lambda: UsageLedger(led.path), 'records': led.records,
             'add': lambda: led.add(1.8e9, 1.8e9, 'Tesla T4'),
             'begin': lambda: led.begin('Tesla T4'), 'compact': led.compact,
             'sessions': led.sessions}
    got = {}
    def run():
        for k, f in calls.items():
            try: got[k] = f()
            except ArgumentError as e: got[k] = e
    t = threading.Thread(target=run, daemon=True)
    t.start(); t.join(30)
    assert not t.is_alive(), f'waited on the named pipe past 30 s in {list(calls)[len(got)]}'
    for k, e in got.items(): assert 'is a named pipe, not a regular file' in str(e), (k, e)
    assert stat.S_ISFIFO(os.stat(led.path).st_mode)  # the pipe was left as it is
