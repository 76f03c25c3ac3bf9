"""Code that tells the time reads `time`'s own clocks, so `fake_clock` drives it.
No class or function keeps a clock of its own for tests to replace."""
import pytest
from colab_t4_nb import callbacks, ledger, switches
from colab_t4_nb.testing import fake_clock

def test_no_clock_attribute_for_tests():
    kept = [o for o in (callbacks._Saver, callbacks.HFCallback, ledger.UsageLedger, switches.data_wait)
            if hasattr(o, '_clock')]
    assert kept == []

def test_fake_clock_drives_ledger_schedule_and_data_wait(tmp_path):
    now = [1.8e9]
    def step(batch): now[0] += 0.01
    with fake_clock(lambda: now[0]):
        led = ledger.UsageLedger(tmp_path/'ledger.jsonl')
        ses = led.begin('Tesla T4')
        now[0] += 3600
        ses.update(busy_h=0.5)
        plan = callbacks._Schedule(None, 5, None)  # a save every 5 minutes
        now[0] += 300
        due = plan.decide(1)
        dw = switches.data_wait([1, 2, 3], step, steps=2, skip=0)
    assert led.sessions().hours.iloc[0] == 1.0
    assert due == (True, False)
    assert dw.wait_ms == [0.0, 0.0] and dw.step_ms == pytest.approx([10.0, 10.0])
