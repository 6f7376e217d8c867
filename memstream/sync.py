"""The synchronous client: :func:`connect_sync` gives the async client's methods without
``await``, for plain scripts, notebooks and code that already runs an event loop.

One implementation serves both: the async client runs on an event loop of its own in a
background thread, and :class:`SyncProxy` forwards each attribute of an object to it. A
coroutine method's call runs on that loop and the caller's thread waits for its result; any
other call runs there too (no client object is ever touched by two threads); an object
returned that has coroutine methods of its own (a session, a manager, a profile, …) comes back
proxied the same way, and an async iterator (``subscribe``) as a plain iterator. Nothing is
written twice: a method added to the async API is in the sync one.

Example::

    with memstream.connect_sync() as ms:
        ms.session("chat-1").append_message({"role": "user", "content": "Hi"})
        print(ms.session("chat-1").get_history())
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, TypeVar

from memstream.client import Memstream, connect
from memstream.domain.errors import MemstreamError, UnavailableError

T = TypeVar("T")
# How long closing waits for the client to close and its loop to stop.
CLOSE_TIMEOUT = 30.0


class LoopThread:
    """An event loop running in a daemon thread of its own."""

    def __init__(self, name: str = "memstream-sync") -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop; the calling thread waits for its result."""
        if threading.current_thread() is self.thread:
            coroutine.close()
            raise MemstreamError(
                "a sync memstream client was called from its own loop's thread "
                "(from a callback it runs): use the async client there"
            )
        if self.loop.is_closed() or not self.loop.is_running():
            coroutine.close()
            raise UnavailableError("this sync memstream client is closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise UnavailableError("the call was cancelled: the sync client closed") from None
        except KeyboardInterrupt:
            future.cancel()
            raise

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call a plain function on the loop's thread."""

        async def call() -> T:
            return function(*args, **kwargs)

        return self.run(call())

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self.thread:
            self.thread.join(CLOSE_TIMEOUT)


def _has_coroutine_methods(cls: type) -> bool:
    """Whether instances of ``cls`` are API objects (a public coroutine method), cached."""
    known = _COROUTINE_CLASSES.get(cls)
    if known is None:
        known = _COROUTINE_CLASSES[cls] = any(
            inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member)
            for name, member in inspect.getmembers(cls)
            if not name.startswith("_")
        )
    return known


_COROUTINE_CLASSES: dict[type, bool] = {}


class SyncProxy:
    """An object of the async API used without ``await`` (see the module's docstring)."""

    __slots__ = ("_loop", "_target")

    def __init__(self, target: Any, loop: LoopThread) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_loop", loop)

    def __getattr__(self, name: str) -> Any:
        loop: LoopThread = self._loop
        value = loop.call(getattr, self._target, name)
        if inspect.iscoroutinefunction(value) or inspect.isasyncgenfunction(value):
            return self._bind_async(value)
        if inspect.ismethod(value) or inspect.isfunction(value):
            return self._bind_plain(value)
        return _wrap(value, loop)

    def __setattr__(self, name: str, value: Any) -> None:
        self._loop.call(setattr, self._target, name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._target)) | {"__getattr__"})

    def __repr__(self) -> str:
        return f"<sync {self._target!r}>"

    def _bind_async(self, method: Callable[..., Any]) -> Callable[..., Any]:
        loop: LoopThread = self._loop

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            if inspect.isasyncgenfunction(method):
                return SyncIterator(method(*args, **kwargs), loop)
            result = loop.run(_awaited(method, args, kwargs))
            return _wrap(result, loop)

        return call

    def _bind_plain(self, method: Callable[..., Any]) -> Callable[..., Any]:
        loop: LoopThread = self._loop

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            return _wrap(loop.call(method, *args, **kwargs), loop)

        return call


async def _awaited(method: Callable[..., Awaitable[T]], args: Any, kwargs: Any) -> T:
    return await method(*args, **kwargs)


def _wrap(value: Any, loop: LoopThread) -> Any:
    """A result as the sync caller gets it: API objects proxied, async iterators iterable."""
    if isinstance(value, AsyncIterator):
        return SyncIterator(value, loop)
    if inspect.iscoroutine(value):
        return _wrap(loop.run(value), loop)
    if not isinstance(value, type) and _has_coroutine_methods(type(value)):
        return SyncProxy(value, loop)
    return value


class SyncIterator(Iterator[Any]):
    """An async iterator (such as ``session.subscribe()``) read from another thread."""

    def __init__(self, iterator: AsyncIterator[Any], loop: LoopThread) -> None:
        self._iterator = iterator
        self._loop = loop

    def __iter__(self) -> SyncIterator:
        return self

    def __next__(self) -> Any:
        try:
            return _wrap(self._loop.run(_next(self._iterator)), self._loop)
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        """End the iteration (an async generator's ``aclose``)."""
        close = getattr(self._iterator, "aclose", None)
        if close is not None:
            self._loop.run(close())


async def _next(iterator: AsyncIterator[T]) -> T:
    return await anext(iterator)


class SyncMemstream(SyncProxy):
    """:class:`~memstream.client.Memstream` without ``await``; ``close()`` (or the end of a
    ``with``) closes it and stops its loop's thread."""

    __slots__ = ("__weakref__", "_closer")

    def __init__(
        self, ms: Memstream, loop: LoopThread, context: AbstractAsyncContextManager[Memstream]
    ) -> None:
        super().__init__(ms, loop)
        # closed at the latest when it is collected or the interpreter exits (an embedded
        # client owns a nats-server process)
        object.__setattr__(self, "_closer", weakref.finalize(self, _close, loop, context))

    def close(self) -> None:
        self._closer()

    def __enter__(self) -> SyncMemstream:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _close(loop: LoopThread, context: AbstractAsyncContextManager[Memstream]) -> None:
    if not loop.loop.is_running():
        return
    try:
        loop.run(context.__aexit__(None, None, None))
    finally:
        loop.stop()


def async_client(client: Memstream | SyncMemstream) -> Memstream:
    """The async client ``client`` is or runs (a sync client's: its calls made on another loop
    run on the sync client's own, see :mod:`memstream.home_loop`)."""
    if isinstance(client, SyncProxy):
        target: Memstream = object.__getattribute__(client, "_target")
        return target
    return client


def connect_sync(**options: Any) -> SyncMemstream:
    """Connect as :func:`memstream.connect` does (same keyword arguments), for code without
    ``await``: the client runs on an event loop in a background thread. Use it in a ``with``
    block or call ``close()``.

    Raises:
        The errors of :func:`memstream.connect` (the loop's thread is stopped first).
    """
    loop = LoopThread()
    context = connect(**options)
    try:
        ms = loop.run(context.__aenter__())
    except BaseException:
        loop.stop()
        raise
    return SyncMemstream(ms, loop, context)
