"""The tests' own servers (tests/servers.py): a test declares the servers it uses, skips without
them in one summary line per missing server, fails when it reaches one it did not declare, and a
run starts its own Redis Cluster (issue 51). Each case is a pytest run of its own, in a process
of its own, on a test file written here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.servers import NO_REDIS_SERVER, POSTGRES_URL, REDIS_URL, unavailable

ROOT = Path(__file__).resolve().parent.parent


def run(tmp_path: Path, source: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    """pytest, with the servers plugin, on `source` as a test file in `tmp_path`; `env` changes
    the environment (None removes a variable)."""
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(source))
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "false"}
    for name, value in env.items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    command = [sys.executable, "-m", "pytest", "-p", "tests.servers", "-p", "no:cacheprovider", "-rs", "test_inner.py"]
    return subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120)


UNDECLARED = f"""
    import psycopg
    import redis


    def test_redis():
        client = redis.Redis.from_url({REDIS_URL!r}, socket_connect_timeout=1)
        try:
            client.ping()
        except redis.ConnectionError:
            pass  # caught: the run must fail all the same
        finally:
            client.close()


    def test_postgres():
        try:
            psycopg.connect({POSTGRES_URL!r}, connect_timeout=1).close()
        except psycopg.OperationalError:
            pass
"""


def test_a_test_that_reaches_a_server_it_did_not_declare_fails(tmp_path: Path) -> None:
    """Whether the server answers or not, and even when the test catches the error."""
    done = run(tmp_path, UNDECLARED)
    assert done.returncode == 1, done.stdout
    assert "test_redis reached Redis without declaring it: mark it @pytest.mark.servers('redis')" in done.stdout
    assert "test_postgres reached PostgreSQL without declaring it: mark it @pytest.mark.servers('postgres')" in done.stdout
    assert "2 passed, 2 errors" in done.stdout


@pytest.mark.servers("redis")
def test_a_declared_server_is_used(tmp_path: Path) -> None:
    done = run(tmp_path, f"""
        import pytest
        import redis


        @pytest.mark.servers("redis")
        def test_redis():
            client = redis.Redis.from_url({REDIS_URL!r}, socket_connect_timeout=1)
            assert client.ping()
            client.close()
    """)
    assert done.returncode == 0, done.stdout
    assert "1 passed" in done.stdout


MISSING = """
    import pytest


    @pytest.mark.servers("redis")
    @pytest.mark.parametrize("n", range(3))
    def test_needs_redis(n):
        raise AssertionError("a test whose server is missing does not run")


    @pytest.mark.parametrize("store", ["memory", "redis"])
    def test_a_store_kind_declares_its_server(store):
        assert store == "memory"
"""


def test_a_missing_server_skips_its_tests_in_one_summary_line(tmp_path: Path) -> None:
    done = run(tmp_path, MISSING, TELAR_TEST_REDIS="redis://127.0.0.1:1/0")
    assert done.returncode == 0, done.stdout
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1, done.stdout
    assert re.fullmatch(r"SKIPPED \[4\] .*servers\.py:\d+: missing Redis: no server answers at 127\.0\.0\.1:1 .*", skipped[0])
    assert "1 passed, 4 skipped" in done.stdout


def test_on_ci_a_missing_server_fails_its_tests(tmp_path: Path) -> None:
    done = run(tmp_path, MISSING, TELAR_TEST_REDIS="redis://127.0.0.1:1/0", CI="true")
    assert done.returncode == 1
    assert "1 passed, 4 errors" in done.stdout
    assert "missing Redis: no server answers at 127.0.0.1:1" in done.stdout


CLUSTER = """
    import pytest

    from telar_checkpoint.stores.redis import RedisStore
    from tests import servers


    @pytest.mark.servers("redis-cluster")
    def test_the_cluster():
        store = RedisStore(servers.REDIS_CLUSTER_URL, prefix="telar_test_servers:")
        try:
            store.write("t", "a\\n")
            assert store.read("t") == "a\\n"
            store.delete("t")
        finally:
            store.close()
"""


def test_a_run_starts_a_redis_cluster_of_its_own_and_stops_it(tmp_path: Path) -> None:
    server = shutil.which("redis-server")
    if server is None:
        unavailable(NO_REDIS_SERVER, "redis-server")
    done = run(tmp_path, CLUSTER, TELAR_TEST_REDIS_CLUSTER=None)
    assert done.returncode == 0, done.stdout + done.stderr
    url = re.search(r"Redis Cluster for the tests: (redis\+cluster://\S+)", done.stdout)
    assert url, done.stdout
    import redis

    for node in url.group(1).removeprefix("redis+cluster://").split(","):
        host, port = node.split(":")
        client = redis.Redis(host=host, port=int(port), socket_connect_timeout=1)
        with pytest.raises(redis.ConnectionError):
            client.ping()  # stopped with the run
        client.close()


def test_without_redis_server_the_cluster_tests_skip_naming_why(tmp_path: Path) -> None:
    python = Path(sys.executable).parent
    done = run(tmp_path, CLUSTER, TELAR_TEST_REDIS_CLUSTER=None, PATH=str(python))  # no redis-server on it
    assert done.returncode == 0, done.stdout + done.stderr
    assert "missing Redis Cluster: redis-server is not installed (apt-get install redis-server), nor" in done.stdout
    assert "1 skipped" in done.stdout
