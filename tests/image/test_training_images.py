"""The training images (bfcl, appworld), run for real as the SDK's manager runs them: port 80 published on
127.0.0.1, SECRET_TOKEN, NGINX_TIMEOUT and (bfcl) OPENAI_API_KEY, BFCL_DATA_PATH and BFCL_SPLID_ID_PATH;
driven with the SDK's own TrainingSandboxClient at the container's root (no token) and, beside it, the
token-guarded /fastapi/ routes with the real SandboxHttpClient.

- bfcl: get_task_ids (400 train tasks, multi_turn_base_0 first), create_instance, a ground-truth episode
  of multi_turn_base_0 (the calls from the prepared data inside the image, read through /fastapi's shell;
  positional ground-truth arguments sent named) ending with reward 1.0, evaluate == 1.0, release; then
  the same through the SDK's own SandboxManager (embedded, docker backend on podman's socket) with
  TrainingSandbox(box_type=SandboxType.BFCL). NGINX_TIMEOUT (boxd's answer deadline; no nginx) reaches
  boxd's limits, gives 504 to a request unanswered that long, and stops commands before it.
- appworld (built without APPWORLD_DATA): healthy, and get_env_profile / create answer the clear "task
  data not installed" error naming the build argument.

Prints each image's size and its start -> /healthz time.

usage: test_training_images.py [--engine podman] [--only bfcl,appworld] [--no-sdk-manager]
       (`make image-bfcl image-appworld` first; the SDK manager part needs podman)
"""
import argparse
import ast
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import requests

from agentscope_runtime.sandbox.client.http_client import SandboxHttpClient
from agentscope_runtime.sandbox.client.training_client import TrainingSandboxClient
from agentscope_runtime.sandbox.model import ContainerModel

import agent_tools
import test_images
from test_images import engine, free_port, image_size

PREFIX = "docker.io/agentscope/runtime-sandbox-"
TOKEN = os.urandom(12).hex()
DATA_DIR = "/agentscope_runtime/training_box/bfcl/multi_turn"
TASK = "multi_turn_base_0"
ENGINE = "podman"


class Box:
    """One container as the manager runs it: the training client at the root, the token client at /fastapi/."""

    def __init__(self, image, env=(), nginx_timeout=60):
        self.workspace = pathlib.Path(tempfile.mkdtemp(prefix="boxd-training-ws-"))
        self.port = free_port()
        command = ["run", "-d", "--rm", "-p", f"127.0.0.1:{self.port}:80", "-e", f"SECRET_TOKEN={TOKEN}",
                   "-e", f"NGINX_TIMEOUT={nginx_timeout}", "-v", f"{self.workspace}:/workspace"]
        for item in env:
            command += ["-e", item]
        self.started = time.perf_counter()
        self.container = engine(*command, image).stdout.strip()
        self.engine_run = time.perf_counter() - self.started
        self.base = f"http://127.0.0.1:{self.port}"
        self.training = TrainingSandboxClient(base_url=self.base)
        model = ContainerModel(session_id="s", container_id=self.container[:12], container_name="boxd-training-test",
                               url=f"{self.base}/", ports=[self.port], runtime_token=TOKEN, timeout=120)
        self.fastapi = SandboxHttpClient(model, timeout=60)

    def wait_healthy(self):
        """Polls GET /healthz (the training client's own probe) every 10 ms; the seconds since `run -d`."""
        deadline = time.perf_counter() + 60
        while not self.training.check_health():
            assert time.perf_counter() < deadline, "no /healthz 200 within 60 s"
            time.sleep(0.01)
        healthy = time.perf_counter() - self.started
        print(f"  start -> /healthz 200: {healthy:.2f} s ({ENGINE} run -d itself: {self.engine_run:.2f} s)")
        return healthy

    def shell(self, command):
        result = self.fastapi.run_shell_command(command)
        out = {item.get("description"): item.get("text") for item in result["content"]}
        assert out.get("returncode") in ("0", 0, None), result
        return out.get("stdout", "")

    def close(self, failed):
        if failed:
            done = engine("logs", self.container, check=False)
            print((done.stdout + done.stderr)[-4000:])
        started = time.perf_counter()
        engine("stop", "-t", "10", self.container, check=False)
        stopped_in = time.perf_counter() - started
        engine("rm", "-f", self.container, check=False)  # normally gone already (--rm)
        shutil.rmtree(self.workspace, ignore_errors=True)
        if not failed:
            # SIGTERM reaches boxd, which stops its workers: podman never waits out its 10 s.
            print(f"  {ENGINE} stop: {stopped_in:.2f} s")
            assert stopped_in < 8, f"stop took {stopped_in:.1f} s"


