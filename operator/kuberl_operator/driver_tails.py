"""The drivers' logs as the log relay follows them: one reader per driver, whoever asks.

Every follower of a driver (`kuberl logs -f`, a status page, each of them through the API) reads
from the same `DriverTail`, which reads the driver's log from its head once, in pieces, as the
driver writes it, and keeps only the newest `window` characters of it. So what the operator
fetches from a head, and holds, does not grow with the number of followers or with time: a log is
fetched once per reader, and a reader holds at most its window.

Offsets are characters from the start of the driver's log. A follower asks from where it has got
to (`after`) and is answered with at most READ_CHARS characters from there, and where they start:
later than asked when the window has moved past it (the follower learns what it skipped), so a
follower that falls behind, or starts following a long log from its beginning, continues from the
oldest whole line still held. A follower that asks for the last lines (`tail_lines`) gets them
once the reader has caught up with the log, which it takes to be when Ray's stream has paused for
settle_s: on a busy head the stream can pause sooner, and the follower then starts a few lines
earlier than asked, never later, so no line is missed. A read with nothing new to answer waits for
news rather than answering at once, so that nobody polls a quiet log.

A reader ends with its driver, is dropped once nobody has read from it for `idle_s`, and the
oldest is dropped first when `most` readers exist: its followers then get a fresh reader, which
reads the log again from its start.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass

from kuberl_operator.ray_jobs import RayJobsError

WINDOW_CHARS = 1024 * 1024
"""The newest characters of a driver's log a reader holds."""
MOST_READERS = 32
"""Readers at once: with WINDOW_CHARS, what the relay may hold of all logs together."""
READ_CHARS = 256 * 1024
"""The most characters one read answers with; the follower asks again for the rest."""
IDLE_S = 60.0
"""A reader nobody has read from for this long is dropped."""
SETTLE_S = 0.75
"""A reader that has received nothing for this long has caught up with the log: Ray's stream
sends a log's backlog without pause and then reads the file every second."""


@dataclass(frozen=True)
class DriverOutput:
    """A piece of an attempt's driver log, as the relay answers a follower."""

    found: bool
    """The Jobs API knows the driver (false before its submission)."""
    ended: bool
    """It has exited and this piece ends its log: there is no more to ask for."""
    start: int
    """Where `text` starts in the log: where asked, or later when the reader no longer holds that
    part (the follower skipped start - after characters)."""
    text: str
    """The log from `start` on, at most READ_CHARS of it."""
    length: int
    """Where `text` ends: where the next read goes on from. A read of the last lines that the
    reader cannot answer yet (it has not caught up with the log) is answered as if from an empty
    log, with 0: the follower asks for them again."""


def not_found(after: int) -> DriverOutput:
    return DriverOutput(found=False, ended=False, start=after, text="", length=after)


