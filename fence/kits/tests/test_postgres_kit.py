"""Tests of the PostgreSQL kit (postgres/tenure_fence.sql) against a real server.

fence/kits/test.sh starts a throwaway PostgreSQL and passes its connection
string in TENURE_KITS_PG. Each test gets a fresh schema with the kit applied,
so tests do not share fence rows.
"""

import os
import shutil
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

KIT = Path(__file__).resolve().parent.parent / "postgres" / "tenure_fence.sql"
MAX_TOKEN = 2**64 - 1
# Guards so a bug fails a test instead of hanging it.
SERVER_TIMEOUTS = "-c statement_timeout=20s -c lock_timeout=20s"
WAIT_SECONDS = 20


@pytest.fixture(scope="module")
def conninfo():
    """The connection string of the server test.sh started."""
    value = os.environ.get("TENURE_KITS_PG")
    if not value:
        pytest.fail("TENURE_KITS_PG is not set: run fence/kits/test.sh, which starts PostgreSQL", pytrace=False)
    return value


@pytest.fixture
def schema(conninfo):
    """A new schema holding the kit (applied once) and a fenced `orders` table."""
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
        conn.execute(f"SET search_path = {name}")
        conn.execute(KIT.read_text())
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, note text NOT NULL)")
        conn.execute(
            "CREATE TRIGGER orders_fenced BEFORE INSERT OR UPDATE OR DELETE ON orders"
            " FOR EACH ROW EXECUTE FUNCTION tenure_fenced('orders')"
        )
    yield name
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {name} CASCADE")


@pytest.fixture
def connect(conninfo, schema):
    """Opens autocommit connections to the test's schema; closes them after the test."""
    opened = []

    def open_connection():
        conn = psycopg.connect(conninfo, autocommit=True, options=f"-c search_path={schema} {SERVER_TIMEOUTS}")
        opened.append(conn)
        return conn

    yield open_connection
    for conn in opened:
        conn.close()


@pytest.fixture
def db(connect):
    """One connection to the test's schema."""
    return connect()


def fence(conn, lease, token):
    """Calls tenure_fence as the README shows, the token as a decimal string."""
    conn.execute("SELECT tenure_fence(%s::text, %s::text::numeric)", (lease, str(token)))


def highest(conn, lease):
    """The lease's highest token in the fence table, or None."""
    row = conn.execute("SELECT highest_token FROM tenure_fence WHERE lease_name = %s", (lease,)).fetchone()
    return None if row is None else int(row[0])


def notes(conn):
    """The rows of the fenced orders table, by id."""
    return conn.execute("SELECT id, note FROM orders ORDER BY id").fetchall()


