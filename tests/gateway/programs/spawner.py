"""A stdlib-only agent program that leaves processes behind, for tests/gateway/test_agent_reaper.py.

argv: MODE TOKEN. Every process it leaves sleeps 300 s with TOKEN in its argv. It prints one JSON
line, {"pids": [[pid, starttime], ...]} (starttime: field 22 of /proc/PID/stat, so a test can tell
a pid that was reused from the process itself), then makes one chat call and exits 0 ("hang":
sleeps instead). Modes:
  "setsid"        Popen(start_new_session=True): a daemon in a session of its own.
  "double_fork"   a child calls setsid() and forks a grandchild, then exits: the grandchild is orphaned.
  "ignores_term"  a setsid daemon that ignores SIGTERM (it is running with SIG_IGN before the call).
  "hang"          a setsid daemon, then this program sleeps past the rollout's timeout (its own pid
                  is listed too).
  "killed"        no helper: after the call the program kills itself with SIGKILL.
  "exit7"         no helper: after the call it prints "bye" to stderr and exits 7.
  "alloc MB"      after the call, fills MB MiB of memory, then prints "allocated".
  "fork N"        starts N sleepers in its own group (as many as it can: each failure is counted;
                  the second line says {"started": k, "failed": [error, ...]}).
With PID_FILE set, the JSON line is also written to that file.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

SLEEP = "import time; time.sleep(300)"
IGNORE_TERM = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
               "open(sys.argv[1], 'w').close(); time.sleep(300)")


def chat(messages):
    req = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({"model": "whatever", "messages": messages}).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())["choices"][0]["message"]


def starttime(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def wait_for(path):
    deadline = time.monotonic() + 30
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit(f"{path} never appeared")
        time.sleep(0.01)


def double_fork(token):
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        os.setsid()
        grandchild = os.fork()
        if grandchild == 0:
            os.execv(sys.executable, [sys.executable, "-c", SLEEP, token])
        os.write(write, str(grandchild).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    with os.fdopen(read) as f:
        return int(f.read())


mode, token = sys.argv[1], sys.argv[2]
pids = []
if mode in ("setsid", "hang"):
    pids.append(subprocess.Popen([sys.executable, "-c", SLEEP, token], start_new_session=True).pid)
elif mode == "double_fork":
    pids.append(double_fork(token))
elif mode == "ignores_term":
    pids.append(subprocess.Popen([sys.executable, "-c", IGNORE_TERM, "ignoring", token], start_new_session=True).pid)
    wait_for("ignoring")
failed = []
if mode == "fork":
    for _ in range(int(sys.argv[3])):
        try:
            pids.append(subprocess.Popen([sys.executable, "-c", SLEEP, token]).pid)
        except OSError as exc:
            failed.append(f"{type(exc).__name__}: {exc.strerror}")
if mode == "hang":
    pids.append(os.getpid())
report = json.dumps({"pids": [[p, starttime(p)] for p in pids]})
if os.environ.get("PID_FILE"):  # for a test that cancels the rollout before it could read stdout
    with open(os.environ["PID_FILE"] + ".part", "w") as f:
        f.write(report)
    os.rename(os.environ["PID_FILE"] + ".part", os.environ["PID_FILE"])
print(report, flush=True)
if mode == "fork":
    print(json.dumps({"started": len(pids), "failed": failed}), flush=True)
chat([{"role": "user", "content": os.environ.get("VF_TASK", "")}])
if mode == "hang":
    time.sleep(300)
elif mode == "killed":
    os.kill(os.getpid(), signal.SIGKILL)
elif mode == "alloc":
    filled = b"x" * (int(sys.argv[3]) << 20)
    print("allocated", flush=True)
elif mode == "exit7":
    sys.stderr.write("bye\n")
    sys.exit(7)
