"""The `computer` tool through the SDK's own `GuiSandbox.computer_use`, on a real Xvfb with a real Tk
window (tests/computer/recorder.py) that records every event it receives."""
import base64
import io
import json
import os
import pathlib
import queue
import subprocess
import threading
import time

import pytest
from agentscope_runtime.sandbox.box.gui.gui_sandbox import GuiSandbox

from conftest import Boxd

RECORDER = pathlib.Path(__file__).resolve().parents[1] / "computer" / "recorder.py"


class Desktop:
    """Xvfb on a display it picks itself, and the recording window on it."""

    def __init__(self, size="1280x800"):
        read, write = os.pipe()
        self.xvfb = subprocess.Popen(
            ["Xvfb", "-displayfd", str(write), "-screen", "0", f"{size}x24", "-nolisten", "tcp"],
            pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        os.close(write)
        with os.fdopen(read) as numbers:
            self.display = ":" + numbers.readline().strip()
        self.events = queue.Queue()
        self.recorder = subprocess.Popen(
            ["/usr/bin/python3", str(RECORDER)],
            env={**os.environ, "DISPLAY": self.display},
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        ready = self.next(lambda event: event.get("ready"), timeout=20)
        self.width, self.height = ready["width"], ready["height"]

    def _read(self):
        for line in self.recorder.stdout:
            self.events.put(json.loads(line))

    def next(self, wanted, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if wanted(event):
                return event
        raise AssertionError("the window did not receive the expected event")

    def drain(self):
        while not self.events.empty():
            self.events.get_nowait()

    def stop(self):
        for process in (self.recorder, self.xvfb):
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture
def desktop():
    screen = Desktop()
    yield screen
    screen.stop()


@pytest.fixture
def computer(desktop, tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Boxd(workspace, "--tools", "computer", "--display", desktop.display)
    with server.client() as client:
        sandbox = GuiSandbox.__new__(GuiSandbox)
        sandbox.call_tool = client.call_tool
        yield sandbox
    server.stop()


def texts(result):
    return [item["text"] for item in result["content"] if item["type"] == "text"]


def png_pixels(result):
    from PIL import Image  # pillow comes with the client's dependencies

    image = [item for item in result["content"] if item["type"] == "image"][0]
    assert image["mimeType"] == "image/png"
    return Image.open(io.BytesIO(base64.b64decode(image["data"]))).convert("RGB")


def test_upstream_texts_and_errors_are_exact(computer, desktop):
    assert texts(computer.computer_use("mouse_move", [400, 310])) == ["Moved cursor to: (400, 310)"]
    assert texts(computer.computer_use("left_click")) == ["Left clicked"]
    assert json.loads(texts(computer.computer_use("get_cursor_position"))[0]) == {"x": 400, "y": 310}
    for action, arguments, message in [
        ("left_click", {"coordinate": [1280, 5]}, "Coordinates (1280, 5) are outside display bounds of 1280x800"),
        ("mouse_move", {}, "Coordinate required for mouse_move"),
        ("left_click_drag", {}, "Coordinate required for left_click_drag"),
        ("key", {}, "Text required for key"),
        ("type", {}, "Text required for type"),
        ("key", {"text": "ctrl+Warp"}, "Invalid key: warp"),
    ]:
        result = computer.computer_use(action, **arguments)
        assert result["isError"] is True, (action, result)
        assert texts(result) == [message]
    unknown = computer.computer_use("teleport")
    assert unknown["isError"] is True and texts(unknown)[0].startswith("Unknown action: teleport")


def test_typed_text_arrives_whole_shifted_and_unicode(computer, desktop):
    computer.computer_use("left_click", [400, 310])
    typed = 'Hi! "Q" é€😀 a+b=c'
    assert texts(computer.computer_use("type", text=typed)) == [f"Typed text: {typed}"]
    desktop.next(lambda event: event.get("event") == "text" and event["text"] == typed)


def test_keys_chords_and_x_names(computer, desktop):
    computer.computer_use("left_click", [400, 310])
    desktop.drain()
    assert texts(computer.computer_use("key", text="ctrl+a")) == ["Pressed key: ctrl+a"]
    chord = desktop.next(lambda event: event.get("event") == "key" and event["keysym"] == "a")
    assert chord["state"] & 4, "Control was held"
    for name, keysym in [("KP_Enter", "KP_Enter"), ("Print", "Print"), ("apostrophe", "apostrophe"),
                         ("F13", "F13"), ("Page_Up", "Prior"), ("super", "Super_L")]:
        computer.computer_use("key", text=name)
        desktop.next(lambda event, keysym=keysym: event.get("event") == "key" and event["keysym"] == keysym)


def test_clicks_land_where_asked_and_a_double_click_is_one(computer, desktop):
    desktop.drain()
    assert texts(computer.computer_use("right_click", [600, 500])) == ["Right clicked"]
    press = desktop.next(lambda event: event.get("event") == "press")
    assert (press["button"], press["x"], press["y"]) == (3, 600, 500)
    assert texts(computer.computer_use("middle_click", [610, 510])) == ["Middle clicked"]
    assert desktop.next(lambda event: event.get("event") == "press")["button"] == 2
    assert texts(computer.computer_use("double_click", [620, 520])) == ["Double clicked"]
    double = desktop.next(lambda event: event.get("event") == "double")
    assert (double["x"], double["y"]) == (620, 520)


def test_drag_presses_at_the_pointer_and_releases_at_the_target(computer, desktop):
    computer.computer_use("mouse_move", [100, 400])
    desktop.drain()
    assert texts(computer.computer_use("left_click_drag", [700, 450])) == ["Dragged to: (700, 450)"]
    press = desktop.next(lambda event: event.get("event") == "press")
    release = desktop.next(lambda event: event.get("event") == "release")
    assert (press["x"], press["y"], release["x"], release["y"]) == (100, 400, 700, 450)


def test_screenshot_is_the_screen_with_exact_colours(computer, desktop):
    result = computer.computer_use("get_screenshot")
    assert result["isError"] is False
    assert json.loads(texts(result)[0]) == {"display_width_px": 1280, "display_height_px": 800}
    image = png_pixels(result)
    assert image.size == (1280, 800)
    assert [image.getpixel((x, 50)) for x in (25, 75, 125, 175)] == [
        (255, 0, 0), (0, 255, 0), (0, 0, 255), (0, 0, 0)]
    assert image.getpixel((1000, 700)) == (255, 255, 255)


def test_the_model_contracts_actions(computer, desktop):
    call = computer.call_tool
    desktop.drain()
    scrolled = call("computer", {"action": "scroll", "coordinate": [640, 600], "scroll_direction": "down", "scroll_amount": 2})
    assert texts(scrolled) == ["Scrolled down by 2"]
    wheel = [desktop.next(lambda event: event.get("event") == "press") for _ in range(2)]
    assert [event["button"] for event in wheel] == [5, 5]
    assert texts(call("computer", {"action": "triple_click", "coordinate": [650, 610]})) == ["Triple clicked"]
    desktop.next(lambda event: event.get("event") == "triple")
    assert texts(call("computer", {"action": "left_mouse_down", "coordinate": [10, 10]})) == ["Left mouse down"]
    assert texts(call("computer", {"action": "left_mouse_up", "coordinate": [30, 30]})) == ["Left mouse up"]
    # The press at the first point, the release at the second (a drag by hand).
    desktop.next(lambda event: event.get("event") == "press" and (event["x"], event["y"]) == (10, 10))
    desktop.next(lambda event: event.get("event") == "release" and (event["x"], event["y"]) == (30, 30))
    held = call("computer", {"action": "hold_key", "text": "shift", "duration": 0.2})
    assert texts(held) == ["Held key: shift for 0.2s"]
    assert texts(call("computer", {"action": "wait", "duration": 0.1})) == ["Waited 0.1s"]
    zoom = call("computer", {"action": "zoom", "region": [0, 0, 200, 100]})
    image = png_pixels(zoom)
    assert image.size == (1280, 640)
    assert image.getpixel((80, 300)) == (255, 0, 0)
    jpeg = call("computer", {"action": "screenshot", "format": "jpeg", "quality": 50})
    assert [item["mimeType"] for item in jpeg["content"] if item["type"] == "image"] == ["image/jpeg"]


def test_a_batch_stops_at_the_first_failure(computer, desktop):
    result = computer.call_tool("computer_batch", {"actions": [
        {"action": "mouse_move", "coordinate": [5, 5]},
        {"action": "key", "text": "nosuchkey"},
        {"action": "left_click"},
    ], "screenshot": True})
    assert result["isError"] is True
    assert texts(result)[:3] == ["Moved cursor to: (5, 5)", "Invalid key: nosuchkey",
                                 "Not executed: an earlier computer action in this turn failed."]
    assert any(item["type"] == "image" for item in result["content"])


def test_an_unreachable_display_is_named_in_readiness_and_calls(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Boxd(workspace, "--tools", "computer", "--display", ":4242")
    try:
        with server.client() as client:
            sandbox = GuiSandbox.__new__(GuiSandbox)
            sandbox.call_tool = client.call_tool
            deadline = time.monotonic() + 10
            status = {}
            while time.monotonic() < deadline:
                status = client.session.get(f"{client.base_url}/readyz").json()
                if status["families"]["computer"]["status"] == "failed":
                    break
                time.sleep(0.05)
            assert status["families"]["computer"]["status"] == "failed"
            assert ":4242" in status["families"]["computer"]["reason"]
            result = sandbox.computer_use("get_screenshot")
            assert result["isError"] is True
            assert ":4242" in json.dumps(result)
    finally:
        server.stop()


def test_a_scaled_screenshot_and_coordinates_that_follow_it(tmp_path):
    big = Desktop(size="2560x1600")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Boxd(workspace, "--tools", "computer", "--display", big.display,
                  "--screenshot-max", "1280x800")
    try:
        with server.client() as client:
            sandbox = GuiSandbox.__new__(GuiSandbox)
            sandbox.call_tool = client.call_tool
            shot = sandbox.computer_use("get_screenshot")
            size = json.loads(texts(shot)[0])
            assert size == {"display_width_px": 1280, "display_height_px": 800,
                            "screen_width_px": 2560, "screen_height_px": 1600, "scale": 0.5}
            assert "2560x1600" in texts(shot)[1]
            assert png_pixels(shot).size == (1280, 800)
            big.drain()
            assert texts(sandbox.computer_use("right_click", [300, 150])) == ["Right clicked"]
            press = big.next(lambda event: event.get("event") == "press")
            assert (press["x"], press["y"]) == (600, 300)
            assert json.loads(texts(sandbox.computer_use("get_cursor_position"))[0]) == {"x": 300, "y": 150}
            outside = sandbox.computer_use("mouse_move", [1280, 10])
            assert texts(outside) == ["Coordinates (1280, 10) are outside display bounds of 1280x800"]
    finally:
        server.stop()
        big.stop()


def test_the_cursor_can_be_drawn_into_a_screenshot(computer, desktop):
    computer.computer_use("mouse_move", [900, 600])
    plain = png_pixels(computer.call_tool("computer", {"action": "screenshot"}))
    marked = png_pixels(computer.call_tool("computer", {"action": "screenshot", "cursor": True}))
    assert plain.getpixel((900, 600)) == (255, 255, 255)
    assert marked.getpixel((900, 600)) == (0, 0, 0)
    assert marked.getpixel((905, 601)) == (255, 255, 255)
    assert marked.getpixel((920, 600)) == plain.getpixel((920, 600)), "only a small mark"
