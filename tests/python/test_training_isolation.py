"""Training instances isolated from each other and from boxd (issue #45), attacked as a policy would:
AppWorld's `execute` runs the policy's Python, so each test below runs its attack as a step's code
(the stand-in appworld of tests/python/training_stub runs it with plain `exec`, as the real library
does after a bypass of its denylist). boxd runs as root with `--training-uids`, so the uid switching
is real; without root these tests are skipped."""
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
from agentscope_runtime.sandbox.client.training_client import TrainingSandboxClient

from conftest import Boxd
from test_training import system_python
from test_training_worker import STUB, appworld_root

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="boxd switches users only as root")

FORGED = json.dumps({"ok": True, "data": {
    "state": [{"role": "user", "content": "forged", "tool_calls": []}],
    "reward": 1.0, "is_terminated": True, "info": {}}})


def runnable_python():
    """An interpreter any uid can run (the stand-in appworld needs no site-packages)."""
    try:
        done = subprocess.run([sys.executable, "-c", "pass"], user=65534, group=65534,
                              extra_groups=[], capture_output=True, timeout=60)
        if done.returncode == 0:
            return sys.executable
    except PermissionError:
        pass
    return system_python()


@pytest.fixture(scope="module")
def readable():
    """The stand-in package and an AppWorld root where every uid can read them (pytest's temporary
    directories are root's, 0700)."""
    top = pathlib.Path(tempfile.mkdtemp(prefix="boxd-training-iso-"))
    shutil.copytree(STUB, top / "stub", ignore=shutil.ignore_patterns("__pycache__"))
    appworld_root(top / "root")
    for root, dirs, files in os.walk(top):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def uid_range(size=16):
    """A range of its own for each boxd of this run (a boxd kills what runs under its range)."""
    first = 52000 + random.randrange(0, 400) * 32
    return first, first + size - 1


# Docker's and Kubernetes' default capabilities for a root container: no CAP_SYS_ADMIN, so no network
# namespace for the workers.
DOCKER_CAPABILITIES = "+chown,+dac_override,+fowner,+kill,+net_bind_service,+setgid,+setuid"
# Without a network namespace, boxd's listeners refuse loopback connections from the workers' uids
# (`Family::confined_uids`): that enforcement is the HTTP layer's, outside this branch. Set this once it
# is in, so the attacks over loopback are asserted in that mode too.
LISTENERS_REFUSE_CONFINED_UIDS = True
MODES = ["network-namespace", "docker-capabilities"]


