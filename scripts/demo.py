"""Demo client: start a background stream, crash the worker, reattach with ``starting_after``.

    python scripts/demo.py start [--events 25]   # start a response, print some events, disconnect
    python scripts/demo.py crash                 # kill the worker process (needs the crash endpoint on)
    python scripts/demo.py stream                # reattach where we left off and stream to the end
    python scripts/demo.py all                   # the three in a row

Works against ``func start``, the host double, or a deployed app:
``RESILIENT_BASE_URL`` (default http://localhost:7071), ``RESILIENT_FUNCTION_KEY`` (sent as
``x-functions-key`` for the Responses endpoints) and ``RESILIENT_ADMIN_KEY`` (the master key, for the
admin-level crash endpoint; it exists only when ``RESILIENT_ENABLE_CRASH_ENDPOINT=true``).
The last response id and sequence number are kept in ``.demo-state.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from openai import OpenAI

STATE = Path(".demo-state.json")


def _client() -> OpenAI:
    headers = {}
    if os.environ.get("RESILIENT_FUNCTION_KEY"):
        headers["x-functions-key"] = os.environ["RESILIENT_FUNCTION_KEY"]
    return OpenAI(base_url=_base_url(), api_key="not-used", default_headers=headers, max_retries=0)


def _base_url() -> str:
    return os.environ.get("RESILIENT_BASE_URL", "http://localhost:7071").rstrip("/")


def _show(event: Any) -> None:
    kind = event.type
    if kind == "response.output_text.delta":
        print(event.delta, end="", flush=True)
    elif kind == "response.output_item.done":
        status = getattr(event.item, "status", None)
        if status == "incomplete":
            print(f"\n  [seq {event.sequence_number}] this phase was interrupted: it is not kept, and it "
                  "streams again from its start", flush=True)
        else:
            print(f"\n  [seq {event.sequence_number}] a phase finished and is checkpointed", flush=True)
    elif kind == "response.in_progress" and event.sequence_number > 2:
        print(f"\n  [seq {event.sequence_number}] RECOVERED: the worker was replaced; "
              f"{len(event.response.output)} finished phase(s) are kept and the interrupted one starts over "
              "(no event is missing or repeated: what follows is new text)", flush=True)
    elif not kind.startswith("response.content_part") and kind != "response.output_text.done":
        print(f"\n  [seq {event.sequence_number}] {kind}", flush=True)


def start(events: int) -> None:
    stream = _client().responses.create(
        model="research", input="How do durable orchestrations survive crashes?", background=True, stream=True,
        metadata={"research_phases": "4", "words_per_phase": "60", "delta_delay_ms": "150"},
    )
    response_id = ""
    last_seq = -1
    for seen, event in enumerate(stream, start=1):
        _show(event)
        if event.type == "response.created":
            response_id = event.response.id
        last_seq = event.sequence_number
        if seen >= events:
            break
    stream.close()
    STATE.write_text(json.dumps({"id": response_id, "after": last_seq}))
    print(f"\n-- {response_id}: disconnected after seq {last_seq}; state in {STATE}")


def _load() -> dict[str, Any]:
    if not STATE.exists():
        sys.exit("no .demo-state.json: run 'demo.py start' first")
    loaded: dict[str, Any] = json.loads(STATE.read_text())
    return loaded


def crash() -> None:
    request = urllib.request.Request(f"{_base_url()}/ops/crash", method="POST", data=b"")
    if os.environ.get("RESILIENT_ADMIN_KEY"):
        request.add_header("x-functions-key", os.environ["RESILIENT_ADMIN_KEY"])
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            print(f"crash endpoint answered {answer.status}: is RESILIENT_ENABLE_CRASH_ENDPOINT on?")
    except urllib.error.HTTPError as error:
        if error.code == 404:
            sys.exit("crash endpoint is off: set RESILIENT_ENABLE_CRASH_ENDPOINT=true in local.settings.json "
                     "and restart")
        print(f"-- worker crashed (host answered {error.code})")
    except OSError:
        print("-- worker crashed (connection dropped)")


def stream(response_id: str | None, after: int | None) -> None:
    state = _load() if response_id is None or after is None else {}
    rid = response_id or state["id"]
    start_after = after if after is not None else int(state["after"])
    print(f"-- reattaching to {rid} with starting_after={start_after}")
    client = _client()
    deadline = time.monotonic() + 30
    while True:
        try:
            for event in client.responses.retrieve(rid, stream=True, starting_after=start_after):
                _show(event)
                start_after = event.sequence_number
            break
        except Exception as error:  # the worker may still be restarting
            if time.monotonic() > deadline:
                raise
            print(f"-- not ready yet ({type(error).__name__}); retrying")
            time.sleep(1)
    final = client.responses.retrieve(rid)
    print(f"\n-- {final.status}: {len(final.output)} output items, {len(final.output_text)} characters")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["start", "crash", "stream", "all"])
    parser.add_argument("--events", type=int, default=25, help="events to read before disconnecting (start)")
    parser.add_argument("--id", help="response id (stream)")
    parser.add_argument("--after", type=int, help="starting_after (stream)")
    args = parser.parse_args()
    if args.command in ("start", "all"):
        start(args.events)
    if args.command in ("crash", "all"):
        crash()
    if args.command in ("stream", "all"):
        stream(args.id, args.after)


if __name__ == "__main__":
    main()