# -- the ground-truth episode ------------------------------------------------------------------------

READ_TASK = f"""python3 - <<'EOF'
import json
for line in open('{DATA_DIR}/multi_turn_processed.jsonl', encoding='utf-8'):
    task = json.loads(line)
    if task['id'] == '{TASK}':
        print(json.dumps({{'params': {{doc['name']: list(doc['parameters'].get('properties', {{}}))
                                      for doc in task['function']}},
                          'ground_truth': task['ground_truth'], 'questions': len(task['question'])}}))
        break
EOF"""


def named_call(call, params):
    """bfcl's `name(arg, key=value)` string as the policy's tool call: every argument named (positional
    ones by the order of the function doc's properties)."""
    node = ast.parse(call, mode="eval").body
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name), call
    name = node.func.id
    arguments = {params[name][i]: ast.literal_eval(arg) for i, arg in enumerate(node.args)}
    arguments.update({kw.arg: ast.literal_eval(kw.value) for kw in node.keywords})
    return {"name": name, "arguments": arguments}


def tool_calls(calls, params):
    return "".join("<tool_call>\n" + json.dumps(named_call(call, params)) + "\n</tool_call>\n" for call in calls)


def episode(step, task, label):
    """Plays the ground truth: per turn one step with the turn's calls (if any), then one step without a
    call (which ends the turn). Answers the last step's data and the step times."""
    params, turns = task["params"], task["ground_truth"]
    assert len(turns) == task["questions"], task
    times, last = [], None
    for number, calls in enumerate(turns, 1):
        if calls:
            started = time.perf_counter()
            data = step({"role": "assistant", "content": tool_calls(calls, params)})
            times.append(time.perf_counter() - started)
            content = data["state"][0]["content"]
            assert content.count("<tool_call>") == len(calls), (label, number, content)
            assert "Error during execution" not in content, (label, number, content)
            assert not data["is_terminated"] and data["reward"] == 0.0, (label, number, data)
        started = time.perf_counter()
        last = step({"role": "assistant", "content": f"Turn {number} done."})
        times.append(time.perf_counter() - started)
        if number < len(turns):
            assert not last["is_terminated"], (label, number, last)
            assert last["state"][0]["content"] and "<tool_call>" not in last["state"][0]["content"], last
    assert last["is_terminated"], (label, last)
    assert "[CONVERSATION_COMPLETED]" in last["state"][0]["content"], (label, last)
    assert last["reward"] == 1.0, (label, last)
    return last, times


def check_bfcl_episode(client, task, label):
    """get_task_ids, create, the ground-truth episode, evaluate, release: the calls a trainer makes."""
    train = client.get_task_ids("bfcl", split="train")
    val = client.get_task_ids("bfcl", split="val")
    assert len(train) == 400 and len(val) == 400 and train[0] == TASK, (len(train), len(val), train[:3])
    started = time.perf_counter()
    created = client.create_instance("bfcl", TASK)
    create_s = time.perf_counter() - started
    instance = created["info"]["instance_id"]
    roles = [message["role"] for message in created["state"]]
    assert roles == ["system", "user"] and "<tools>" in created["state"][0]["content"], created
    try:
        _, times = episode(lambda message: client.step(instance, action=message), task, label)
        started = time.perf_counter()
        score = client.evaluate(instance, params={"sparse": True})
        evaluate_s = time.perf_counter() - started
        assert score == 1.0, score
        dense = client.evaluate(instance, params={"sparse": False})
        assert dense["accuracy"] == 1.0 and dense["valid"], dense
    finally:
        assert client.release_instance(instance) is True
    try:
        client.step(instance, action={"role": "assistant", "content": "again"})
        raise AssertionError("a released instance still answers")
    except ValueError as error:
        assert "HTTP Error 4" in str(error), error
    times.sort()
    print(f"  {label}: {len(train)}/{len(val)} train/val tasks; create {create_s * 1000:.0f} ms; {len(times)} steps "
          f"(median {times[len(times) // 2] * 1000:.0f} ms, max {times[-1] * 1000:.0f} ms); evaluate "
          f"{evaluate_s * 1000:.0f} ms -> 1.0; released")


