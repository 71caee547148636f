"""FenceMiddleware served by a real uvicorn, called over HTTP with httpx:
the genuine holder is admitted, every refusal reason has its 409 JSON body
and keeps the handler from running, and forged tokens cannot poison the
store."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import vectors
from asgi_server import serve

from tenure_fence import STATE_KEY, FenceMiddleware, MemoryTokenStore, Verified
from tenure_fence.proof import to_text

#: 2^62: the forged, huge token of the demonstrations.
HUGE = 2**62


class Store:
    """The protected application: records each write it is called with
    and answers 200 with the fence it saw in the scope."""

    def __init__(self) -> None:
        self.writes: list[Verified] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        verified: Verified = scope["state"][STATE_KEY]
        self.writes.append(verified)
        body = f"{verified.fence.name} {verified.fence.token} {verified.key_id}".encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


class Service:
    """The store behind the middleware, its token store, and an HTTP client."""

    def __init__(self, http: httpx.Client, app: Store, tokens: MemoryTokenStore) -> None:
        self.http = http
        self.app = app
        self.tokens = tokens

    def write(
        self,
        name: str,
        proof: bytes | str | None = None,
        token: str | None = None,
        extra: list[tuple[str, str]] = (),
    ) -> httpx.Response:
        """PUTs to /leases/<name> with the given fence headers."""
        headers: list[tuple[str, str]] = list(extra)
        if proof is not None:
            headers.append(("Tenure-Fence", proof if isinstance(proof, str) else to_text(proof)))
        if token is not None:
            headers.append(("Tenure-Fencing-Token", token))
        return self.http.put(f"/leases/{name}", headers=headers, content=b"data")


@pytest.fixture
def service() -> Iterator[Service]:
    """A fenced store on a real uvicorn: resources are /leases/<name>,
    each guarded by the lease <name>; one fresh token store per test."""
    app = Store()
    tokens = MemoryTokenStore()
    fenced = FenceMiddleware(
        app,
        keyset=vectors.keyset(),
        resource=lambda scope: scope["path"].removeprefix("/leases/"),
        store=tokens,
    )
    with serve(fenced) as url, httpx.Client(base_url=url, timeout=10) as http:
        yield Service(http, app, tokens)


def genuine(token: int = 42, name: str = "orders") -> bytes:
    """A genuine proof (signed by the pinned "active" test key) of the plain
    vector's grant, with `token` and `name`."""
    fence = dataclasses.replace(
        vectors.fence_of(vectors.valid("a plain lease")), token=token, name=name
    )
    return vectors.TestSigner.named("active").sign(fence)


def assert_refused(response: httpx.Response, reason: str, message: str, **extra: str) -> None:
    """A 409 with exactly the JSON body of the contract."""
    assert response.status_code == 409, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"reason": reason, "message": message, **extra}


def test_genuine_proof_is_admitted(service: Service) -> None:
    vector = vectors.valid("a plain lease")
    response = service.write("orders", vector["proof_text"], token="42")
    assert response.status_code == 200
    assert response.text == "orders 42 34750f98bd59fcfc"
    assert service.app.writes[0].fence == vectors.fence_of(vector)
    # Without the optional token header, and again with the same token.
    assert service.write("orders", vector["proof_text"]).status_code == 200
    # The older key still verifies, for its own lease name.
    older = vectors.valid("a semaphore slot, signed by the older key")
    assert service.write("pool.gpu", older["proof_text"], token="1000003").text == (
        "pool.gpu 1000003 6a3803d5f059902a"
    )
    assert service.tokens.highest("orders") == 42
    assert len(service.app.writes) == 3


def test_u64_max_token_is_admitted(service: Service) -> None:
    vector = vectors.valid("the largest token (u64 max): verifiers must not lose precision")
    response = service.write("big", vector["proof_text"], token=str(2**64 - 1))
    assert response.status_code == 200 and response.text.split()[1] == str(2**64 - 1)


STALE_MESSAGE = (
    'fencing token 41 for lease "orders" is stale: a later holder wrote with token 42; '
    "stop acting as holder"
)

REFUSALS = [
    # (id, lease name of the path, proof, token header, reason, message)
    (
        "missing",
        "orders",
        None,
        None,
        "FENCE_MISSING",
        "no Tenure-Fence header: send your lease's fence proof with every write",
    ),
    (
        "malformed",
        "orders",
        "4611686018427387904",
        None,
        "FENCE_MALFORMED",
        "malformed fence proof: shorter than any proof",
    ),
    (
        "longer than any proof",
        "orders",
        "A" * 3000,
        None,
        "FENCE_MALFORMED",
        "malformed fence proof: longer than any proof",
    ),
    (
        "unsupported version",
        "orders",
        vectors.invalid("version 2")["proof_text"],
        None,
        "FENCE_UNSUPPORTED_VERSION",
        "fence proof version 2 is not supported (this verifier reads version 1)",
    ),
    (
        "unknown key",
        "orders",
        vectors.invalid("signed by a key that is not pinned")["proof_text"],
        None,
        "FENCE_UNKNOWN_KEY",
        "fence proof signed by unknown key b62e867fa2f33afe: refresh the pinned keys from "
        "`tenure fence-keys`",
    ),
    (
        "bad signature",
        "orders",
        vectors.invalid("one bit of the signature changed")["proof_text"],
        None,
        "FENCE_BAD_SIGNATURE",
        "fence proof signature does not verify: the proof was altered or forged",
    ),
    (
        "wrong name",
        "payments",
        vectors.valid("a plain lease")["proof_text"],
        None,
        "FENCE_WRONG_NAME",
        'the fence proof is for lease "orders", not "payments", which guards this resource',
    ),
    (
        "token mismatch",
        "orders",
        vectors.valid("a plain lease")["proof_text"],
        "43",
        "FENCE_TOKEN_MISMATCH",
        "the Tenure-Fencing-Token header 43 is not the proof's token 42",
    ),
    (
        "token not decimal",
        "orders",
        vectors.valid("a plain lease")["proof_text"],
        "+42",
        "FENCE_TOKEN_MISMATCH",
        "the Tenure-Fencing-Token header (not a decimal token) is not the proof's token 42",
    ),
]


