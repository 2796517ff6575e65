r"""The AppWorld environment of the training worker, joined after protocol.py (see its docstring).

AppWorld (appworld 0.1.3.post1, data under APPWORLD_ROOT/data)
--------------------------------------------------------------
- profile: the task ids of a dataset (train, dev, test_normal, test_challenge; "val" means dev when
  there is no val dataset).
- create: AppWorld(task_id, experiment_name from the instance id); state = [system prompt, the
  task's instruction]; params.simple (bare code is run, its output answered as is), params.prompt
  false (a shorter prompt).
- step: the code of the first ```python block in content (with simple: else the content itself),
  or tool_calls named `appworld` with {"code": ...}; each runs in world.execute; is_terminated once
  the task is completed (then reward = evaluate with the step's params).
- evaluate: appworld's evaluate_task on the experiment's saved state; sparse: 1.0 when no test
  fails, else 0.0; dense: the ratio of passed tests.
- get_info: the tool and the task's apps with their descriptions.
"""

import re

APPWORLD_VERSION = "0.1.3.post1"
APPWORLD_DATA_HINT = (
    "build the image with `make image-appworld APPWORLD_DATA=images/appworld/data/<dir, "
    "data-0.1.0.bundle or archive>` (see images/README.md)"
)

CODE_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
OPEN_CODE_BLOCK = re.compile(r".*?```python\n(.*)", re.DOTALL)
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
DATASET_NAME = re.compile(r"[A-Za-z0-9_]+")

APPWORLD_PROMPT = """I am your supervisor, and you are an AI assistant who completes my day-to-day \
tasks on your own, by operating apps (spotify, venmo, gmail, ...) through their APIs on my behalf.

You work in a Python REPL: each of your messages holds one block of code, written as
```python
<code>
```
(or a call of the tool `appworld` with {{"code": "<code>"}}); the environment runs it and answers \
with its output, and you continue from there until the task is done. Variables persist between \
steps.

Three APIs explain the others:
```python
print(apis.api_docs.show_app_descriptions())  # the apps you can use
print(apis.api_docs.show_api_descriptions(app_name='spotify'))  # the APIs of an app
print(apis.api_docs.show_api_doc(app_name='spotify', api_name='login'))  # one API's specification
```
{instructions}"""

APPWORLD_INSTRUCTIONS = """
Key instructions:
1. Look at an API's specification (apis.api_docs.show_api_doc) before calling it; call APIs only \
as documented, as apis.<app>.<api>(...).
2. Write small chunks of code, one per step, and check that each works before any irreversible \
change.
3. Many APIs return results in pages: go through all the pages with page_index.
4. The "supervisor" app holds my personal information, account passwords, addresses and payment \
cards; the people I mention are the contacts of my "phone" app.
5. Any file system in a task is the file_system app, not the machine's files; only the standard \
library is available, and OS-level modules are disabled.
6. For the current date and time use datetime.now() or the phone app; temporal requests use whole \
days (00:00:00 to 23:59:59) in one default time zone.
7. Decide on your own; do not ask me for clarifications.
8. When the task is done, call apis.supervisor.complete_task(), with answer=<answer> when the \
task asks for information (just the entity or number, e.g. answer=10), or status="fail" if it \
cannot be done.

Now solve the actual task.
My name is: {first_name} {last_name}. My personal email is {email} and my phone number is \
{phone_number}."""


