"""A real X window that records what it receives, for the computer family's tests.

It covers the whole screen (no window manager: placed at 0,0 as an override-redirect window), paints
four known colours in the top-left 200x100 region, holds a text field that takes keyboard input, and
prints one JSON line per event on stdout: key presses with their keysym name and character, button
presses and releases with coordinates, wheel clicks, and the text field's contents after every key.
It prints {"ready": true, "width": W, "height": H} once it is mapped and focused.

Run with Debian's python3 (python3-tk): python3 recorder.py
"""

import json
import sys
import tkinter as tk


def emit(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


root = tk.Tk()
width, height = root.winfo_screenwidth(), root.winfo_screenheight()
root.overrideredirect(True)
root.geometry(f"{width}x{height}+0+0")

canvas = tk.Canvas(root, width=width, height=height, highlightthickness=0, bg="#ffffff")
canvas.place(x=0, y=0)
for index, colour in enumerate(["#ff0000", "#00ff00", "#0000ff", "#000000"]):
    canvas.create_rectangle(index * 50, 0, index * 50 + 49, 99, fill=colour, width=0)

entry = tk.Entry(root, width=60)
entry.place(x=300, y=300)


def on_key(event):
    emit(event="key", keysym=event.keysym, char=event.char, state=event.state)
    root.after_idle(lambda: emit(event="text", text=entry.get()))


def on_button(kind):
    def handler(event):
        emit(event=kind, button=event.num, x=event.x_root, y=event.y_root, state=event.state)
    return handler


root.bind_all("<KeyPress>", on_key)
for target in (canvas, entry):
    target.bind("<ButtonPress>", on_button("press"))
    target.bind("<ButtonRelease>", on_button("release"))
    target.bind("<Double-Button-1>", lambda event: emit(event="double", x=event.x_root, y=event.y_root))
    target.bind("<Triple-Button-1>", lambda event: emit(event="triple", x=event.x_root, y=event.y_root))


def ready():
    entry.focus_force()
    emit(ready=True, width=width, height=height)


root.after(100, ready)
root.mainloop()
