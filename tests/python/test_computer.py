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
            # A display that never came up is `starting` (calls wait for it) until its start bound...
            state = readiness_naming(client, ":4242")
            assert state["status"] == "starting" and ":4242" in state.get("reason", ""), state
            started = time.monotonic()
            result = sandbox.computer_use("get_screenshot")
            assert result["isError"] is True
            assert ":4242" in json.dumps(result)
            assert time.monotonic() - started < 19
            # ...then `failed`, with the reason.
            state = computer_readiness(client)
            assert state["status"] == "failed" and ":4242" in state["reason"], state
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


GRAB = pathlib.Path(__file__).resolve().parents[1] / "computer" / "grab.py"


def computer_readiness(client):
    return client.session.get(f"{client.base_url}/readyz", timeout=10).json()["families"]["computer"]


def readiness_naming(client, display, seconds=20):
    """The computer family's state once its reason names `display`: boxd reports the family `starting`
    before its first try at the display has said why (on a loaded machine, for a while)."""
    deadline = time.monotonic() + seconds
    state = computer_readiness(client)
    while display not in state.get("reason", "") and time.monotonic() < deadline:
        time.sleep(0.05)
        state = computer_readiness(client)
    return state


class Grab:
    """tests/computer/grab.py: a real X client holding a server grab on `display` until released."""

    def __init__(self, display):
        self.proc = subprocess.Popen(
            ["/usr/bin/python3", str(GRAB), "--hold", "60"],
            env={**os.environ, "DISPLAY": display},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        assert self.proc.stdout.readline().strip() == "grabbed"

    def release(self):
        if self.proc.poll() is None:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            assert self.proc.stdout.readline().strip() == "released"
        self.proc.wait(10)


def test_a_grabbed_display_answers_within_a_bound_degrades_and_stale_moves_never_run(tmp_path):
    desktop = Desktop()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Boxd(workspace, "--tools", "computer", "--display", desktop.display)
    grab = None
    try:
        with server.client() as client:
            sandbox = GuiSandbox.__new__(GuiSandbox)
            sandbox.call_tool = client.call_tool
            assert texts(sandbox.computer_use("mouse_move", [100, 100])) == ["Moved cursor to: (100, 100)"]
            grab = Grab(desktop.display)
            started = time.monotonic()
            # Before the fix, this waited for the grab without end (the client's own 20 s timeout).
            stuck = sandbox.computer_use("mouse_move", [700, 500])
            assert time.monotonic() - started < 12, "answered within the X round-trip bound"
            assert stuck["isError"] is True, stuck
            assert "not answer" in json.dumps(stuck), stuck
            state = computer_readiness(client)
            assert state["status"] == "degraded", state
            assert desktop.display in state["reason"] and "grab" in state["reason"], state
            # Another call while the display is stuck answers at once and sends nothing.
            started = time.monotonic()
            later = sandbox.computer_use("mouse_move", [800, 600])
            assert later["isError"] is True and time.monotonic() - started < 3, later
            grab.release()
            deadline = time.monotonic() + 15
            while computer_readiness(client)["status"] != "ready":
                assert time.monotonic() < deadline, computer_readiness(client)
                time.sleep(0.1)
            # Neither move ran when the grab ended: their callers had an error.
            assert json.loads(texts(sandbox.computer_use("get_cursor_position"))[0]) == {"x": 100, "y": 100}
            assert texts(sandbox.computer_use("mouse_move", [300, 200])) == ["Moved cursor to: (300, 200)"]
    finally:
        if grab is not None:
            grab.proc.kill()
        server.stop()
        desktop.stop()


def test_a_batch_and_a_chord_have_a_cap_named_in_the_error(computer, desktop):
    moves = [{"action": "mouse_move", "coordinate": [10 + index % 100, 10]} for index in range(100_000)]
    started = time.monotonic()
    result = computer.call_tool("computer_batch", {"actions": moves})
    assert result["isError"] is True, texts(result)[:3]
    [reason] = texts(result)
    assert "at most 100 actions" in reason and "100000" in reason, reason
    assert time.monotonic() - started < 10
    desktop.drain()
    chord = "+".join(["a"] * 200_001)
    for action, extra in [("key", {}), ("hold_key", {"duration": 0.1}), ("key_down", {})]:
        refused = computer.call_tool("computer", {"action": action, "text": chord, **extra})
        assert refused["isError"] is True, (action, texts(refused))
        assert texts(refused) == ["A key chord names at most 16 keys; this one names 200001"], texts(refused)
    with pytest.raises(AssertionError):
        desktop.next(lambda event: event.get("event") == "key", timeout=1)


TYPED_NON_ASCII = "héllo wörld ñ Ω — ✓ 中文"


def test_non_ascii_typing_loses_nothing_on_fresh_displays(tmp_path):
    """Each character bound to a spare keycode on demand must be seen by the window before its key
    arrives: on a fresh display, many times over (the loss was one character in 4 runs of 6)."""
    runs = 8
    for run in range(runs):
        desktop = Desktop()
        workspace = tmp_path / f"workspace{run}"
        workspace.mkdir()
        server = Boxd(workspace, "--tools", "computer", "--display", desktop.display)
        try:
            with server.client() as client:
                sandbox = GuiSandbox.__new__(GuiSandbox)
                sandbox.call_tool = client.call_tool
                sandbox.computer_use("left_click", [400, 310])
                desktop.drain()
                assert texts(sandbox.computer_use("type", text=TYPED_NON_ASCII)) == [f"Typed text: {TYPED_NON_ASCII}"]
                seen = []

                def whole(event):
                    if event.get("event") == "text":
                        seen.append(event["text"])
                    return event.get("event") == "text" and event["text"] == TYPED_NON_ASCII

                try:
                    desktop.next(whole, timeout=5)
                except AssertionError:
                    raise AssertionError(f"run {run + 1} of {runs}: the window holds {seen[-1:]!r}")
        finally:
            server.stop()
            desktop.stop()


def free_display():
    for number in range(150, 250):
        if not os.path.exists(f"/tmp/.X11-unix/X{number}") and not os.path.exists(f"/tmp/.X{number}-lock"):
            return number
    raise RuntimeError("no free display number")


def test_a_display_not_yet_up_is_starting_and_calls_wait_for_it(tmp_path):
    number = free_display()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Boxd(workspace, "--tools", "computer", "--display", f":{number}")
    xvfb = None
    try:
        with server.client() as client:
            sandbox = GuiSandbox.__new__(GuiSandbox)
            sandbox.call_tool = client.call_tool
            state = readiness_naming(client, f":{number}")
            assert state["status"] == "starting", state
            assert f":{number}" in state.get("reason", ""), state

            def start_xvfb():
                nonlocal xvfb
                time.sleep(1.5)
                xvfb = subprocess.Popen(
                    ["Xvfb", f":{number}", "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

            later = threading.Thread(target=start_xvfb)
            later.start()
            # Sent before the display is up: it waits for it instead of answering 503.
            result = sandbox.computer_use("get_cursor_position")
            later.join()
            assert result["isError"] is False, result
            assert computer_readiness(client)["status"] == "ready"
            # Once it came up, a display that goes away is `failed`.
            xvfb.terminate()
            xvfb.wait(10)
            sandbox.computer_use("get_cursor_position")
            deadline = time.monotonic() + 10
            while computer_readiness(client)["status"] != "failed":
                assert time.monotonic() < deadline, computer_readiness(client)
                time.sleep(0.1)
    finally:
        server.stop()
        if xvfb is not None and xvfb.poll() is None:
            xvfb.kill()


def test_a_stopped_x_server_is_degraded_and_recovers_without_replaying(tmp_path):
    import signal

    desktop = Desktop()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Boxd(workspace, "--tools", "computer", "--display", desktop.display)
    try:
        with server.client() as client:
            sandbox = GuiSandbox.__new__(GuiSandbox)
            sandbox.call_tool = client.call_tool
            assert texts(sandbox.computer_use("mouse_move", [50, 60])) == ["Moved cursor to: (50, 60)"]
            desktop.xvfb.send_signal(signal.SIGSTOP)
            try:
                started = time.monotonic()
                stuck = sandbox.computer_use("left_click", [900, 700])
                assert stuck["isError"] is True and time.monotonic() - started < 12, stuck
                assert computer_readiness(client)["status"] == "degraded"
            finally:
                desktop.xvfb.send_signal(signal.SIGCONT)
            deadline = time.monotonic() + 15
            while computer_readiness(client)["status"] != "ready":
                assert time.monotonic() < deadline, computer_readiness(client)
                time.sleep(0.1)
            assert json.loads(texts(sandbox.computer_use("get_cursor_position"))[0]) == {"x": 50, "y": 60}
    finally:
        server.stop()
        desktop.stop()