class AppWorldEnv:
    name = "appworld"

    def __init__(self):
        if os.environ.get("BOXD_TRAINING_OWN_ROOT") == "1":
            self._own_root()
        self.world_process = None
        try:
            import appworld

            if getattr(appworld, "__file__", None) is None:  # a bare directory named appworld
                raise ImportError("not a package", name="appworld")
        except ImportError as exc:
            if getattr(exc, "name", None) not in (None, "appworld"):
                raise NotReady(
                    f"appworld cannot import {exc.name} in {sys.executable}: "
                    f"pip install appworld=={APPWORLD_VERSION}"
                )
            raise NotReady(
                f"the environment library appworld is not installed in {sys.executable}: "
                f"pip install appworld=={APPWORLD_VERSION} && appworld install"
            )
        from appworld.common.path_store import path_store

        self.lib = appworld
        self.library = f"appworld {getattr(appworld, '__version__', 'unknown')}"
        self.data = path_store.data
        tasks = os.path.join(self.data, "tasks")
        datasets = os.path.join(self.data, "datasets")
        if not os.path.isdir(tasks) or not os.path.isdir(datasets):
            raise NotReady(f"AppWorld task data not installed (no {tasks}): {APPWORLD_DATA_HINT}")
        import importlib.util

        try:
            installed = importlib.util.find_spec("appworld.apps.supervisor") is not None
        except ImportError:
            installed = False
        if not installed:
            raise NotReady(
                f"AppWorld apps not unpacked in {sys.executable} (appworld install): "
                f"{APPWORLD_DATA_HINT}"
            )
        self.tasks_dir = tasks
        self.datasets_dir = datasets
        self.count = sum(1 for entry in os.scandir(tasks) if entry.is_dir())
        self.world = None

    @staticmethod
    def _own_root():
        """An APPWORLD_ROOT of this worker's own (boxd gives each instance a uid and a home): the shared
        root's entries (data, ...) linked in, and experiments/ a directory of its own, so no instance
        reads or edits another's saved state (AppWorld writes it under ROOT/experiments/outputs)."""
        shared = os.environ.get("APPWORLD_ROOT") or ""
        own = os.path.join(os.getcwd(), "appworld")
        os.makedirs(os.path.join(own, "experiments"), mode=0o700, exist_ok=True)
        if shared and os.path.isdir(shared):
            for entry in os.listdir(shared):
                link = os.path.join(own, entry)
                if entry != "experiments" and not os.path.lexists(link):
                    os.symlink(os.path.join(shared, entry), link)
        os.environ["APPWORLD_ROOT"] = own

    def _datasets(self):
        return sorted(entry.name[:-4] for entry in os.scandir(self.datasets_dir)
                      if entry.name.endswith(".txt"))

    def profile(self, params):
        split = params.get("split", "train")
        if split is None:
            split = "train"
        known = self._datasets()
        if split == "val" and "val" not in known and "dev" in known:
            split = "dev"
        if not isinstance(split, str) or not DATASET_NAME.fullmatch(split) or split not in known:
            raise Refused(f"unknown split {split!r}: {', '.join(known) or 'no datasets installed'}")
        return list(self.lib.load_task_ids(split))

    def create(self, task_id, instance_id, params):
        if not DATASET_NAME.fullmatch(task_id) or not os.path.isdir(
            os.path.join(self.tasks_dir, task_id)
        ):
            raise Refused(f"unknown task {task_id!r} for appworld: see get_env_profile")
        simple = params.get("simple", False)
        prompt = params.get("prompt", True)
        if not isinstance(simple, bool) or not isinstance(prompt, bool):
            raise Refused("params.simple and params.prompt must be booleans")
        if SAFE_NAME.fullmatch(instance_id) and instance_id not in (".", ".."):
            experiment = instance_id
        else:
            import hashlib

            experiment = "boxd_" + hashlib.sha256(instance_id.encode("utf-8")).hexdigest()[:16]
        world_process = WorldProcess(self)
        try:
            # No policy code has run yet: this answer is the world's own.
            data = world_process.call("create", task_id, instance_id, experiment, simple, prompt)
        except Refused:
            world_process.close()
            raise
        self.world_process, self.task_id, self.experiment = world_process, task_id, experiment
        return data

    # -- in the world process (see WorldProcess): the world, and the policy's code

    def world_open(self, task_id, instance_id, experiment, simple, prompt):
        try:
            world = self.lib.AppWorld(task_id=task_id, experiment_name=experiment)
        except Exception as exc:
            log("AppWorld failed to load the task:\n" + traceback.format_exc())
            raise Refused(f"appworld could not load task {task_id!r}: {describe(exc)}", 500)
        self.world, self.task_id, self.experiment = world, task_id, experiment
        self.simple = simple
        supervisor = world.task.supervisor
        person = {key: getattr(supervisor, key, "") for key in
                  ("first_name", "last_name", "email", "phone_number")}
        instructions = APPWORLD_INSTRUCTIONS.format(**person)
        if prompt:
            system = APPWORLD_PROMPT.format(instructions=instructions)
        else:
            system = instructions.strip()
        return {
            "state": [
                {"role": "system", "content": system},
                {"role": "user", "content": world.task.instruction},
            ],
            "info": {"instance_id": instance_id, "task_id": task_id},
        }

    def _run(self, code):
        output = self.world.execute(code)
        if not isinstance(output, str):
            output = str(output)
        return output if self.simple else "Output:\n```\n" + output + "```\n\n"

    @staticmethod
    def _code_of(content):
        match = CODE_BLOCK.search(content)
        if match:
            return match.group(1).strip()
        match = OPEN_CODE_BLOCK.match(content)
        return match.group(1).strip() if match else ""

    def world_step(self, messages):
        """Runs the step's code; {"content": the outputs, "completed": the task says it is done}."""
        content = message_text(messages, required=False)
        tool_calls = messages.get("tool_calls") or []
        if not isinstance(tool_calls, list):
            raise Refused("messages.tool_calls must be a list")
        if "content" not in messages and not tool_calls:
            raise Refused("messages.content or messages.tool_calls is required")
        outputs = []
        if not tool_calls:
            code = self._code_of(content)
            if code:
                outputs.append(self._run(code))
            elif self.simple and content.strip():
                outputs.append(self._run(content))
        for call in tool_calls:
            if not isinstance(call, dict):
                raise Refused("each of messages.tool_calls must be an object")
            function = call.get("function") if isinstance(call.get("function"), dict) else {}
            name = call.get("name") or function.get("name")
            arguments = call.get("arguments", function.get("arguments"))
            if name != "appworld":
                outputs.append(f"tool {name!r} not found: the only tool is appworld, with "
                               'arguments {"code": "<python code>"}')
                continue
            try:
                if isinstance(arguments, str):
                    arguments = json.loads(arguments)
                code = arguments["code"]
                if not isinstance(code, str):
                    raise TypeError("code must be a string")
            except Exception as exc:
                outputs.append(f"tool call error of appworld: its arguments must be a JSON object "
                               f'{{"code": "<python code>"}} ({describe(exc)})')
                continue
            outputs.append(self._run(code))
        return {"content": "\n".join(outputs), "completed": bool(self.world.task_completed())}

    def world_info(self):
        apps = getattr(self.world.task, "app_descriptions", None) or {}
        lines = [
            "Available tools:",
            '- appworld: runs Python code in this task\'s AppWorld REPL; arguments {"code": '
            '"<python code>"} (or one ```python block in the message)',
            "Apps, called as apis.<app>.<api>(...) inside that code:",
        ]
        lines += [f"- {app}: {description}" for app, description in dict(apps).items()]
        return "\n".join(lines)

    # -- in the worker: what reaches boxd

    def step(self, messages, params):
        ran = self.world_process.call("step", messages)
        # The world process ran the policy's code: its answer is data, checked, never a reward.
        if (not isinstance(ran, dict) or not isinstance(ran.get("content"), str)
                or not isinstance(ran.get("completed"), bool)):
            self.world_process.broken("a step answer of the wrong shape")
        terminated = ran["completed"]
        reward = float(self.evaluate({}, params)) if terminated else 0.0
        return {
            "state": [{"role": "user", "content": ran["content"], "tool_calls": []}],
            "reward": reward,
            "is_terminated": terminated,
            "info": {},
        }

    def evaluate(self, messages, params):
        try:
            from appworld.evaluator import evaluate_task

            tracker = evaluate_task(
                task_id=self.task_id,
                experiment_name=self.experiment,
                suppress_errors=True,
                save_report=False,
            )
            passes, failures = len(tracker.passes), len(tracker.failures)
        except Exception as exc:
            log("appworld evaluation failed:\n" + traceback.format_exc())
            raise Refused(f"appworld evaluation failed: {describe(exc)}", 500)
        if params.get("sparse") or passes + failures == 0:
            return float(failures == 0)
        return passes / (passes + failures)

    def get_info(self, messages, params):
        info = self.world_process.call("get_info")
        if not isinstance(info, str):
            self.world_process.broken("a get_info answer that is not text")
        return info


