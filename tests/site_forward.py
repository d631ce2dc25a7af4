"""One end of a TCP forward, run on a site host (scripts/site-exec): what ``ssh -L`` does
without ssh. ``python site_forward.py LISTEN_ADDRESS TARGET_HOST TARGET_PORT`` listens on
LISTEN_ADDRESS (an ephemeral port), prints that port, and pipes every connection to
TARGET_HOST:TARGET_PORT as this host reaches it, until stdin closes.

``ssh -L P:localhost:8787 node1`` run on ``login`` is two such ends: on ``login``, one listening
on 127.0.0.1 and forwarding to ``node1`` (ssh's channel); on ``node1``, one forwarding to its own
127.0.0.1:8787 (what sshd connects to there).
"""

import asyncio
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def main(listen: str, host: str, port: int) -> None:
    async def forward(reader, writer):
        try:
            target_reader, target_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, target_writer), _pipe(target_reader, writer))

    server = await asyncio.start_server(forward, listen, 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until stdin closes
    server.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
