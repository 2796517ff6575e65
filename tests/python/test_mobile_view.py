"""The live view of the device (`GET /adb/view`, what nginx serves at `/websockify/` for
`MobileSandbox.mobile_url`): the page, its frames (`/adb/screen`, `/adb/stream`) and its input
(`/adb/input`), against the project's device stand-in (tests/adb/device.py) as in test_mobile.py."""
import io
import os
import re
import shutil
import statistics
import time

import pytest
import requests
from PIL import Image

import test_mobile
from conftest import TOKEN, Boxd
# `boxd` is test_mobile's fixture; it starts boxd on this module's `device` (which counts captures).
from test_mobile import FAKEBIN, FakeDevice, boxd, free_port, wait_for  # noqa: F401

AUTH = {"Authorization": f"Bearer {TOKEN}"}
# src/adb/view.rs
MAX_VIEW_STREAMS = 4
MAX_VIEW_FPS = 15


def png(width, height, color=(20, 120, 220)):
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, "PNG")
    return out.getvalue()


@pytest.fixture
def captures(tmp_path, monkeypatch):
    """Every `screencap` the device runs appends a line to this file (a fakebin of its own)."""
    fakebin = tmp_path / "fakebin"
    shutil.copytree(FAKEBIN, fakebin)
    count = tmp_path / "captures"
    real = fakebin / "screencap.real"
    (fakebin / "screencap").rename(real)
    wrapper = fakebin / "screencap"
    wrapper.write_text(f'#!/bin/sh\necho x >> "{count}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setattr(test_mobile, "FAKEBIN", fakebin)
    return count


@pytest.fixture
def device(tmp_path, captures):
    fake = FakeDevice(tmp_path / "device")
    fake.screenshot.write_bytes(png(320, 640))
    yield fake
    fake.stop()


def url(server, path):
    return f"http://127.0.0.1:{server.port}{path}"


def count(captures):
    return len(captures.read_text().splitlines()) if captures.exists() else 0


def parts(response, limit, seconds=20):
    """The first `limit` frames of a multipart stream: (headers, body) each."""
    boundary = re.search(r"boundary=(\S+)", response.headers["content-type"]).group(1).encode()
    raw = response.raw
    deadline = time.monotonic() + seconds
    frames = []
    while len(frames) < limit:
        assert time.monotonic() < deadline, f"{len(frames)} frames within {seconds} s"
        line = raw.readline()
        assert line == b"--" + boundary + b"\r\n", line
        headers = {}
        while (line := raw.readline()) != b"\r\n":
            name, value = line.decode().split(":", 1)
            headers[name.strip().lower()] = value.strip()
        body = raw.read(int(headers["content-length"]))
        assert raw.read(2) == b"\r\n"
        frames.append((headers, body))
    return frames


def test_the_page_is_self_contained_and_reads_its_password(boxd):
    for prefix in ["", "/fastapi"]:
        page = requests.get(url(boxd, f"{prefix}/adb/view?password={TOKEN}"), headers=AUTH, timeout=10)
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert page.headers["referrer-policy"] == "no-referrer"
        assert "connect-src 'self'" in page.headers["content-security-policy"]
        html = page.text
        # No external script, style, font or image: everything it needs is in it.
        assert not re.search(r"<script[^>]+src=|<link|@import|https?://", html), html
        assert 'get("password")' in html and "Bearer " in html
        assert "../fastapi/adb/" in html and "stream?fps=" in html and '"input"' in html


def test_the_page_is_served_without_the_token(boxd):
    assert requests.get(url(boxd, "/adb/view?password=x"), timeout=10).status_code == 200


def test_a_frame_is_the_device_screen_with_the_token_only(boxd, device):
    for prefix in ["", "/fastapi"]:
        frame = requests.get(url(boxd, f"{prefix}/adb/screen"), headers=AUTH, timeout=20)
        assert frame.status_code == 200, frame.text
        assert frame.headers["content-type"] == "image/png"
        assert frame.headers["x-screen-size"] == "320x640"
        assert frame.content == device.screenshot.read_bytes()
        assert Image.open(io.BytesIO(frame.content)).size == (320, 640)
        for headers in [{}, {"Authorization": "Bearer wrong"}]:
            refused = requests.get(url(boxd, f"{prefix}/adb/screen"), headers=headers, timeout=10)
            assert refused.status_code == 403
            refused = requests.get(url(boxd, f"{prefix}/adb/stream"), headers=headers, timeout=10)
            assert refused.status_code == 403
            refused = requests.post(url(boxd, f"{prefix}/adb/input"), headers=headers,
                                    json={"action": "tap", "coordinate": [1, 1]}, timeout=10)
            assert refused.status_code == 403
    assert device.lines() == []
    # Scaled on request; the device's size still says where taps land.
    small = requests.get(url(boxd, "/adb/screen?max_side=160"), headers=AUTH, timeout=20)
    assert small.status_code == 200
    assert Image.open(io.BytesIO(small.content)).size == (80, 160)
    assert small.headers["x-screen-size"] == "320x640"
    for query in ["max_side=5", "max_side=x", "fps=3", "colour=red"]:
        bad = requests.get(url(boxd, f"/adb/screen?{query}"), headers=AUTH, timeout=10)
        assert bad.status_code == 400, (query, bad.text)


def test_the_stream_sends_frames_at_its_rate(boxd, device):
    for query in ["fps=0", f"fps={MAX_VIEW_FPS + 1}", "fps=-1", "max_side=100000"]:
        bad = requests.get(url(boxd, f"/adb/stream?{query}"), headers=AUTH, timeout=10)
        assert bad.status_code == 400, (query, bad.text)
    with requests.get(url(boxd, "/fastapi/adb/stream?fps=4"), headers=AUTH, stream=True,
                      timeout=20) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("multipart/x-mixed-replace")
        assert stream.headers["x-accel-buffering"] == "no"
        started = time.monotonic()
        frames = parts(stream, 5)
        elapsed = time.monotonic() - started
    for headers, body in frames:
        assert headers["content-type"] == "image/png"
        assert headers["x-screen-size"] == "320x640"
        assert body == device.screenshot.read_bytes()
    # Five frames at 4 per second: the first at once, the other four a quarter second apart.
    assert elapsed >= 0.9, elapsed


def test_a_stream_stops_capturing_when_its_client_goes_away(boxd, device, captures):
    streams = []
    try:
        for _ in range(MAX_VIEW_STREAMS):
            stream = requests.get(url(boxd, f"/adb/stream?fps={MAX_VIEW_FPS}"), headers=AUTH,
                                  stream=True, timeout=20)
            assert stream.status_code == 200
            parts(stream, 1)
            streams.append(stream)
        busy = requests.get(url(boxd, "/adb/stream"), headers=AUTH, timeout=10)
        assert busy.status_code == 429, busy.text
        # One client goes away: its slot comes back.
        streams.pop().close()

        def another():
            answer = requests.get(url(boxd, "/adb/stream"), headers=AUTH, stream=True, timeout=20)
            if answer.status_code == 200:
                return answer
            assert answer.status_code == 429, answer.text
            answer.close()
            return None

        streams.append(wait_for(another, 10, "a closed stream's slot is free again"))
    finally:
        for stream in streams:
            stream.close()
    # Every client gone: every slot comes back, and the device is no longer asked for frames.
    def all_free():
        held = []
        try:
            for _ in range(MAX_VIEW_STREAMS):
                answer = requests.get(url(boxd, "/adb/stream?fps=1"), headers=AUTH, stream=True,
                                      timeout=20)
                held.append(answer)
                if answer.status_code != 200:
                    return False
            return True
        finally:
            for answer in held:
                answer.close()

    wait_for(all_free, 10, "every closed stream's slot is free")
    # That nothing more is captured can only be seen over a while: the count holds still for half a
    # second, then for a second more (four streams left running would add 15 captures a second each).
    def settled():
        before = count(captures)
        time.sleep(0.5)
        return before if count(captures) == before else None

    quiet = wait_for(settled, 10, "captures stop")
    time.sleep(1)
    assert count(captures) == quiet


def test_input_taps_in_device_pixels_and_types(boxd, device):
    post = lambda body: requests.post(url(boxd, "/adb/input"), headers=AUTH, json=body, timeout=20)
    # A model's scaled screenshot changes how the tool reads coordinates, not how the view does.
    with boxd.client() as client:
        shot = client.call_tool("adb", {"action": "get_screenshot", "max_size": 160})
        assert shot["isError"] is False
        assert client.call_tool("adb", {"action": "tap", "coordinate": [40, 80]})["isError"] is False
    assert device.lines() == ["input tap 160 320"]
    answers = [post({"action": "tap", "coordinate": [40, 80]}),
               post({"action": "input_text", "text": "hi there"}),
               post({"action": "key_event", "code": "ENTER"}),
               post({"action": "swipe", "start": [1, 2], "end": [3, 4]})]
    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
    assert answers[0].json() == {"done": "Tapped at (40, 80)"}
    assert device.lines()[1:] == ["input tap 40 80", "input text hi there", "input keyevent 66",
                                  "input swipe 1 2 3 4 300"]
    for body in [{"action": "launch_app", "package": "com.x"}, {"action": "tap"},
                 {"action": "tap", "coordinate": [-1, 5]}, {"action": "get_screenshot"}, {}]:
        refused = post(body)
        assert refused.status_code == 400, (body, refused.text)
    assert len(device.lines()) == 5


def test_input_is_a_409_while_a_debugging_authorization_dialog_has_focus(boxd, device):
    """The view's clicks and keys pass the same focus check as the tool's: while the device asks whether
    to trust an ADB host, nothing is sent, the answer is 409 with the reason, and frames still come."""
    post = lambda body: requests.post(url(boxd, "/adb/input"), headers=AUTH, json=body, timeout=20)
    device.dialog.write_text("QUFBQQ== tenant@sandbox\n")
    for body in [{"action": "tap", "coordinate": [540, 1200]}, {"action": "key_event", "code": "ENTER"},
                 {"action": "input_text", "text": "\t\n"}, {"action": "long_press", "coordinate": [5, 5]}]:
        refused = post(body)
        assert refused.status_code == 409, (body, refused.status_code, refused.text)
        assert "debugging-authorization dialog" in refused.text, refused.text
    assert requests.get(url(boxd, "/adb/screen"), headers=AUTH, timeout=20).status_code == 200
    assert device.lines() == [] and device.dialog.exists()
    device.dismiss_dialog()
    assert post({"action": "tap", "coordinate": [1, 2]}).json() == {"done": "Tapped at (1, 2)"}
    assert device.lines() == ["input tap 1 2"]


def test_no_device_is_a_503_with_the_reason(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Boxd(workspace, "--tools", "adb", "--adb-connect", f"127.0.0.1:{free_port()}")
    try:
        for path in ["/adb/screen", "/adb/stream"]:
            answer = requests.get(url(server, path), headers=AUTH, timeout=30)
            assert answer.status_code == 503, answer.text
            assert "adb" in answer.text and "127.0.0.1" in answer.text, answer.text
    finally:
        server.stop()


def test_figures(boxd, device):
    """Frame latency and the rate a stream reaches with the fake device (printed with -s)."""
    latencies = []
    with requests.Session() as session:
        for _ in range(30):
            started = time.monotonic()
            frame = session.get(url(boxd, "/adb/screen"), headers=AUTH, timeout=20)
            latencies.append(time.monotonic() - started)
            assert frame.status_code == 200
    with requests.get(url(boxd, f"/adb/stream?fps={MAX_VIEW_FPS}"), headers=AUTH, stream=True,
                      timeout=20) as stream:
        started = time.monotonic()
        frames = parts(stream, 31)
        fps = 30 / (time.monotonic() - started)
    assert len(frames) == 31
    print(f"\n/adb/screen latency p50 {statistics.median(latencies) * 1000:.1f} ms, "
          f"max {max(latencies) * 1000:.1f} ms; /adb/stream at fps={MAX_VIEW_FPS}: {fps:.1f} fps")
    assert fps > 1
