"""The SDK's own SandboxManager (embedded, docker backend, pointed at podman's Docker-compatible socket) runs
each image under the name it builds (docker.io/agentscope/runtime-sandbox-TYPE:latest), and the SDK's
classes work against it.

Issue #36: every image answers the SDK's first health probe. The SDK probes `/healthz` (`/fastapi/healthz`;
the training images at the root) before each call through the manager, and sleeps a whole second after a
probe that fails (SandboxHttpClient.wait_until_healthy, TrainingSandboxClient.wait_until_healthy). This
test watches those probes themselves (requests.Session.request, which both clients' sessions use, and the
`time.sleep` of the two client modules), not the clock: a start paid the retry when one of its probes
failed or the SDK slept. N starts (20) per type, each `with Sandbox()` followed at once by the first
command, the first cell and (gui, browser) the first screenshot; prints per type the retries paid (must
be 0/N) and the medians, and fails on any retry, printing that start's probe trace and `podman events`.

Then, once per desktop type, GuiSandbox/BrowserSandbox/FilesystemSandbox.desktop_url opened in a real
Chromium connects to the desktop on the page's pass cookie, and MobileSandbox.mobile_url answers.

usage: test_sdk_manager.py [--starts 20] [--only base,gui,browser,filesystem,mobile,bfcl]
       (podman; `make images` first)
"""
import argparse
import datetime
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import requests

SOCKET = pathlib.Path(tempfile.mkdtemp(prefix="boxd-sdk-manager-")) / "podman.sock"


def ours(before):
    listed = subprocess.run(["podman", "ps", "-a", "--format", "{{.ID}} {{.Image}}"], capture_output=True,
                            text=True, check=True).stdout.split("\n")
    return [line.split()[0] for line in listed
            if line and "agentscope/runtime-sandbox-" in line and line.split()[0] not in before]


