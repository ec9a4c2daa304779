"""The servers the tests use, declared by each test (a helper module and pytest plugin, not tests).

A test declares the servers it talks to: ``@pytest.mark.servers("postgres")`` (kinds: ``postgres``,
``redis``, ``redis-cluster``), or a parameter whose value is one of those kinds (the ``store``
fixtures' ``kind``). Before its fixtures are set up, a test whose server cannot be reached is
skipped, or fails when ``CI=true``; the skips of one missing server fold into one summary line.
While it is set up and runs, every connection this process opens to a test server is checked
against its declaration, and a test that reached an undeclared one fails. (Not watched: its
teardown, which may finish fixtures other tests shared, and the processes it starts.)

The servers: ``TELAR_TEST_POSTGRES`` and ``TELAR_TEST_REDIS`` when set, else the local defaults; a
Redis Cluster from ``TELAR_TEST_REDIS_CLUSTER`` when set, else one the test run starts itself
(three masters on free ports, nothing persisted, stopped at the end of the run) when
``redis-server`` is installed.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

POSTGRES_URL = os.environ.get("TELAR_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("TELAR_TEST_REDIS", "redis://127.0.0.1:6379/0")
# Outside a test run (the benchmarks), a cluster there; a test run sets its own (see `start_cluster`).
REDIS_CLUSTER_URL = os.environ.get("TELAR_TEST_REDIS_CLUSTER", "redis+cluster://127.0.0.1:7000")

SERVER_NAMES = {"postgres": "PostgreSQL", "redis": "Redis", "redis-cluster": "Redis Cluster"}
START_SECONDS = 30.0  # bounds each wait of starting the cluster
LOOPBACK = {"localhost": "127.0.0.1", "::1": "127.0.0.1"}
NO_REDIS_SERVER = "redis-server is not installed (apt-get install redis-server)"  # for a test that starts its own


def unavailable(problem: str, what: str | None = None) -> None:
    """Skip the running test because something it needs is missing (`what`: a server, Chromium),
    or fail it on CI, where everything must run. The skips that name `what` are reported at this
    line, so that pytest's summary folds those of one cause into one line with their count."""
    reason = problem if what is None else f"missing {what}: {problem}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: every test must run)", pytrace=False)
    pytest.skip(reason)


# --- Whether each server answers ---


@functools.cache
def postgres_problem() -> str | None:
    """Why the test PostgreSQL server cannot be used, or None when it can."""
    try:
        import psycopg

        from telar_checkpoint.stores.postgres import server_name
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    try:
        with psycopg.connect(POSTGRES_URL, connect_timeout=2):
            return None
    except Exception:
        return f"no server answers at {server_name(POSTGRES_URL)} (TELAR_TEST_POSTGRES names another)"


@functools.cache
def redis_problem() -> str | None:
    """Why the test Redis server cannot be used, or None when it can."""
    try:
        import redis
    except ImportError:
        return "redis is not installed (pip install -e '.[test]')"
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
        return None
    except Exception:
        kwargs = client.connection_pool.connection_kwargs
        return f"no server answers at {kwargs.get('host')}:{kwargs.get('port')} (TELAR_TEST_REDIS names another)"
    finally:
        client.close()


@functools.cache
def redis_cluster_problem() -> str | None:
    """Why the test Redis Cluster cannot be used, or None when it can."""
    if CLUSTER_NOT_STARTED is not None:
        return CLUSTER_NOT_STARTED
    try:
        import redis  # noqa: F401
    except ImportError:
        return "redis is not installed (pip install -e '.[test]')"
    try:
        client = redis_cluster_admin()
        client.ping()
        client.close()
        return None
    except Exception as exc:
        return f"no cluster answers at {REDIS_CLUSTER_URL} ({type(exc).__name__}; TELAR_TEST_REDIS_CLUSTER names it)"


PROBLEMS = {"postgres": postgres_problem, "redis": redis_problem, "redis-cluster": redis_cluster_problem}


def require_server(kind: str) -> None:
    """Skip the running test (fail it on CI) when the `kind` server is missing; the test must
    declare it too. Memory, file and sqlite need none."""
    if kind not in PROBLEMS:
        return
    if GUARD.test is not None and kind not in GUARD.allowed:
        pytest.fail(f"{GUARD.test} uses {SERVER_NAMES[kind]}: mark it @pytest.mark.servers({kind!r})", pytrace=False)
    problem = PROBLEMS[kind]()
    if problem:
        unavailable(problem, SERVER_NAMES[kind])


def redis_cluster_admin() -> Any:
    """A client of the test cluster, outside any store."""
    from redis.cluster import ClusterNode, RedisCluster

    from telar_checkpoint.stores.url import cluster_nodes

    nodes, options = cluster_nodes(REDIS_CLUSTER_URL)
    return RedisCluster(startup_nodes=[ClusterNode(*node) for node in nodes], socket_connect_timeout=2, **options)


