"""A client's home loop: the event loop it was connected on runs every call made on it.

A memstream client holds a NATS connection, futures and read-model connections of the event
loop (and thread) it was connected on. A call made on another loop — another thread's, or the
new loop of ``asyncio.run`` that ``Runner.run_sync`` and other synchronous wrappers start — is
handed to the home loop (``call_soon_threadsafe``) and its result awaited by the caller's loop
without blocking either. A call on the home loop runs as it is, at the cost of one check.

A call the home loop does not take up within :data:`TAKE_UP_SECONDS` (its thread is blocked,
typically by the very caller waiting for this call) is abandoned before it starts and fails
with :class:`UnavailableError` saying so: nothing of it ran, so nothing was stored. Once
taken up, a call runs to its end on the home loop, whatever the caller does meanwhile, unless
the caller cancels it.

:func:`home_loop_methods` applies this to every public coroutine (and async generator) method
of an API class.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar, cast

from memstream.domain.errors import MemstreamError, UnavailableError

T = TypeVar("T")
C = TypeVar("C", bound=type)

# How long a call on another loop waits for the home loop to take it up: a running loop
# takes up a callback within milliseconds unless something blocks its thread.
TAKE_UP_SECONDS = 5.0


def caller_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def run_home(
    home: asyncio.AbstractEventLoop,
    start: Callable[[], Coroutine[Any, Any, T]],
    *,
    take_up: float | None = None,
) -> T:
    """The result of ``start()``'s coroutine, run on ``home`` and awaited on the caller's loop.

    Raises:
        UnavailableError: ``home`` is closed or not running, or did not take the call up
            within ``take_up`` seconds (default :data:`TAKE_UP_SECONDS`); the call did not
            start.
    """
    _check_running(home)
    handoff = _Handoff(home, start)
    home.call_soon_threadsafe(handoff.begin)
    wait = TAKE_UP_SECONDS if take_up is None else take_up
    taken = asyncio.wrap_future(handoff.taken)
    done = asyncio.wrap_future(handoff.result)
    try:
        finished, _ = await asyncio.wait({taken}, timeout=wait)
        if not finished and handoff.abandon():
            raise _not_taken_up(wait)
        return cast(T, await done)
    except asyncio.CancelledError:
        handoff.cancel()
        raise
    finally:
        taken.cancel()


def wait_home(
    home: asyncio.AbstractEventLoop,
    start: Callable[[], Coroutine[Any, Any, T]],
    *,
    take_up: float | None = None,
) -> T:
    """The result of ``start()``'s coroutine, run on ``home`` while this thread waits for it
    (blocking: for synchronous methods, on a thread other than ``home``'s).

    Raises:
        UnavailableError: as :func:`run_home`.
        MemstreamError: called on ``home``'s own thread, whose loop would wait for itself.
    """
    if caller_loop() is home:
        raise MemstreamError(
            "a synchronous call cannot wait on the event loop it runs on (its client's): "
            "await the async method there, or use memstream.connect_sync()"
        )
    _check_running(home)
    handoff = _Handoff(home, start)
    home.call_soon_threadsafe(handoff.begin)
    wait = TAKE_UP_SECONDS if take_up is None else take_up
    try:
        handoff.taken.result(timeout=wait)
    except concurrent.futures.TimeoutError:
        if handoff.abandon():
            raise _not_taken_up(wait) from None
    return cast(T, handoff.result.result())


def run_now(coroutine: Coroutine[Any, Any, T]) -> tuple[bool, T | None]:
    """``(True, result)`` of ``coroutine`` run to its end at once, if it never has to wait
    (a read whose read model has this client's writes, on the client's own loop, where
    blocking for it would deadlock); ``(False, None)`` if it would have to wait: it is then
    closed, having done only what precedes its first wait."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return True, done.value
    coroutine.close()
    return False, None


def _check_running(home: asyncio.AbstractEventLoop) -> None:
    if home.is_closed():
        raise UnavailableError(
            "this memstream client's event loop is closed: connect on the loop that uses it, "
            "or use memstream.connect_sync(), whose loop runs in a thread of its own"
        )
    if not home.is_running():
        raise UnavailableError(
            "the event loop this memstream client was connected on is not running, so it "
            "cannot serve a call from another loop: connect on the loop that uses the client, "
            "or use memstream.connect_sync(), whose loop runs in a thread of its own"
        )


def _not_taken_up(wait: float) -> UnavailableError:
    return UnavailableError(
        f"this memstream client's event loop did not take the call up within {wait:g} s: its "
        "thread is blocked (is it waiting for this call?); the call did not run. Await the "
        "call on that loop, or use memstream.connect_sync(), whose loop runs in a thread of "
        "its own"
    )


class _Handoff:
    """One call handed to the home loop: taken up there, or abandoned by its caller first."""

    def __init__(
        self, home: asyncio.AbstractEventLoop, start: Callable[[], Coroutine[Any, Any, Any]]
    ) -> None:
        self._home = home
        self._start = start
        self._lock = threading.Lock()
        self._abandoned = False
        self._task: asyncio.Task[Any] | None = None
        self.taken: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.result: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def begin(self) -> None:  # on the home loop
        with self._lock:
            if self._abandoned:
                return
            self.taken.set_result(None)
            try:
                task = self._task = self._home.create_task(self._start())
            except BaseException as error:  # the method refused its arguments at once
                self.result.set_exception(error)
                return
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self.result.cancel()
        elif (error := task.exception()) is not None:
            self.result.set_exception(error)
        else:
            self.result.set_result(task.result())

    def abandon(self) -> bool:
        """Whether the call is given up (it was not taken up; now it never will be)."""
        with self._lock:
            if self.taken.done():
                return False
            self._abandoned = True
            return True

    def cancel(self) -> None:
        """The caller was cancelled: so is the call, wherever it got to."""
        with self._lock:
            self._abandoned = True
            task = self._task
        if task is not None and not self._home.is_closed():
            self._home.call_soon_threadsafe(task.cancel)


def client_loop(api: Any) -> asyncio.AbstractEventLoop | None:
    """The home loop of an API object over a client (``api._ms``; None: a client without one,
    such as a test's fake, whose calls run where they are made)."""
    return getattr(getattr(api, "_ms", None), "loop", None)


def home_loop_methods(home: Callable[[Any], asyncio.AbstractEventLoop | None]) -> Callable[[C], C]:
    """A class decorator: each public coroutine method (and async generator method) defined
    in the class runs on ``home(self)``'s loop when called on another (see the module)."""

    def decorate(cls: C) -> C:
        for name, member in list(vars(cls).items()):
            if name.startswith("_"):
                continue
            if inspect.iscoroutinefunction(member):
                setattr(cls, name, _homed(member, home))
            elif inspect.isasyncgenfunction(member):
                setattr(cls, name, _homed_generator(member, home))
        return cls

    return decorate


def _homed(
    method: Callable[..., Coroutine[Any, Any, T]],
    home: Callable[[Any], asyncio.AbstractEventLoop | None],
) -> Callable[..., Coroutine[Any, Any, T]]:
    @functools.wraps(method)
    async def call(self: Any, *args: Any, **kwargs: Any) -> T:
        loop = home(self)
        if loop is None or loop is asyncio.get_running_loop():
            return await method(self, *args, **kwargs)
        return await run_home(loop, lambda: method(self, *args, **kwargs))

    return call


def _homed_generator(
    method: Callable[..., AsyncIterator[T]],
    home: Callable[[Any], asyncio.AbstractEventLoop | None],
) -> Callable[..., AsyncIterator[T]]:
    @functools.wraps(method)
    async def iterate(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[T]:
        loop = home(self)
        if loop is None or loop is asyncio.get_running_loop():
            async for item in method(self, *args, **kwargs):
                yield item
            return
        iterator = method(self, *args, **kwargs)  # runs nothing until its first step
        try:
            while True:
                more, item = await run_home(loop, lambda: _step(iterator))
                if not more:
                    return
                yield item
        finally:
            if not loop.is_closed() and loop.is_running():
                await run_home(loop, lambda: _close(iterator))

    return iterate


async def _step(iterator: AsyncIterator[Any]) -> tuple[bool, Any]:
    try:
        return True, await anext(iterator)
    except StopAsyncIteration:
        return False, None


async def _close(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()
