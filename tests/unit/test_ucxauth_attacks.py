"""``ucx+auth``: what its proof stops and what it does not, over real UCX endpoints.

The peers here are raw ucxx endpoints in the listener's process, speaking the exchange's
frames themselves: a peer with a wrong proof that keeps sending Dask frames after the
verdict, a recorded proof answered to a new challenge, and a relay that holds no key and
passes a keyed client's frames to the listener. In CI UCX runs over TCP on loopback; on a
GPU host (``UCX_TLS`` unset, ``HPCGPU_UCX_ALL_TRANSPORTS=1``) the same tests run with every
transport UCX finds there (cuda_copy, cuda_ipc), as docs/security.md says.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from hpcgpu.network import ucxauth
from ucx_marks import needs_ucx, ucx_over_tcp  # noqa: F401 (the module's fixture)

pytestmark = [needs_ucx, pytest.mark.usefixtures("ucx_over_tcp")]




@pytest.fixture
def key():
    with ucxauth.temporary_key() as path:
        yield path


async def _recv(ep, size: int) -> bytes:
    buffer = bytearray(size)
    await asyncio.wait_for(ep.recv(buffer), 10)
    return bytes(buffer)


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


async def _listening(handled: list):
    """An ``ucx+auth`` listener on loopback whose handler keeps each comm's first message."""
    from distributed.comm import listen

    async def handle(comm):
        handled.append(await comm.read())

    return await listen("ucx+auth://127.0.0.1:0", handle).__aenter__()


def _dask_message(payload: bytes) -> list[bytes]:
    """One message as distributed-ucxx frames it (close flag and count, sizes, the frame)."""
    return [struct.pack("?Q", False, 1), struct.pack("?Q", False, len(payload)), payload]


def test_frames_after_a_failed_proof_are_never_read(key, caplog):
    """A peer answers the challenge with a wrong proof, gets the refusal, and goes on sending
    what would be a Dask handshake and a message: the listener reads none of it (its
    endpoint was aborted), and no handler runs."""
    import ucxx

    handled: list = []

    async def main():
        listener = await _listening(handled)
        try:
            ep = await ucxx.create_endpoint("127.0.0.1", _port(listener.contact_address))
            challenge = await _recv(ep, ucxauth.CHALLENGE)
            assert challenge[:8] == ucxauth.MAGIC
            await ep.send(bytearray(ucxauth.MAGIC + bytes(ucxauth.NONCE + ucxauth.MAC)))
            verdict = await _recv(ep, ucxauth.VERDICT)
            sent = 0
            for frame in _dask_message(b"\x80\x04N.") * 3:  # pickled None, three times
                try:
                    await asyncio.wait_for(ep.send(bytearray(frame)), 2)
                    sent += 1
                except Exception:  # the aborted endpoint: what a peer sees, or not
                    break
            await asyncio.sleep(0.5)  # give a listener that would read them the time to
            return verdict
        finally:
            listener.stop()

    with caplog.at_level("WARNING", logger="hpcgpu.network"):
        verdict = asyncio.run(main())
    assert verdict == b"\0" + bytes(ucxauth.MAC)  # refused, and no server proof given away
    assert handled == []
    assert "a peer did not prove it holds the cluster's secret" in caplog.text


def test_a_recorded_proof_answered_to_a_new_challenge_is_refused(key):
    """A proof made for one challenge (as recorded from a past exchange) fails for the next:
    each challenge carries a fresh nonce."""
    import ucxx

    secret = ucxauth.read_key(key)
    handled: list = []

    async def exchange(answer):
        listener_port = _port(listener.contact_address)
        ep = await ucxx.create_endpoint("127.0.0.1", listener_port)
        challenge = await _recv(ep, ucxauth.CHALLENGE)
        await ep.send(bytearray(answer(challenge[8:])))
        return challenge[8:], await _recv(ep, ucxauth.VERDICT)

    async def main():
        nonlocal listener
        listener = await _listening(handled)
        try:
            client_nonce = bytes(range(ucxauth.NONCE))
            recorded = {}

            def honest(server_nonce):
                recorded["frame"] = (ucxauth.MAGIC + client_nonce
                                     + ucxauth.client_proof(secret, server_nonce, client_nonce))
                return recorded["frame"]

            first_nonce, first = await exchange(honest)
            second_nonce, second = await exchange(lambda _: recorded["frame"])
            return first_nonce, first, second_nonce, second
        finally:
            listener.stop()

    listener = None
    first_nonce, first, second_nonce, second = asyncio.run(main())
    assert first[:1] == b"\1" and second[:1] == b"\0"
    assert first_nonce != second_nonce


def test_a_relay_without_the_key_gets_a_connection_the_listener_trusts(key):
    """The documented limit: the proof shows that a process holding the key answered, not
    that it is the process at the other end of this endpoint. A relay that a keyed client
    connects to (a wrong address given to the client) passes the challenge and the answer
    between them, and then speaks Dask on the listener's side with no key of its own.
    hpcgpu's defence is upstream: clients and workers get the scheduler's address only from
    sources another user cannot write (docs/security.md)."""
    import ucxx
    from distributed.comm import connect
    from distributed_ucxx.ucxx import UCXX

    handled: list = []
    relayed: dict = {}

    async def main():
        listener = await _listening(handled)
        real_port = _port(listener.contact_address)

        async def on_victim(victim_ep):
            server_ep = await ucxx.create_endpoint("127.0.0.1", real_port)
            await victim_ep.send(bytearray(await _recv(server_ep, ucxauth.CHALLENGE)))
            await server_ep.send(bytearray(await _recv(victim_ep, ucxauth.RESPONSE)))
            verdict = await _recv(server_ep, ucxauth.VERDICT)
            relayed["verdict"] = verdict[:1]
            await victim_ep.send(bytearray(verdict))
            comm = UCXX(server_ep, "", f"ucx://127.0.0.1:{real_port}")
            await comm.read()  # the listener's Dask handshake
            await comm.write(comm.handshake_info())
            await comm.write({"op": "from-the-relay"})
            relayed["done"] = True

        relay = ucxx.create_listener(lambda ep: asyncio.ensure_future(on_victim(ep)))
        try:
            victim = asyncio.ensure_future(connect(f"ucx+auth://127.0.0.1:{relay.port}", timeout=3))
            for _ in range(100):
                if handled:
                    break
                await asyncio.sleep(0.1)
            victim.cancel()
            await asyncio.gather(victim, return_exceptions=True)
        finally:
            relay.close()
            listener.stop()

    asyncio.run(main())
    assert relayed.get("verdict") == b"\1"  # the listener accepted the relayed proof
    assert handled == [{"op": "from-the-relay"}]  # and read the relay's own message