# --- A Redis Cluster of the run's own ---

CLUSTER_NOT_STARTED: str | None = None  # why this run has no cluster, when it has none


def _free_port() -> int:
    """A port free on loopback whose cluster bus port (+10000) is free too."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


def _wait(what: str, ready: Any) -> None:
    deadline = time.monotonic() + START_SECONDS
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the test Redis Cluster: {what} not reached within {START_SECONDS:.0f} s")
        time.sleep(0.05)


def start_cluster(directory: Path, server: str) -> tuple[str, list[subprocess.Popen[bytes]]]:
    """Three masters on free loopback ports, their 16384 slots split between them, nothing
    persisted: the cluster's URL and its processes (see `stop_cluster`)."""
    import redis

    ports = [_free_port() for _ in range(3)]
    processes = []
    for port in ports:
        command = [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes"]
        command += ["--cluster-config-file", f"nodes-{port}.conf", "--dir", str(directory), "--save", "", "--appendonly", "no"]
        log = open(directory / f"{port}.log", "wb")
        processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        log.close()
    clients = [redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, socket_timeout=5) for port in ports]
    try:

        def answering() -> bool:
            try:
                return all(client.ping() for client in clients)
            except redis.ConnectionError:
                return False

        _wait("every node answering", answering)
        share = 16384 // len(ports)
        for i, client in enumerate(clients):
            last = 16383 if i == len(ports) - 1 else (i + 1) * share - 1
            client.execute_command("CLUSTER", "ADDSLOTS", *range(i * share, last + 1))
        for port in ports[1:]:
            clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", port)
        _wait("cluster_state:ok on every node", lambda: all(c.cluster("INFO")["cluster_state"] == "ok" for c in clients))
    except BaseException:
        stop_cluster(processes)
        raise
    finally:
        for client in clients:
            client.close()
    return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in ports), processes


