"""The HTTP server under ``evolm serve``: uvicorn with its limits (connections, keep-alive, header size) and
an h11 protocol that closes a connection whose headers or body do not arrive in time.
"""

from __future__ import annotations

import asyncio
from typing import Any

from evolm.serve.settings import ServeSettings


def guarded_h11(header_timeout_s: float, body_timeout_s: float) -> type:
    """uvicorn's h11 protocol with read deadlines: a connection is closed when a request's headers have not
    arrived ``header_timeout_s`` after the connection opened (or its last reply went out), or its body
    ``body_timeout_s`` after its headers. uvicorn alone waits forever for a request that trickles in
    (its ``timeout_keep_alive`` is only for idle connections, and any byte stops it).
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11(H11Protocol):
        _timer: asyncio.TimerHandle | None = None
        _reading: str = "done"  # "headers", "body" or "done" (a request received, or being answered)

        def _arm(self, reading: str, seconds: float) -> None:
            self._disarm()
            self._reading = reading
            self._timer = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _expired(self) -> None:
            self._timer = None
            if not self.transport.is_closing():
                self.logger.info("closing a connection: request %s not received in time", self._reading)
                self.transport.close()

        def _follow(self) -> None:
            state = self.conn.their_state
            if state is h11.SEND_BODY and self._reading == "headers":
                self._arm("body", body_timeout_s)
            elif state is h11.IDLE and self._reading == "done":
                self._arm("headers", header_timeout_s)
            elif state not in (h11.IDLE, h11.SEND_BODY):
                self._disarm()
                self._reading = "done"

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm("headers", header_timeout_s)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._follow()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._follow()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return GuardedH11


def uvicorn_options(settings: ServeSettings) -> dict[str, Any]:
    """``uvicorn.Config`` arguments for ``settings``' connection limits (read deadlines, keep-alive, headers),
    and no proxy headers."""
    return {"http": guarded_h11(settings.header_timeout_s, settings.body_timeout_s),
            "timeout_keep_alive": settings.keep_alive_s, "limit_concurrency": settings.max_connections,
            "h11_max_incomplete_event_size": settings.max_header_kb * 1024,
            # a client is its peer address (``app.client_of``): uvicorn's default takes X-Forwarded-For from
            # any local connection, which would let one client pass for as many as it likes
            "proxy_headers": False}


def run_server(app: Any, host: str, port: int, log_level: str = "info") -> None:
    """Serve ``app`` until interrupted (uvicorn; the lifespan starts and stops the batcher)."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5,
                **uvicorn_options(app.state.settings))
