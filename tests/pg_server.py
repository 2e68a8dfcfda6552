"""A real PostgreSQL (with pgvector) for tests: one server per session, a database per test.

pgserver ships PostgreSQL 16 and pgvector as a wheel and starts them in a folder, with no
system install (as root it runs the server as a `pgserver` system user it creates).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """URI of the session's server (its `postgres` database)."""
    pgserver = pytest.importorskip("pgserver", reason="pip install -e '.[team]'")
    pytest.importorskip("psycopg")
    pytest.importorskip("pgvector")
    # Not under pytest's basetemp: pytest resets that folder to mode 0700 on every run, which
    # locks out the `pgserver` user the server runs as when tests run as root.
    pgdata = Path(tempfile.mkdtemp(prefix="rag-test-pg-"))
    server = pgserver.get_server(pgdata, cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(pgdata, ignore_errors=True)


def with_database(uri: str, name: str) -> str:
    """The same server's URI with another database name."""
    base, _, query = uri.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


@pytest.fixture
def pg_dsn(pg_server: str) -> Iterator[str]:
    """A fresh, empty database for one test."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield with_database(pg_server, name)
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def reader_role(dsn: str) -> str:
    """The DSN of a new login role that is neither superuser nor owner, allowed to read every
    table: the row-level security policies, not the grants, must keep restricted rows from
    it (as from the reader role servers use)."""
    import psycopg

    role = f"rag_reader_{uuid.uuid4().hex[:8]}"  # roles are the server's, not the database's
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    return dsn.replace("postgres:@", f"{role}:@", 1)
