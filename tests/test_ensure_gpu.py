"""`ensure_gpu` in Colab's situation, run in a fresh interpreter against the package as installed.

Colab's client library is the stand-in `colab_t4_nb.testing.fake_colab` (it behaves like `google.colab`:
`runtime.unassign()` takes no arguments and raises `errors.RuntimeManagementError` when the runtime
service is unreachable; `drive.mount(mountpoint)` makes `mountpoint/MyDrive` appear). The card handed out
is a recorded Colab K80 or T4 replayed through the NVML stand-in, and Drive is mounted in a temporary
folder (`core.COLAB_DRIVE` points there), so nothing is written outside the test's folder."""
import json
from pathlib import Path
import pytest
from conftest import python

PRELUDE = '''
import json, sys
from pathlib import Path
from unittest import mock
import colab_t4_nb.allocation as alloc
import colab_t4_nb.core as core
from colab_t4_nb.testing import fake_colab, fake_nvml, t4_reading
tmp = Path(sys.argv[1])
mib = 2**20
k80 = {**t4_reading(), 'name': 'Tesla K80', 'cc': [3, 7],
       'memory': {'total': 11441 * mib, 'free': 11441 * mib, 'used': 0}}
card = {'K80': k80, 'T4': t4_reading()}[sys.argv[2]]
def attempt(**kw):
    "One call of ensure_gpu('T4'): what it printed, raised and returned, as JSON on the last line."
    try: out = {'returned': [g.name for g in alloc.ensure_gpu('T4', **kw)]}
    except alloc.ColabT4Error as e: out = {'raised': type(e).__name__, 'message': str(e)}
    print(json.dumps(out))
'''

def run(tmp_path, card, body, env, timeout=300):
    "PRELUDE then `body` in a fresh interpreter with `card` handed out: the lines it printed, after a clean exit."
    r = python(PRELUDE + body, {**env, 'HOME': str(tmp_path/'home')}, [tmp_path, card], timeout=timeout)
    assert r.returncode == 0 and 'Traceback' not in r.stderr, r.stdout + r.stderr
    return r.stdout.splitlines()

@pytest.fixture
def colab_env(cpu_env):
    "A fresh interpreter with no COLAB_T4_HOME, so the state folder is chosen as in Colab."
    return {k: v for k, v in cpu_env.items() if k != 'COLAB_T4_HOME'}

def ledger_lines(p:Path)->list: return [json.loads(l) for l in p.read_text().splitlines()]

DRIVE = '''
with fake_colab() as colab, fake_nvml([card]), mock.patch.object(core, 'COLAB_DRIVE', tmp/'drive'):
    colab.drive.mount(str(tmp/'drive'))
'''

def test_wrong_card_with_tries_left_hands_the_runtime_back(tmp_path, colab_env):
    out = run(tmp_path, 'K80', DRIVE + '''
    attempt(budget=2)
    print(json.dumps(colab.calls))
    ''', colab_env)
    res, calls = json.loads(out[-2]), json.loads(out[-1])
    assert res['raised'] == 'WrongGPUError' and 'reconnect and run again' in res['message'], res
    assert out[0].startswith('Wanted T4, got Tesla K80 (11 GiB). Handing this runtime back to Colab '
                             '(attempt 1 of 2 today'), out
    assert calls == [['drive.mount', str(tmp_path/'drive')], ['runtime.unassign']], calls
    state = tmp_path/'drive'/'MyDrive'/'colab_t4_nb'
    assert list(json.loads((state/'alloc_budget.json').read_text()).values()) == [1]
    rec, = ledger_lines(state/'usage_ledger.jsonl')
    assert (rec['kind'], rec['got'], rec['got_key'], rec['wanted'], rec['action'], rec['runtime']) == \
           ('allocation', 'Tesla K80 (11 GiB)', 'K80', ['T4'], 'handed back', 'colab'), rec

def test_tries_used_up_leaves_the_runtime_alone(tmp_path, colab_env):
    out = run(tmp_path, 'K80', DRIVE + '''
    for _ in range(3): attempt(budget=2)
    print(json.dumps(colab.calls))
    ''', colab_env)
    last, calls = json.loads(out[-2]), json.loads(out[-1])
    assert last['raised'] == 'WrongGPUError' and 'All 2 runtime re-assignments' in last['message'], last
    assert calls.count(['runtime.unassign']) == 2, calls
    state = tmp_path/'drive'/'MyDrive'/'colab_t4_nb'
    actions = [r['action'] for r in ledger_lines(state/'usage_ledger.jsonl')]
    assert actions == ['handed back', 'handed back', 'budget spent'], actions

