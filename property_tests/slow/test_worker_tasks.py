"""runner.Workers.map: tasks that are not checks (a picklable function and its arguments) run in the check
workers with their isolation: a task whose worker dies or hangs comes back as a Lost (crashed, timeout), the
slot gets a fresh worker and the other tasks run; values come back in the order of the tasks."""
import operator
import os
import time

from pathmdn_verify.core.registry import Context
from pathmdn_verify.run.runner import Lost, Workers


def test_a_crash_and_a_hang_cost_only_their_task():
    tasks = [(operator.add, (1, 2)), (os._exit, (3,)), (time.sleep, (60,)), (operator.mul, (4, 5)),
             (os.getpid, ())]
    started, ended = [], []
    pool = Workers(1, Context(device="cpu"), kernels=False)
    try:
        pool.wait_ready()
        t0 = time.monotonic()
        values = pool.map(tasks, timeout=5.0, on_start=started.append, on_done=lambda i, v: ended.append(i))
        seconds = time.monotonic() - t0
    finally:
        pool.close()
    assert values[0] == 3 and values[3] == 20
    assert isinstance(values[1], Lost) and values[1].kind == "crashed" and "exit code 3" in values[1].message
    assert isinstance(values[2], Lost) and values[2].kind == "timeout" and "5 s" in values[2].message
    assert seconds < 50                               # the hang was cut at its timeout, not slept out
    assert values[4] != os.getpid()                   # in a worker, never in this process
    assert started == ended == [0, 1, 2, 3, 4]        # one worker: each task ends before the next starts


def test_an_exception_of_a_task_is_raised():
    pool = Workers(1, Context(device="cpu"), kernels=False)
    try:
        pool.wait_ready()
        try:
            pool.map([(operator.truediv, (1, 0))], timeout=60.0)
        except ZeroDivisionError:
            pass
        else:
            raise AssertionError("the task's exception was not raised")
    finally:
        pool.close()
