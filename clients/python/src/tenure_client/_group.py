"""The :class:`GroupSession`: several plain leases taken all or none by
AcquireGroup, renewed, lost and released as a whole."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Sequence

from ._errors import Reason, TenureError
from ._gen import lease_pb2
from ._session import LossCause, Session, SessionHost, lost_by
from ._types import Lease, LeaseEvent
from .fencing import fence_headers


@dataclass(frozen=True)
class GroupRelease:
    """What :meth:`GroupSession.release` ended.

    Attributes:
        released: the member names that were held and are now released.
        not_held: the member names already lost (expired, revoked or taken
            over): not an error.
    """

    released: tuple[str, ...] = ()
    not_held: tuple[str, ...] = ()


class GroupSession(Session):
    """Plain leases taken together by :meth:`TenureClient.acquire_group`, all
    or none, each with its own fencing token.

    One RenewGroup renews every member on the schedule of a :class:`Session`;
    the members share one TTL and one send time, so the group has one
    :attr:`safe_deadline`. The group is lost as a whole (:attr:`lost` is set)
    the moment any member is lost: the client's shared watch shows one
    revoked, expired or taken over (cause WATCH), or says it missed changes
    of a member and names that member's token (cause MISSED), or RenewGroup answers
    LEASE_NOT_HELD (cause NOT_HELD); and no later than the safe deadline
    when renewals cannot get through. Stop acting on every member then.
    :meth:`release` ends what is still held.

    Attributes (besides :class:`Session`'s; ``name``, ``fencing_token``,
    ``revision`` and ``lease`` are the first member's):
        names: the members' names, in request order.
        fencing_tokens: the members' fencing tokens, in `names` order.
        leases: the members' holdings as last returned, in `names` order.
    """

    def __init__(
        self,
        client: SessionHost,
        leases: Sequence[Lease],
        lease_key: str,
        sent: float,
        *,
        renew_fraction: float,
        safety_margin: Optional[float],
    ) -> None:
        self.names: tuple[str, ...] = tuple(lease.name for lease in leases)
        self.fencing_tokens: tuple[int, ...] = tuple(lease.fencing_token for lease in leases)
        self.fence_proofs: tuple[bytes, ...] = tuple(lease.fence_proof for lease in leases)
        self._acquired_each = tuple(lease.revision for lease in leases)
        self.leases: tuple[Lease, ...] = tuple(leases)
        super().__init__(
            client,
            leases[0],
            lease_key,
            sent,
            renew_fraction=renew_fraction,
            safety_margin=safety_margin,
        )
        self._released = False
        self._update_group(leases, sent)

    def __repr__(self) -> str:
        state = "held" if self.is_held() else f"lost:{self.lost_cause}"
        return (
            f"GroupSession(names={list(self.names)!r}, holder={self.holder!r}, "
            f"fencing_tokens={list(self.fencing_tokens)!r}, {state})"
        )

    def fencing_token_of(self, name: str) -> int:
        """The fencing token of the member `name`.

        Raises:
            KeyError: `name` is not a member.
        """
        try:
            return self.fencing_tokens[self.names.index(name)]
        except ValueError:
            raise KeyError(name) from None

    def fence_proof_of(self, name: str) -> bytes:
        """The fence proof of the member `name` (each member has its own:
        a store guarding one of them verifies that member's).

        Raises:
            KeyError: `name` is not a member.
        """
        try:
            return self.fence_proofs[self.names.index(name)]
        except ValueError:
            raise KeyError(name) from None

    def fence_headers(self, name: Optional[str] = None) -> dict[str, str]:
        """The HTTP headers for a write to the store guarded by member
        `name` (default: the first member): its fence proof and token (the
        token only when the server signs no proofs).

        Raises:
            KeyError: `name` is not a member.
        """
        name = self.names[0] if name is None else name
        return fence_headers(self.fencing_token_of(name), self.fence_proof_of(name))

    async def downgrade(self, *, timeout: float = 5.0) -> Lease:
        """A group's members are plain leases: only a read-write lock's
        exclusive holding downgrades.

        Raises:
            ValueError: always.
        """
        raise ValueError("a group holds plain leases: only a read-write lock holding downgrades")

    async def release(self, *, timeout: float = 5.0) -> GroupRelease:  # type: ignore[override]
        """Stops renewing, sets :attr:`lost` (cause RELEASED unless already
        lost), then releases every member still held in one ReleaseGroup.
        Members already lost are reported in ``not_held``: not an error.
        A second call releases nothing.

        Raises:
            TenureError: the call failed (server away, credentials); the
                members then end at their TTL by themselves.
        """
        await self._stop_renewing()
        if self._released:
            return GroupRelease()
        self._lose(LossCause.RELEASED)
        request = lease_pb2.ReleaseGroupRequest(
            members=self._members(), lease_key=self.lease_key
        )
        try:
            reply = await self._client._unary("ReleaseGroup", request, timeout)
        except TenureError as err:
            if err.reason in (Reason.LEASE_NOT_HELD, Reason.LEASE_NOT_FOUND):
                self._released = True
                return GroupRelease(not_held=self.names)
            raise
        self._released = True
        return GroupRelease(released=tuple(reply.released), not_held=tuple(reply.not_held))

    # ---- internals ---------------------------------------------------------

    def _members(self) -> list[lease_pb2.GroupMember]:
        return [
            lease_pb2.GroupMember(name=lease.name, expected_revision=lease.revision)
            for lease in self.leases
        ]

    def _update_group(self, leases: Sequence[Lease], sent: float) -> None:
        """Takes a successful AcquireGroup/RenewGroup reply: the group's TTL
        is its members' shortest, counted from the one send time."""
        self.leases = tuple(leases)
        self._update(min(leases, key=lambda lease: lease.ttl), sent)
        self.lease = leases[0]
        self.revision = leases[0].revision

    async def _renew_once(self, timeout: float) -> Lease:
        """Sends one RenewGroup with every member's last revision; returns
        the first member's renewed holding (all are in :attr:`leases`)."""
        request = lease_pb2.RenewGroupRequest(members=self._members(), lease_key=self.lease_key)
        sent = time.monotonic()
        reply = await self._client._unary("RenewGroup", request, timeout)
        leases = [Lease.from_proto(lease) for lease in reply.leases]
        if [(lease.name, lease.fencing_token) for lease in leases] != list(
            zip(self.names, self.fencing_tokens)
        ):
            raise TenureError(
                Reason.LEASE_NOT_HELD,
                "RenewGroup returned other members or fencing tokens than the group's",
            )
        if not self.lost.is_set() and all(
            new.revision > old.revision for new, old in zip(leases, self.leases)
        ):
            self._update_group(leases, sent)
        return leases[0]

    def _watch_names(self) -> tuple[str, ...]:
        return self.names

    def _holds(self, event: LeaseEvent) -> bool:
        return (
            event.slot == 0
            and event.name in self.names
            and event.fencing_token == self.fencing_token_of(event.name)
        )

    def _observe(self, event: LeaseEvent) -> None:
        """Ends the group when the event shows any member's holding gone."""
        for i, name in enumerate(self.names):
            if event.name == name and lost_by(
                event, self._acquired_each[i], 0, self.fencing_tokens[i]
            ):
                self._lose_on_watch(event)
                return
