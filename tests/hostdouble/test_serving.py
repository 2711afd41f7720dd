"""The HTTP server the double's host and worker listen with (serving.py): no housekeeping timer, yet a
current Date header on every response and a stop as soon as it is asked for."""

from __future__ import annotations

import asyncio
import time
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from tests.hostdouble.serving import loopback_socket, start_server


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


def test_each_response_carries_the_current_date_and_the_server_stops_when_asked() -> None:
    async def scenario() -> None:
        sock = loopback_socket(0)
        port = sock.getsockname()[1]
        server, task = await start_server(_app, sock, keep_alive_s=5, graceful_s=1, own_signals=True)
        loop = asyncio.get_running_loop()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            dates = []
            for _ in range(2):
                answer = await http.get("/")
                assert answer.status_code == 200 and answer.headers["server"] == "uvicorn"
                dates.append(parsedate_to_datetime(answer.headers["date"]).timestamp())
                assert abs(dates[-1] - time.time()) <= 1.5
                await asyncio.sleep(1.1)  # no timer refreshes it: the next response makes a new one
            assert dates[1] > dates[0]
        asked = loop.time()
        server.should_exit = True  # what the host's shutdown and uvicorn's signal handler do
        await asyncio.wait_for(task, 10)
        assert loop.time() - asked < 5  # woken by the request to stop, not by a periodic look at the flag

    asyncio.run(scenario())
