"""A stdlib-only agent program that probes its isolation, then makes one chat call.

Modes (argv[1]):
  "net PORT..."   makes a chat call through OPENAI_BASE_URL, then tries to connect to each
                  127.0.0.1:PORT, to the gateway's Unix socket (argv after "--unix") and writes a
                  file in its working directory and one next to this script; prints a JSON report
                  (with the pids it can see and its effective capabilities).
  "daemon TOKEN"  double-forks a setsid daemon (a python sleeping, TOKEN in its argv, its pid in
                  this namespace written to daemon.pid), waits until the test saw it (the file "seen"),
                  makes a chat call, exits 0.
  "hang TOKEN"    the same daemon, plus a child in its process group, then sleeps until SIGTERM
                  (which it records in the file "terminated").
"""

import json
import os
import socket
import sys
import time
import urllib.request


def chat(messages):
    req = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({"model": "whatever", "messages": messages}).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())["choices"][0]["message"]


def attempt(family, address):
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(address)
        return "connected"
    except OSError as exc:
        return f"refused: {exc.strerror or exc}"


def write(path):
    try:
        with open(path, "w") as f:
            f.write("x")
        return "written"
    except OSError as exc:
        return f"refused: {exc.strerror}"


SLEEPER = "import time; time.sleep(600)"


def daemon(token):
    """Double fork + setsid: the daemon leaves this process group and its session."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open("daemon.pid", "w") as f:
                f.write(str(os.getpid()))
            os.execv(sys.executable, [sys.executable, "-c", SLEEPER, token])
        os._exit(0)
    os.wait()


def wait_until_seen():
    """The test, watching from the host, creates "seen" in this directory once it saw the sleepers."""
    deadline = time.monotonic() + 30
    while not os.path.exists("seen") and time.monotonic() < deadline:
        time.sleep(0.02)


mode = sys.argv[1]
task = os.environ.get("VF_TASK", "")
if mode == "net":
    reply = chat([{"role": "user", "content": task}])
    args = sys.argv[2:]
    ports = args[: args.index("--unix")]
    with open("/proc/self/status") as f:
        status = f.read().splitlines()
    report = {
        "reply": reply.get("content"),
        "ports": {p: attempt(socket.AF_INET, ("127.0.0.1", int(p))) for p in ports},
        "outside": attempt(socket.AF_INET, ("1.1.1.1", 53)),
        "unix": attempt(socket.AF_UNIX, args[args.index("--unix") + 1]),
        "workdir_write": write("note.txt"),
        "host_write": write(os.path.join(os.path.dirname(os.path.abspath(__file__)), "planted.txt")),
        "pid": os.getpid(),
        "visible_pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "cap_eff": next(line.split()[1] for line in status if line.startswith("CapEff:")),
    }
    print(json.dumps(report))
elif mode in ("daemon", "hang"):
    daemon(sys.argv[2])
    if mode == "hang":
        import subprocess

        subprocess.Popen([sys.executable, "-c", SLEEPER, sys.argv[2]])
    wait_until_seen()
    chat([{"role": "user", "content": task}])
    if mode == "hang":
        import signal

        def terminated(*_):  # the timeout's SIGTERM reaches the program: it may end cleanly
            with open("terminated", "w") as f:
                f.write("SIGTERM")
            sys.exit(0)

        signal.signal(signal.SIGTERM, terminated)
        time.sleep(600)
