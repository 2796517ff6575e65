"""`boxd launch up/ls/down` against a real engine API (podman's Docker-compatible socket), driven with the
real client.

usage: test_launch.py --boxd target/x86_64-unknown-linux-gnu/release/boxd --image boxd-base:latest
                      [--engine-socket /run/podman/podman.sock] [--runs 5] [--every-type]

Without --engine-socket it starts `podman system service` on a scratch socket and stops it at the end.
Every container it makes is removed; it fails if any container labelled boxd.launch is left.
"""
import argparse
import json
import os
import pathlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from agentscope_runtime.sandbox.client.http_client import SandboxHttpClient
from agentscope_runtime.sandbox.model import ContainerModel

ENGINE = shutil.which("podman") or shutil.which("docker") or "podman"
LABEL = "boxd.launch"


class Launcher:
    def __init__(self, boxd, socket_path):
        self.boxd, self.socket = boxd, socket_path

    def run(self, *args, timeout=120, socket_path=None):
        # Bounded: the launcher's own readiness wait is 60 s at most.
        return subprocess.run([self.boxd, "launch", *args, "--engine-socket", socket_path or self.socket],
                              capture_output=True, text=True, timeout=timeout)

    def up(self, *args):
        started = time.perf_counter()
        result = self.run("up", *args)
        elapsed = time.perf_counter() - started
        assert result.returncode == 0, f"up failed: {result.stderr}"
        lines = result.stdout.splitlines()
        assert len(lines) == 1, f"up printed more than one line: {result.stdout!r}"
        return json.loads(lines[0]), elapsed

    def down(self, *ids):
        result = self.run("down", *ids)
        assert result.returncode == 0, f"down failed: {result.stderr}"
        return result


