"""A real X client that holds a server grab, for the computer family's tests: while it holds it, the X
server serves no other client (boxd's requests wait unanswered, as behind a stuck client or a stopped
server).

It opens $DISPLAY through libX11 (ctypes: no extra package), grabs the server, prints "grabbed", and
releases the grab when a line arrives on stdin or after --hold seconds (default 60: a test that dies
never leaves the display grabbed for long), then prints "released" and exits.

Run with Debian's python3: python3 grab.py [--hold SECONDS]
"""

import ctypes
import ctypes.util
import select
import sys


def main():
    hold = 60.0
    if len(sys.argv) == 3 and sys.argv[1] == "--hold":
        hold = float(sys.argv[2])
    name = ctypes.util.find_library("X11")
    if not name:
        sys.exit("libX11 is not installed")
    xlib = ctypes.CDLL(name)
    xlib.XOpenDisplay.restype = ctypes.c_void_p
    xlib.XOpenDisplay.argtypes = [ctypes.c_char_p]
    for function in (xlib.XGrabServer, xlib.XUngrabServer, xlib.XSync, xlib.XCloseDisplay):
        function.argtypes = [ctypes.c_void_p] + ([ctypes.c_int] if function is xlib.XSync else [])
    display = xlib.XOpenDisplay(None)
    if not display:
        sys.exit("cannot open the display")
    xlib.XGrabServer(display)
    # XSync waits for the server to have processed the grab: once "grabbed" is printed, it holds.
    xlib.XSync(display, 0)
    print("grabbed", flush=True)
    select.select([sys.stdin], [], [], hold)
    xlib.XUngrabServer(display)
    xlib.XSync(display, 0)
    print("released", flush=True)
    xlib.XCloseDisplay(display)


main()