@pytest.mark.parametrize('refusal', [{'unassign_status': 503}, {'env': {'TBE_RUNTIME_ADDR': None}}])
def test_unassign_refused_says_how_to_do_it_by_hand(tmp_path, colab_env, refusal):
    out = run(tmp_path, 'K80', f'''
with fake_colab(**{refusal!r}) as colab, fake_nvml([card]), mock.patch.object(core, 'COLAB_DRIVE', tmp/'drive'):
    colab.drive.mount(str(tmp/'drive'))
    attempt()
    print(json.dumps(colab.calls))
    ''', colab_env)
    res = json.loads(out[-2])
    assert res['raised'] == 'WrongGPUError', res
    assert res['message'].startswith('Colab did not take this runtime back (RuntimeManagementError: '), res
    assert 'Runtime > Disconnect and delete runtime' in res['message'], res
    assert json.loads(out[-1]) == [['drive.mount', str(tmp_path/'drive')]]
    led = tmp_path/'drive'/'MyDrive'/'colab_t4_nb'/'usage_ledger.jsonl'
    assert [r['action'] for r in ledger_lines(led)] == ['handed back', 'hand-back refused']

def test_right_card_is_kept_and_recorded(tmp_path, colab_env):
    out = run(tmp_path, 'T4', DRIVE + '''
    attempt(); attempt()
    print(json.dumps(colab.calls))
    ''', colab_env)
    assert json.loads(out[-2]) == {'returned': ['Tesla T4']}
    assert json.loads(out[-1]) == [['drive.mount', str(tmp_path/'drive')]]
    led = tmp_path/'drive'/'MyDrive'/'colab_t4_nb'/'usage_ledger.jsonl'
    recs = ledger_lines(led)
    assert [r['action'] for r in recs] == ['kept', 'kept'] and len({r['runtime_id'] for r in recs}) == 1
    from colab_t4_nb.ledger import UsageLedger, advice
    a = advice(UsageLedger(led))
    assert (a.runtimes, a.t4_runtimes, a.tries_per_t4) == (1, 1, 1.0), a

def test_without_drive_state_stays_on_the_runtime_disk(tmp_path, colab_env):
    "Drive not mounted: budget and ledger go to the home folder (wiped with the runtime), and the message says where."
    out = run(tmp_path, 'K80', '''
with fake_colab() as colab, fake_nvml([card]), mock.patch.object(core, 'COLAB_DRIVE', tmp/'drive'):
    attempt()
    print(json.dumps(colab.calls))
    ''', colab_env)
    home = tmp_path/'home'/'.colab_t4_nb'
    assert f'counted in {home/"alloc_budget.json"}' in out[0], out
    assert json.loads(out[-1]) == [['runtime.unassign']]
    assert [r['action'] for r in ledger_lines(home/'usage_ledger.jsonl')] == ['handed back']
    assert not (tmp_path/'drive').exists()

def test_ledger_off_and_unwritable(tmp_path, colab_env):
    out = run(tmp_path, 'K80', DRIVE + '''
    import warnings
    attempt(ledger=False)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        attempt(ledger='/proc/no/such/ledger.jsonl')
    print(json.dumps([str(x.message) for x in w]))
    ''', colab_env)
    warned = json.loads(out[-1])
    assert not (tmp_path/'drive'/'MyDrive'/'colab_t4_nb'/'usage_ledger.jsonl').exists()
    assert len(warned) == 1, warned
    assert warned[0].startswith('Could not record this allocation in the usage ledger /proc/no/such/ledger.jsonl')
    assert json.loads(out[-2])['raised'] == 'WrongGPUError'  # the attempt itself went on

def test_a_budget_file_of_other_contents_is_left_alone(tmp_path, colab_env):
    "A file of the user's given as the budget file is refused, not overwritten, and nothing is handed back."
    mine = tmp_path/'notes.json'
    mine.write_text('{"my": "notes"}')
    out = run(tmp_path, 'K80', DRIVE + f'''
    attempt(budget=2, budget_path={str(mine)!r})
    print(json.dumps(colab.calls))
    ''', colab_env)
    res, calls = json.loads(out[-2]), json.loads(out[-1])
    assert res['raised'] == 'ArgumentError' and 'not an allocation budget count' in res['message'], res
    assert mine.read_text() == '{"my": "notes"}' and ['runtime.unassign'] not in calls, calls

def test_a_pipe_as_budget_or_ledger_is_refused_not_waited_on(tmp_path, colab_env):
    "`--budget-path` or `ledger=` naming a named pipe (reading it would wait for a writer): refused at once, nothing handed back."
    pipe = tmp_path/'pipe'
    out = run(tmp_path, 'K80', DRIVE + f'''
    import contextlib, os
    from colab_t4_nb.cli import main
    os.mkfifo({str(pipe)!r})
    with contextlib.redirect_stderr(sys.stdout): print(main(['ensure', '--budget-path', {str(pipe)!r}]))
    attempt(ledger={str(pipe)!r})
    print(json.dumps(colab.calls))
    ''', colab_env, timeout=60)
    said, status, res, calls = out[-4:]
    assert status == '1' and said == (f"colab-t4 ensure: --budget-path='{pipe}' is a named pipe, not a regular file: "
                                      'pass the path of a regular file instead.'), out
    res = json.loads(res)
    assert res['raised'] == 'ArgumentError' and f"ledger='{pipe}' is a named pipe, not a regular file" in res['message'], res
    assert json.loads(calls) == [['drive.mount', str(tmp_path/'drive')]]  # no runtime handed back