def check_bfcl(image):
    print("bfcl:")
    size = image_size(image)
    env = ["OPENAI_API_KEY=", f"BFCL_DATA_PATH={DATA_DIR}/multi_turn_processed.jsonl",
           f"BFCL_SPLID_ID_PATH={DATA_DIR}/multi_turn_split_ids.json"]
    box = Box(image, env, nginx_timeout=47)  # an unusual value: boxd's limits must carry it
    failed = True
    try:
        healthy = box.wait_healthy()
        answer = requests.get(f"{box.base}/healthz", timeout=10)
        assert answer.status_code == 200 and answer.text == "OK", (answer.status_code, answer.text)
        # The token still guards /fastapi/; the training routes need none. boxd itself is on port 80 now (no
        # nginx choosing paths): its own routes also answer without the /fastapi prefix, and they take the
        # token too (only the probes /healthz and /livez answer without it).
        assert box.fastapi.check_health()
        assert requests.get(f"{box.base}/fastapi/healthz", headers={"Authorization": f"Bearer {TOKEN}"},
                            timeout=10).status_code == 200
        assert requests.post(f"{box.base}/fastapi/tools/run_shell_command", json={"command": "true"},
                             timeout=10).status_code in (401, 403)
        for path in ("/readyz", "/openapi.json", "/mcp/list_tools"):
            assert requests.get(f"{box.base}{path}", timeout=10).status_code in (401, 403), path
        assert requests.post(f"{box.base}/tools/run_shell_command", json={"command": "true"},
                             timeout=10).status_code in (401, 403)
        assert requests.get(f"{box.base}/no-such-path", timeout=10).status_code == 404
        assert requests.get(f"{box.base}/create", timeout=10).status_code == 405
        # NGINX_TIMEOUT=47 reached boxd serve (no nginx renders it any more): `boxd init` derived the
        # answer deadline and the work limits from it, and boxd's children inherit what boxd runs with.
        limits = box.shell("echo $BOXD_RESPONSE_TIMEOUT $BOXD_COMMAND_TIMEOUT $BOXD_CELL_TIMEOUT "
                           "$BOXD_TRAINING_CALL_TIMEOUT")
        assert limits.split() == ["47", "42", "42", "42"], limits
        task = json.loads(box.shell(READ_TASK))
        check_bfcl_episode(box.training, task, "TrainingSandboxClient at the root")
        print("  " + agent_tools.check(box.fastapi, box.workspace))
        # Errors come back as the client's ValueError with the server's detail.
        try:
            box.training.create_instance("bfcl", "multi_turn_base_999999")
            raise AssertionError("an unknown task was created")
        except ValueError as error:
            assert "HTTP Error 400" in str(error), error
        failed = False
    finally:
        box.close(failed)
    check_answer_deadline(image, env)
    return size, healthy, task


def check_answer_deadline(image, env):
    """NGINX_TIMEOUT honoured as nginx did: a request still unanswered after it gets 504 (here a command
    allowed longer than the timeout by its own limit), and by default work stops 5 s (or a quarter)
    before it, so a slow command answers 124 rather than 504."""
    box = Box(image, [*env, "BOXD_COMMAND_TIMEOUT=30"], nginx_timeout=3)
    failed = True
    try:
        box.wait_healthy()
        url = f"{box.base}/fastapi/tools/run_shell_command"
        started = time.perf_counter()
        answer = requests.post(url, json={"command": "sleep 10"}, headers={"Authorization": f"Bearer {TOKEN}"},
                               timeout=30)
        elapsed = time.perf_counter() - started
        assert answer.status_code == 504 and "NGINX_TIMEOUT" in answer.text, (answer.status_code, answer.text)
        assert 2.9 < elapsed < 5, elapsed
        print(f"  NGINX_TIMEOUT=3 with a 30 s command limit: 504 after {elapsed:.2f} s")
        failed = False
    finally:
        box.close(failed)
    box = Box(image, env, nginx_timeout=3)
    failed = True
    try:
        box.wait_healthy()
        started = time.perf_counter()
        result = box.fastapi.run_shell_command("echo started; sleep 10")
        elapsed = time.perf_counter() - started
        out = {item.get("description"): item.get("text") for item in result["content"]}
        assert out.get("returncode") == "124" and out.get("stdout") == "started\n", result
        assert elapsed < 3, elapsed
        print(f"  NGINX_TIMEOUT=3 by default: the command stopped first, 124 after {elapsed:.2f} s")
        failed = False
    finally:
        box.close(failed)