def fenced_write(conn, lease, token, order_id, note):
    """One fenced transaction: fence, upsert an order, commit."""
    conn.execute("BEGIN")
    try:
        fence(conn, lease, token)
        conn.execute(
            "INSERT INTO orders VALUES (%s, %s) ON CONFLICT (id) DO UPDATE SET note = excluded.note",
            (order_id, note),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def stale_message(token, high, lease):
    """The FENCE_STALE message the kit promises."""
    return (
        f"FENCE_STALE: fencing token {token} is older than {high}, the highest seen for lease "
        f'"{lease}"; the lease has passed to another holder'
    )


def wait_until_blocked(observer, waiter, holder):
    """Returns once backend `waiter` waits on a lock that backend `holder` holds.

    PostgreSQL publishes lock waits only in pg_stat_activity and
    pg_blocking_pids, so this polls them; it fails after WAIT_SECONDS.
    """
    deadline = time.monotonic() + WAIT_SECONDS
    row = None
    while time.monotonic() < deadline:
        row = observer.execute(
            "SELECT wait_event_type, pg_blocking_pids(pid) FROM pg_stat_activity WHERE pid = %s",
            (waiter,),
        ).fetchone()
        if row is not None and row[0] == "Lock" and holder in row[1]:
            return
        time.sleep(0.005)
    pytest.fail(f"backend {waiter} never waited on a lock held by {holder}; last seen {row}")


def test_applying_the_kit_again_changes_nothing(conninfo, schema, db):
    psql = shutil.which("psql")
    assert psql, "psql is missing: scripts/postgres.sh installs it with PostgreSQL"
    fenced_write(db, "orders", 5, 1, "before")
    env = dict(os.environ, PGOPTIONS=f"-c search_path={schema}")
    for _ in range(2):
        done = subprocess.run(
            [psql, conninfo, "-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction", "-f", str(KIT)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
    assert highest(db, "orders") == 5
    assert notes(db) == [(1, "before")]
    with pytest.raises(psycopg.Error) as err:
        fenced_write(db, "orders", 4, 1, "stale")
    assert err.value.sqlstate == "TF409"
    counts = db.execute(
        "SELECT (SELECT count(*) FROM pg_proc WHERE pronamespace = %(s)s::regnamespace AND proname LIKE 'tenure%%'),"
        " (SELECT count(*) FROM pg_class WHERE relnamespace = %(s)s::regnamespace AND relname = 'tenure_fence')",
        {"s": schema},
    ).fetchone()
    assert counts == (3, 1)


def test_genuine_writes_are_accepted_and_advance_the_fence(db):
    fenced_write(db, "orders", 3, 1, "first holder")
    assert highest(db, "orders") == 3
    fenced_write(db, "orders", 8, 1, "second holder")
    assert highest(db, "orders") == 8
    assert notes(db) == [(1, "second holder")]


def test_a_lower_token_is_refused_with_tf409_and_its_transaction_aborts(db):
    fenced_write(db, "orders", 9, 1, "newer holder")
    db.execute("BEGIN")
    with pytest.raises(psycopg.Error) as err:
        fence(db, "orders", 7)
    assert err.value.sqlstate == "TF409"
    assert err.value.diag.message_primary == stale_message(7, 9, "orders")
    # The transaction is aborted: the stale holder cannot write in it.
    with pytest.raises(psycopg.errors.InFailedSqlTransaction):
        db.execute("INSERT INTO orders VALUES (2, 'stale')")
    db.execute("ROLLBACK")
    assert highest(db, "orders") == 9
    assert notes(db) == [(1, "newer holder")]


def test_an_equal_token_is_accepted(db):
    fenced_write(db, "orders", 9, 1, "write one")
    fenced_write(db, "orders", 9, 2, "write two")
    assert highest(db, "orders") == 9
    assert notes(db) == [(1, "write one"), (2, "write two")]


def test_leases_are_fenced_independently(db):
    fenced_write(db, "orders", 9, 1, "orders")
    db.execute("BEGIN")
    fence(db, "payments", 2)  # lower than orders' 9, another lease: fine
    db.execute("COMMIT")
    assert (highest(db, "orders"), highest(db, "payments")) == (9, 2)


def test_an_older_token_waits_for_the_newer_holder_then_fails(connect):
    newer, older, observer = connect(), connect(), connect()
    fenced_write(newer, "orders", 5, 1, "old holder")
    newer.execute("BEGIN")
    fence(newer, "orders", 9)
    newer.execute("UPDATE orders SET note = 'new holder' WHERE id = 1")
    older.execute("BEGIN")
    with ThreadPoolExecutor(max_workers=1) as pool:
        attempt = pool.submit(fence, older, "orders", 7)
        wait_until_blocked(observer, older.info.backend_pid, newer.info.backend_pid)
        assert not attempt.done()
        newer.execute("COMMIT")
        with pytest.raises(psycopg.Error) as err:
            attempt.result(timeout=WAIT_SECONDS)
    older.execute("ROLLBACK")
    assert err.value.sqlstate == "TF409"
    assert err.value.diag.message_primary == stale_message(7, 9, "orders")
    assert highest(observer, "orders") == 9
    assert notes(observer) == [(1, "new holder")]


def test_a_newer_token_waits_for_the_older_holder_to_commit_then_writes(connect):
    older, newer, observer = connect(), connect(), connect()
    older.execute("BEGIN")
    fence(older, "orders", 7)
    older.execute("INSERT INTO orders VALUES (1, 'older')")
    with ThreadPoolExecutor(max_workers=1) as pool:
        attempt = pool.submit(fenced_write, newer, "orders", 9, 1, "newer")
        wait_until_blocked(observer, newer.info.backend_pid, older.info.backend_pid)
        older.execute("COMMIT")
        attempt.result(timeout=WAIT_SECONDS)
    # The writes landed in token order: the newer holder's is the last.
    assert notes(observer) == [(1, "newer")]
    assert highest(observer, "orders") == 9


def test_a_waiting_older_token_proceeds_when_the_newer_transaction_rolls_back(connect):
    newer, older, observer = connect(), connect(), connect()
    newer.execute("BEGIN")
    fence(newer, "orders", 9)
    with ThreadPoolExecutor(max_workers=1) as pool:
        attempt = pool.submit(fenced_write, older, "orders", 7, 1, "older")
        wait_until_blocked(observer, older.info.backend_pid, newer.info.backend_pid)
        newer.execute("ROLLBACK")
        attempt.result(timeout=WAIT_SECONDS)
    assert highest(observer, "orders") == 7
    assert notes(observer) == [(1, "older")]


def test_under_repeatable_read_the_waiting_older_token_gets_a_serialization_failure(connect):
    newer, older, observer = connect(), connect(), connect()
    fenced_write(newer, "orders", 5, 1, "old holder")
    older.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    older.execute("SELECT 1")  # takes the snapshot before the newer commit
    newer.execute("BEGIN")
    fence(newer, "orders", 9)
    with ThreadPoolExecutor(max_workers=1) as pool:
        attempt = pool.submit(fence, older, "orders", 7)
        wait_until_blocked(observer, older.info.backend_pid, newer.info.backend_pid)
        newer.execute("COMMIT")
        with pytest.raises(psycopg.errors.SerializationFailure):
            attempt.result(timeout=WAIT_SECONDS)
    older.execute("ROLLBACK")
    # Retried, as a serialization failure is, it is refused as stale.
    with pytest.raises(psycopg.Error) as err:
        fenced_write(older, "orders", 7, 1, "stale")
    assert err.value.sqlstate == "TF409"


def test_the_trigger_refuses_every_unfenced_write(db, schema):
    fenced_write(db, "orders", 4, 1, "fenced")
    for statement in (
        "INSERT INTO orders VALUES (2, 'unfenced')",
        "UPDATE orders SET note = 'unfenced' WHERE id = 1",
        "DELETE FROM orders WHERE id = 1",
    ):
        with pytest.raises(psycopg.Error) as err:
            db.execute(statement)
        op = statement.split()[0]
        assert err.value.sqlstate == "TF428", statement
        assert err.value.diag.message_primary == (
            f'FENCE_MISSING: {op} on {schema}.orders is not fenced for lease "orders":'
            " call tenure_fence('orders', <token>) first in this transaction"
        )
        assert err.value.diag.message_detail == "This transaction is fenced for no lease."
    assert notes(db) == [(1, "fenced")]


def test_the_trigger_refuses_a_write_fenced_for_another_lease(db):
    db.execute("BEGIN")
    fence(db, "payments", 3)
    with pytest.raises(psycopg.Error) as err:
        db.execute("INSERT INTO orders VALUES (1, 'wrong lease')")
    db.execute("ROLLBACK")
    assert err.value.sqlstate == "TF428"
    assert "call tenure_fence('orders', <token>) first in this transaction" in err.value.diag.message_primary
    assert err.value.diag.message_detail == 'This transaction is fenced for: "payments".'
    assert notes(db) == []


def test_the_fence_lasts_one_transaction_and_a_rolled_back_savepoint_undoes_it(db):
    fenced_write(db, "orders", 4, 1, "fenced")
    assert db.execute("SELECT tenure_fence_token('orders')").fetchone() == (None,)
    db.execute("BEGIN")
    db.execute("SAVEPOINT s")
    fence(db, "orders", 4)
    assert db.execute("SELECT tenure_fence_token('orders')").fetchone()[0] == 4
    db.execute("ROLLBACK TO SAVEPOINT s")
    assert db.execute("SELECT tenure_fence_token('orders')").fetchone() == (None,)
    with pytest.raises(psycopg.Error) as err:
        db.execute("INSERT INTO orders VALUES (2, 'after rollback to savepoint')")
    db.execute("ROLLBACK")
    assert err.value.sqlstate == "TF428"


def test_the_trigger_can_take_the_lease_from_a_column(db):
    db.execute("CREATE TABLE accounts (id int PRIMARY KEY, lease text, balance int NOT NULL)")
    db.execute(
        "CREATE TRIGGER accounts_fenced BEFORE INSERT OR UPDATE OR DELETE ON accounts"
        " FOR EACH ROW EXECUTE FUNCTION tenure_fenced('column', 'lease')"
    )
    db.execute("BEGIN")
    fence(db, "tenant-a", 2)
    db.execute("INSERT INTO accounts VALUES (1, 'tenant-a', 10)")
    with pytest.raises(psycopg.Error) as err:
        db.execute("INSERT INTO accounts VALUES (2, 'tenant-b', 10)")
    assert err.value.sqlstate == "TF428"
    assert 'for lease "tenant-b"' in err.value.diag.message_primary
    db.execute("ROLLBACK")

    db.execute("BEGIN")
    fence(db, "tenant-a", 2)
    db.execute("INSERT INTO accounts VALUES (1, 'tenant-a', 10)")
    db.execute("COMMIT")
    # Moving a row to another lease needs both leases fenced.
    db.execute("BEGIN")
    fence(db, "tenant-b", 1)
    with pytest.raises(psycopg.Error) as err:
        db.execute("UPDATE accounts SET lease = 'tenant-b' WHERE id = 1")
    assert 'for lease "tenant-a"' in err.value.diag.message_primary
    db.execute("ROLLBACK")
    db.execute("BEGIN")
    fence(db, "tenant-a", 2)
    fence(db, "tenant-b", 1)
    db.execute("UPDATE accounts SET lease = 'tenant-b' WHERE id = 1")
    db.execute("COMMIT")
    # A row that names no lease cannot be fenced.
    db.execute("BEGIN")
    fence(db, "tenant-a", 2)
    with pytest.raises(psycopg.Error) as err:
        db.execute("INSERT INTO accounts VALUES (3, NULL, 0)")
    db.execute("ROLLBACK")
    assert err.value.sqlstate == "TF428"
    assert err.value.diag.message_primary.endswith("names no lease: column lease is NULL")
    assert db.execute("SELECT id, lease FROM accounts").fetchall() == [(1, "tenant-b")]


def test_the_trigger_fences_truncate_and_reports_a_misconfiguration(db):
    db.execute(
        "CREATE TRIGGER orders_fenced_truncate BEFORE TRUNCATE ON orders"
        " FOR EACH STATEMENT EXECUTE FUNCTION tenure_fenced('orders')"
    )
    fenced_write(db, "orders", 1, 1, "kept")
    with pytest.raises(psycopg.Error) as err:
        db.execute("TRUNCATE orders")
    assert err.value.sqlstate == "TF428"
    assert notes(db) == [(1, "kept")]

    db.execute("CREATE TABLE misconfigured (id int)")
    db.execute(
        "CREATE TRIGGER misconfigured_fenced BEFORE INSERT ON misconfigured"
        " FOR EACH ROW EXECUTE FUNCTION tenure_fenced('column', 'no_such_column')"
    )
    db.execute("BEGIN")
    fence(db, "orders", 1)
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        db.execute("INSERT INTO misconfigured VALUES (1)")
    db.execute("ROLLBACK")
    assert "has no column no_such_column" in err.value.diag.message_primary


def test_the_full_unsigned_64_bit_range_is_accepted(db):
    db.execute("BEGIN")
    db.execute("SELECT tenure_fence('orders', %s)", (MAX_TOKEN,))  # a numeric parameter
    db.execute("COMMIT")
    assert highest(db, "orders") == MAX_TOKEN
    fenced_write(db, "orders", MAX_TOKEN, 1, "at the top")  # a decimal string
    with pytest.raises(psycopg.Error) as err:
        fenced_write(db, "orders", MAX_TOKEN - 1, 1, "one below")
    assert err.value.diag.message_primary == stale_message(MAX_TOKEN - 1, MAX_TOKEN, "orders")


@pytest.mark.parametrize(
    ("token", "shown"),
    [
        (str(2**64), "18446744073709551616"),
        ("0", "0"),
        ("-1", "-1"),
        ("1.5", "1.5"),
        ("NaN", "NaN"),
        ("Infinity", "Infinity"),
        ("1e30", "1" + "0" * 30),
        (None, "NULL"),
    ],
)
def test_a_token_outside_1_to_2_pow_64_minus_1_is_refused(db, token, shown):
    db.execute("BEGIN")
    with pytest.raises(psycopg.Error) as err:
        db.execute("SELECT tenure_fence('orders', %s::text::numeric)", (token,))
    db.execute("ROLLBACK")
    assert err.value.sqlstate == "TF400"
    assert err.value.diag.message_primary == (
        f'FENCE_INVALID_TOKEN: fencing token {shown} for lease "orders" is not a whole number'
        " from 1 to 18446744073709551615"
    )
    assert highest(db, "orders") is None


def test_a_whole_token_written_with_a_fraction_is_stored_whole(db):
    db.execute("BEGIN")
    db.execute("SELECT tenure_fence('orders', 9.0)")
    assert db.execute("SELECT current_setting('tenure.fence')").fetchone() == ('{"orders": "9"}',)
    db.execute("COMMIT")
    assert highest(db, "orders") == 9


@pytest.mark.parametrize("lease", ["", "x" * 256, None])
def test_a_lease_name_outside_1_to_255_bytes_is_refused(db, lease):
    db.execute("BEGIN")
    with pytest.raises(psycopg.Error) as err:
        db.execute("SELECT tenure_fence(%s::text, 1)", (lease,))
    db.execute("ROLLBACK")
    assert err.value.sqlstate == "TF400"
    assert err.value.diag.message_primary.startswith("FENCE_INVALID_NAME: lease name ")


def test_a_255_byte_lease_name_is_accepted(db):
    lease = "é" * 127 + "x"  # 255 bytes of UTF-8
    db.execute("BEGIN")
    fence(db, lease, 1)
    db.execute("COMMIT")
    assert highest(db, lease) == 1


def test_callers_with_another_search_path_reach_the_kit(conninfo, schema):
    with psycopg.connect(conninfo, autocommit=True, options="-c search_path=pg_catalog") as conn:
        conn.execute("BEGIN")
        conn.execute(f"SELECT {schema}.tenure_fence('orders', 2)")
        conn.execute(f"INSERT INTO {schema}.orders VALUES (1, 'other search_path')")
        conn.execute("COMMIT")
        assert conn.execute(f"SELECT highest_token FROM {schema}.tenure_fence").fetchone() == (2,)
