"""m2mc-peer's requests come in on stdin whatever stdin is: a pipe the loop watches, a regular file
(``m2mc-peer < requests.jsonl``), or, on Windows, a pipe or console no loop can watch; SIGTERM
stops it where the loop has no signal handlers."""

import asyncio
import os
import signal

from m2mc.app.peer import stdin_reader, stop_on_signals

LINES = b"".join(b'{"jsonrpc": "2.0", "id": %d, "method": "whoami"}\n' % i for i in range(2000))


async def read_all(stdin) -> bytes:
    reader = await stdin_reader(stdin)
    return await asyncio.wait_for(reader.read(-1), timeout=10)


def test_a_regular_file_as_stdin_is_read_to_its_end(tmp_path):
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(LINES)
    with requests.open("rb") as stdin:  # the loop refuses it: "Pipe transport is only for pipes, sockets and character devices"
        assert asyncio.run(read_all(stdin)) == LINES


class WindowsLikeLoop(asyncio.SelectorEventLoop):
    """Windows' selector loop: it cannot watch a pipe, nor set signal handlers."""

    async def connect_read_pipe(self, protocol_factory, pipe):
        raise NotImplementedError

    def add_signal_handler(self, sig, callback, *args):
        raise NotImplementedError


def run_on_windows_like_loop(coroutine):
    loop = WindowsLikeLoop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


def test_a_pipe_no_loop_can_watch_is_read_by_a_thread():
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb") as stdin:
        async def feed_and_read() -> bytes:
            reading = asyncio.ensure_future(read_all(stdin))
            await asyncio.sleep(0.05)
            os.write(write_end, LINES[:100])  # a first request alone, as a user types it
            await asyncio.sleep(0.05)
            os.write(write_end, LINES[100:])
            os.close(write_end)
            return await reading

        assert run_on_windows_like_loop(feed_and_read()) == LINES


def test_portable_mode_reads_stdin_by_thread_too(monkeypatch):
    monkeypatch.setenv("M2MC_PORTABLE", "1")
    read_end, write_end = os.pipe()
    os.write(write_end, LINES[:500])
    os.close(write_end)
    with os.fdopen(read_end, "rb") as stdin:
        assert asyncio.run(read_all(stdin)) == LINES[:500]


def test_sigterm_stops_the_peer_where_the_loop_has_no_signal_handlers():
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)

    async def stopped_by_sigterm() -> bool:
        stopping = asyncio.Event()
        stop_on_signals(stopping)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stopping.wait(), timeout=5)
        return stopping.is_set()

    try:
        assert run_on_windows_like_loop(stopped_by_sigterm())
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
