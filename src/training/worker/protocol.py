r"""boxd's training-environment worker: one process serves one instance of BFCL or AppWorld.

boxd embeds the worker's source and runs it as `PYTHON -u -c <source> --env bfcl|appworld`, one
process per instance (bfcl-eval keeps an episode's simulated state in module globals, so a process
is the isolation), with a scratch directory as cwd and boxd's environment: BFCL_DATA_PATH and
BFCL_SPLID_ID_PATH as agentscope-runtime's manager injects them, APPWORLD_ROOT as the appworld
library reads it. The source is three files joined, for the environment asked (worker.rs): this one
(the protocol and what both environments share), the environment's own (bfcl.py or appworld.py,
which names its class ENVIRONMENT), then main.py (the loop). A worker so holds only its own
environment's code and imports only its library; no file imports a sibling, each uses the names of
the files before it.

Protocol (JSON lines, UTF-8, on stdin/stdout)
----------------------------------------------
stdout carries the protocol only. Before importing anything else the worker keeps a private
duplicate of fd 1 for its answers and points fd 1 at fd 2, so whatever a library prints lands on
stderr (boxd logs stderr lines); tracebacks go to stderr too. The working directory is taken off
sys.path (`-c` puts it first), so nothing in it shadows a library.

Who can write the answers (issue #45)
------------------------------------
The answer lines are boxd's only view of an instance, rewards included, so only this process writes
them, and the policy's code never runs in it. The worker makes itself non-dumpable first thing
(PR_SET_DUMPABLE 0): a process of the same uid can then neither open /proc/<worker>/fd/* (the
protocol pipes) nor read or write its memory, nor trace it. BFCL runs no policy code at all (a call
runs only when it names a task's function with checked arguments, see bfcl.py). AppWorld's `execute`
does run the policy's Python: the world lives in a child process forked at create (the "world
process", appworld.py), which drops the protocol descriptors (fd 0 becomes /dev/null; the protocol's
copy of stdout is closed; fd 1 is stderr) and talks to this process over a socket pair. What it
answers is taken as data only: a step's text and whether the task says it is complete, checked for
type and size. The reward is never the world process's word: this process computes it with
appworld's evaluator from the experiment's saved state (the instance's own world, which its code
changes by acting in it, as the task intends). A world process that dies or breaks its protocol ends
this worker (boxd reports the instance gone). With a uid per instance (boxd's --training-uids),
another instance's code cannot reach either process.

First line, once the library and the data are loaded:
    {"ready": true, "env": "bfcl", "library": "bfcl-eval 2025.8.25", "tasks": 800}
or, when they cannot be (the worker then exits 0):
    {"ready": false, "error": "<one line: what is wrong and how to fix it>"}

Then one answer line per request line, until EOF on stdin (exit 0):
    {"op": "profile", "params": {"split": "train"}}
        -> data: [task id, ...]
    {"op": "create", "task_id": str, "instance_id": str, "params": {...}}
        -> data: {"state": [system message, user message], "info": {"instance_id", "task_id", ...}}
    {"op": "step", "messages": {the assistant's message}, "params": {...}}
        -> data: {"state": [message], "reward": float, "is_terminated": bool, "info": {}}
    {"op": "evaluate", "messages": {...}, "params": {"sparse": bool}}
        -> data: a float (sparse) or the environment's dict
    {"op": "get_info", "messages": {...}, "params": {...}}
        -> data: a string naming the real tools
Answers: {"ok": true, "data": ...} or {"ok": false, "status": 400|500, "error": "<one line>"}:
400 for the caller's mistakes (a malformed line, an unknown op, task or split, a step before
create, a second create, a missing or ill-typed message), 500 for a failure inside the
environment (its traceback on stderr). A worker serves at most one instance: `profile` any number
of times before `create`; after a successful `create` only step / evaluate / get_info. boxd kills
the worker on release, on a failed create and on a timeout, so the worker never cleans up.
"""

import os
import sys

# The protocol's own copy of stdout first, before any import can print.
_PROTOCOL_FD = os.dup(1)
os.dup2(2, 1)


def _set_dumpable(value):
    """prctl(PR_SET_DUMPABLE): 0 keeps processes of the same uid (an AppWorld world process, which
    runs the policy's code) out of this one's /proc/<pid>/fd and memory, and from tracing it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(4, value, 0, 0, 0) == 0  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        return False


_set_dumpable(0)
# `-c` puts the working directory first on sys.path: nothing in the scratch directory may shadow a
# library.
if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]

import json  # noqa: E402
import math  # noqa: E402
import traceback  # noqa: E402

ERROR_MAX = 2000


class Refused(Exception):
    """A request the worker answers with an error line (400: the caller's mistake; 500: ours)."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


class NotReady(Exception):
    """The library or its data cannot be loaded; the message says how to fix it."""


def one_line(text):
    text = " ".join(str(text).split())
    return text if len(text) <= ERROR_MAX else text[: ERROR_MAX - 3] + "..."


def describe(exc):
    return one_line(f"{type(exc).__name__}: {exc}")


def log(text):
    print(f"training worker: {text}", file=sys.stderr, flush=True)


def _finite(value):
    """`value` with non-finite floats replaced (JSON has none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def send(obj):
    try:
        text = json.dumps(obj, ensure_ascii=False, allow_nan=False, default=str)
    except ValueError:
        text = json.dumps(_finite(obj), ensure_ascii=False, default=str)
    try:
        data = (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: escape them
        data = (json.dumps(json.loads(text), ensure_ascii=True) + "\n").encode("ascii")
    view = memoryview(data)
    while view:
        written = os.write(_PROTOCOL_FD, view)
        view = view[written:]


def object_field(request, name):
    value = request.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Refused(f"{name} must be an object")
    return value


def message_text(messages, required=True):
    """The assistant message's text: `content` as a string (text parts of a list are joined)."""
    if "content" not in messages:
        if required:
            raise Refused("messages.content is required: send the assistant's message as messages")
        return ""
    content = messages["content"]
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        return "".join(
            part.get("text", "") for part in content if isinstance(part.get("text", ""), str)
        )
    raise Refused("messages.content must be a string")