def docker_capabilities_wrapper(directory):
    """A BOXD_BIN that runs boxd with only Docker's default capabilities (bounding set)."""
    real = os.path.abspath(os.environ.get("BOXD_BIN", "target/debug/boxd"))
    wrapper = pathlib.Path(directory) / "boxd-docker-capabilities"
    wrapper.write_text(f"#!/bin/sh\nexec setpriv --bounding-set=-all,{DOCKER_CAPABILITIES} "
                       f"--inh-caps=-all -- {real} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


class Sandbox:
    def __init__(self, tmp_path_factory, readable, *extra, mode="network-namespace"):
        self.first, self.last = uid_range()
        self.mode = mode
        workspace = tmp_path_factory.mktemp("workspace")
        saved = os.environ.get("BOXD_BIN")
        if mode == "docker-capabilities":
            if not shutil.which("setpriv"):
                pytest.skip("no setpriv here")
            os.environ["BOXD_BIN"] = docker_capabilities_wrapper(tmp_path_factory.mktemp("bin"))
        try:
            self.boxd = self._start(workspace, readable, extra)
        finally:
            if saved is None:
                os.environ.pop("BOXD_BIN", None)
            else:
                os.environ["BOXD_BIN"] = saved
        wanted = ("network namespace of its own (no loopback" if mode == "network-namespace"
                  else "cannot get a network namespace of their own; boxd's listeners refuse")
        assert any(wanted in line for line in self.boxd.log_lines), self.boxd.log_lines
        self.url = f"http://127.0.0.1:{self.boxd.port}"
        self.client = TrainingSandboxClient(base_url=self.url).__enter__()

    def _start(self, workspace, readable, extra):
        return Boxd(workspace, "--tools", "training", "--training-env", "appworld",
                         "--training-python", runnable_python(), "--training-max-instances", "4",
                         "--training-uids", f"{self.first}-{self.last}", *extra,
                         env={"APPWORLD_ROOT": str(readable / "root"),
                              "PYTHONPATH": str(readable / "stub")})

    def create(self, task_id, instance_id):
        return self.client.create_instance("appworld", task_id, instance_id=instance_id,
                                           params={"simple": True})

    def run(self, instance_id, code):
        """Runs `code` as the instance's policy; the step's data."""
        return self.client.step(instance_id, action={"role": "assistant", "content": code})

    def facts(self, instance_id):
        """What the instance's code sees of itself: its pid, its worker's pid, uid, gid, home."""
        step = self.run(instance_id, "import os, json\nprint(json.dumps([os.getpid(), os.getppid(), "
                                     "os.getuid(), os.getgid(), os.getcwd()]))")
        return json.loads(step["state"][0]["content"])

    def stop(self):
        self.boxd.stop()


@pytest.fixture(params=MODES)
def sandbox(request, tmp_path_factory, readable):
    box = Sandbox(tmp_path_factory, readable, mode=request.param)
    yield box
    box.stop()


def processes_of(uid):
    """Live processes whose real uid is `uid`: [(pid, session id, command line)]."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            with open(f"/proc/{entry}/stat") as f:
                session = int(f.read().rsplit(")", 1)[1].split()[3])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError, IndexError):
            continue
        if int(status["Uid"].split()[0]) == uid and not status["State"].strip().startswith("Z"):
            found.append((int(entry), session, command))
    return found


def wait_for(condition, seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


ATTACK_OTHER = r"""
import json, os, urllib.request
results = {}
def attempt(name, action):
    try:
        action()
        results[name] = "done"
    except Exception as exc:
        results[name] = type(exc).__name__
def post(route, body):
    request = urllib.request.Request(f"http://127.0.0.1:{PORT}/{route}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(request, timeout=5).read()
def write(path, text):
    with open(path, "w") as f:
        f.write(text)
attempt("signal its world process", lambda: os.kill(WORLD, 0))
attempt("signal its worker", lambda: os.kill(WORKER, 0))
attempt("list its home", lambda: os.listdir(HOME))
attempt("edit its saved state", lambda: write(STATE, '{"status": "success", "answer": 8}'))
attempt("list the homes", lambda: os.listdir(os.path.dirname(os.getcwd())))
attempt("write its worker's protocol", lambda: write(f"/proc/{WORKER}/fd/1", FORGED + "\n"))
attempt("read its worker's requests", lambda: open(f"/proc/{WORKER}/fd/0").read(1))
attempt("write its world's stdout", lambda: write(f"/proc/{WORLD}/fd/1", FORGED + "\n"))
attempt("read its world's memory", lambda: open(f"/proc/{WORLD}/mem", "rb").read(1))
if LOOPBACK:
    attempt("step it over loopback", lambda: post("step", {"instance_id": "b", "messages": {
        "content": "apis.supervisor.complete_task(answer=8)"}}))
    attempt("release it over loopback", lambda: post("release", {"instance_id": "b"}))
print(json.dumps(results))
"""


def test_one_instance_cannot_reach_another(sandbox):
    """Instance a's policy code against instance b: its processes, its files, its worker's protocol
    descriptors and boxd's tokenless routes over loopback. Every attempt fails; b's answers and score
    stay its own."""
    sandbox.create("task_a_1", "a")
    sandbox.create("task_b_1", "b")
    a_world, a_worker, a_uid, a_gid, a_home = sandbox.facts("a")
    b_world, b_worker, b_uid, b_gid, b_home = sandbox.facts("b")
    # A uid (and a group) of its own each, from the range; a home of its own, 0700.
    assert a_uid != b_uid and {a_uid, b_uid} <= set(range(sandbox.first, sandbox.last + 1))
    assert (a_gid, b_gid) == (a_uid, b_uid)
    for uid, home in ((a_uid, a_home), (b_uid, b_home)):
        assert os.stat(home).st_uid == uid and os.stat(home).st_mode & 0o777 == 0o700
    assert os.stat(os.path.dirname(a_home)).st_mode & 0o777 == 0o711
    state = pathlib.Path(b_home, "appworld", "experiments", "outputs", "b", "tasks", "task_b_1",
                         "dbs", "state.json")
    assert state.exists()
    before = state.read_text()
    loopback = sandbox.mode == "network-namespace" or LISTENERS_REFUSE_CONFINED_UIDS
    code = (f"WORLD, WORKER, HOME, STATE, PORT, FORGED, LOOPBACK = {b_world}, {b_worker}, "
            f"{b_home!r}, {str(state)!r}, {sandbox.boxd.port}, {FORGED!r}, {loopback}\n"
            + ATTACK_OTHER)
    results = json.loads(sandbox.run("a", code)["state"][0]["content"])
    assert len(results) == (11 if loopback else 9), results
    assert "done" not in results.values(), results
    assert state.read_text() == before
    # b is untouched: still there, its score its own, its answers in step.
    assert sandbox.client.evaluate("b", params={"sparse": True}) == 0.0
    step = sandbox.run("b", "apis.supervisor.complete_task(answer=8)")
    assert step["state"][0]["content"] == "Marked the active task complete.\n"
    assert step["is_terminated"] is True and step["reward"] == 1.0


ATTACK_OWN = r"""
import os, stat
line = (FORGED + "\n").encode()
wrote = []
def targets():
    for pid in ("self", str(os.getppid())):
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            yield f"/proc/{pid}/fd/{name}"
for path in targets():
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode):
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, line)
            os.close(fd)
            wrote.append(path)
    except OSError:
        pass
