"""A few X11 requests spoken on the wire (no Xlib: its error handler ends the process, and the tests must see
each refusal as an answer): the connection setup with an Xauthority cookie or none, QueryExtension, XTEST's
FakeInput, GetImage, QueryPointer, and a round trip that says whether the server refused what came before."""
import os
import socket
import struct

# Xauthority families (Xauth.h).
FAMILY_LOCAL = 256
FAMILY_WILD = 65535
# XTEST's FakeInput event types.
MOTION_NOTIFY = 6


class Refused(Exception):
    """The server refused the connection (its reason) or a request (an X error)."""


def read_xauthority(path, display):
    """The (name, data) of `path`'s entry for local display number `display`, as Xlib picks it."""
    host = socket.gethostname().encode()
    raw = open(path, "rb").read()
    offset = 0

    def field():
        nonlocal offset
        (length,) = struct.unpack_from(">H", raw, offset)
        value = raw[offset + 2:offset + 2 + length]
        offset += 2 + length
        return value

    while offset < len(raw):
        (family,) = struct.unpack_from(">H", raw, offset)
        offset += 2
        address, number, name, data = field(), field(), field(), field()
        if number in (b"", str(display).encode()) and (family == FAMILY_WILD or (family == FAMILY_LOCAL and address == host)):
            return name, data
    raise LookupError(f"{path} has no entry for display :{display}")


def pad(length):
    return (4 - length % 4) % 4


class Connection:
    """One client connection to display `:display` through its Unix socket; `cookie` is (name, data) or None."""

    def __init__(self, display, cookie=None, timeout=10.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(f"/tmp/.X11-unix/X{display}")
        name, data = cookie or (b"", b"")
        setup = struct.pack("<BxHHHHxx", ord("l"), 11, 0, len(name), len(data))
        setup += name + b"\0" * pad(len(name)) + data + b"\0" * pad(len(data))
        self.sock.sendall(setup)
        status, reason_length, _, _, extra = struct.unpack("<BBHHH", self.recv(8))
        body = self.recv(extra * 4)
        if status != 1:
            raise Refused(body[:reason_length].decode(errors="replace").strip() if status == 0 else "authenticate")
        vendor_length, _, screens, formats = struct.unpack_from("<HHBB", body, 16)
        offset = 32 + vendor_length + pad(vendor_length) + 8 * formats
        (self.root,) = struct.unpack_from("<I", body, offset)
        self.width, self.height = struct.unpack_from("<HH", body, offset + 20)
        self.sequence = 0

    def recv(self, size):
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise Refused("the server closed the connection")
            data += chunk
        return data

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()

    def send(self, request):
        self.sequence = (self.sequence + 1) & 0xFFFF
        self.sock.sendall(request)
        return self.sequence

    def reply(self, sequence):
        """The reply to request `sequence` (its 32 bytes and what follows); an X error for it or any earlier
        request raises `Refused`. Events are skipped."""
        while True:
            head = self.recv(32)
            kind = head[0]
            if kind == 0:
                code, seq, value, minor, major = struct.unpack_from("<xBHIHB", head)
                raise Refused(f"X error {code} (request {major}.{minor}, value {value:#x}, sequence {seq})")
            if kind == 1:
                (length,) = struct.unpack_from("<I", head, 4)
                rest = self.recv(length * 4)
                (seq,) = struct.unpack_from("<H", head, 2)
                if seq == sequence:
                    return head + rest
                continue
            # An event: skipped.

    def sync(self):
        """A round trip (GetInputFocus): raises `Refused` if the server refused anything sent before."""
        self.reply(self.send(struct.pack("<BxH", 43, 1)))

    def query_extension(self, name):
        """(present, major opcode) of extension `name`."""
        encoded = name.encode()
        request = struct.pack("<BxHHxx", 98, 2 + (len(encoded) + pad(len(encoded))) // 4, len(encoded))
        answer = self.reply(self.send(request + encoded + b"\0" * pad(len(encoded))))
        return bool(answer[8]), answer[9]

    def fake_motion(self, xtest_opcode, x, y):
        """XTEST FakeInput: the pointer to (x, y) on the root window (no reply; `sync` shows a refusal)."""
        self.send(struct.pack("<BBHBBxxIIxxxxxxxxhhxxxxxxxB",
                              xtest_opcode, 2, 9, MOTION_NOTIFY, 0, 0, self.root, x, y, 0))

    def pointer(self):
        """QueryPointer on the root window: (x, y)."""
        answer = self.reply(self.send(struct.pack("<BxHI", 38, 2, self.root)))
        return struct.unpack_from("<hh", answer, 16)

    def get_image(self, x, y, width, height):
        """GetImage (ZPixmap, all planes) of the root window: the pixel bytes."""
        answer = self.reply(self.send(struct.pack("<BBHIhhHHI", 73, 2, 5, self.root, x, y, width, height,
                                                  0xFFFFFFFF)))
        return answer[32:]


def display_number(name=None):
    """The number of display `name` (default `$DISPLAY`): ":1" or ":1.0" is 1."""
    name = name if name is not None else os.environ.get("DISPLAY", "")
    return int(name.rpartition(":")[2].split(".")[0])
