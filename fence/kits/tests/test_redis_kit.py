"""Tests of the Redis kit (redis/tenure_fence.lua) against a real redis-server.

fence/kits/test.sh starts a throwaway redis-server and passes its URL in
TENURE_KITS_REDIS. The script is loaded once with SCRIPT LOAD and called
with EVALSHA, as the README shows; each test uses keys of its own lease.
"""

import hashlib
import os
import uuid
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

KIT = Path(__file__).resolve().parent.parent / "redis" / "tenure_fence.lua"
MAX_TOKEN = "18446744073709551615"


@pytest.fixture(scope="module")
def client():
    """A client of the server test.sh started."""
    url = os.environ.get("TENURE_KITS_REDIS")
    if not url:
        pytest.fail("TENURE_KITS_REDIS is not set: run fence/kits/test.sh, which starts redis-server", pytrace=False)
    conn = redis.Redis.from_url(url, decode_responses=True, socket_timeout=20)
    yield conn
    conn.close()


@pytest.fixture
def sha(client):
    """The script's SHA-1, from SCRIPT LOAD (per test: one test flushes the cache)."""
    return client.script_load(KIT.read_text())


@pytest.fixture
def keys():
    """A fence key and a data key of a lease no other test uses, sharing a hash tag."""
    lease = "orders-" + uuid.uuid4().hex[:8]
    return f"tenure:fence:{{{lease}}}", f"{lease}:{{{lease}}}:state"


def fenced(client, sha, keys, token, command, *args):
    """EVALSHA of the kit: the README's call."""
    fence_key, data_key = keys
    return client.evalsha(sha, 2, fence_key, data_key, token, command, *args)


def refused(client, sha, keys, token, command, *args):
    """The error message of a call that must be refused."""
    with pytest.raises(redis.ResponseError) as err:
        fenced(client, sha, keys, token, command, *args)
    return str(err.value)


def test_script_load_returns_the_sha1_of_the_file(client, sha):
    assert sha == hashlib.sha1(KIT.read_bytes()).hexdigest()
    assert client.script_exists(sha) == [True]


def test_genuine_writes_run_and_advance_the_fence(client, sha, keys):
    fence_key, data_key = keys
    assert fenced(client, sha, keys, "3", "SET", "v3") == "OK"
    assert client.get(fence_key) == "3"
    assert fenced(client, sha, keys, "5", "set", "v5") == "OK"
    assert (client.get(fence_key), client.get(data_key)) == ("5", "v5")
    assert fenced(client, sha, keys, "6", "DEL") == 1
    assert client.exists(data_key) == 0
    assert fenced(client, sha, keys, "7", "HSET", "total", "12", "count", "3") == 2
    assert client.hgetall(data_key) == {"total": "12", "count": "3"}
    assert client.get(fence_key) == "7"


def test_set_options_pass_through(client, sha, keys):
    fence_key, data_key = keys
    assert fenced(client, sha, keys, "1", "SET", "v", "EX", "100") == "OK"
    assert 0 < client.ttl(data_key) <= 100
    assert fenced(client, sha, keys, "2", "SET", "other", "NX") is None
    assert fenced(client, sha, keys, "2", "SET", "w", "GET") == "v"
    assert client.get(data_key) == "w"


def test_a_lower_token_is_refused_and_nothing_is_written(client, sha, keys):
    fence_key, data_key = keys
    fenced(client, sha, keys, "9", "SET", "newer")
    message = refused(client, sha, keys, "7", "SET", "stale")
    assert message == (
        f"FENCE_STALE fencing token 7 is older than 9, the highest seen for fence key {fence_key};"
        " the lease has passed to another holder"
    )
    assert refused(client, sha, keys, "8", "DEL").startswith("FENCE_STALE ")
    assert refused(client, sha, keys, "1", "HSET", "f", "v").startswith("FENCE_STALE ")
    assert (client.get(fence_key), client.get(data_key)) == ("9", "newer")


def test_an_equal_token_is_accepted(client, sha, keys):
    fence_key, data_key = keys
    fenced(client, sha, keys, "9", "SET", "first")
    assert fenced(client, sha, keys, "9", "SET", "second") == "OK"
    assert (client.get(fence_key), client.get(data_key)) == ("9", "second")


@pytest.mark.parametrize(
    ("higher", "lower"),
    [
        ("9007199254740993", "9007199254740992"),  # 2^53 + 1 and 2^53: one double
        ("18446744073709551615", "18446744073709551614"),
        ("10000000000000000000", "9999999999999999999"),  # length decides
        ("100", "99"),
    ],
)
def test_tokens_are_compared_exactly_beyond_2_pow_53(client, sha, keys, higher, lower):
    fence_key, _ = keys
    fenced(client, sha, keys, lower, "SET", "lower")
    fenced(client, sha, keys, higher, "SET", "higher")
    assert client.get(fence_key) == higher
    assert refused(client, sha, keys, lower, "SET", "stale").startswith(
        f"FENCE_STALE fencing token {lower} is older than {higher},"
    )


