"""The training family through the real agentscope-runtime TrainingSandboxClient against boxd
(`--tools training --training-env bfcl`), on BFCL data prepared by src/training/prepare_bfcl.py."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import requests
from agentscope_runtime.sandbox.client.training_client import TrainingSandboxClient

from conftest import Boxd
from test_training_worker import PREPARE, block, bfcl_env, named_call, replay, say


@pytest.fixture(scope="module")
def bfcl_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("bfcl")
    done = subprocess.run(
        [sys.executable, str(PREPARE), "--out", str(out), "--subset", "multi_turn"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with open(out / "multi_turn_processed.jsonl") as f:
        tasks = {task["id"]: task for task in map(json.loads, f)}
    return out, tasks


def readable_bfcl_data(source):
    """A copy of the BFCL task data every user can read (pytest's temporary directories are 0700)."""
    import pathlib
    import shutil
    import tempfile
    readable = pathlib.Path(tempfile.mkdtemp(prefix="boxd-bfcl-"))
    readable.chmod(0o755)
    for name in ("multi_turn_processed.jsonl", "multi_turn_split_ids.json"):
        shutil.copy(source / name, readable / name)
        (readable / name).chmod(0o644)
    return readable


def start_boxd(tmp_path_factory, bfcl_data):
    workspace = tmp_path_factory.mktemp("workspace")
    return Boxd(workspace, "--tools", "training", "--training-env", "bfcl",
                "--training-python", sys.executable, env=bfcl_env(bfcl_data[0]))


@pytest.fixture(scope="module")
def server(tmp_path_factory, bfcl_data):
    boxd = start_boxd(tmp_path_factory, bfcl_data)
    yield boxd
    boxd.stop()


@pytest.fixture(scope="module")
def client(server):
    with TrainingSandboxClient(base_url=f"http://127.0.0.1:{server.port}") as client:
        yield client


class Episode:
    """One instance, with the worker tests' `data(op, ...)` shape so their replay drives it."""

    def __init__(self, client, instance_id):
        self.client, self.instance_id = client, instance_id

    def data(self, op, messages=None, params=None):
        if op == "step":
            return self.client.step(self.instance_id, action=messages, params=params)
        if op == "evaluate":
            return self.client.evaluate(self.instance_id, messages=messages, params=params)
        if op == "get_info":
            return self.client.get_tools_info(self.instance_id, messages=messages, params=params)
        raise AssertionError(op)


def create(client, task_id, instance_id=None):
    data = client.create_instance("bfcl", task_id, instance_id=instance_id)
    return Episode(client, data["info"]["instance_id"]), data


def error_of(call):
    with pytest.raises(ValueError) as raised:
        call()
    return str(raised.value)


def test_health_and_profile(server, client):
    health = requests.get(f"http://127.0.0.1:{server.port}/healthz", timeout=10)
    assert health.status_code == 200 and health.text == "OK"
    train = client.get_env_profile("bfcl", split="train")
    val = client.get_env_profile("bfcl", split="val")
    assert len(train) == 400 and len(val) == 400 and not set(train) & set(val)
    assert train[0] == "multi_turn_base_0" and val[0] == "multi_turn_miss_func_0"
    assert error_of(lambda: client.get_env_profile("bfcl", split="test")) == \
        "HTTP Error 400: unknown split 'test': train or val"


@pytest.mark.parametrize("task_id", ["multi_turn_base_0", "multi_turn_miss_func_0"])
def test_ground_truth_replay(client, bfcl_data, task_id):
    episode, created = create(client, task_id)
    assert re.fullmatch(r"exp_\d+_[0-9a-f]{8}", episode.instance_id)
    assert created["info"]["task_id"] == task_id and created["info"]["test_id"] == task_id
    system, user = created["state"]
    assert system["role"] == "system" and "<tools>" in system["content"]
    assert "- cd" in client.get_tools_info(episode.instance_id).splitlines()
    last = replay(episode, bfcl_data[1][task_id])
    assert last["is_terminated"] is True and last["reward"] == 1.0
    assert client.evaluate(episode.instance_id, params={"sparse": True}) == 1.0
    assert client.evaluate(episode.instance_id, params={"sparse": False})["accuracy"] == 1.0
    assert client.release_instance(episode.instance_id) is True
    assert client.release_instance(episode.instance_id) is False


def test_errors(server, client):
    url = f"http://127.0.0.1:{server.port}"
    assert error_of(lambda: client.create_instance("bfcl", None)) == \
        "HTTP Error 400: task_id is required"
    assert error_of(lambda: client.create_instance("", "multi_turn_base_0")) == \
        "HTTP Error 400: env_type is required"
    message = error_of(lambda: client.create_instance("appworld", "multi_turn_base_0"))
    assert re.match(r"HTTP Error 4\d\d: ", message) and "\n" not in message
    assert error_of(lambda: client.create_instance("bfcl", "nope")) == \
        "HTTP Error 400: unknown task 'nope' for bfcl: see get_env_profile"
    assert error_of(lambda: client.step(None, action=say("x"))) == \
        "HTTP Error 400: instance_id is required"
    for call in (lambda: client.step("ghost", action=say("x")),
                 lambda: client.evaluate("ghost", params={"sparse": True}),
                 lambda: client.get_tools_info("ghost")):
        assert error_of(call) == "HTTP Error 400: Instance ghost not found!"
    assert client.release_instance("ghost") is False
    answer = requests.post(f"{url}/release", json={"env_type": "bfcl"}, timeout=10)
    assert answer.status_code == 400 and answer.json()["detail"] == "instance_id is required"
    # A step the worker refuses leaves the instance alive.
    episode, _ = create(client, "multi_turn_base_0", "refused")
    assert error_of(lambda: client.step("refused", action={"content": 5})) == \
        "HTTP Error 400: messages.content must be a string"
    assert episode.data("step", messages=say("next"))["is_terminated"] is False
    client.release_instance("refused")


def test_public_routes_take_only_json(server, client):
    """Without a token, the JSON content type is what keeps a web page from driving an instance: a
    `text/plain` (or form, or untyped) POST needs no CORS preflight. Each is refused with 415 before
    its body is read; the same body as `application/json` works."""
    url = f"http://127.0.0.1:{server.port}"
    body = json.dumps({"env_type": "bfcl", "task_id": "multi_turn_base_0",
                       "instance_id": "csrf", "messages": {}, "params": {}})
    for route in ("create", "step", "evaluate", "get_info", "release", "get_env_profile"):
        for content_type in ("text/plain", "text/plain;charset=UTF-8",
                             "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                             None):
            headers = {"Content-Type": content_type} if content_type else {}
            answer = requests.post(f"{url}/{route}", data=body.encode(), headers=headers,
                                   timeout=10)
            assert answer.status_code == 415, (route, content_type, answer.text)
            assert "application/json" in answer.json()["detail"]
    assert error_of(lambda: client.step("csrf", action=say("x"))) == \
        "HTTP Error 400: Instance csrf not found!"
    answer = requests.post(f"{url}/release", data=body.encode(),
                           headers={"Content-Type": "Application/JSON; charset=utf-8"}, timeout=10)
    assert answer.status_code == 200 and answer.json() == {"success": False, "data": None}


def test_reused_instance_id_replaces(client):
    create(client, "multi_turn_base_0", "reused")
    client.step("reused", action=say(block("cd", {"folder": "document"})))
    _, created = create(client, "multi_turn_base_1", "reused")
    assert created["info"] == {**created["info"], "instance_id": "reused",
                               "task_id": "multi_turn_base_1"}
    dense = client.evaluate("reused", params={})
    assert dense["test_id"] == "multi_turn_base_1" and dense["turn_count"] == 0
    assert client.release_instance("reused") is True


def ls(client, instance_id):
    content = client.step(instance_id, action=say(block("ls", {})))["state"][0]["content"]
    return json.loads(content.split("\n")[1])["content"]


def test_instances_are_isolated(client):
    create(client, "multi_turn_base_0", "iso-a")
    create(client, "multi_turn_base_0", "iso-b")
    for name in ("iso-a", "iso-b"):
        client.step(name, action=say(block("cd", {"folder": "document"})))
    client.step("iso-a", action=say(block("mkdir", {"dir_name": "only_in_a"})))
    assert "only_in_a" in ls(client, "iso-a")["current_directory_content"]
    assert "only_in_a" not in ls(client, "iso-b")["current_directory_content"]
    for name in ("iso-a", "iso-b"):
        assert client.release_instance(name) is True


def worker_pids(boxd_pid):
    """The environment workers boxd started (its children running `-c <worker> --env bfcl`)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if parent == boxd_pid and b"-c" in args and args[-3:-1] == [b"--env", b"bfcl"]:
            pids.append(int(entry))
    return set(pids)


def wait_for(condition, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_killed_worker(tmp_path_factory, bfcl_data):
    """A worker killed mid-episode: the next call on its instance answers a clear error, the
    instance is gone, and the others go on."""
    boxd = start_boxd(tmp_path_factory, bfcl_data)
    try:
        with TrainingSandboxClient(base_url=f"http://127.0.0.1:{boxd.port}") as client:
            spare = wait_for(lambda: worker_pids(boxd.proc.pid))
            assert len(spare) == 1
            create(client, "multi_turn_base_0", "doomed")
            victim = spare.pop()  # the spare became the instance's worker
            create(client, "multi_turn_base_0", "survivor")
            client.step("doomed", action=say(block("cd", {"folder": "document"})))
            os.kill(victim, signal.SIGKILL)
            message = error_of(lambda: client.step("doomed", action=say(block("ls", {}))))
            assert re.match(r"HTTP Error 5\d\d: .*the environment worker exited", message), message
            assert "\n" not in message
            assert error_of(lambda: client.step("doomed", action=say("x"))) == \
                "HTTP Error 400: Instance doomed not found!"
            assert client.release_instance("doomed") is False
            step = client.step("survivor", action=say(block("pwd", {})))
            assert '"name": "pwd_1"' in step["state"][0]["content"]
            assert client.evaluate("survivor", params={"sparse": True}) == 0.0
    finally:
        boxd.stop()


def test_cap_idle_release_and_malformed_bodies(tmp_path_factory, bfcl_data):
    """`--training-max-instances` answers 429 past it; an instance idle past
    `--training-idle-release` is released (and its worker stopped); bodies that do not fit are 422."""
    workspace = tmp_path_factory.mktemp("workspace")
    boxd = Boxd(workspace, "--tools", "training", "--training-env", "bfcl",
                "--training-python", sys.executable, "--training-max-instances", "1",
                "--training-idle-release", "1", env=bfcl_env(bfcl_data[0]))
    url = f"http://127.0.0.1:{boxd.port}"
    try:
        with TrainingSandboxClient(base_url=url) as client:
            create(client, "multi_turn_base_0", "only")
            message = error_of(lambda: client.create_instance("bfcl", "multi_turn_base_1"))
            assert message.startswith("HTTP Error 429: 1 instances are live"), message
            # Reusing the live id is not a second instance.
            create(client, "multi_turn_base_1", "only")
            # The instance's worker and the next spare; untouched, the instance goes (a request
            # would count as use, so only the processes are watched).
            wait_for(lambda: len(worker_pids(boxd.proc.pid)) == 2, seconds=15)
            wait_for(lambda: len(worker_pids(boxd.proc.pid)) == 1, seconds=15)
            assert error_of(lambda: client.get_tools_info("only")) == \
                "HTTP Error 400: Instance only not found!"
            create(client, "multi_turn_base_1", "again")
            for body, wrong in (({"instance_id": "x", "messages": None}, "messages"),
                                ({"instance_id": "x", "params": []}, "params")):
                answer = requests.post(f"{url}/step", json=body, timeout=10)
                assert answer.status_code == 422, answer.text
                assert "invalid type" in answer.json()["detail"], (wrong, answer.text)
            broken = requests.post(f"{url}/create", data=b"{", timeout=10,
                                   headers={"Content-Type": "application/json"})
            assert broken.status_code == 422
            assert requests.get(f"{url}/create", timeout=10).status_code == 405
    finally:
        boxd.stop()


def test_an_abandoned_request_does_not_shift_the_answers(server, client):
    """A caller that gives up on a slow step must not leave its answer for the next request; a
    request sent while one is in flight on the same instance is refused, not queued."""
    url = f"http://127.0.0.1:{server.port}"
    create(client, "multi_turn_base_15", "slow")
    slow = say(block("power", {"base": 7, "exponent": 5_000_000}))
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.post(f"{url}/step", json={"instance_id": "slow", "messages": slow}, timeout=0.3)
    busy = requests.post(f"{url}/step", json={"instance_id": "slow", "messages": say("x")},
                         timeout=10)
    assert busy.status_code == 409 and "in flight" in busy.json()["detail"], busy.text

    def added():
        try:
            return client.step("slow", action=say(block("add", {"a": 1, "b": 2})))
        except ValueError as err:
            assert "HTTP Error 409" in str(err), err
            return None

    answer = wait_for(added, seconds=60)["state"][0]["content"]
    assert json.loads(answer.split("\n")[1]) == {"name": "add_1", "content": {"result": 3}}
    assert client.release_instance("slow") is True


def test_workers_run_as_the_training_user(tmp_path_factory, bfcl_data):
    # AppWorld's `execute` runs the policy's code in the worker: as root, boxd starts the workers as
    # `--training-user`, in a directory of their own that user was given; unprivileged, as itself.
    import pathlib
    import pwd
    import shutil
    import tempfile
    is_root = os.geteuid() == 0
    user = pwd.getpwnam("nobody") if is_root else pwd.getpwuid(os.geteuid())
    # The data where that user can read it (pytest's temporary directories are 0700).
    readable = readable_bfcl_data(bfcl_data[0])
    try:
        workspace = tmp_path_factory.mktemp("workspace")
        extra = ["--training-user", "nobody"] if is_root else []
        python, env = python_for(user)
        boxd = Boxd(workspace, "--tools", "training", "--training-env", "bfcl", "--training-python",
                    python, *extra, env={**bfcl_env(readable), **env})
        try:
            with TrainingSandboxClient(base_url=f"http://127.0.0.1:{boxd.port}") as client:
                task_id = "multi_turn_base_0"
                episode, _ = create(client, task_id)
                last = replay(episode, bfcl_data[1][task_id])
                assert last["reward"] == 1.0
                workers = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
                           if worker_of(pid, boxd.proc.pid)]
                assert workers, "no environment worker found"
                for pid in workers:
                    with open(f"/proc/{pid}/status") as status:
                        fields = dict(line.split(":", 1) for line in status)
                    assert set(map(int, fields["Uid"].split())) == {user.pw_uid}, fields["Uid"]
                    assert set(map(int, fields["Gid"].split())) == {user.pw_gid}, fields["Gid"]
                    directory = os.readlink(f"/proc/{pid}/cwd")
                    assert os.stat(directory).st_uid == user.pw_uid
                    assert os.stat(directory).st_mode & 0o777 == 0o700
                assert client.release_instance(episode.instance_id) is True
        finally:
            boxd.stop()
    finally:
        shutil.rmtree(readable, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="boxd switches users only as root")
def test_bfcl_workers_with_a_uid_each(tmp_path_factory, bfcl_data):
    """`--training-uids`: each BFCL worker (the spare too) runs as a uid and group of its own from the
    range, in a 0700 home of its own that release removes; episodes score as usual."""
    import pathlib
    import pwd
    import random
    import shutil
    import tempfile
    first = 60000 + random.randrange(0, 100) * 16
    readable = readable_bfcl_data(bfcl_data[0])
    try:
        python, env = python_for(pwd.getpwnam("nobody"))
        boxd = Boxd(tmp_path_factory.mktemp("workspace"), "--tools", "training", "--training-env",
                    "bfcl", "--training-python", python, "--training-max-instances", "3",
                    "--training-uids", f"{first}-{first + 5}", env={**bfcl_env(readable), **env})
        try:
            with TrainingSandboxClient(base_url=f"http://127.0.0.1:{boxd.port}") as client:
                task_id = "multi_turn_base_0"
                episode, _ = create(client, task_id)
                other, _ = create(client, "multi_turn_base_1")
                last = replay(episode, bfcl_data[1][task_id])
                assert last["reward"] == 1.0
                workers = wait_for(lambda: [pid for pid in map(int, filter(str.isdigit,
                                                                           os.listdir("/proc")))
                                            if worker_of(pid, boxd.proc.pid)] or None)
                homes, uids = [], []
                for pid in workers:
                    with open(f"/proc/{pid}/status") as status:
                        fields = dict(line.split(":", 1) for line in status)
                    (uid,) = set(map(int, fields["Uid"].split()))
                    assert set(map(int, fields["Gid"].split())) == {uid}
                    assert fields["Groups"].split() == [str(uid)]
                    assert first <= uid <= first + 5
                    home = os.readlink(f"/proc/{pid}/cwd")
                    assert os.stat(home).st_uid == uid and os.stat(home).st_mode & 0o777 == 0o700
                    uids.append(uid)
                    homes.append(home)
                assert len(set(uids)) == len(uids) == 3  # two instances and the spare
                assert client.release_instance(episode.instance_id) is True
                assert client.release_instance(other.instance_id) is True
                assert sum(os.path.exists(home) for home in homes) == 1  # the spare's
        finally:
            boxd.stop()
    finally:
        shutil.rmtree(readable, ignore_errors=True)


def worker_of(pid, boxd_pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            argv = cmdline.read().split(b"\0")
    except OSError:
        return False
    return parent == boxd_pid and b"--env" in argv


def python_for(user):
    """An interpreter with bfcl-eval that `user` can run, and the environment it needs: the test venv's
    when that user can run it and import bfcl-eval from it; else the system's Python of the same
    version with a world-readable copy of the packages the worker imports (issue #46: the venv may sit
    in a directory that user cannot enter, e.g. a clone under /root, so where the clone is must not
    decide whether the tests pass)."""
    try:
        reachable = subprocess.run([sys.executable, "-c", "import bfcl_eval, mpmath"],
                                   user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                                   capture_output=True, timeout=60)
        if reachable.returncode == 0:
            return sys.executable, {}
    except PermissionError:
        pass
    return system_python(), {"PYTHONPATH": str(readable_packages())}


def system_python():
    """The system's Python of this version (which any user can run)."""
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.path.exists(system):
        pytest.skip("no system Python of the test venv's version for another user")
    return system


# What a BFCL worker imports from site-packages: its source with the loop left out, one episode run
# (evaluate imports the checker's modules lazily), then the top-level names whose files are there.
IMPORTS_PROBE = r"""
import json, os, sys, sysconfig
source = "".join(open(path).read() for path in sys.argv[1:])
source = source.replace('if __name__ == "__main__":', 'if False:')
space = {"__name__": "probe"}
exec(compile(source, "worker.py", "exec"), space)
env = space["Bfcl"]()
env.create("multi_turn_base_0", "probe", {})
env.evaluate({}, {"sparse": True})
site = os.path.realpath(sysconfig.get_paths()["purelib"])
names = set()
for module in list(sys.modules.values()):
    path = os.path.realpath(getattr(module, "__file__", None) or "/")
    if path.startswith(site + os.sep):
        names.add(os.path.relpath(path, site).split(os.sep)[0])
# The worker's source points fd 1 at stderr: the answer goes to its protocol descriptor.
os.write(space["_PROTOCOL_FD"], json.dumps(sorted(names)).encode() + b"\n")
"""

_READABLE = {}


def readable_packages():
    """A world-readable directory (0755, under the system's temporary directory) holding a copy of the
    packages a BFCL worker imports from the test venv (and their dist-info, which the worker reads
    for the version); made once per test session."""
    import atexit
    import pathlib
    import shutil
    import sysconfig
    import tempfile
    if "path" in _READABLE:
        return _READABLE["path"]
    from test_training_worker import worker_files
    site = pathlib.Path(os.path.realpath(sysconfig.get_paths()["purelib"]))
    with tempfile.TemporaryDirectory() as scratch:
        data = pathlib.Path(scratch)
        done = subprocess.run(
            [sys.executable, str(PREPARE), "--out", str(data), "--subset", "multi_turn"],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        probe = subprocess.run(
            [sys.executable, "-c", IMPORTS_PROBE, *map(str, worker_files("bfcl"))],
            capture_output=True, text=True, timeout=120, cwd=scratch, env={**os.environ, **bfcl_env(data)})
    assert probe.returncode == 0, probe.stderr
    names = json.loads(probe.stdout.strip().splitlines()[-1])
    copy = pathlib.Path(tempfile.mkdtemp(prefix="boxd-training-site-"))
    atexit.register(shutil.rmtree, copy, True)
    for name in names:
        source = site / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.exists():
            shutil.copy(source, copy / name)
    for info in site.glob("bfcl_eval-*.dist-info"):
        shutil.copytree(info, copy / info.name)
    for root, dirs, files in os.walk(copy):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    _READABLE["path"] = copy
    return copy
