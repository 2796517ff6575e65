"""Bad input to the streaming routes, which the fuzzer (scripts/fuzz.sh) leaves out because a generated
request would hold a stream open: the NDJSON/SSE tool stream, the workspace watch, a process's event
stream and its WebSocket. Each malformed request is a 4xx with a reason before any stream starts, a bad
tool argument is an `isError` result inside the stream, and boxd is alive afterwards."""
import asyncio
import json

import httpx
import pytest
import websockets

from conftest import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}
# Every request here must be answered well within this; a stream that hangs fails the test.
TIMEOUT = httpx.Timeout(15.0)


def http(boxd) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{boxd.port}", headers=AUTH, timeout=TIMEOUT)


def assert_refused(response: httpx.Response, status, label: str):
    """`status` exactly, or any 4xx for `None` (which 4xx is the route's own business)."""
    got = response.status_code
    ok = 400 <= got < 500 if status is None else got == status
    assert ok, f"{label}: {got} {response.text[:300]}"
    detail = response.json().get("detail")
    assert isinstance(detail, str) and detail, f"{label}: no reason in {response.text[:300]}"


def refused_before_streaming(client: httpx.Client, method: str, url: str, status, label: str, **kw):
    """Like `assert_refused`, reading only the status and headers: a request wrongly accepted opens a
    stream (with keep-alives that would keep a plain read waiting), which then fails the test at once."""
    with client.stream(method, url, **kw) as response:
        if response.status_code < 400:
            pytest.fail(f"{label}: accepted ({response.status_code}): a stream was opened")
        response.read()
        assert_refused(response, status, label)


def events(response: httpx.Response) -> list:
    """An NDJSON stream's events, each line one JSON object (keep-alives are blank lines)."""
    return [json.loads(line) for line in response.iter_lines() if line.strip()]


def assert_alive(client: httpx.Client):
    assert client.get("/livez").status_code == 200
    assert client.get("/healthz").status_code == 200


def test_tool_stream_refuses_malformed_requests_before_streaming(boxd):
    with http(boxd) as client:
        cases = [
            ("unknown tool", "/tools/no_such_tool/stream", {"json": {}}, 404),
            ("array body", "/tools/run_shell_command/stream", {"json": [1, 2]}, None),
            ("string body", "/tools/run_shell_command/stream", {"json": "ls"}, None),
            ("broken JSON", "/tools/run_shell_command/stream",
             {"content": b"{", "headers": {"Content-Type": "application/json"}}, None),
            ("not UTF-8", "/tools/run_shell_command/stream",
             {"content": b"\xff\xfe", "headers": {"Content-Type": "application/json"}}, None),
            ("NUL in the tool name", "/tools/run%00shell/stream", {"json": {}}, 404),
        ]
        for label, path, request, status in cases:
            assert_refused(client.post(path, **request), status, label)
        # `null` reads as no arguments: the stream opens and ends with an error event naming the field.
        with client.stream("POST", "/tools/run_shell_command/stream", json=None) as response:
            if response.status_code == 200:
                last = events(response)[-1]
                assert last["type"] == "error" and 400 <= last["status"] < 500, last
                assert "command" in last["detail"], last
            else:
                response.read()
                assert_refused(response, None, "null body")
        assert_alive(client)


@pytest.mark.parametrize(
    "tool,arguments",
    [
        ("run_shell_command", {}),
        ("run_shell_command", {"command": 5}),
        ("run_shell_command", {"command": "true", "timeout": -1}),
        ("run_shell_command", {"command": "true", "timeout": "soon"}),
        ("run_ipython_cell", {"code": ["1"]}),
        ("read_file", {"path": "/etc/passwd"}),
        ("read_file", {"path": "missing\u0000.txt"}),
        ("write_file", {"path": 7, "content": "x"}),
    ],
)
def test_tool_stream_reports_bad_arguments_as_an_error_result(boxd, tool, arguments):
    with http(boxd) as client:
        with client.stream("POST", f"/tools/{tool}/stream", json=arguments) as response:
            assert response.status_code == 200, response.read()[:300]
            seen = events(response)
        assert seen, "empty stream"
        last = seen[-1]
        assert last["type"] in ("result", "error"), seen
        if last["type"] == "result":
            assert last["result"]["isError"] is True, last
            text = last["result"]["content"][0]["text"]
            assert text, last
        else:
            assert 400 <= last["status"] < 500 and last["detail"], last
        assert_alive(client)


