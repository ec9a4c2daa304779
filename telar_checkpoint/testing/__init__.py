"""`StoreTests`: the store contract as a test class, for our stores and yours.

Subclass it in a test module, give it a `store` fixture (a new, empty store, closed by the
fixture), and declare what the store can do::

    import functools
    import pytest
    from telar_checkpoint.testing import StoreTests

    class TestMyStore(StoreTests):
        shared = True  # another object, in this process or another, can open the same store

        @pytest.fixture
        def store(self, tmp_path):
            store = MyStore(tmp_path / "space")
            yield store
            store.close()

        def opener(self, store):  # needed only when `shared`: a picklable function of no arguments
            return functools.partial(MyStore, store.directory)

Capabilities are class attributes: `versions` (the store `keeps_versions`: `version()` gives
tokens and `append_if` appends), `indexes` (the store `keeps_index`), `delete_forgets_expiry`
(False for a store on `Store`'s default expiries, which a delete leaves), `shared` (see `opener`),
`async_calls` (False for a store given a sync-only connection: its async methods must refuse) and
`forked_child_writes`. Expiries and leases are tested on every store: each has them, its own or
`Store`'s defaults. A test that needs a capability the class declares absent is not collected at
all (no skip in the report: a declaration, not an accident of the machine), and
`test_declared_capabilities` checks that the store's class attributes say what the class
declares, and that it behaves so. The async tests
run their coroutines with `asyncio.run`, so no pytest plugin is needed; the store is closed with
`aclose` in that loop.

This package is for test code only: it imports pytest and hypothesis, which the library does not
need (``pip install 'telar-checkpoint[test]'``).
"""

from telar_checkpoint.testing._contract import StoreTests
from telar_checkpoint.testing._workers import child_exit_code

__all__ = ["StoreTests", "child_exit_code"]