def stop_cluster(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


# --- What a test declares, and what it reaches ---


def uses_servers(*kinds: str) -> Any:
    """Declare the servers a fixture uses, for every test that uses it: under ``@pytest.fixture``
    (pytest takes no marks on fixtures)."""

    def declare(function: Any) -> Any:
        function.telar_servers = kinds
        return function

    return declare


def declared(item: pytest.Item) -> set[str]:
    """The servers `item` declares: its `servers` marks, those of the fixtures it uses
    (`uses_servers`), and parameters naming a server kind."""
    kinds = {kind for mark in item.iter_markers("servers") for kind in mark.args}
    for definitions in getattr(item, "_fixtureinfo").name2fixturedefs.values():
        kinds.update(getattr(definitions[-1].func, "telar_servers", ()))  # the last: the one in force
    unknown = kinds - PROBLEMS.keys()
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: unknown server {sorted(unknown)}; servers are {sorted(PROBLEMS)}")
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        kinds |= {value for value in callspec.params.values() if isinstance(value, str) and value in PROBLEMS}
    return kinds


def _address(host: str | None, port: int | str | None, default_port: int) -> tuple[str, int] | None:
    if not host or host.startswith("/"):
        return None  # a Unix socket: no test server is there
    return LOOPBACK.get(host, host), int(port or default_port)


def server_addresses() -> dict[tuple[str, int], str]:
    """The address of each test server: the server kind answering there."""
    from telar_checkpoint.stores.url import cluster_nodes

    addresses: dict[tuple[str, int] | None, str] = {}
    pg = urlsplit(POSTGRES_URL)
    addresses[_address(pg.hostname, pg.port, 5432)] = "postgres"
    single = urlsplit(REDIS_URL)
    addresses[_address(single.hostname, single.port, 6379)] = "redis"
    for host, port in cluster_nodes(REDIS_CLUSTER_URL)[0]:
        addresses[_address(host, port, 6379)] = "redis-cluster"
    return {address: kind for address, kind in addresses.items() if address is not None}


class Guard:
    """Notes each connection this process opens to a test server the running test did not declare."""

    def __init__(self) -> None:
        self.addresses: dict[tuple[str, int], str] = {}
        self.test: str | None = None  # the running test's id; None between tests
        self.allowed: set[str] = set()
        self.own: set[str] = set()  # the servers the running test declared (between tests, the last one)
        self.undeclared: set[str] = set()  # the kinds of server it reached

    def reached(self, host: str | None, port: int | str | None, default_port: int) -> None:
        address = _address(host, port, default_port)
        kind = self.addresses.get(address) if address is not None else None
        if self.test is not None and kind is not None and kind not in self.allowed:
            self.undeclared.add(kind)

    def install(self) -> None:
        """Wrap what opens connections: Python's sockets (redis-py, asyncio) and psycopg's connect (libpq's)."""
        guard = self
        def watched(connect: Any) -> Any:
            def guarded(sock: socket.socket, address: Any) -> Any:
                if isinstance(address, tuple):
                    guard.reached(address[0], address[1], 0)
                return connect(sock, address)

            return guarded

        socket.socket.connect = watched(socket.socket.connect)  # type: ignore[method-assign]
        socket.socket.connect_ex = watched(socket.socket.connect_ex)  # type: ignore[method-assign]
        try:
            import psycopg
        except ImportError:
            return
        sync_connect, async_connect = psycopg.Connection.connect.__func__, psycopg.AsyncConnection.connect.__func__  # type: ignore[attr-defined]

        def note(conninfo: str, kwargs: dict[str, Any]) -> None:
            params = psycopg.conninfo.conninfo_to_dict(conninfo, **kwargs)
            guard.reached(params.get("host") or os.environ.get("PGHOST"), params.get("port") or os.environ.get("PGPORT"), 5432)

        def guarded_sync(cls: Any, conninfo: str = "", **kwargs: Any) -> Any:
            note(conninfo, kwargs)
            return sync_connect(cls, conninfo, **kwargs)

        async def guarded_async(cls: Any, conninfo: str = "", **kwargs: Any) -> Any:
            note(conninfo, kwargs)
            return await async_connect(cls, conninfo, **kwargs)

        psycopg.Connection.connect = classmethod(guarded_sync)  # type: ignore[method-assign, assignment]
        psycopg.AsyncConnection.connect = classmethod(guarded_async)  # type: ignore[method-assign, assignment]
        psycopg.connect = psycopg.Connection.connect  # the module's alias, bound when psycopg was imported


GUARD = Guard()


# --- The plugin (registered by tests/conftest.py) ---


def pytest_configure(config: pytest.Config) -> None:
    global REDIS_CLUSTER_URL, CLUSTER_NOT_STARTED
    config.addinivalue_line("markers", "servers(*kinds): the test servers a test talks to (tests/servers.py)")
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # a worker of a parallel run: the controller's cluster
        REDIS_CLUSTER_URL, CLUSTER_NOT_STARTED = workerinput["telar_redis_cluster"]
    elif "TELAR_TEST_REDIS_CLUSTER" not in os.environ and not config.option.collectonly:
        server = shutil.which("redis-server")
        if server is None:
            CLUSTER_NOT_STARTED = f"{NO_REDIS_SERVER}, nor TELAR_TEST_REDIS_CLUSTER set"
        else:
            directory = Path(tempfile.mkdtemp(prefix="telar-test-cluster-"))
            try:
                REDIS_CLUSTER_URL, processes = start_cluster(directory, server)
            except Exception as exc:
                CLUSTER_NOT_STARTED = f"the test run could not start one ({exc}; logs in {directory})"
            else:
                config.add_cleanup(lambda: (stop_cluster(processes), shutil.rmtree(directory, ignore_errors=True)))
    if CLUSTER_NOT_STARTED is None:
        os.environ["TELAR_TEST_REDIS_CLUSTER"] = REDIS_CLUSTER_URL  # for the processes tests start
    GUARD.addresses = server_addresses()
    GUARD.install()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, in the controller: what each worker is told of the cluster."""
    node.workerinput["telar_redis_cluster"] = (REDIS_CLUSTER_URL, CLUSTER_NOT_STARTED)


def pytest_report_header(config: pytest.Config) -> str:
    return f"Redis Cluster for the tests: {CLUSTER_NOT_STARTED or REDIS_CLUSTER_URL}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the test's fixtures: skip it if a server it declares is missing, then watch it. Its
    setup may also tear down a wider fixture of the test before it (a module's, for another
    parameter), so that test's servers are allowed there too."""
    kinds = declared(item)
    GUARD.test, GUARD.allowed, GUARD.undeclared = item.nodeid, kinds | GUARD.own, set()
    GUARD.own = kinds
    for kind in sorted(kinds):
        require_server(kind)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    GUARD.allowed = GUARD.own


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """Fail the test if its setup or call reached a server it did not declare. (Teardown is not
    watched: it may finish wider fixtures that other tests used.)"""
    undeclared, GUARD.test, GUARD.undeclared = sorted(GUARD.undeclared), None, set()
    try:
        return (yield)
    finally:
        if undeclared:
            pytest.fail(
                f"{item.nodeid} reached {' and '.join(SERVER_NAMES[kind] for kind in undeclared)} without declaring it: "
                f"mark it @pytest.mark.servers({', '.join(map(repr, undeclared))}) (tests/servers.py)",
                pytrace=False,
            )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """A skip for a missing server or browser is reported at `unavailable`, not at each test, so
    pytest's summary folds them into one line per cause."""
    report: pytest.TestReport = yield
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and longrepr[2].startswith("Skipped: missing "):
        report.longrepr = (__file__, _UNAVAILABLE_LINE, longrepr[2])
    return report


_UNAVAILABLE_LINE = unavailable.__code__.co_firstlineno