def test_watch_refuses_bad_queries_before_streaming(boxd):
    with http(boxd) as client:
        cases = [
            ("outside the workspace", {"path": "/etc"}, 403),
            ("escape with ..", {"path": "../.."}, 403),
            ("missing path", {"path": "no/such/dir"}, 404),
            ("debounce negative", {"debounce_ms": "-1"}, 400),
            ("debounce not a number", {"debounce_ms": "soon"}, 400),
            ("recursive not a boolean", {"recursive": "maybe"}, 400),
            ("include_git not a boolean", {"include_git": "2"}, 400),
        ]
        for label, params, status in cases:
            refused_before_streaming(client, "GET", "/watch", status, label, params=params)
        refused_before_streaming(client, "GET", "/watch?path=a%00b", None, "NUL in path")
        assert_alive(client)


def test_process_streams_refuse_unknown_ids_and_bad_offsets(boxd):
    with http(boxd) as client:
        for label, path, status in [
            ("unknown id", "/processes/p-000000000000/events", 404),
            ("negative offset", "/processes/p-000000000000/events?offset=-1", 400),
            ("offset not a number", "/processes/p-000000000000/events?offset=x", 400),
            ("ws to an unknown id", "/processes/p-000000000000/ws", 404),
        ]:
            assert_refused(client.get(path), status, label)
        started = client.post("/processes", json={"command": "sleep 30"})
        assert started.status_code == 201, started.text
        pid = started.json()["id"]
        # A plain GET (no Upgrade) of a live process's WebSocket is a 4xx, not a hang.
        plain = client.get(f"/processes/{pid}/ws")
        assert 400 <= plain.status_code < 500, plain.text
        assert_refused(client.get(f"/processes/{pid}/events?offset=abc"), 400, "bad offset")
        client.post(f"/processes/{pid}/kill")
        assert_alive(client)


def test_websocket_survives_malformed_frames(boxd):
    with http(boxd) as client:
        started = client.post("/processes", json={"command": "cat", "pty": True})
        assert started.status_code == 201, started.text
        pid = started.json()["id"]

        async def drive():
            url = f"ws://127.0.0.1:{boxd.port}/processes/{pid}/ws"
            async with websockets.connect(url, additional_headers=AUTH, open_timeout=10) as ws:
                for frame in [
                    "not json",
                    "{",
                    json.dumps([1, 2]),
                    json.dumps({"type": "no_such_type"}),
                    json.dumps({"type": "resize", "rows": -1, "cols": "wide"}),
                    json.dumps({"type": "resize", "rows": 10**12, "cols": 10**12}),
                    json.dumps({"type": "signal", "signal": "NOPE"}),
                    json.dumps({"type": "stdin", "data": 5}),
                    json.dumps({"type": "stdin", "data": "a\u0000b"}),
                ]:
                    await ws.send(frame)
                await ws.send(b"still here\n")
                # The terminal echoes the input that follows the bad frames: the connection survived
                # them (a bad frame may be answered with an error event first).
                async with asyncio.timeout(10):
                    seen = ""
                    while "still here" not in seen:
                        message = await ws.recv()
                        seen += message if isinstance(message, str) else message.decode(errors="replace")

        asyncio.run(drive())
        client.post(f"/processes/{pid}/kill")
        assert_alive(client)


def test_process_id_that_is_not_utf8_is_a_json_4xx(boxd):
    with http(boxd) as client:
        for suffix in ("", "/events", "/ws", "/output"):
            assert_refused(client.get(f"/processes/%00%ff{suffix}"), None, f"non-UTF-8 id {suffix}")