class DriverTail:
    """One driver's log as one reader holds it: its newest `window` characters."""

    def __init__(self, window: int = WINDOW_CHARS, settle_s: float = SETTLE_S) -> None:
        self.window, self.settle_s = window, settle_s
        self._chunks: deque[str] = deque()
        self._held = 0  # characters in _chunks
        self._starts_line = True  # the oldest character held starts a line
        self.start = 0
        """Where the oldest character held is in the log."""
        self.length = 0
        """The log's length so far."""
        self.ended = False
        """The driver has exited and its whole log has been read."""
        self.error: str | None = None
        """Why the reader stopped before the log's end (the head went away, or refused)."""
        self.closed = False
        """The reader was dropped: its followers go on with a fresh one."""
        self.last_used = time.monotonic()
        self._last_received: float | None = None
        self._news = asyncio.Event()

    @property
    def done(self) -> bool:
        return self.ended or self.closed or self.error is not None

    async def pump(
        self, chunks: AsyncIterator[str], ended: Callable[[], Awaitable[bool]] | None = None
    ) -> None:
        """Reads `chunks` (the driver's log from its start) into the window until they end, then
        asks `ended` whether the driver has exited: a stream that ends while the driver runs
        broke off. The source's errors (RayJobsError) end the reader with their message."""
        try:
            async for text in chunks:
                self.append(text)
            if ended is None or await ended():
                self.ended = True
            else:
                self.error = "the head's log stream ended while the driver runs"
        except RayJobsError as exc:
            self.error = str(exc)
        finally:
            self._notify()

    def append(self, text: str) -> None:
        """Adds what the driver wrote; the oldest pieces go once more than the window is held."""
        if not text:
            return
        self.length += len(text)
        if len(text) > self.window:
            self._chunks.clear()
            self._held, self._starts_line = 0, text[-self.window - 1] == "\n"
            text = text[-self.window :]
        self._chunks.append(text)
        self._held += len(text)
        while self._held > self.window:
            dropped = self._chunks.popleft()
            self._held -= len(dropped)
            self._starts_line = dropped.endswith("\n")
        self.start = self.length - self._held
        self._last_received = time.monotonic()
        self._notify()

    def close(self) -> None:
        self.closed = True
        self._notify()

    def _notify(self) -> None:
        self._news.set()
        self._news = asyncio.Event()

    async def read(
        self, after: int, tail_lines: int | None, wait_s: float, most: int = READ_CHARS
    ) -> DriverOutput:
        """At most `most` characters from `after` on, or, with `tail_lines`, from the start of the
        last `tail_lines` lines once the reader has caught up. Waits up to `wait_s` for something
        new when there is nothing past `after` yet. Raises RayJobsError with the reader's error
        when it stopped before the log's end and holds nothing more for this follower."""
        self.last_used = time.monotonic()
        deadline = self.last_used + wait_s
        if tail_lines is not None:
            await self._until(self._caught_up, deadline)
            if not self._caught_up():
                return DriverOutput(found=True, ended=False, start=0, text="", length=0)
            begin = self._line_start(tail_lines)
        else:
            await self._until(lambda: self.length > after or self.done, deadline)
            begin = after if after >= self.start else self._first_whole_line()
        if begin >= self.length and self.error is not None:
            raise RayJobsError(self.error)
        text = self._slice(begin, most)
        end = begin + len(text)
        return DriverOutput(
            found=True, ended=self.ended and end >= self.length, start=begin, text=text, length=end
        )

    def _caught_up(self) -> bool:
        """Ended, stopped, or quiet for settle_s after receiving something."""
        if self.done:
            return True
        received = self._last_received
        return received is not None and time.monotonic() - received >= self.settle_s

    async def _until(self, condition: Callable[[], bool], deadline: float) -> None:
        """Until `condition` holds or `deadline` passes, woken by each change (and, for the
        settling of a reader, at the moment it would settle)."""
        while not condition() and (left := deadline - time.monotonic()) > 0:
            if self._last_received is not None and not self.done:
                settles_in = self._last_received + self.settle_s - time.monotonic()
                if settles_in > 0:
                    left = min(left, settles_in)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._news.wait(), left)

    def _line_start(self, count: int) -> int:
        """Where the last `count` lines held start (a final newline ends the last line; it does
        not start another). Fewer lines held: the oldest whole line."""
        if count == 0:
            return self.length
        offset, seen, last = self.length, 0, True
        for chunk in reversed(self._chunks):
            offset -= len(chunk)
            end = len(chunk) - 1 if last and chunk.endswith("\n") else len(chunk)
            last = False
            while (newline := chunk.rfind("\n", 0, end)) != -1:
                seen += 1
                if seen == count:
                    return offset + newline + 1
                end = newline
        return self._first_whole_line()

    def _first_whole_line(self) -> int:
        """Where the oldest whole line held starts: the window's start when a line starts there,
        else just past its first newline."""
        if self._starts_line:
            return self.start
        offset = self.start
        for chunk in self._chunks:
            if (newline := chunk.find("\n")) != -1:
                return offset + newline + 1
            offset += len(chunk)
        return self.start  # one line longer than the window: its end

    def _slice(self, begin: int, most: int) -> str:
        pieces, offset = [], self.start
        for chunk in self._chunks:
            end = offset + len(chunk)
            if end > begin and most > 0:
                piece = chunk[max(begin - offset, 0) : max(begin - offset, 0) + most]
                pieces.append(piece)
                most -= len(piece)
            offset = end
        return "".join(pieces)


Source = Callable[[], tuple[AsyncIterator[str], Callable[[], Awaitable[bool]] | None]]
"""What a new reader reads: the log's pieces from its start, and how to tell, once they end,
whether the driver has exited (None: their end says so)."""


class DriverTails:
    """The readers of every followed driver, by key (a job's identity and attempt)."""

    def __init__(
        self,
        window: int = WINDOW_CHARS,
        most: int = MOST_READERS,
        idle_s: float = IDLE_S,
        settle_s: float = SETTLE_S,
    ) -> None:
        self.window, self.most, self.idle_s, self.settle_s = window, most, idle_s, settle_s
        self._tails: OrderedDict[Hashable, DriverTail] = OrderedDict()  # oldest use first
        self._tasks: dict[Hashable, asyncio.Task] = {}
        self._sweeper: asyncio.Task | None = None

    def __len__(self) -> int:
        return len(self._tails)

    def get(self, key: Hashable) -> DriverTail | None:
        """The key's reader, unless it stopped on an error or was dropped (the next read then
        starts a fresh one)."""
        tail = self._tails.get(key)
        if tail is None or tail.closed or tail.error is not None:
            self._drop(key)
            return None
        self._tails.move_to_end(key)
        return tail

    def start(self, key: Hashable, source: Source) -> DriverTail:
        """A new reader for `key`, reading `source` (unless one was started meanwhile: that one);
        the oldest in use goes when there are `most` already."""
        if (started := self.get(key)) is not None:
            return started
        self._sweep(time.monotonic())
        while len(self._tails) >= self.most:
            self._drop(next(iter(self._tails)))
        tail = DriverTail(self.window, self.settle_s)
        chunks, ended = source()
        self._tails[key] = tail
        self._tasks[key] = asyncio.create_task(tail.pump(chunks, ended), name=f"log-tail {key}")
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep_idle(), name="log-tail sweeper")
        return tail

    async def close(self) -> None:
        """Stops every reader (the relay's cleanup)."""
        for key in list(self._tails):
            self._drop(key)
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper

    def _drop(self, key: Hashable) -> None:
        if (tail := self._tails.pop(key, None)) is not None:
            tail.close()
        if (task := self._tasks.pop(key, None)) is not None:
            task.cancel()

    def _sweep(self, now: float) -> None:
        for key, tail in list(self._tails.items()):
            if now - tail.last_used >= self.idle_s:
                self._drop(key)

    async def _sweep_idle(self) -> None:
        """Drops idle readers while there are any (a reader holds its window and, while its
        driver runs, a stream from its head)."""
        while self._tails:
            await asyncio.sleep(self.idle_s / 2)
            self._sweep(time.monotonic())
