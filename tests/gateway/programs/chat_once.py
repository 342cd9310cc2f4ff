"""A stdlib-only agent program: one chat call per argv word (default one), prints each reply.

Modes (argv[1]): "env" prints its environment as JSON and makes one call; "crash" exits 3
before any call; "nocall" exits 0 without a call; "crash_after" makes a call then exits 4;
"hang" makes a call, starts a child that sleeps (its pid in child.pid) and sleeps itself;
"calls N" makes N calls, each extending the history (a linear conversation).
"""

import json
import os
import subprocess
import sys
import time
import urllib.request


def chat(messages):
    req = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({"model": "whatever", "messages": messages, "temperature": 2.0}).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())["choices"][0]["message"]


mode = sys.argv[1] if len(sys.argv) > 1 else "calls"
task = os.environ.get("VF_TASK", "")
if mode == "env":
    print(json.dumps(dict(os.environ)))
    chat([{"role": "user", "content": task}])
elif mode == "crash":
    sys.stderr.write("boom: cannot go on\n")
    sys.exit(3)
elif mode == "nocall":
    print("done without asking")
elif mode == "crash_after":
    chat([{"role": "user", "content": task}])
    sys.stderr.write("failed after one call\n")
    sys.exit(4)
elif mode == "hang":
    chat([{"role": "user", "content": task}])
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
    for folder in (".", os.environ.get("PID_DIR", ".")):
        with open(os.path.join(folder, "child.pid"), "w") as f:
            f.write(f"{child.pid} {os.getpid()} {os.getcwd()}")
    time.sleep(1000)
else:
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    messages = [{"role": "user", "content": task}]
    for i in range(n):
        reply = chat(messages)
        print(reply.get("content"))
        messages += [{"role": "assistant", "content": reply.get("content") or ""},
                     {"role": "user", "content": f"again {i}"}]
