"""The one reader of a driver's log that all its followers share (driver_tails), fed by a source
the test writes to: it holds only the newest window of the log, answers each follower a bounded
piece from where it has got to (telling it what it skipped), the last lines once it has caught up,
waits for news instead of being polled, and readers end, stop and are dropped as they should."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from kuberl_operator.driver_tails import DriverTail, DriverTails
from kuberl_operator.ray_jobs import RayJobsError

pytestmark = pytest.mark.timeout(60)


class Log:
    """A driver's log as a head streams it: the test writes, the reader receives."""

    def __init__(self) -> None:
        self.pieces: asyncio.Queue[str | Exception | None] = asyncio.Queue()
        self.opened = 0

    def write(self, text: str) -> None:
        self.pieces.put_nowait(text)

    def end(self) -> None:
        self.pieces.put_nowait(None)

    def fail(self, message: str) -> None:
        self.pieces.put_nowait(RayJobsError(message))

    async def stream(self) -> AsyncIterator[str]:
        self.opened += 1
        while (piece := await self.pieces.get()) is not None:
            if isinstance(piece, Exception):
                raise piece
            yield piece

    def source(self):
        return lambda: (self.stream(), None)


async def received(tail: DriverTail, length: int) -> None:
    """Until the reader has received `length` characters."""
    while tail.length < length:
        await tail.read(tail.length, None, wait_s=5)


def lines(first: int, last: int) -> str:
    return "".join(f"line {i:04d}\n" for i in range(first, last))  # 10 characters each


def test_a_follower_reads_bounded_pieces_from_where_it_got_to_until_the_end():
    async def scenario():
        log, tail = Log(), DriverTail(window=1000)
        pump = asyncio.create_task(tail.pump(log.stream()))
        log.write(lines(0, 30))
        first = await tail.read(0, None, wait_s=5, most=120)
        assert (first.start, first.text, first.length) == (0, lines(0, 12), 120)
        assert not first.ended
        rest = await tail.read(first.length, None, wait_s=5)
        assert (rest.start, rest.text, rest.length) == (120, lines(12, 30), 300)

        # Nothing new: the read waits for it rather than answering empty at once.
        waiting = asyncio.create_task(tail.read(300, None, wait_s=5))
        await asyncio.sleep(0)
        assert not waiting.done()
        log.write("last words\n")
        news = await waiting
        assert (news.text, news.length, news.ended) == ("last words\n", 311, False)
        log.end()
        await pump
        end = await tail.read(311, None, wait_s=5)
        assert (end.text, end.ended) == ("", True)
        # A follower still behind is told the end only with the last piece.
        behind = await tail.read(300, None, wait_s=0, most=5)
        assert (behind.text, behind.ended) == ("last ", False)

    asyncio.run(scenario())


def test_only_the_window_is_held_and_a_follower_behind_it_skips_to_its_oldest_whole_line():
    async def scenario():
        log, tail = Log(), DriverTail(window=100)
        pump = asyncio.create_task(tail.pump(log.stream()))
        for i in range(100):
            log.write(lines(i, i + 1))
        await received(tail, 1000)
        assert tail.start >= 900 and tail.length == 1000
        assert sum(map(len, tail._chunks)) <= 100  # held: the window, not the log

        late = await tail.read(0, None, wait_s=0)
        assert late.start == tail.start and late.text.startswith("line ")
        assert late.text.endswith(lines(99, 100)) and late.length == 1000

        # A piece longer than the window keeps its end, cut at a line for the follower.
        log.write("x" * 150 + "\nend\n")
        await received(tail, 1155)
        assert (tail.start, sum(map(len, tail._chunks))) == (1055, 100)
        assert (await tail.read(1000, None, wait_s=0)).text == "end\n"
        log.end()
        await pump

    asyncio.run(scenario())


def test_the_last_lines_are_answered_once_the_reader_has_caught_up():
    async def scenario():
        log, tail = Log(), DriverTail(window=10_000, settle_s=0.2)
        pump = asyncio.create_task(tail.pump(log.stream()))
        # Not caught up yet (nothing received): answered as an empty log, to be asked again.
        early = await tail.read(0, 3, wait_s=0)
        assert (early.text, early.length, early.ended) == ("", 0, False)
        asking = asyncio.create_task(tail.read(0, 3, wait_s=10))
        log.write(lines(0, 50))
        log.write(lines(50, 100) + "partial")  # the last line not ended yet
        last = await asking
        assert last.text == lines(98, 100) + "partial"
        assert (last.start, last.length) == (980, 1007)
        # A final newline ends the last line; it does not start another.
        log.write("\n")
        await received(tail, 1008)
        assert (await tail.read(0, 1, wait_s=5)).text == "partial\n"
        assert (await tail.read(0, 0, wait_s=5)).text == ""
        assert (await tail.read(0, 500, wait_s=5)).text == lines(0, 100) + "partial\n"
        log.end()
        await pump

    asyncio.run(scenario())


def test_a_reader_that_breaks_off_says_why_once_it_has_nothing_more():
    async def scenario():
        log, tail = Log(), DriverTail()
        pump = asyncio.create_task(tail.pump(log.stream()))
        log.write("some words\n")
        log.fail("the head went away")
        await pump
        assert (await tail.read(0, None, wait_s=0)).text == "some words\n"
        with pytest.raises(RayJobsError, match="the head went away"):
            await tail.read(11, None, wait_s=5)

        # A stream that ends while the driver still runs broke off too.
        quiet, early = Log(), DriverTail()
        quiet.end()

        async def still_running() -> bool:
            return False

        await early.pump(quiet.stream(), still_running)
        assert early.error is not None and not early.ended

    asyncio.run(scenario())


def test_every_follower_shares_one_reader_per_driver_and_readers_are_dropped_when_idle_or_oldest():
    async def scenario():
        tails = DriverTails(window=100, most=2, idle_s=0.3)
        logs = {key: Log() for key in "abc"}
        a = tails.start("a", logs["a"].source())
        assert tails.get("a") is a and tails.get("a") is a  # found again, not read again
        assert logs["a"].opened <= 1
        tails.start("b", logs["b"].source())
        waiting = asyncio.create_task(a.read(0, None, wait_s=5))
        await asyncio.sleep(0)
        tails.start("c", logs["c"].source())  # at most two: the least recently used goes
        assert tails.get("a") is None and len(tails) == 2
        output = await waiting  # its follower is answered (and asks a fresh reader next)
        assert (output.text, output.ended) == ("", False)

        # Readers nobody reads from are dropped (their streams closed) after idle_s.
        while len(tails):
            await asyncio.sleep(0.1)
        await tails.close()

    asyncio.run(scenario())
