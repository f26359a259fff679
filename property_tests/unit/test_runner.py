"""The runner's scheduling: shards balanced by duration, the start order (longest first), the autotune warm-up; a dead
worker's exit status."""
from pathmdn_verify.core.registry import Check
from pathmdn_verify.run.runner import next_startable, shard, start_order


def test_shard_is_deterministic_and_balanced_by_duration():
    checks = [Check(f"c{i:02d}", "d", lambda ctx: None) for i in range(10)]
    durations = {"c00": 9.0, **{f"c{i:02d}": 1.0 for i in range(1, 10)}}
    shards = [shard(checks, k, 3, durations) for k in (1, 2, 3)]
    assert sorted(c.id for s in shards for c in s) == [c.id for c in checks]       # a partition
    assert [c.id for c in shards[0]] == ["c00"]                                      # the long one alone
    assert [len(s) for s in shards] == [1, 5, 4]
    assert shards == [shard(checks, k, 3, durations) for k in (1, 2, 3)]
    assert [len(shard(checks, k, 3)) for k in (1, 2, 3)] == [4, 3, 3]                # by id: round robin


def test_start_order_is_longest_first():
    """On a GPU without durations: layer generation checks, kernel backward fp32, then bf16, then the other
    kernel checks, the other layer checks, the rest, each tier round-robin over op groups; with a previous run's
    durations: by them (unknown: the median); on the CPU without durations: the selection's order."""
    names = ["oracle.path.x", "kernel.fla.path_attn.fwd.bf16.a", "kernel.fla.path_attn.bwd.bf16.b",
             "kernel.fla.path_attn.bwd.fp32.c", "layer.fla.path.base.bf16.train", "kernel.fla.gdn_chunk.bwd.fp32.a",
             "kernel.fla.path_attn.bwd.fp32.d", "kernel.fla.gdn_chunk.fwd.bf16.a", "layer.fla.fox.base.fp32.generation"]
    checks = [Check(n, "d", lambda ctx: None) for n in names]
    assert start_order(checks, "cuda") == [8, 3, 5, 6, 2, 1, 7, 4, 0]
    assert start_order(checks, "cpu") == list(range(9))
    durations = {"oracle.path.x": 9.0, "kernel.fla.path_attn.fwd.bf16.a": 1.0, "kernel.fla.path_attn.bwd.bf16.b": 5.0}
    assert start_order(checks, "cpu", durations) == [0, 2, 3, 4, 5, 6, 7, 8, 1]     # 5 (the median) for the others
    assert start_order(checks, "cuda", durations) == start_order(checks, "cpu", durations)


def test_autotune_warm_up_holds_back_an_ops_other_checks():
    """Under --configs autotune on a GPU, an op's other checks wait while its first check (which times the op's
    configs into Triton's cache) runs; other ops go on."""
    names = ["kernel.fla.path_attn.fwd.bf16.a", "kernel.fla.path_attn.bwd.fp32.b", "kernel.fla.path_attn.fwd.bf16.c",
             "kernel.fla.mdn_chunk16.fwd.bf16.a", "oracle.path.x", "oracle.path.y"]
    checks = [Check(n, "d", lambda ctx: None) for n in names]
    path, mdn = "kernel.fla.path_attn", "kernel.fla.mdn_chunk16"
    assert next_startable([1, 5, 2], checks, {path: 0}) == 5                 # path_attn waits, oracle.path not
    assert next_startable([1, 2], checks, {path: 0, mdn: 3}) is None         # nothing else: wait
    assert next_startable([0, 1], checks, {path: 0}) == 0                    # a rerun of the first check itself
    assert next_startable([1, 2], checks, {mdn: 3}) == 1


def test_a_workers_reads_add_up_and_a_missed_report_makes_them_unknown():
    """The verdict cache keeps a check with everything its worker read so far (pathmdn_verify.platform.reads): the
    reports add up in order; one missed (a result that did not come back) leaves the slot's reads unknown, so no
    later verdict of that worker is kept with a partial list, until a fresh worker starts over."""
    from pathmdn_verify.run.runner import Workers, _Slot
    slot = _Slot(env={})
    Workers._add_reads(slot, (1, ["/a.py"]))
    Workers._add_reads(slot, (2, ["/b.py"]))
    assert slot.reads == {"/a.py", "/b.py"}
    Workers._add_reads(slot, (4, ["/d.py"]))          # the third report never arrived
    Workers._add_reads(slot, (5, ["/e.py"]))
    assert slot.reads is None
    control = _Slot(env={})
    Workers._add_reads(control, (1, ["/a.py"]))
    Workers._add_reads(control, None)                 # a result without observed reads
    assert control.reads is None


class _Popen:
    returncode = None


class _Process:
    """A dead worker whose exit status a manager thread reads; a read beside that thread is the race."""
    def __init__(self, manager):
        self._popen, self.manager, self.read_beside = _Popen(), manager, False

    @property
    def exitcode(self):
        if self.manager.is_alive():
            self.read_beside = True
            return 255         # what the loser of the race reads
        return self._popen.returncode


def _dead_slot(manager_seconds: float):
    import threading
    import time
    from types import SimpleNamespace
    state = {}
    def reap():
        time.sleep(manager_seconds)
        state["process"]._popen.returncode = 3
    manager = threading.Thread(target=reap, daemon=True)
    process = state["process"] = _Process(manager)
    executor = SimpleNamespace(_executor_manager_thread=manager, shutdown=lambda **kw: None)
    manager.start()
    return SimpleNamespace(executor=executor, process=process)


def test_a_dead_workers_exit_status_is_never_read_beside_its_pools_manager(monkeypatch):
    """The status the manager thread reads, after waiting for it (control: a manager that outlasts the wait
    leaves the status unknown, never read a second time); the old 2 s wait read 255 beside a slow manager."""
    from pathmdn_verify.run import runner
    monkeypatch.setattr(runner, "REAP_SECONDS", 5.0)
    slot = _dead_slot(0.3)
    assert runner.Workers._exit_code(slot) == 3 and not slot.process.read_beside
    assert "exit code 3" in runner.Workers._died(runner.Workers._exit_code(_dead_slot(0.1)))
    monkeypatch.setattr(runner, "REAP_SECONDS", 0.1)
    slot = _dead_slot(1.0)
    assert runner.Workers._exit_code(slot) is None and not slot.process.read_beside