def check_appworld(image):
    print("appworld (built without APPWORLD_DATA):")
    size = image_size(image)
    box = Box(image)
    failed = True
    try:
        healthy = box.wait_healthy()
        assert box.fastapi.check_health()
        for call in (lambda: box.training.get_env_profile("appworld", split="train"),
                     lambda: box.training.create_instance("appworld", "82e2fac_1")):
            try:
                call()
                raise AssertionError("AppWorld answered without its task data")
            except ValueError as error:
                message = str(error)
                assert "task data not installed" in message and "APPWORLD_DATA" in message, message
        print(f"  get_env_profile and create: {message[:160]}")
        print("  " + agent_tools.check(box.fastapi, box.workspace))
        failed = False
    finally:
        box.close(failed)
    return size, healthy


def check_sdk_manager(task):
    """TrainingSandbox(box_type=SandboxType.BFCL) through the SDK's own embedded SandboxManager on a podman
    socket of our own (as test_sdk_manager.py)."""
    socket_path = pathlib.Path(tempfile.mkdtemp(prefix="boxd-training-manager-")) / "podman.sock"
    before = set(engine("ps", "-aq").stdout.split())
    cwd = os.getcwd()
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{socket_path}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.perf_counter() + 20
        while not socket_path.exists():
            assert time.perf_counter() < deadline, "podman's socket never appeared"
            time.sleep(0.05)
        os.environ["DOCKER_HOST"] = f"unix://{socket_path}"
        # The embedded manager makes a directory per session under ./sessions_mount_dir: not in the checkout.
        os.chdir(socket_path.parent)
        from agentscope_runtime.sandbox.box.training_box.training_box import TrainingSandbox
        from agentscope_runtime.sandbox.enums import SandboxType

        started = time.perf_counter()
        with TrainingSandbox(box_type=SandboxType.BFCL) as box:
            print(f"  TrainingSandbox(box_type=BFCL): ready through the SDK's manager in "
                  f"{time.perf_counter() - started:.2f} s")
            check_bfcl_episode(box, task, "TrainingSandbox through the SDK's SandboxManager")
    finally:
        listed = engine("ps", "-a", "--format", "{{.ID}} {{.Image}}").stdout.splitlines()
        leftovers = [line.split()[0] for line in listed
                     if "agentscope/runtime-sandbox-" in line and line.split()[0] not in before]
        if leftovers:  # the manager's warm pool keeps containers of its own
            engine("rm", "-f", "-t", "2", *leftovers, check=False)
        service.terminate()
        service.wait(10)
        os.chdir(cwd)
        shutil.rmtree(socket_path.parent, ignore_errors=True)


def main():
    global ENGINE
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", default="podman")
    parser.add_argument("--only", default="bfcl,appworld")
    parser.add_argument("--bfcl-image", default=f"{PREFIX}bfcl:latest")
    parser.add_argument("--appworld-image", default=f"{PREFIX}appworld:latest")
    parser.add_argument("--no-sdk-manager", action="store_true", help="skip the SandboxManager part")
    args = parser.parse_args()
    ENGINE = test_images.ENGINE = args.engine
    only = set(args.only.split(","))
    figures = []
    if "bfcl" in only:
        size, healthy, task = check_bfcl(args.bfcl_image)
        figures.append(("bfcl", size, healthy))
        if args.no_sdk_manager or os.path.basename(ENGINE) != "podman":
            print("  (the SDK manager part skipped: --no-sdk-manager, or not podman)")
        else:
            check_sdk_manager(task)
    if "appworld" in only:
        size, healthy = check_appworld(args.appworld_image)
        figures.append(("appworld", size, healthy))
    for name, size, healthy in figures:
        print(f"{name}: {size / 1e6:.0f} MB, start -> /healthz {healthy:.2f} s")
    print("training images test: ok")


if __name__ == "__main__":
    sys.exit(main())
