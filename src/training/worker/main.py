"""The training worker's loop, joined last, after protocol.py and the environment's file (which
names its class ENVIRONMENT): the greeting, then one answer line per request line."""


class Worker:
    def __init__(self, env):
        self.env = env
        self.instance = None  # (instance_id, task_id) once created

    def handle(self, request):
        op = request.get("op")
        if not isinstance(op, str):
            raise Refused("the request has no op")
        params = object_field(request, "params")
        if op == "profile":
            if self.instance:
                raise Refused(f"this worker serves instance {self.instance[0]!r}: "
                              "profile is asked of an idle worker")
            return self.env.profile(params)
        if op == "create":
            if self.instance:
                raise Refused(f"this worker already serves instance {self.instance[0]!r} "
                              f"(task {self.instance[1]!r})")
            task_id = request.get("task_id")
            if isinstance(task_id, int) and not isinstance(task_id, bool):
                task_id = str(task_id)
            if not isinstance(task_id, str) or not task_id:
                raise Refused("task_id is required")
            instance_id = request.get("instance_id")
            if not isinstance(instance_id, str) or not instance_id:
                raise Refused("instance_id is required")
            data = self.env.create(task_id, instance_id, params)
            self.instance = (instance_id, task_id)
            return data
        if op in ("step", "evaluate", "get_info"):
            if not self.instance:
                raise Refused(f"{op} before create: this worker has no instance")
            if op == "step" and not isinstance(request.get("messages"), dict):
                raise Refused("messages must be an object (the assistant's message)")
            messages = object_field(request, "messages")
            return getattr(self.env, op)(messages, params)
        raise Refused(f"unknown op {op!r}: profile, create, step, evaluate or get_info")

    def answer(self, line):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            return {"ok": False, "status": 400, "error": "malformed request line: not UTF-8"}
        try:
            request = json.loads(text)
        except (ValueError, RecursionError) as exc:
            return {"ok": False, "status": 400,
                    "error": f"malformed request line: not JSON ({describe(exc)})"}
        if not isinstance(request, dict):
            return {"ok": False, "status": 400,
                    "error": "malformed request line: not a JSON object"}
        op = request.get("op")
        try:
            return {"ok": True, "data": self.handle(request)}
        except Refused as exc:
            return {"ok": False, "status": exc.status, "error": one_line(exc)}
        except Exception as exc:
            log(f"{self.env.name} {op} failed:\n" + traceback.format_exc())
            return {"ok": False, "status": 500,
                    "error": one_line(f"{self.env.name} {op} failed: {describe(exc)}")}


def main():
    args = sys.argv[1:]
    name = None
    if "--env" in args and args.index("--env") + 1 < len(args):
        name = args[args.index("--env") + 1]
    if name != ENVIRONMENT.name:
        send({"ready": False, "error": f"unknown environment {name!r}: this worker serves "
                                       f"--env {ENVIRONMENT.name}"})
        return 0
    try:
        env = ENVIRONMENT()
    except NotReady as exc:
        send({"ready": False, "error": one_line(exc)})
        return 0
    except Exception as exc:
        log(f"the {name} environment failed to load:\n" + traceback.format_exc())
        send({"ready": False, "error": one_line(f"the {name} environment failed to load: "
                                                f"{describe(exc)}")})
        return 0
    send({"ready": True, "env": name, "library": env.library, "tasks": env.count})
    worker = Worker(env)
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return 0
        if not line.strip():
            send({"ok": False, "status": 400, "error": "malformed request line: empty"})
            continue
        send(worker.answer(line))


if __name__ == "__main__":
    try:
        code = main()
    except BrokenPipeError:  # boxd went away
        code = 0
    sys.exit(code)