def test_the_largest_token_is_accepted(client, sha, keys):
    fence_key, data_key = keys
    assert fenced(client, sha, keys, MAX_TOKEN, "SET", "top") == "OK"
    assert fenced(client, sha, keys, MAX_TOKEN, "SET", "top again") == "OK"
    assert (client.get(fence_key), client.get(data_key)) == (MAX_TOKEN, "top again")


@pytest.mark.parametrize(
    "token",
    [
        "18446744073709551616",  # 2^64
        "99999999999999999999",
        "100000000000000000000",  # 21 digits
        "0",
        "-1",
        "01",
        "1.5",
        "1e3",
        " 1",
        "1 ",
        "+1",
        "0x10",
        "",
        "abc",
        "٣",  # a non-ASCII digit
        "1" * 100_000,
    ],
)
def test_an_invalid_token_string_is_refused(client, sha, keys, token):
    fence_key, data_key = keys
    message = refused(client, sha, keys, token, "SET", "v")
    assert message.startswith('FENCE_INVALID_TOKEN fencing token "')
    assert message.endswith('" is not a decimal number from 1 to 18446744073709551615')
    assert len(message) < 200
    assert client.exists(fence_key, data_key) == 0


@pytest.mark.parametrize("command", ["GET", "INCR", "EXPIRE", "FLUSHALL", "EVAL", ""])
def test_an_unknown_command_is_refused(client, sha, keys, command):
    fence_key, data_key = keys
    message = refused(client, sha, keys, "1", command, "1")
    assert message == f"FENCE_UNKNOWN_COMMAND {command} is not fenced by this script; use SET, DEL or HSET"
    assert client.exists(fence_key, data_key) == 0


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        ("SET", (), "FENCE_USAGE SET needs a value"),
        ("DEL", ("other-key",), "FENCE_USAGE DEL takes no argument after the data key"),
        ("HSET", ("field",), "FENCE_USAGE HSET needs field value pairs"),
        ("HSET", ("f1", "v1", "f2"), "FENCE_USAGE HSET needs field value pairs"),
        ("HSET", ("f", "v") * 3501, "FENCE_USAGE HSET with 7002 arguments; at most 7000 in one call"),
    ],
)
def test_a_command_with_wrong_arguments_is_refused(client, sha, keys, command, args, expected):
    fence_key, data_key = keys
    assert refused(client, sha, keys, "1", command, *args) == expected
    assert client.exists(fence_key, data_key) == 0


def test_the_largest_hset_is_accepted(client, sha, keys):
    _, data_key = keys
    pairs = [item for i in range(3500) for item in (f"f{i}", "v")]
    assert fenced(client, sha, keys, "1", "HSET", *pairs) == 3500
    assert client.hlen(data_key) == 3500


def test_wrong_keys_are_refused(client, sha, keys):
    fence_key, data_key = keys
    with pytest.raises(redis.ResponseError, match="^FENCE_USAGE expected 2 keys"):
        client.evalsha(sha, 1, fence_key, "1", "SET", "v")
    with pytest.raises(redis.ResponseError, match="^FENCE_USAGE the data key must not be the fence key"):
        client.evalsha(sha, 2, fence_key, fence_key, "1", "SET", "v")
    with pytest.raises(redis.ResponseError, match="^FENCE_USAGE expected the token and a command"):
        client.evalsha(sha, 2, fence_key, data_key, "1")
    assert client.exists(fence_key, data_key) == 0


def test_a_failing_command_leaves_the_fence_unchanged(client, sha, keys):
    fence_key, data_key = keys
    fenced(client, sha, keys, "1", "SET", "a string")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        fenced(client, sha, keys, "5", "HSET", "field", "value")
    assert (client.get(fence_key), client.get(data_key)) == ("1", "a string")


def test_a_fence_key_holding_something_else_is_reported(client, sha, keys):
    fence_key, data_key = keys
    client.set(fence_key, "not a token")
    assert refused(client, sha, keys, "5", "SET", "v") == (
        f'FENCE_CORRUPT fence key {fence_key} holds "not a token", not a fencing token;'
        " it was written by something other than this script"
    )
    assert client.exists(data_key) == 0


def test_a_client_script_object_reloads_after_the_cache_is_flushed(client, keys):
    fence_key, data_key = keys
    script = client.register_script(KIT.read_text())
    client.script_flush()  # what a restart or a failover does to the cache
    assert script(keys=[fence_key, data_key], args=["4", "SET", "v"]) == "OK"
    assert client.get(fence_key) == "4"


def test_the_readme_keys_share_a_cluster_slot():
    assert key_slot(b"tenure:fence:{orders}") == key_slot(b"orders:{orders}:total")
