"""Python client for Tenure, the gRPC lease-coordination service.

The generated stubs are in :mod:`tenure_client._gen` (``lease_pb2``,
``lease_pb2_grpc``); on top of them:

- :class:`TenureClient` — a grpc.aio connection: :meth:`~TenureClient.acquire`,
  :meth:`~TenureClient.get`, :meth:`~TenureClient.watch`.
- :class:`Session` — one held lease, renewed in the background; :attr:`~Session.lost`
  (an :class:`asyncio.Event`), :meth:`~Session.is_held`, :meth:`~Session.release`.
- :class:`GroupSession` — several leases taken all or none, lost as a whole.
- :class:`Semaphore` — up to N holders of a name, each slot a :class:`Session`.
- :class:`RWLock` — a read-write lock: one exclusive or many shared holders,
  each a :class:`Session` (:attr:`~Session.mode`, :meth:`~Session.downgrade`).
- :class:`TenureError` — a failed call with its typed :class:`Reason` (made
  from the generated ``ErrorReason``) and whether it is retryable.
- :mod:`~tenure_client.fencing` — :func:`~tenure_client.fencing.fence_headers`
  (what :meth:`Session.fence_headers` sends: the fence proof and token
  headers) and :class:`~tenure_client.fencing.FencingGuard`, the downstream
  fencing check.
- :class:`LeaderElector`, :func:`elect`, :func:`proclaim`, :func:`leader` —
  leader election (an election is the lease of the same name).

Layout: a module imports only modules before it in this order (lowest
first), type-only imports included, so there is no import circle:
``_gen`` → ``_errors``, ``_types`` → ``_resume`` → ``_conn`` (the
:class:`~typing.Protocol` of what the helpers use of a client) →
``_keepalive`` → ``_losswatch`` → ``_session`` → ``_group`` → ``_client`` →
``_election`` → ``sync`` (and this package). ``fencing`` imports none of them
(``_session`` and ``_group`` import it).
"""

from ._client import AcquireContext, LeaseWatch, RWLock, Semaphore, TenureClient
from ._election import Leader, LeaderElector, elect, leader, proclaim
from ._group import GroupRelease, GroupSession
from ._errors import DOMAIN, RETRYABLE_REASONS, Reason, TenureError
from ._gen import lease_pb2, lease_pb2_grpc
from ._session import LossCause, Session
from ._types import EventType, Lease, LeaseEvent, LeaseInfo, LockMode
from .fencing import FencingGuard, StaleTokenError

__all__ = [
    "AcquireContext",
    "DOMAIN",
    "EventType",
    "FencingGuard",
    "GroupRelease",
    "GroupSession",
    "Lease",
    "LeaseEvent",
    "LeaseInfo",
    "LeaseWatch",
    "Leader",
    "LeaderElector",
    "LockMode",
    "LossCause",
    "RETRYABLE_REASONS",
    "RWLock",
    "Reason",
    "Semaphore",
    "Session",
    "StaleTokenError",
    "TenureClient",
    "TenureError",
    "elect",
    "leader",
    "lease_pb2",
    "lease_pb2_grpc",
    "proclaim",
]

__version__ = "0.1.0"