class Probes:
    """The SDK's health probes and retry sleeps, as they happen (one start at a time)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.origin = time.perf_counter()
        self.trace = []  # (seconds since reset, what)
        self.failed = 0
        self.sleeps = 0
        self.probes = 0

    def reset(self):
        with self.lock:
            self.origin, self.trace, self.failed, self.sleeps, self.probes = time.perf_counter(), [], 0, 0, 0

    def note(self, what):
        """`what` at seconds since the start's constructor and at the wall clock (podman events' clock)."""
        wall = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S.%f")
        with self.lock:
            self.trace.append((time.perf_counter() - self.origin, f"[{wall}] {what}"))

    def install(self):
        from agentscope_runtime.sandbox.client import http_client, training_client

        real_request = requests.Session.request
        probes = self

        def request(session, method, url, *args, **kwargs):
            if not str(url).endswith("/healthz"):
                return real_request(session, method, url, *args, **kwargs)
            started = time.perf_counter()
            try:
                response = real_request(session, method, url, *args, **kwargs)
            except Exception as error:
                with probes.lock:
                    probes.probes += 1
                    probes.failed += 1
                probes.note(f"GET {url} -> {type(error).__name__}: {error} ({time.perf_counter() - started:.3f} s)")
                raise
            with probes.lock:
                probes.probes += 1
                probes.failed += response.status_code != 200
            probes.note(f"GET {url} -> {response.status_code} ({time.perf_counter() - started:.3f} s)")
            return response

        class WatchedTime:
            """The client modules' `time`, with the retry's sleep counted."""

            def __getattr__(self, name):
                return getattr(time, name)

            @staticmethod
            def sleep(seconds):
                with probes.lock:
                    probes.sleeps += 1
                probes.note(f"the SDK sleeps {seconds} s (its health retry)")
                time.sleep(seconds)

        requests.Session.request = request
        http_client.time = WatchedTime()
        training_client.time = WatchedTime()

    @property
    def paid(self):
        return self.failed > 0 or self.sleeps > 0


def median_ms(values):
    return f"{statistics.median(values) * 1000:.0f} ms" if values else "-"


def timed(call):
    started = time.perf_counter()
    result = call()
    return result, time.perf_counter() - started


def podman_events(since, container):
    done = subprocess.run(["podman", "events", "--stream=false", "--since", since,
                           "--filter", f"container={container}", "--format",
                           "{{.Time}} {{.Type}} {{.Status}}"], capture_output=True, text=True, timeout=30)
    return done.stdout + done.stderr


def first_calls(kind, box):
    """The calls right after `with` returned, in order; answers {name: (since `with`, own duration)}."""
    entered = time.perf_counter()
    figures = {}

    def step(name, call, check):
        result, own = timed(call)
        check(result)
        figures[name] = (time.perf_counter() - entered, own)

    if kind == "bfcl":
        step("first training call", lambda: box.get_task_ids("bfcl", split="train"),
             lambda ids: _expect(len(ids) == 400, ids))
        return figures
    # Through call_tool, as every class has it (MobileSandbox has no run_shell_command method).
    step("first command", lambda: box.call_tool("run_shell_command", {"command": "echo ready"}),
         lambda answer: _expect("ready" in str(answer), answer))
    step("first cell", lambda: box.call_tool("run_ipython_cell", {"code": "print(6 * 7)"}),
         lambda answer: _expect("42" in str(answer), answer))
    if kind == "gui":
        step("first screenshot", lambda: box.computer_use("get_screenshot"),
             lambda shot: _expect([item["type"] for item in shot["content"]] == ["text", "image"], shot))
    if kind == "browser":
        step("first screenshot", lambda: box.browser_take_screenshot(),
             lambda shot: _expect(not shot.get("isError") and "image" in str(shot), str(shot)[:300]))
    return figures


def _expect(condition, detail):
    assert condition, detail


def run_starts(kind, factory, starts, probes):
    """`starts` starts of one type; answers (paid, per-call figures, enter times) and prints them."""
    paid, calls, enters = [], {}, []
    for number in range(starts):
        since = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        probes.reset()
        started = time.perf_counter()
        with factory() as box:
            enters.append(time.perf_counter() - started)
            probes.note("`with` returned")
            figures = first_calls(kind, box)
            probes.note("first calls answered")
            if probes.paid:
                container = box.get_info()["container_id"]
                paid.append((number, list(probes.trace), podman_events(since, container)))
        for name, values in figures.items():
            calls.setdefault(name, []).append(values)
    print(f"{kind}: {starts} starts through the SDK's manager; retries paid {len(paid)}/{starts}; "
          f"`with` p50 {median_ms(enters)} (max {max(enters) * 1000:.0f} ms); " +
          "; ".join(f"{name} after `with` p50 {median_ms([v[0] for v in values])} "
                    f"(max {max(v[0] for v in values) * 1000:.0f} ms; the call itself p50 "
                    f"{median_ms([v[1] for v in values])})" for name, values in calls.items()))
    for number, trace, events in paid:
        print(f"  start {number} paid the retry. The SDK's probes (seconds since the constructor):")
        for at, what in trace:
            print(f"    {at:7.3f} {what}")
        print("  podman events:\n    " + "\n    ".join(events.splitlines()))
    return len(paid), calls, enters


def check_viewers(classes):
    from test_images import check_browser_pass, novnc_status

    for cls, group in classes:
        started = time.perf_counter()
        with cls() as box:
            ready = time.perf_counter() - started
            groups = list(box.list_tools())
            assert group in groups, groups
            if group == "adb-control":
                view = requests.get(box.mobile_url, timeout=10)
                assert view.status_code == 200 and "<html" in view.text.lower(), view.status_code
                detail = "mobile_url: the device viewer page answers 200"
            else:
                seen = {}
                check_browser_pass(novnc_status(box.desktop_url, details=seen), seen)
                detail = "desktop_url in Chromium: noVNC connected on the page's pass cookie"
            print(f"{cls.__name__}: ready through the SDK's manager in {ready:.2f} s; groups {groups}; {detail}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--only", default="base,gui,browser,filesystem,mobile,bfcl")
    args = parser.parse_args()
    before = set(subprocess.run(["podman", "ps", "-aq"], capture_output=True, text=True).stdout.split())
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{SOCKET}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.perf_counter() + 20
        while not SOCKET.exists():
            assert time.perf_counter() < deadline, "podman's socket never appeared"
            time.sleep(0.05)
        os.environ["DOCKER_HOST"] = f"unix://{SOCKET}"
        # The embedded manager makes a directory per session under ./sessions_mount_dir: not in the checkout.
        os.chdir(SOCKET.parent)
        from agentscope_runtime.sandbox import (BaseSandbox, BrowserSandbox, FilesystemSandbox, GuiSandbox,
                                                MobileSandbox)
        from agentscope_runtime.sandbox.box.training_box.training_box import TrainingSandbox
        from agentscope_runtime.sandbox.enums import SandboxType

        # The SDK checks for binder kernel modules (upstream runs an emulator inside); this image needs none.
        MobileSandbox._host_check_done = True
        probes = Probes()
        probes.install()
        factories = {
            "base": BaseSandbox, "gui": GuiSandbox, "browser": BrowserSandbox, "filesystem": FilesystemSandbox,
            "mobile": MobileSandbox, "bfcl": lambda: TrainingSandbox(box_type=SandboxType.BFCL),
        }
        kinds = args.only.split(",")
        results = {kind: run_starts(kind, factories[kind], args.starts, probes) for kind in kinds}
        viewers = {"gui": (GuiSandbox, "computer-use"), "browser": (BrowserSandbox, "playwright"),
                   "filesystem": (FilesystemSandbox, "filesystem"), "mobile": (MobileSandbox, "adb-control")}
        check_viewers([viewers[kind] for kind in kinds if kind in viewers])

        print(f"\n| image | retries paid | `with` p50 | first command | first cell | first screenshot "
              "| first training call |\n|---|---|---|---|---|---|---|")
        for kind, (paid, calls, enters) in results.items():
            cell = lambda name: median_ms([v[0] for v in calls[name]]) if name in calls else "-"
            print(f"| {kind} | {paid}/{args.starts} | {median_ms(enters)} | {cell('first command')} | "
                  f"{cell('first cell')} | {cell('first screenshot')} | {cell('first training call')} |")
        print("(first calls: medians of the time from `with` returning to the answer, in the order command, "
              "cell, screenshot)")
        paid = {kind: result[0] for kind, result in results.items() if result[0]}
        assert not paid, f"starts that paid the SDK's 1 s retry: {paid}"
    finally:
        leftovers = ours(before)  # the manager's warm pool keeps containers of its own
        if leftovers:
            subprocess.run(["podman", "rm", "-f", "-t", "2", *leftovers], capture_output=True)
        service.terminate()
        service.wait(10)
        shutil.rmtree(SOCKET.parent, ignore_errors=True)
    print("sdk manager test: ok")


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    sys.exit(main())
