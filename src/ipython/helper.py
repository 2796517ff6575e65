"""boxd's IPython helper: one InteractiveShell driven by JSON lines.

Requests arrive on the original stdin and answers leave on the original stdout; those two fds are moved
aside at start so user code can neither read the protocol nor corrupt it. During a cell, fds 1 and 2 point
at capture files (so `!cmd`, C extensions and subprocesses are captured too); between cells they point at
boxd's log.
"""
import base64
import codecs
import json
import os
import re
import signal
import sys
import tempfile
import threading

proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
log_fd = os.dup(2)
devnull = os.open(os.devnull, os.O_RDWR)
os.dup2(devnull, 0)
os.dup2(log_fd, 1)


send_lock = threading.Lock()


def send(message):
    line = json.dumps(message) + "\n"
    with send_lock:
        proto_out.write(line)
        proto_out.flush()


try:
    import IPython
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
except ImportError as error:
    send({"fatal": f"IPython is not installed for {sys.executable}: {error}"})
    sys.exit(3)

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml")
MAX_OUTPUT = int(os.environ.get("BOXD_MAX_OUTPUT", str(4 * 1024 * 1024)))
images = []


def take_images(data):
    found = False
    for mime in IMAGE_TYPES:
        payload = data.get(mime)
        if payload is None:
            continue
        if isinstance(payload, bytes):
            payload = base64.b64encode(payload).decode()
        elif mime == "image/svg+xml":
            payload = base64.b64encode(payload.encode()).decode()
        images.append({"mimeType": mime, "data": payload})
        found = True
    return found


class Publisher(DisplayPublisher):
    def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
        if not take_images(data) and "text/plain" in data:
            print(data["text/plain"])


class Hook(DisplayHook):
    def write_format_data(self, format_dict, md_dict=None):
        take_images(format_dict)
        super().write_format_data(format_dict, md_dict)


os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
shell = InteractiveShell.instance(display_pub_class=Publisher, displayhook_class=Hook, colors="NoColor")


def show_traceback_on_stderr(etype, evalue, stb):
    sys.stderr.write(ANSI.sub("", shell.InteractiveTB.stb2text(stb)) + "\n")


shell._showtraceback = show_traceback_on_stderr
# Only a running cell is interruptible; a late SIGINT between cells must not break the protocol loop.
signal.signal(signal.SIGINT, signal.SIG_IGN)


def read_capped(capture):
    size = capture.seek(0, os.SEEK_END)
    capture.seek(0)
    if size <= MAX_OUTPUT:
        return capture.read().decode("utf-8", "replace")
    half = MAX_OUTPUT // 2
    head = capture.read(half)
    capture.seek(size - half)
    tail = capture.read(half)
    marker = f"\n[boxd: output truncated, {size - 2 * half} bytes omitted]\n".encode()
    return (head + marker + tail).decode("utf-8", "replace")


class Tail(threading.Thread):
    """Streams what a cell writes to its capture files while it runs (for streaming calls)."""

    def __init__(self, request_id, captures):
        super().__init__(daemon=True)
        self.request_id = request_id
        self.captures = [(name, capture, codecs.getincrementaldecoder("utf-8")("replace"))
                         for name, capture in captures]
        self.positions = {name: 0 for name, _ in captures}
        self.stopping = threading.Event()

    def pump(self, final=False):
        for name, capture, decoder in self.captures:
            while True:
                chunk = os.pread(capture.fileno(), 65536, self.positions[name])
                self.positions[name] += len(chunk)
                text = decoder.decode(chunk, final=final and not chunk)
                if name == "stderr":
                    text = ANSI.sub("", text)
                if text:
                    send({"id": self.request_id, "output": {"stream": name, "data": text}})
                if not chunk:
                    break

    def run(self):
        while not self.stopping.wait(0.05):
            self.pump()

    def finish(self):
        self.stopping.set()
        self.join()
        self.pump(final=True)


def run(code, request_id, stream):
    images.clear()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        tail = Tail(request_id, [("stdout", out), ("stderr", err)]) if stream else None
        if tail:
            tail.start()
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            shell.run_cell(code, store_history=True)
        except KeyboardInterrupt:
            sys.stderr.write("KeyboardInterrupt\n")
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            sys.stdout.flush()
            sys.stderr.flush()
            if tail:
                tail.finish()
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
        return {"stdout": read_capped(out), "stderr": ANSI.sub("", read_capped(err)), "images": list(images)}


send({"ready": True, "python": sys.version.split()[0], "ipython": IPython.__version__})
for line in proto_in:
    request = json.loads(line)
    answer = run(request["code"], request["id"], request.get("stream", False))
    answer["id"] = request["id"]
    send(answer)