def ours_left():
    """Containers labelled as ours, straight from the engine's CLI (not through the launcher)."""
    out = subprocess.run([ENGINE, "ps", "-a", "-q", "--filter", f"label={LABEL}"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return out.split()


def start_engine_service():
    directory = tempfile.mkdtemp(prefix="boxd-launch-engine-")
    path = os.path.join(directory, "podman.sock")
    service = subprocess.Popen([ENGINE, "system", "service", "--time=0", f"unix://{path}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not os.path.exists(path):
        assert service.poll() is None, "podman system service exited"
        assert time.monotonic() < deadline, "podman system service made no socket in 30 s"
        time.sleep(0.05)
    return service, path


def client_for(launched):
    """The JSON `up` prints, used as the SDK's manager would fill its ContainerModel."""
    model = ContainerModel(session_id=launched["id"], container_id=launched["id"],
                           container_name=launched["name"], url=launched["url"], ports=[launched["port"]],
                           runtime_token=launched["token"], timeout=60)
    return SandboxHttpClient(model, timeout=60)


def text(result, description):
    return next((item["text"] for item in result["content"] if item.get("description") == description), None)


def check_drives_the_client(launcher, image, workspace):
    launched, elapsed = launcher.up("--type", "base", "--image", image, "--workspace", str(workspace))
    try:
        assert set(launched) >= {"id", "name", "type", "image", "url", "port", "token", "workspace"}, launched
        assert "desktop_url" not in launched and "mobile_url" not in launched, launched
        assert launched["url"] == f"http://127.0.0.1:{launched['port']}/fastapi", launched
        assert len(launched["token"]) == 32 and int(launched["token"], 16) >= 0, launched
        client = client_for(launched)
        assert client.base_url == launched["url"], client.base_url
        # Ready means ready: no wait, the first call answers.
        assert client.check_health()
        shell = client.run_shell_command("echo hello from launch; ls /workspace")
        assert text(shell, "returncode") == "0", shell
        assert "hello from launch" in text(shell, "stdout") and "from-host.txt" in text(shell, "stdout"), shell
        cell = client.run_ipython_cell("x = 6 * 7\nprint(x)")
        assert text(cell, "stdout") == "42\n", cell
        client.workspace_write("from-client.txt", "written in the sandbox")
        assert (workspace / "from-client.txt").read_text() == "written in the sandbox"
        # The token is the only way in.
        wrong = SandboxHttpClient(ContainerModel(
            session_id="s", container_id="x", container_name="x", url=launched["url"], ports=[launched["port"]],
            runtime_token="0" * 32, timeout=10), timeout=10)
        assert not wrong.check_health(), "a wrong token was accepted"
        print(f"up -> ready in {elapsed:.2f} s; shell, IPython cell and workspace through SandboxHttpClient: ok")

        table = launcher.run("ls")
        assert table.returncode == 0, table.stderr
        row = next(line for line in table.stdout.splitlines() if line.startswith(launched["id"][:12]))
        assert "base" in row and "running" in row and launched["url"] in row, table.stdout
        rows = [json.loads(line) for line in launcher.run("ls", "--json").stdout.splitlines()]
        mine = [r for r in rows if r["id"] == launched["id"]]
        assert len(mine) == 1 and mine[0]["url"] == launched["url"] and mine[0]["state"] == "running", rows
        assert all("token" not in r for r in rows), "ls shows tokens"
        print("ls (table and JSON lines): ok")
    finally:
        launcher.down(launched["id"])
    assert launched["id"] not in " ".join(ours_left()), "down left the container"
    listed = launcher.run("ls", "--json").stdout
    assert launched["id"] not in listed, listed
    print("down: container gone: ok")


def check_desktop_urls(launcher, image):
    """gui/mobile shapes on the base image (the desktop itself is the gui image's test)."""
    for kind, key, path in (("gui", "desktop_url", "/vnc/vnc_lite.html"), ("mobile", "mobile_url", "/websockify/")):
        # mobile runs privileged, as the SDK runs its mobile image.
        launched, _ = launcher.up("--type", kind, "--image", image)
        try:
            origin = f"http://127.0.0.1:{launched['port']}"
            assert launched[key] == f"{origin}{path}?password={launched['token']}", launched
            assert launched["type"] == kind
            assert client_for(launched).check_health()
        finally:
            launcher.down(launched["name"])
    print("desktop_url (gui) and mobile_url (mobile): ok")


def check_errors(launcher, image):
    nowhere = launcher.run("ls", socket_path="/nonexistent/podman.sock")
    assert nowhere.returncode == 1, nowhere
    message = nowhere.stderr.strip()
    assert "\n" not in message and "podman system service" in message, message
    print(f"engine unreachable: {message}")

    missing = launcher.run("up", "--image", "docker.io/agentscope/runtime-sandbox-base:no-such-tag")
    assert missing.returncode == 1, missing
    message = missing.stderr.strip()
    assert "\n" not in message and "make images" in message, message
    print(f"image missing: {message}")

    # An image that stops at once, and one that never serves: each error carries the container's last
    # words, and nothing is left behind.
    exits, silent = scratch_images(image)
    exited = launcher.run("up", "--image", exits, "--ready-timeout", "30")
    assert exited.returncode == 1, exited
    assert "stopped before it was ready (exit status 3)" in exited.stderr and "  boom" in exited.stderr, exited
    print("image that exits: error with its exit status and log lines; container removed")
    started = time.perf_counter()
    never = launcher.run("up", "--image", silent, "--ready-timeout", "2")
    assert never.returncode == 1 and "was not ready within 2 s" in never.stderr, never
    assert "  waiting forever" in never.stderr and time.perf_counter() - started < 15, never
    print("image that never serves: not ready after --ready-timeout, with its log lines; container removed")
    for stop in (signal.SIGINT, signal.SIGTERM):
        waiting = subprocess.Popen([launcher.boxd, "launch", "up", "--image", silent, "--engine-socket", launcher.socket],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not ours_left():  # the container exists: up is waiting for it
            assert waiting.poll() is None and time.monotonic() < deadline, "up never created its container"
            time.sleep(0.05)
        waiting.send_signal(stop)
        _, err = waiting.communicate(timeout=30)
        assert waiting.returncode == 1 and "interrupted; container" in err, (waiting.returncode, err)
        assert ours_left() == [], f"{stop.name} left the container"
    print("SIGINT / SIGTERM while waiting: container removed")

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = launcher.run("up", "--image", image, "--port", str(port))
    assert busy.returncode == 1 and "already in use" in busy.stderr, busy
    print(f"port in use: {busy.stderr.strip()}")

    foreign = subprocess.run([ENGINE, "create", "--name", f"not-launched-{os.getpid()}", image],
                             capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    try:
        refused = launcher.run("down", foreign)
        assert refused.returncode == 1 and "not started by `boxd launch`" in refused.stderr, refused
    finally:
        subprocess.run([ENGINE, "rm", "-f", foreign], capture_output=True, timeout=60, check=False)
    unknown = launcher.run("down", "no-such-container-0")
    assert unknown.returncode == 1 and "no container" in unknown.stderr, unknown
    print("down refuses containers that are not ours and unknown ones: ok")
    assert ours_left() == [], f"errors left containers: {ours_left()}"


SCRATCH_IMAGES = ("localhost/boxd-launch-test:exits", "localhost/boxd-launch-test:silent")


def scratch_images(image):
    """Two images on top of `image` (a config layer each): one that exits 3 at once, one that never
    serves. Removed at the end of the test."""
    context = tempfile.mkdtemp(prefix="boxd-launch-ctx-")
    entrypoints = ('["sh", "-c", "echo boom; exit 3"]', '["sh", "-c", "echo waiting forever; exec sleep infinity"]')
    try:
        for tag, entrypoint in zip(SCRATCH_IMAGES, entrypoints):
            pathlib.Path(context, "Containerfile").write_text(f"FROM {image}\nENTRYPOINT {entrypoint}\n")
            subprocess.run([ENGINE, "build", "-q", "-t", tag, "-f", os.path.join(context, "Containerfile"), context],
                           capture_output=True, text=True, timeout=300, check=True)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return SCRATCH_IMAGES


def image_exists(name):
    return subprocess.run([ENGINE, "image", "exists", name], timeout=60).returncode == 0


def check_every_type(launcher):
    """Each type on its default image (what `make images` tags), where that image exists here: ready, its
    health answers, its desktop page is served; then down."""
    for kind in ("base", "gui", "browser", "filesystem", "mobile"):
        default = f"docker.io/agentscope/runtime-sandbox-{kind}:latest"
        if not image_exists(default):
            print(f"{kind}: {default} not built here; skipped")
            continue
        # mobile waits for a device that does not exist here: a short wait shows it.
        result = launcher.run("up", "--type", kind, *(["--ready-timeout", "15"] if kind == "mobile" else []))
        if result.returncode != 0:
            # mobile is ready only with an Android device (adb) behind it: none exists on these machines.
            assert kind == "mobile" and "adb" in result.stderr, result.stderr
            print(f"{kind}: not ready without a device, as expected: {result.stderr.splitlines()[0][:160]}...")
            continue
        launched = json.loads(result.stdout)
        try:
            assert client_for(launched).check_health(), launched
            if "desktop_url" in launched:
                page = urllib.request.urlopen(launched["desktop_url"], timeout=30)
                assert page.status == 200, page.status
            print(f"{kind}: up, healthy" + (", desktop page served" if "desktop_url" in launched else "") + ", down")
        finally:
            launcher.down(launched["id"])


def measure(launcher, image, runs):
    times = []
    for _ in range(runs):
        launched, elapsed = launcher.up("--image", image)
        times.append(elapsed)
        launcher.down(launched["id"])
    print(f"up -> ready over {runs} runs: " + ", ".join(f"{t:.2f}" for t in times)
          + f" s (median {statistics.median(times):.2f} s)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--boxd", default="target/x86_64-unknown-linux-gnu/release/boxd")
    parser.add_argument("--image", default="boxd-base:latest")
    parser.add_argument("--engine-socket")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--every-type", action="store_true",
                        help="also up/down each type on its default image, where `make images` built it")
    args = parser.parse_args()

    # The engine API resolves a short name its own way (podman's: docker.io/library/...): use the id.
    image = subprocess.run([ENGINE, "image", "inspect", "--format", "{{.Id}}", args.image],
                           capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    service = None
    socket_path = args.engine_socket
    if socket_path is None:
        service, socket_path = start_engine_service()
    launcher = Launcher(os.path.abspath(args.boxd), socket_path)
    workspace = pathlib.Path(tempfile.mkdtemp(prefix="boxd-launch-ws-"))
    (workspace / "from-host.txt").write_text("from the host")
    try:
        assert ours_left() == [], f"containers labelled {LABEL} exist before the test: {ours_left()}"
        check_errors(launcher, image)
        check_drives_the_client(launcher, image, workspace)
        check_desktop_urls(launcher, image)
        measure(launcher, image, args.runs)
        if args.every_type:
            check_every_type(launcher)
    finally:
        left = ours_left()
        if left:
            subprocess.run([ENGINE, "rm", "-f", *left], capture_output=True, timeout=120, check=False)
        for tag in SCRATCH_IMAGES:
            if image_exists(tag):
                subprocess.run([ENGINE, "rmi", tag], capture_output=True, timeout=120, check=False)
        if service is not None:
            service.terminate()
            service.wait(timeout=30)
        # Files the container wrote as root stay removable by the test's user only if it is root too.
        shutil.rmtree(workspace, ignore_errors=True)
    assert left == [], f"containers left behind: {left}"
    print("launch test: ok")


if __name__ == "__main__":
    sys.exit(main())
