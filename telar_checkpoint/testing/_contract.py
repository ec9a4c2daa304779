"""`StoreTests`, the store contract (see the package's docstring)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

try:
    import pytest
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test
except ImportError as exc:  # pragma: no cover - the test extra is missing
    raise ImportError("telar_checkpoint.testing needs pytest and hypothesis: pip install 'telar-checkpoint[test]'") from exc

from telar_checkpoint.errors import NoAsyncDriverError, StoreError
from telar_checkpoint.stores.base import ABSENT, Store
from telar_checkpoint.testing._machine import StoreMachine
from telar_checkpoint.testing._workers import (
    INDEX_KEYS,
    KEYS,
    VALUES,
    append,
    append_if_lines,
    append_if_loop,
    append_lines,
    assert_all_lines,
    assert_one_winner_per_version,
    child_exit_code,
    fail,
    run_async,
)

CAPABILITIES = ("versions", "indexes", "delete_forgets_expiry", "shared", "async_calls")
_NEEDS = "_store_tests_needs"
F = TypeVar("F", bound=Callable[..., Any])
FAR = 4_102_444_800.0  # 2100-01-01, in seconds since the epoch: an expiry that is never due in a test
LEASES_RACED = 30  # leases four processes race for, each at once


def race_for_leases(open_store: Callable[[], Store], worker: int, start: Any) -> None:
    """Wait for the other workers at `start` (a barrier), then try to take each of the
    `LEASES_RACED` leases, noting the ones won as a line ``worker:i,j,...`` in "shared" (run in
    a child process)."""
    store = open_store()
    try:
        start.wait(60)
        won = [str(i) for i in range(LEASES_RACED) if store.lease(f"race:{i}", f"worker {worker}", 1000.0, 60.0)]
        store.update("shared", lambda old: (old or "") + f"{worker}:{','.join(won)}\n")
    finally:
        store.close()


def needs(*capabilities: str) -> Callable[[F], F]:
    """Collect the decorated test only in classes that declare every one of `capabilities`
    (names from `CAPABILITIES`, the class attributes `StoreTests` declares them by)."""
    unknown = set(capabilities) - set(CAPABILITIES)
    if unknown:
        raise ValueError(f"unknown store capabilities {sorted(unknown)}; known: {', '.join(CAPABILITIES)}")

    def mark(test: F) -> F:
        setattr(test, _NEEDS, capabilities)
        return test

    return mark


class StoreTests:
    """The store contract, sync and async; subclass it with a `store` fixture (see the module)."""

    #: `version()` gives a token that changes with every write, and `append_if` appends at it
    #: (the store's `keeps_versions`).
    versions: bool = True
    #: The store keeps an index (its `keeps_index`).
    indexes: bool = True
    #: Deleting a key forgets its expiry (False: the store keeps `Store`'s default expiries, in
    #: keys of its own that a delete of the thread's key leaves for the sweep).
    delete_forgets_expiry: bool = True
    #: Another store object, in this process or a child process, can open the same space (`opener`).
    shared: bool = False
    #: The async methods work (False: the store was given a sync-only connection, pool or client,
    #: and each async method refuses with `NoAsyncDriverError`, changing nothing).
    async_calls: bool = True
    #: A process forked while its parent was mid-write can write too (False: its write is refused at
    #: once with a StoreError, as SQLite's must be). Read only when `shared`.
    forked_child_writes: bool = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, test in vars(StoreTests).items():
            wanted = getattr(test, _NEEDS, ())
            if wanted and name not in cls.__dict__:
                setattr(cls, name, test if all(getattr(cls, capability) for capability in wanted) else None)

    def opener(self, store: Store) -> Callable[[], Store]:
        """A picklable function of no arguments that opens another object on `store`'s space
        (called here and in child processes); needed when `shared`."""
        raise NotImplementedError(f"{type(self).__name__} declares shared = True: define opener(store)")

    def reopen(self, store: Store) -> Store:
        return self.opener(store)()

    def owns_path(self, store: Store, path: Path) -> bool:
        """Whether `path`, found under the test's `tmp_path`, is the store's own: inside its
        `directory`, or its `path` and files named after it (a database's journals)."""
        directory = getattr(store, "directory", None)
        if directory is not None and path.is_relative_to(directory):
            return True
        own = getattr(store, "path", None)
        return own is not None and path.parent == Path(own).parent and path.name.startswith(Path(own).name)

    # --- What the class declares ---

    def test_declared_capabilities(self, store: Store) -> None:
        """The store says what the class declares (`Store.keeps_versions`, `keeps_index`), and
        does what it says."""
        for capability, attribute in (("versions", "keeps_versions"), ("indexes", "keeps_index")):
            has = getattr(store, attribute)
            declared = getattr(self, capability)
            assert has is declared, f"the store's {attribute} is {has}: declare {capability} = {has}"
        store.write("t", "v\n")
        if store.keeps_versions:
            assert store.version("t") is not None, "a store that keeps versions gives one for a stored value"
        store.expire_at("t", 10.0)
        assert store.expiry("t") == 10.0 and store.expired(10.0, 5) == [("t", 10.0)], "every store keeps expiries"
        if self.shared:
            other = self.reopen(store)
            try:
                assert other.read("t") == "v\n"
            finally:
                other.close()
        if self.async_calls:
            run_async(store, self._async_declared_capabilities)
        else:
            self._refuses_async_calls(store)

    def _refuses_async_calls(self, store: Store) -> None:
        """A store declared without `async_calls` refuses each async method in our words, changing nothing."""

        async def calls() -> None:
            for call in (lambda: store.aread("t"), lambda: store.awrite("t", "x\n"), lambda: store.adelete("t")):
                with pytest.raises(NoAsyncDriverError):
                    await call()

        asyncio.run(calls())
        assert store.read("t") is not None, "a refused async call changes nothing"

    async def _async_declared_capabilities(self, astore: Store) -> None:
        if not astore.keeps_versions:
            return
        version = await astore.aversion("t")
        assert version is not None, "a store that keeps versions gives one for a stored value (async)"
        if astore.defers_appends:
            moved = await astore.aappend_if_deferred("t", "w\n", version)
            await astore.aflush("t")
        else:
            moved = await astore.aappend_if("t", "w\n", version)
        assert moved is not None and await astore.aread("t") == "v\nw\n"

    # --- The basic contract ---

    def test_read_missing_is_none(self, store: Store) -> None:
        assert store.read("missing") is None
        assert list(store.keys()) == []

    def test_update_creates_extends_rewrites_and_deletes(self, store: Store) -> None:
        assert store.update("t", lambda old: "one\n" if old is None else pytest.fail("not absent")) == "one\n"
        assert store.update("t", append("two\n")) == "one\ntwo\n"
        assert store.read("t") == "one\ntwo\n"
        assert store.update("t", lambda old: "other\n") == "other\n"
        assert store.read("t") == "other\n"
        assert store.update("t", lambda old: old) == "other\n"
        assert store.update("t", lambda old: None) is None
        assert store.read("t") is None
        assert list(store.keys()) == []
        assert store.update("never", lambda old: None) is None
        assert store.read("never") is None

    def test_write_and_delete(self, store: Store) -> None:
        store.write("t", "v")
        assert store.read("t") == "v"
        store.delete("t")
        store.delete("t")
        assert store.read("t") is None

    def test_failing_change_leaves_value_untouched(self, store: Store) -> None:
        store.write("t", "kept\n")
        with pytest.raises(RuntimeError, match="refused"):
            store.update("t", fail)
        with pytest.raises(RuntimeError, match="refused"):
            store.update("new", fail)
        assert store.read("t") == "kept\n"
        assert store.read("new") is None
        assert sorted(store.keys()) == ["t"]
        assert store.update("t", append("more\n")) == "kept\nmore\n"

    def test_keys_and_foreign(self, store: Store) -> None:
        for key in ("a", "b", "c"):
            store.write(key, key)
        store.delete("b")
        assert sorted(store.keys()) == ["a", "c"]
        assert store.foreign() == []

    def test_unicode_keys_round_trip_inside_the_store(self, store: Store, tmp_path: Path) -> None:
        for i, key in enumerate(KEYS):
            store.write(key, f"value {i}")
        assert sorted(store.keys()) == sorted(KEYS)
        assert all(store.read(key) == f"value {i}" for i, key in enumerate(KEYS))
        assert store.foreign() == []
        assert [path for path in tmp_path.rglob("*") if not self.owns_path(store, path)] == []
        for key in KEYS:
            store.delete(key)
        assert list(store.keys()) == []

    def test_setup_is_idempotent_and_leaves_the_store_usable_and_empty(self, store: Store) -> None:
        """`setup()` and then `asetup()` (refused with NoAsyncDriverError without `async_calls`),
        each twice, leave the store empty and working; a setup after a write keeps the value."""
        store.setup()
        store.setup()
        if self.async_calls:
            run_async(store, self._async_setup)
        else:
            with pytest.raises(NoAsyncDriverError):
                asyncio.run(store.asetup())
        assert list(store.keys()) == [] and store.read("t") is None
        store.write("t", "v\n")
        store.setup()
        assert store.read("t") == "v\n" and list(store.keys()) == ["t"]

    async def _async_setup(self, astore: Store) -> None:
        await astore.asetup()
        await astore.asetup()
        assert await astore.aread("t") is None and await astore.akeys() == []

    @pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
    def test_values_round_trip_exactly(self, store: Store, value: str) -> None:
        store.write("t", value)
        assert store.read("t") == value
        store.update("t", append(value))
        assert store.read("t") == value + value

    @pytest.mark.parametrize("value", ["lone \ud800 high", "\udcc3\udca9", "\udfff"])
    def test_lone_surrogates_are_stored_exactly_or_refused(self, store: Store, value: str) -> None:
        store.write("t", "before")
        try:
            store.write("t", value)
        except StoreError:
            assert store.read("t") == "before"
        else:
            assert store.read("t") == value

    # --- Concurrency ---

    @pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open descriptors in /proc")
    def test_short_lived_threads_leave_no_open_handles(self, store: Store) -> None:
        """LangGraph writes from executor threads made for each run: a store that tied a
        connection or a descriptor to each thread would leak one per run."""

        def one_write(i: int) -> None:
            store.update("t", append(f"{i}\n"))
            store.version("t")
            store.read("t")

        def run_in_new_thread(i: int) -> None:
            worker = threading.Thread(target=one_write, args=(i,))
            worker.start()
            worker.join()

        run_in_new_thread(0)
        before = len(os.listdir("/proc/self/fd"))
        for i in range(1, 80):
            run_in_new_thread(i)
        assert len(os.listdir("/proc/self/fd")) - before <= 12
        assert store.read("t") == "".join(f"{i}\n" for i in range(80))

    @needs("shared")
    @pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
    def test_a_child_forked_mid_write_takes_its_own_turn(self, store: Store) -> None:
        """A process forked while a thread of its parent is mid-write (gunicorn's --preload, a
        multiprocessing pool) neither inherits the parent's turn nor deadlocks on it: its write
        waits for the parent's, then lands, and neither is lost. A store that cannot write from
        such a child (SQLite: its copy holds the parent's lock for ever; `forked_child_writes`
        False) must fail the child's write at once with a StoreError saying so."""
        store.update("t", append("before\n"))
        inside, release = threading.Event(), threading.Event()

        def slow(old: str | None) -> str:
            inside.set()
            assert release.wait(10)
            return (old or "") + "parent\n"

        parent = threading.Thread(target=store.update, args=("t", slow))
        parent.start()
        assert inside.wait(10)
        pid = os.fork()
        if pid == 0:  # the child: write once, then leave without running the parent's teardown
            code = 1
            try:
                started = time.monotonic()
                store.update("t", append("child\n"))
                code = 0
            except StoreError as exc:
                refused = "forked while its parent was writing" in str(exc) and time.monotonic() - started < 1
                code = 3 if refused else 2
            finally:
                os._exit(code)
        time.sleep(0.3)
        release.set()
        parent.join(10)
        code = child_exit_code(pid, "the forked child's write never finished (it waited on a lock it inherited)")
        if not self.forked_child_writes:
            assert code == 3, "the child's write was not refused at once with a clear StoreError"
            assert store.read("t") == "before\nparent\n"
        else:
            assert code == 0
            assert sorted(store.read("t").splitlines()) == ["before", "child", "parent"]  # type: ignore[union-attr]

    def test_threads_lose_no_append(self, store: Store) -> None:
        def work(worker: int) -> None:
            for i in range(50):
                store.update("shared", append(f"{worker}:{i}\n"))

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(work, range(8)))
        assert_all_lines(store.read("shared"), workers=8, count=50)

    def _race_in_processes(self, store: Store, work: Callable[[Callable[[], Store], int, int], None], count: int) -> str | None:
        """Run ``work(opener, worker, count)`` in 4 spawned processes at once, each on a store object of
        its own (`opener`), appending to "shared": what they wrote, once each succeeded."""
        store.write("shared", "")
        spawn = multiprocessing.get_context("spawn")
        workers = [spawn.Process(target=work, args=(self.opener(store), worker, count)) for worker in range(4)]
        for process in workers:
            process.start()
        for process in workers:
            process.join(timeout=240)
        assert [process.exitcode for process in workers] == [0] * 4
        return store.read("shared")

    @needs("shared")
    def test_processes_lose_no_append(self, store: Store) -> None:
        assert_all_lines(self._race_in_processes(store, append_lines, 200), workers=4, count=200)

    @needs("versions", "shared")
    def test_processes_racing_append_if_one_winner_per_version(self, store: Store) -> None:
        assert_one_winner_per_version(self._race_in_processes(store, append_if_lines, 50), workers=4, count=50)

    async def _async_twins(self, astore: Store) -> None:
        assert await astore.aread("t") is None
        assert await astore.aupdate("t", append("one\n")) == "one\n"
        assert await astore.aupdate("t", append("two\n")) == "one\ntwo\n"
        await astore.awrite("u", "ü\u2028")
        assert await astore.aread("u") == "ü\u2028"
        assert sorted(await astore.akeys()) == ["t", "u"]
        with pytest.raises(RuntimeError):
            await astore.aupdate("t", fail)
        assert await astore.aread("t") == "one\ntwo\n"
        await astore.adelete("t")
        assert await astore.aupdate("u", lambda old: None) is None
        assert await astore.akeys() == []

    @needs("async_calls")
    def test_async_twins(self, store: Store) -> None:
        run_async(store, self._async_twins)

    async def _async_concurrent_updates_lose_nothing(self, astore: Store) -> None:
        async def work(worker: int) -> None:
            for i in range(25):
                await astore.aupdate("shared", append(f"{worker}:{i}\n"))

        await asyncio.gather(*(work(w) for w in range(4)))
        assert_all_lines(await astore.aread("shared"), workers=4, count=25)
        assert astore.read("shared") == await astore.aread("shared")

    @needs("async_calls")
    def test_async_concurrent_updates_lose_nothing(self, store: Store) -> None:
        run_async(store, self._async_concurrent_updates_lose_nothing)

    # --- Versions: what the saver's fast path relies on ---

    @needs("versions")
    def test_append_if_absent_creates_only_a_key_that_holds_nothing(self, store: Store) -> None:
        """`append_if(key, suffix, ABSENT)` creates `key` holding `suffix` only where it holds
        nothing (a store may always answer None: the saver then updates); a key that holds a
        value is left as it is; of creators racing for one key, one at most wins."""
        store.write("t", "old\n")
        assert store.append_if("t", "x\n", ABSENT) is None and store.read("t") == "old\n"
        version = store.append_if("new", "first\n", ABSENT)
        if version is None:
            assert store.read("new") is None
            return
        assert store.read("new") == "first\n" and store.version("new") == version and "new" in set(store.keys())
        assert store.append_if("new", "again\n", ABSENT) is None
        assert store.append_if("new", "second\n", version) is not None and store.read("new") == "first\nsecond\n"
        with ThreadPoolExecutor(max_workers=8) as pool:
            won = [v for v in pool.map(lambda i: store.append_if("raced", f"{i}\n", ABSENT), range(8)) if v is not None]
        assert len(won) == 1 and store.version("raced") == won[0] and store.read("raced") in {f"{i}\n" for i in range(8)}

    @needs("versions")
    def test_version_changes_with_every_write(self, store: Store) -> None:
        assert store.version("t") is None
        seen = []
        for change in (lambda old: "one\n", append("two\n"), lambda old: "other\n", lambda old: ""):
            new, version = store.update_versioned("t", change)
            assert new == store.read("t") and version is not None and version == store.version("t")
            seen.append(version)
        seen.append(store.append_if("t", "x\n", seen[-1]))
        assert seen[-1] == store.version("t") and store.read("t") == "x\n"
        store.delete("t")
        assert store.version("t") is None
        store.write("t", "x\n")  # the same value again, after a delete: still a new version
        seen.append(store.version("t"))
        assert None not in seen and len(set(seen)) == len(seen)

    @needs("versions")
    def test_a_no_op_update_reports_the_version_too(self, store: Store) -> None:
        store.update_versioned("t", lambda old: "v\n")
        new, version = store.update_versioned("t", lambda old: old)
        assert new == "v\n" and version is not None and store.version("t") == version
        assert store.update_versioned("t", lambda old: None) == (None, None) and store.version("t") is None
        assert store.update_versioned("never", lambda old: None) == (None, None) and list(store.keys()) == []

    @needs("versions")
    def test_append_if_refuses_a_stale_version_and_writes_nothing(self, store: Store) -> None:
        assert store.append_if("absent", "x", None) is None
        _new, first = store.update_versioned("t", lambda old: "one\n")
        assert first is not None
        second = store.append_if("t", "two\n", first)
        assert second is not None and second != first and second == store.version("t")
        assert store.append_if("t", "stale\n", first) is None
        assert store.append_if("t", "garbage\n", ("not", "a", "version")) is None
        assert store.read("t") == "one\ntwo\n" and store.version("t") == second
        store.delete("t")
        assert store.append_if("t", "after delete\n", second) is None
        assert store.read("t") is None and list(store.keys()) == []
        store.write("t", "one\ntwo\n")
        assert store.append_if("t", "recreated\n", second) is None
        assert store.read("t") == "one\ntwo\n"

    @needs("versions")
    def test_appending_nothing_returns_a_usable_version(self, store: Store) -> None:
        """An empty suffix changes nothing: the version it returns (which may be the one it
        was given) is the current one, and the next append at it succeeds."""
        _new, version = store.update_versioned("t", lambda old: "")
        assert version is not None
        kept = store.append_if("t", "", version)
        assert kept is not None and kept == store.version("t") and store.read("t") == ""
        moved = store.append_if("t", "x\n", kept)
        assert moved is not None and moved != kept and store.read("t") == "x\n"

    @needs("versions", "shared")
    def test_another_store_object_sees_every_write(self, store: Store) -> None:
        other = self.reopen(store)
        try:
            _new, version = store.update_versioned("t", lambda old: "one\n")
            assert version is not None and other.version("t") == version
            moved = other.append_if("t", "two\n", version)
            assert store.version("t") == moved != version
            assert store.append_if("t", "lost\n", version) is None
            assert store.read("t") == other.read("t") == "one\ntwo\n"
            other.write("t", "rewritten\n")
            assert store.version("t") not in (version, moved) and store.read("t") == "rewritten\n"
        finally:
            other.close()

    @needs("versions")
    @pytest.mark.parametrize("value", VALUES + ["lone \ud800 high", "nul \x00 char"], ids=range(len(VALUES) + 2))
    def test_append_if_stores_exactly_or_refuses(self, store: Store, value: str) -> None:
        _new, version = store.update_versioned("t", lambda old: "head\n")
        assert version is not None
        try:
            moved = store.append_if("t", value, version)
        except StoreError:
            assert store.read("t") == "head\n" and store.version("t") == version
        else:
            assert moved == store.version("t") and store.read("t") == "head\n" + value

    @needs("versions")
    def test_threads_racing_append_if_one_winner_per_version(self, store: Store) -> None:
        store.write("shared", "")
        with ThreadPoolExecutor(6) as pool:
            list(pool.map(lambda worker: append_if_loop(store, worker, 30), range(6)))
        assert_one_winner_per_version(store.read("shared"), workers=6, count=30)

    async def _async_versions(self, astore: Store) -> None:
        assert await astore.aversion("t") is None
        new, version = await astore.aupdate_versioned("t", lambda old: "one\n")
        assert new == "one\n" and version is not None and version == await astore.aversion("t")
        assert version == astore.version("t")
        moved = await astore.aappend_if("t", "two\n", version)
        assert moved is not None and moved != version and moved == await astore.aversion("t")
        assert await astore.aappend_if("t", "stale\n", version) is None
        assert await astore.aread("t") == "one\ntwo\n"
        assert await astore.aupdate_versioned("t", lambda old: None) == (None, None)
        assert await astore.aversion("t") is None and await astore.aappend_if("t", "x", moved) is None

    @needs("versions", "async_calls")
    def test_async_versions(self, store: Store) -> None:
        run_async(store, self._async_versions)

    async def _async_racing_append_if_one_winner(self, astore: Store) -> None:
        _new, version = await astore.aupdate_versioned("t", lambda old: "")
        assert version is not None
        for round_ in range(5):
            results = await asyncio.gather(*(astore.aappend_if("t", f"{round_}:{w}\n", version) for w in range(6)))
            winners = [result for result in results if result is not None]
            assert len(winners) == 1 and winners[0] == await astore.aversion("t")
            version = winners[0]
        assert len((await astore.aread("t") or "").splitlines()) == 5

    @needs("versions", "async_calls")
    def test_async_racing_append_if_one_winner(self, store: Store) -> None:
        run_async(store, self._async_racing_append_if_one_winner)

    # --- The index (see `Store.index`) ---

    @needs("indexes")
    def test_indexed_gives_the_keys_recorded_under_a_term_in_order(self, store: Store) -> None:
        for key in INDEX_KEYS:
            store.write(key, "v\n")
            store.index(key, ["run:1", f"own:{key}"])
        store.index("a", ["run:2"])
        assert store.indexed("run:1") == sorted(INDEX_KEYS)
        assert store.indexed("run:2") == ["a"]
        assert store.indexed("own:тред") == ["тред"]
        assert store.indexed("nothing") == []

    @needs("indexes")
    def test_indexed_pages_from_a_start_key(self, store: Store) -> None:
        for key in INDEX_KEYS:
            store.index(key, ["t"])
        expected = sorted(INDEX_KEYS)
        assert store.indexed("t", limit=2) == expected[:2]
        assert store.indexed("t", expected[2], 3) == expected[2:5]  # from a key on, that key included
        assert store.indexed("t", expected[2] + "\x00") == expected[3:]  # just after it
        assert store.indexed("t", expected[-1] + "\x00") == []
        pages: list[str] = []
        start = None
        while page := store.indexed("t", start, 2):
            pages += page
            start = page[-1] + "\x00"
        assert pages == expected

    @needs("indexes")
    def test_index_may_name_a_key_before_its_value_exists(self, store: Store) -> None:
        """The saver records terms before the write they describe: a key without a value yet."""
        store.index("later", ["run:1"])
        assert store.indexed("run:1") == ["later"]
        assert store.read("later") is None

    @needs("indexes")
    def test_recording_a_term_twice_keeps_one(self, store: Store) -> None:
        store.index("a", ["t", "t"])
        store.index("a", ["t"])
        assert store.indexed("t") == ["a"]

    @needs("indexes")
    def test_unindex_forgets_only_what_it_names(self, store: Store) -> None:
        store.index("a", ["t", "u"])
        store.index("b", ["t"])
        store.unindex("a", ["t", "never"])
        assert store.indexed("t") == ["b"]
        assert store.indexed("u") == ["a"]

    @needs("indexes")
    def test_delete_forgets_the_keys_terms(self, store: Store) -> None:
        store.write("a", "v\n")
        store.write("b", "v\n")
        store.index("a", ["t"])
        store.index("b", ["t"])
        store.delete("a")
        assert store.indexed("t") == ["b"]

    @needs("indexes")
    def test_terms_of_any_text_round_trip(self, store: Store) -> None:
        terms = ['meta:["k","s\\u0000"]', "run:тред 🧵", "x" * 200, "a b\nc"]
        store.index("k", terms)
        for term in terms:
            assert store.indexed(term) == ["k"]

    @needs("indexes")
    def test_index_is_ready_on_a_new_store_and_stays_ready(self, store: Store) -> None:
        assert store.index_ready()
        store.write("a", "v\n")
        assert store.index_ready()

    def test_sorted_keys_pages_in_code_point_order(self, store: Store) -> None:
        for key in INDEX_KEYS:
            store.write(key, "v\n")
        expected = sorted(INDEX_KEYS)
        assert store.thread_keys() == store.sorted_keys() == expected
        assert store.sorted_keys(limit=2) == expected[:2]
        assert store.sorted_keys(after=expected[1], limit=3) == expected[2:5]
        assert store.sorted_keys(after=expected[-1]) == []
        store.delete(expected[0])
        assert store.sorted_keys(limit=1) == [expected[1]]

    @needs("indexes", "shared")
    def test_another_store_object_sees_the_index(self, store: Store) -> None:
        store.write("a", "v\n")
        store.index("a", ["t"])
        other = self.reopen(store)
        try:
            assert other.indexed("t") == ["a"]
            assert other.sorted_keys() == ["a"]
            assert other.index_ready()
        finally:
            other.close()

    async def _async_index(self, store: Store) -> None:
        await store.awrite("b", "v\n")
        await store.awrite("a", "v\n")
        await store.aindex("b", ["t"])
        await store.aindex("a", ["t", "u"])
        assert await store.aindexed("t") == ["a", "b"]
        await store.aunindex("a", ["t"])
        assert await store.aindexed("t") == ["b"]
        assert await store.asorted_keys(limit=1) == ["a"]
        assert await store.aindex_ready()

    @needs("indexes", "async_calls")
    def test_async_index(self, store: Store) -> None:
        run_async(store, self._async_index)

    # --- Expiries and leases (see `Store.expire_at`): every store keeps them ---

    def test_expire_at_keeps_the_later_time(self, store: Store) -> None:
        store.write("t", "v\n")
        store.expire_at("t", 1_700_000_000.25)
        assert store.expiry("t") == 1_700_000_000.25
        store.expire_at("t", 1_700_000_500.125)
        assert store.expiry("t") == 1_700_000_500.125
        store.expire_at("t", 1_700_000_000.0)  # earlier: kept as it was
        assert store.expiry("t") == 1_700_000_500.125
        exact = 1_712_345_678.123456  # a time as time.time() gives it, kept to the last bit
        store.expire_at("t", exact)
        assert store.expiry("t") == exact and store.read("t") == "v\n"

    def test_set_expiry_sets_exactly_and_none_removes(self, store: Store) -> None:
        store.expire_at("t", 500.0)
        store.set_expiry("t", 100.5)  # earlier: set all the same
        assert store.expiry("t") == 100.5
        store.set_expiry("t", 200.0)
        assert store.expiry("t") == 200.0
        store.set_expiry("t", None)
        assert store.expiry("t") is None and store.expired(FAR, 10) == []
        store.set_expiry("never", None)  # nothing recorded: nothing happens
        assert store.expiry("never") is None
        store.expire_at("t", 50.0)  # and after a removal, any time is later
        assert store.expiry("t") == 50.0

    def test_expiry_of_an_unknown_key_is_none(self, store: Store) -> None:
        assert store.expiry("unknown") is None
        assert store.expired(FAR, 10) == []
        store.write("t", "v\n")
        assert store.expiry("t") is None and store.expired(FAR, 10) == []

    def test_expired_gives_the_due_keys_earliest_first_ties_in_key_order(self, store: Store) -> None:
        for key in INDEX_KEYS:
            store.expire_at(key, 100.0)
        store.expire_at("late", 300.0)
        store.expire_at("early", 50.0)
        store.expire_at("due now", 200.0)
        assert store.expired(200.0, 100) == [("early", 50.0)] + [(key, 100.0) for key in sorted(INDEX_KEYS)] + [("due now", 200.0)]
        assert store.expired(199.5, 100) == [("early", 50.0)] + [(key, 100.0) for key in sorted(INDEX_KEYS)]
        assert store.expired(49.0, 100) == []
        assert store.expired(1000.0, 100)[-1] == ("late", 300.0)

    def test_expired_honours_its_limit(self, store: Store) -> None:
        for i, key in enumerate(["d", "c", "b", "a"]):
            store.expire_at(key, 10.0 + i % 2)
        assert store.expired(20.0, 3) == [("b", 10.0), ("d", 10.0), ("a", 11.0)]
        assert store.expired(20.0, 1) == [("b", 10.0)]
        assert store.expired(20.0, 0) == []
        assert store.expired(20.0, 3) == [("b", 10.0), ("d", 10.0), ("a", 11.0)]  # reading changed nothing
        store.set_expiry("b", None)
        assert store.expired(20.0, 2) == [("d", 10.0), ("a", 11.0)]

    def test_expired_costs_what_it_finds(self, store: Store) -> None:
        """Among 2,000 keys far from due, the 3 due ones are found with a limit of 10 (a store that
        cut its scan short, or read its keys in a wrong order, would miss some)."""
        for i in range(2000):
            store.expire_at(f"k{i:04}", FAR + i)
        for key, when in (("due-b", 20.0), ("due-a", 30.0), ("due-c", 10.0)):
            store.expire_at(key, when)
        store.expire_at("k1000", 1.0)  # a key whose expiry moved: once far, now due
        store.set_expiry("k1000", 5.0)
        assert store.expired(100.0, 10) == [("k1000", 5.0), ("due-c", 10.0), ("due-b", 20.0), ("due-a", 30.0)]
        assert store.expired(100.0, 2) == [("k1000", 5.0), ("due-c", 10.0)]
        assert store.expired(FAR + 1, 10)[-2:] == [("k0000", FAR), ("k0001", FAR + 1)]

    @needs("delete_forgets_expiry")
    def test_delete_forgets_the_expiry(self, store: Store) -> None:
        for key in ("a", "b", "c"):
            store.write(key, "v\n")
            store.expire_at(key, 10.0)
        store.delete("a")
        store.update("b", lambda old: None)  # an update that deletes the value forgets it too
        assert store.expiry("a") is None and store.expiry("b") is None
        assert store.expired(100.0, 10) == [("c", 10.0)]
        store.write("a", "again\n")  # a new value of the key has no expiry of the old one's
        assert store.expiry("a") is None
        store.delete("never")  # a key with an expiry and no value: a delete forgets it all the same
        store.expire_at("never", 20.0)
        store.delete("never")
        assert store.expiry("never") is None and store.expired(100.0, 5) == [("c", 10.0)]
        for key in KEYS:
            store.expire_at(key, 1.0)
            store.delete(key)
        assert store.expired(100.0, 5) == [("c", 10.0)]

    def test_a_key_may_have_an_expiry_and_no_value(self, store: Store) -> None:
        """The saver may record an expiry before the first write of a key: it is kept, and the key
        holds no value and is listed as no thread."""
        store.expire_at("later", 10.0)
        assert store.read("later") is None and store.thread_keys() == store.sorted_keys() == store.sorted_keys(limit=1) == []
        assert store.expiry("later") == 10.0 and store.expired(10.0, 5) == [("later", 10.0)]
        store.write("later", "v\n")
        assert store.expiry("later") == 10.0 and store.thread_keys() == store.sorted_keys() == ["later"]
        assert store.foreign() == []

    def test_expiries_of_any_key_round_trip(self, store: Store) -> None:
        for i, key in enumerate(KEYS):
            store.write(key, "v\n")
            store.expire_at(key, 100.0 + i)
        assert [store.expiry(key) for key in KEYS] == [100.0 + i for i in range(len(KEYS))]
        assert store.expired(1000.0, 100) == [(key, 100.0 + i) for i, key in enumerate(KEYS)]
        assert store.thread_keys() == store.sorted_keys() == sorted(KEYS)
        for key in KEYS:
            store.set_expiry(key, None)
        assert store.expired(1000.0, 100) == [] and all(store.expiry(key) is None for key in KEYS)
        assert store.foreign() == []

    def test_a_lease_is_taken_refused_renewed_and_lapses(self, store: Store) -> None:
        assert store.lease("sweep", "a", 1000.0, 10.0)  # free
        assert not store.lease("sweep", "b", 1005.0, 10.0)  # a's until 1010
        assert store.lease("sweep", "a", 1005.0, 10.0)  # renewed, until 1015
        assert not store.lease("sweep", "b", 1012.0, 10.0)  # a's still (the refusal changed nothing)
        assert not store.lease("sweep", "b", 1014.5, 10.0)
        assert store.lease("sweep", "b", 1015.0, 10.0)  # lapsed at 1015: b's until 1025
        assert not store.lease("sweep", "a", 1016.0, 10.0)
        assert store.lease("other", "a", 1016.0, 10.0)  # leases are apart
        assert not store.lease("other", "b", 1016.0, 10.0)
        assert not store.lease("sweep", "b\n", 1016.0, 10.0) and not store.lease("sweep", "", 1016.0, 10.0)
        assert store.lease("тред 🧵", "holder\nwith a newline", 1016.0, 10.0)
        assert store.lease("тред 🧵", "holder\nwith a newline", 1017.0, 10.0)
        assert not store.lease("тред 🧵", "holder", 1017.0, 10.0)
        assert store.foreign() == []  # a lease is the store's own

    def test_release_frees_only_the_holders_lease(self, store: Store) -> None:
        store.release("free", "a")  # nothing held: nothing happens
        assert store.lease("sweep", "a", 1000.0, 60.0)
        store.release("sweep", "b")  # not b's: kept
        assert not store.lease("sweep", "b", 1001.0, 60.0)
        store.release("sweep", "a")
        assert store.lease("sweep", "b", 1002.0, 60.0)
        assert not store.lease("sweep", "a", 1003.0, 60.0)
        store.release("sweep", "b")
        store.release("sweep", "b")
        assert store.lease("sweep", "a", 1004.0, 60.0)

    def test_threads_racing_for_a_lease_one_wins(self, store: Store) -> None:
        start = threading.Barrier(6)

        def take(worker: int) -> list[int]:
            start.wait(10)
            return [i for i in range(20) if store.lease(f"race:{i}", f"worker {worker}", 1000.0, 60.0)]

        with ThreadPoolExecutor(6) as pool:
            won = list(pool.map(take, range(6)))
        assert sorted(i for mine in won for i in mine) == list(range(20))
        for worker, mine in enumerate(won):
            for i in mine:
                assert store.lease(f"race:{i}", f"worker {worker}", 1001.0, 60.0)
                assert not store.lease(f"race:{i}", f"worker {(worker + 1) % 6}", 1001.0, 60.0)

    @needs("shared")
    def test_processes_racing_for_a_lease_one_wins(self, store: Store) -> None:
        """Four processes, each with a store object of its own, try to take the same leases at once:
        each lease has exactly one winner, which then holds it."""
        spawn = multiprocessing.get_context("spawn")
        start = spawn.Barrier(4)
        workers = [spawn.Process(target=race_for_leases, args=(self.opener(store), worker, start)) for worker in range(4)]
        for process in workers:
            process.start()
        for process in workers:
            process.join(timeout=240)
        assert [process.exitcode for process in workers] == [0] * 4
        lines = (store.read("shared") or "").splitlines()
        assert sorted(line.split(":")[0] for line in lines) == ["0", "1", "2", "3"]
        winners = {int(i): int(line.split(":")[0]) for line in lines for i in line.split(":")[1].split(",") if i}
        assert sorted(winners) == list(range(LEASES_RACED)), "a lease won by none, or by two"
        for i, worker in winners.items():
            assert not store.lease(f"race:{i}", f"worker {(worker + 1) % 4}", 1001.0, 60.0)
            assert store.lease(f"race:{i}", f"worker {worker}", 1001.0, 60.0)

    @needs("shared")
    def test_another_store_object_sees_the_expiries_and_leases(self, store: Store) -> None:
        store.write("a", "v\n")
        store.expire_at("a", 50.0)
        store.expire_at("b", 40.0)
        assert store.lease("sweep", "one", 1000.0, 60.0)
        other = self.reopen(store)
        try:
            assert other.expiry("a") == 50.0 and other.expired(60.0, 10) == [("b", 40.0), ("a", 50.0)]
            assert not other.lease("sweep", "two", 1001.0, 60.0)
            other.expire_at("a", 70.0)
            other.set_expiry("b", None)
            assert store.expired(100.0, 10) == [("a", 70.0)]
            other.release("sweep", "one")
            assert store.lease("sweep", "two", 1002.0, 60.0)
            assert not other.lease("sweep", "one", 1003.0, 60.0)
        finally:
            other.close()

    async def _async_expiry(self, astore: Store) -> None:
        await astore.awrite("b", "v\n")
        await astore.aexpire_at("b", 20.0)
        await astore.aexpire_at("b", 10.0)
        assert await astore.aexpiry("b") == 20.0
        await astore.aset_expiry("a", 20.0)
        await astore.aexpire_at("c", 30.0)
        assert await astore.aexpiry("none") is None
        assert await astore.aexpired(25.0, 10) == [("a", 20.0), ("b", 20.0)]
        assert await astore.aexpired(25.0, 1) == [("a", 20.0)]
        await astore.aset_expiry("a", 5.0)
        assert await astore.aexpired(25.0, 1) == [("a", 5.0)]
        await astore.aset_expiry("a", None)
        assert await astore.aexpiry("a") is None
        await (astore.adelete("b") if self.delete_forgets_expiry else astore.aset_expiry("b", None))
        assert await astore.aexpired(100.0, 10) == [("c", 30.0)]
        assert astore.expired(100.0, 10) == [("c", 30.0)]

    @needs("async_calls")
    def test_async_expiry(self, store: Store) -> None:
        run_async(store, self._async_expiry)

    async def _async_lease(self, astore: Store) -> None:
        assert await astore.alease("n", "a", 100.0, 10.0)
        assert not await astore.alease("n", "b", 105.0, 10.0)
        assert await astore.alease("n", "a", 105.0, 10.0)  # renewed, until 115
        assert not await astore.alease("n", "b", 114.0, 10.0)
        assert await astore.alease("n", "b", 115.0, 10.0)  # lapsed
        await astore.arelease("n", "a")  # not a's: kept
        assert not await astore.alease("n", "a", 116.0, 10.0)
        await astore.arelease("n", "b")
        assert await astore.alease("n", "a", 116.0, 10.0)
        assert not astore.lease("n", "b", 117.0, 10.0)
        won = await asyncio.gather(*(astore.alease("race", f"h{i}", 0.0, 60.0) for i in range(6)))
        assert won.count(True) == 1

    @needs("async_calls")
    def test_async_lease(self, store: Store) -> None:
        run_async(store, self._async_lease)

    # --- A state machine against a plain dict ---

    #: Hypothesis settings of the state machine (over the current profile): small enough for a
    #: server store to take seconds.
    machine_settings: dict[str, Any] = {"max_examples": 30, "stateful_step_count": 15, "deadline": None}

    def test_state_machine_against_dict(self, store: Store) -> None:
        """Random writes, appends (at the current version or a stale one), deletes, failing changes
        and index changes agree with a dict, run on the one store, emptied before each example."""
        machine = type("StoreMachine", (StoreMachine,), {"store": store, "versions": self.versions, "indexes": self.indexes})
        run_state_machine_as_test(machine, settings=settings(**self.machine_settings))
