"""boxd's IPython helper (src/ipython/helper.py) driven directly over its JSON-lines protocol, as boxd drives it:
races between a cell and the thread that reads its output show only over many quick cells."""
import json
import os
import pathlib
import subprocess
import sys

HELPER = pathlib.Path(__file__).resolve().parents[2] / "src" / "ipython" / "helper.py"


def test_many_quick_cells_keep_their_output_and_the_capture_thread_never_fails(tmp_path):
    log = tmp_path / "helper.log"
    with open(log, "w") as sink:
        helper = subprocess.Popen([sys.executable, "-c", HELPER.read_text()], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=sink, text=True, bufsize=1,
                                  env={**os.environ, "HOME": str(tmp_path)})
        try:
            assert json.loads(helper.stdout.readline())["ready"] is True
            for index in range(400):
                # A cell's pipes are closed once it is done and their numbers are reused by the next
                # cell's: the capture thread must never read or close a number that is no longer its own.
                # Output large enough to be read while the cell's end is being served.
                helper.stdin.write(json.dumps({"id": index, "code": f"print({index}); print('a' * 102400)"}) + "\n")
                helper.stdin.flush()
                answer = json.loads(helper.stdout.readline())
                assert answer["id"] == index
                assert answer["stdout"] == f"{index}\n" + "a" * 102400 + "\n", answer["stdout"][:200]
        finally:
            helper.kill()
            helper.wait(10)
    assert "output capture" not in log.read_text(), log.read_text()[-2000:]


def test_history_stays_in_memory_and_is_not_written_to_a_file(tmp_path):
    helper = subprocess.Popen([sys.executable, "-c", HELPER.read_text()], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
                              env={**os.environ, "HOME": str(tmp_path), "IPYTHONDIR": str(tmp_path / "ipython")})
    try:
        helper.stdout.readline()
        answers = []
        for index, code in enumerate(["x = 5", "x", "print(In[1], _)", "%history -n"]):
            helper.stdin.write(json.dumps({"id": index, "code": code}) + "\n")
            helper.stdin.flush()
            answers.append(json.loads(helper.stdout.readline())["stdout"])
    finally:
        helper.kill()
        helper.wait(10)
    assert answers[1] == "Out[2]: 5\n"
    assert answers[2] == "x = 5 5\n"
    assert "1: x = 5" in answers[3] and "3: print(In[1], _)" in answers[3]
    assert not list(tmp_path.rglob("history.sqlite"))


def run_queued(tmp_path, cells):
    """Starts the helper with `cells` already waiting, as the SDK's first cell meets a kernel that is still
    starting, and returns each answer (stdout, stderr)."""
    helper = subprocess.Popen([sys.executable, "-c", HELPER.read_text()], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
                              cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path)})
    try:
        for index, code in enumerate(cells):
            helper.stdin.write(json.dumps({"id": index, "code": code}) + "\n")
        helper.stdin.flush()
        assert json.loads(helper.stdout.readline())["ready"] is True
        answers = [json.loads(helper.stdout.readline()) for _ in cells]
    finally:
        helper.kill()
        helper.wait(10)
    assert [answer["id"] for answer in answers] == list(range(len(cells)))
    return [(answer["stdout"], answer["stderr"]) for answer in answers]


STATE = ("import sys; print('IPython.core.magics' in sys.modules, type(sys.modules['asyncio']).__name__, "
         "type(get_ipython().find_line_magic('time')).__name__, 'Completer' in vars(get_ipython()))")


def test_a_cell_waiting_at_start_runs_before_the_magics_load_and_the_kernel_is_whole_after_it(tmp_path):
    # The built-in magics, asyncio, stack_data and the completer come after the first cell (~90 ms of the
    # kernel's start): the first cell runs without them, the second has them all.
    first, second = run_queued(tmp_path, [STATE, STATE])
    assert first == ("False LazyModule DeferredMagic False\n", "")
    assert second == ("True module method True\n", "")


def test_every_kind_of_first_cell_works_before_the_rest_of_the_start(tmp_path):
    first_cells = {
        "pwd": f"Out[1]: '{tmp_path}'\n",  # automagic: a single line naming a magic
        "%time x = 1\nprint(x)": "1\n",
        "%%bash\necho from-bash": "from-bash\n",
        "%lsmagic": "%time",
        "cat marker": "from-cat",  # an alias, registered at start
        "import asyncio\nawait asyncio.sleep(0)\nprint('awaited')": "awaited\n",
        "print(get_ipython().complete('pri')[1][:1])": "['print']\n",
        "print(get_ipython().Completer.__class__.__name__)": "IPCompleter\n",
    }
    (tmp_path / "marker").write_text("from-cat")
    for code, expected in first_cells.items():
        [(stdout, stderr)] = run_queued(tmp_path, [code])
        assert expected in stdout, (code, stdout, stderr)
    [(stdout, stderr)] = run_queued(tmp_path, ["def g():\n    1 / 0\ng()"])
    assert stdout == "" and "ZeroDivisionError" in stderr and "----> 2     1 / 0" in stderr, stderr


def test_magics_a_first_cell_registers_outlive_the_built_ins_loading_after_it(tmp_path):
    register = ("from IPython.core.magic import register_line_magic\n"
                "@register_line_magic\ndef hello(line): return 'hello ' + line\n"
                "@register_line_magic\ndef pwd(line): return 'my pwd'\n"
                "print(type(get_ipython().find_line_magic('time')).__name__)")
    [registered, used] = run_queued(tmp_path, [register, "a = %hello you\nb = %pwd\nc = %time 7\nprint(a, b, c)"])
    assert registered == ("DeferredMagic\n", "")
    assert used[0].startswith("CPU times") and used[0].endswith("\nhello you my pwd 7\n"), used


def test_the_magics_loaded_after_the_first_cell_are_those_ipython_registers_at_start(tmp_path):
    listing = ("from IPython.core.alias import Alias\n"
               "manager = get_ipython().magics_manager\n"
               "print({kind: sorted(name for name, magic in table.items()) for kind, table in manager.magics.items()})\n"
               "print(sorted(manager.registry), sorted(name for name in vars(manager.user_magics) if name[0] != '_'))\n"
               "print(get_ipython().alias_manager.linemagics is manager.magics['line'], "
               "sorted(name for name, _ in get_ipython().alias_manager.aliases))")
    eager = subprocess.run(
        [sys.executable, "-c",
         "from IPython.core.interactiveshell import InteractiveShell\n"
         "from traitlets.config import Config\n"
         "settings = Config(); settings.HistoryManager.enabled = False\n"
         "shell = InteractiveShell.instance(config=settings, colors='NoColor')\n"
         "shell.run_cell(" + repr(listing) + ")"],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path)}, timeout=60)
    assert eager.returncode == 0, eager.stderr
    [_, (deferred, stderr)] = run_queued(tmp_path, ["1", listing])
    assert deferred == eager.stdout, (deferred, eager.stdout, stderr)