@pytest.mark.parametrize(
    "name, proof, token, reason, message", [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_refusal(
    service: Service, name: str, proof: str | None, token: str | None, reason: str, message: str
) -> None:
    assert_refused(service.write(name, proof, token), reason, message)
    assert service.app.writes == []  # the handler never ran
    assert service.tokens.highest(name) is None  # nothing recorded


def test_stale_token_is_refused_with_token_and_highest(service: Service) -> None:
    assert service.write("orders", genuine(42)).status_code == 200
    assert_refused(
        service.write("orders", genuine(41), token="41"),
        "FENCE_STALE",
        STALE_MESSAGE,
        token="41",
        highest="42",
    )
    assert [w.fence.token for w in service.app.writes] == [42]
    assert service.tokens.highest("orders") == 42


def test_headers_sent_twice_are_refused(service: Service) -> None:
    proof = to_text(genuine(42))
    response = service.write("orders", extra=[("Tenure-Fence", proof), ("Tenure-Fence", proof)])
    assert_refused(
        response, "FENCE_MALFORMED", "malformed fence proof: more than one Tenure-Fence header"
    )
    response = service.write(
        "orders", proof, extra=[("Tenure-Fencing-Token", "42"), ("Tenure-Fencing-Token", "42")]
    )
    assert_refused(response, "FENCE_TOKEN_MISMATCH", "more than one Tenure-Fencing-Token header")
    assert service.app.writes == []


def test_forged_tokens_cannot_poison_the_store(service: Service) -> None:
    """The point of proofs: every way of sending a huge token is refused,
    and the genuine holder keeps writing."""
    holder = genuine(42)
    assert service.write("orders", holder, token="42").status_code == 200

    # 1. The huge token alone, as a store without proofs would take it.
    assert_refused(
        service.write("orders", token=str(HUGE)),
        "FENCE_MISSING",
        "no Tenure-Fence header: send your lease's fence proof with every write",
    )
    # 2. The huge token beside a genuine (lower) proof.
    assert_refused(
        service.write("orders", holder, token=str(HUGE)),
        "FENCE_TOKEN_MISMATCH",
        f"the Tenure-Fencing-Token header {HUGE} is not the proof's token 42",
    )
    # 3. The genuine proof with its token changed to 2^62: the signature fails.
    forged = vectors.invalid("the token changed to 2^62 (a forged, huge token)")["proof_text"]
    assert_refused(
        service.write("orders", forged, token=str(HUGE)),
        "FENCE_BAD_SIGNATURE",
        "fence proof signature does not verify: the proof was altered or forged",
    )
    # 4. A genuine proof with a huge token, but signed for another lease name.
    assert_refused(
        service.write("orders", genuine(HUGE, name="orders.archive"), token=str(HUGE)),
        "FENCE_WRONG_NAME",
        'the fence proof is for lease "orders.archive", not "orders", which guards this resource',
    )

    # None of them moved the highest token: the genuine holder is still admitted.
    assert service.tokens.highest("orders") == 42
    response = service.write("orders", holder, token="42")
    assert response.status_code == 200 and response.text == "orders 42 34750f98bd59fcfc"
    assert [w.fence.token for w in service.app.writes] == [42, 42]

    # Fencing itself still works: a later holder is admitted, the old one then refused.
    assert service.write("orders", genuine(43), token="43").status_code == 200
    assert_refused(
        service.write("orders", holder, token="42"),
        "FENCE_STALE",
        'fencing token 42 for lease "orders" is stale: a later holder wrote with '
        "token 43; stop acting as holder",
        token="42",
        highest="43",
    )


class AsyncTokenStore:
    """A TokenStore with an ``async def advance``, as one over a database
    driver would be; it starts with a highest token of 100 for "orders"."""

    def __init__(self) -> None:
        self.highest = {"orders": 100}
        self.calls: list[tuple[str, int]] = []

    async def advance(self, name: str, token: int) -> tuple[bool, int]:
        self.calls.append((name, token))
        highest = self.highest.get(name, 0)
        if token < highest:
            return False, highest
        self.highest[name] = token
        return True, token


def test_async_resource_and_store() -> None:
    app = Store()
    tokens = AsyncTokenStore()

    async def resource(scope: dict) -> str:
        return scope["path"].removeprefix("/leases/")

    fenced = FenceMiddleware(app, keyset=vectors.keyset(), resource=resource, store=tokens)
    with serve(fenced) as url, httpx.Client(base_url=url, timeout=10) as http:
        service = Service(http, app, MemoryTokenStore())
        assert_refused(
            service.write("orders", genuine(42)),
            "FENCE_STALE",
            'fencing token 42 for lease "orders" is stale: a later holder wrote with '
            "token 100; stop acting as holder",
            token="42",
            highest="100",
        )
        assert service.write("orders", genuine(101)).status_code == 200
        # A refusal before the store (a wrong name) never reaches it.
        assert_refused(
            service.write("payments", genuine(500)),
            "FENCE_WRONG_NAME",
            'the fence proof is for lease "orders", not "payments", which guards this resource',
        )
    assert tokens.calls == [("orders", 42), ("orders", 101)]
    assert [w.fence.token for w in app.writes] == [101]