def _die_with_parent():
    """prctl(PR_SET_PDEATHSIG, SIGKILL): a world process does not outlive its worker."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False


WORLD_ANSWER_MAX = 32 * 1024 * 1024  # bytes of one answer line from a world process
STALE_MAX = 64  # answers to no request skipped before one call's answer


class WorldProcess:
    """An AppWorld world in a forked child, where the policy's code runs (see "Who can write the
    answers" above). Requests and answers are JSON lines over a socket pair; this side bounds and
    type-checks what comes back. The child is in the worker's process group (boxd's kill reaches it)
    and dies with the worker."""

    def __init__(self, env):
        import socket

        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the world process
            code = 0
            try:
                ours.close()
                os.close(_PROTOCOL_FD)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.close(null)
                _die_with_parent()
                WorldProcess._serve(env, theirs)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        self.pid = pid
        self.socket = ours
        self.answers = ours.makefile("rb")
        self.number = 0  # of the last request

    @staticmethod
    def _serve(env, channel):
        requests = channel.makefile("rb")
        # Named as boxd's ops, so that an error reads as it did when the world ran in the worker.
        ops = {"create": env.world_open, "step": env.world_step, "get_info": env.world_info}
        while True:
            line = requests.readline()
            if not line:
                return
            op = None
            try:
                request = json.loads(line)
                op, number = request["op"], request["number"]
                answer = {"ok": True, "data": ops[op](*request["args"])}
            except Refused as exc:
                answer = {"ok": False, "status": exc.status, "error": one_line(exc)}
            except Exception as exc:
                log(f"appworld {op} failed:\n" + traceback.format_exc())
                answer = {"ok": False, "status": 500,
                          "error": one_line(f"appworld {op} failed: {describe(exc)}")}
            answer["number"] = number
            text = json.dumps(_finite(answer), ensure_ascii=True, default=str)
            channel.sendall(text.encode("ascii") + b"\n")

    def call(self, op, *args):
        """The answer to `op`. Each request is numbered and its answer carries the number: the policy
        can write lines of its own into the channel, and a line not numbered as the request (one it
        wrote, or an answer its lines pushed back) is skipped, up to STALE_MAX of them; at worst it
        forges the text of its own step, never a reward (the caller computes that)."""
        self.number += 1
        try:
            line = json.dumps({"op": op, "args": list(args), "number": self.number},
                              ensure_ascii=True, default=str)
            self.socket.sendall(line.encode("ascii") + b"\n")
            for _ in range(STALE_MAX):
                answer = self._read()
                number = answer.get("number")
                if type(number) is int and number == self.number:
                    break
            else:
                self.broken(f"more than {STALE_MAX} answers to no request")
        except OSError as exc:
            self.broken(f"the channel failed ({describe(exc)})")
        if answer.get("ok") is True:
            return answer.get("data")
        status = answer.get("status")
        error = answer.get("error")
        raise Refused(one_line(error) if isinstance(error, str) else "appworld failed",
                      status if status in (400, 500) else 500)

    def _read(self):
        answer = self.answers.readline(WORLD_ANSWER_MAX + 1)
        if not answer:
            self.broken("it exited")
        if not answer.endswith(b"\n"):
            self.broken(f"an answer longer than {WORLD_ANSWER_MAX} bytes")
        try:
            answer = json.loads(answer)
        except (ValueError, RecursionError):
            self.broken("an answer that is not JSON")
        if not isinstance(answer, dict):
            self.broken("an answer that is not an object")
        return answer

    def broken(self, why):
        """The world process is gone or broke its protocol: the instance cannot go on, so the worker
        ends (boxd answers that the instance is gone)."""
        log(f"the AppWorld world process broke: {why}; the worker exits")
        self.close()
        os._exit(1)

    def close(self):
        import signal

        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except OSError:
            pass
        self.socket.close()


ENVIRONMENT = AppWorldEnv