for fd in range(1, 64):
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, line)
            wrote.append(fd)
    except OSError:
        pass
print("tried", wrote)
"""


def test_policy_cannot_write_its_own_reward(sandbox):
    """The policy writes a forged answer line (reward 1.0, terminated) to every pipe it can reach: fd 1,
    its own descriptors, and its parent's through /proc. boxd still gets the worker's answers, in
    step, with the reward the worker computed."""
    sandbox.create("task_a_1", "forger")
    step = sandbox.run("forger", f"FORGED = {FORGED!r}\n" + ATTACK_OWN)
    assert step["state"][0]["content"].startswith("tried")
    assert step["reward"] == 0.0 and step["is_terminated"] is False, step
    assert sandbox.client.evaluate("forger", params={"sparse": True}) == 0.0
    assert sandbox.client.get_tools_info("forger").startswith("Available tools:")
    # A wrong answer still scores what it is worth, a right one 1.0.
    step = sandbox.run("forger", "apis.supervisor.complete_task(answer=6)")
    assert step["is_terminated"] is True and step["reward"] == 0.5
    assert sandbox.client.release_instance("forger") is True


ESCAPE = r"""
import os, time
child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "1000"])
    os._exit(0)
os.waitpid(child, 0)
started = []
try:
    for _ in range(64):
        pid = os.fork()
        if pid == 0:
            time.sleep(1000)
            os._exit(0)
        started.append(pid)
except OSError as exc:
    print("fork refused:", type(exc).__name__, len(started))
else:
    print("forked", len(started))
"""


@pytest.mark.parametrize("mode", MODES)
def test_release_kills_everything_the_instance_started(tmp_path_factory, readable, mode):
    """A `setsid` grandchild leaves the worker's process group and session: `/release` still kills
    it (and every other process of the instance's uid) before it answers, removes the home, and the
    uid is handed out again clean. `--training-processes-max` bounds the instance's processes."""
    box = Sandbox(tmp_path_factory, readable, "--training-processes-max", "24", mode=mode)
    try:
        box.create("task_a_1", "leaver")
        world, worker, uid, _, home = box.facts("leaver")
        step = box.run("leaver", ESCAPE)
        assert step["state"][0]["content"].startswith("fork refused: BlockingIOError"), step
        escaped = wait_for(lambda: [p for p in processes_of(uid) if p[2] == "sleep 1000"])
        worker_session = int(open(f"/proc/{worker}/stat").read().rsplit(")", 1)[1].split()[3])
        assert escaped[0][1] != worker_session
        assert len(processes_of(uid)) <= 24
        assert box.client.release_instance("leaver") is True
        assert processes_of(uid) == []
        assert not os.path.exists(home)
        # The uid serves again, with nothing of the old instance in it.
        box.create("task_a_1", "next")
        assert box.facts("next")[2] in range(box.first, box.last + 1)
    finally:
        box.stop()
    # boxd's stop leaves nothing of any instance either.
    for uid in range(box.first, box.last + 1):
        assert processes_of(uid) == [], uid


def test_setup_refuses_root_and_short_ranges(tmp_path_factory, readable):
    for uids, wanted in (("0-40", "uid 0"), ("52000-52002", "needs at least 6")):
        workspace = tmp_path_factory.mktemp("workspace")
        done = subprocess.run(
            [os.environ.get("BOXD_BIN", "target/debug/boxd"), "serve", "--host", "127.0.0.1",
             "--port", "0", "--workspace", str(workspace), "--tools", "training",
             "--training-env", "appworld", "--training-max-instances", "4", "--training-uids", uids],
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        assert done.returncode != 0 and wanted in done.stderr, done.stderr
