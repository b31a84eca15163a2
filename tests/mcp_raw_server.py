"""A tiny stdio MCP server speaking JSON-RPC by hand, for the bounded stdio transport's tests: it writes its answers
as the TypeScript SDK's servers do, the id last (`{"result":...,"jsonrpc":"2.0","id":N}`), and writes what no SDK
server would (a line with its id in the middle, stray lines, bytes that are not UTF-8).

    python tests/mcp_raw_server.py RUNS            # answers initialize, tools/list, tools/call; exits at stdin's end
    python tests/mcp_raw_server.py RUNS --stubborn # ... and, once stdin closes, ignores SIGTERM, with a child
    python tests/mcp_raw_server.py RUNS --child    # ... with a child, and exits at stdin's end (the child stays)

Tools: `big(size, id_at, wait)` writes a text of `size` characters, its id at the `tail` (`{"result":...,
"jsonrpc":"2.0","id":N}`), in the `middle` (`{"result":...,"id":N,"jsonrpc":"2.0"}`), first as the Kotlin SDK writes it
(`kotlin`: `{"id":N,"result":...,"jsonrpc":"2.0"}`), first in sorted keys (`sorted`: `{"id":N,"jsonrpc":"2.0",
"result":...}`), or `none` (its id null; then a short answer follows for that id). It appends "big" to the file RUNS
once half the line is written; with `wait` it writes the other half only once it has read the next request, so that the
test knows a call it sends then was in flight while the line was read. `shout(size)` sends a log notification of `size`
characters before its answer. `pid` says the process id (and its child's). `stray` writes a line that is not JSON and
one that is not UTF-8 before its answer, whose text holds a byte that is not UTF-8 either. `stray_big(size)` writes a
line of `size` bytes that is not JSON before its answer. `bad_id(size, id)` writes an answer of `size` characters whose
id is the raw bytes `id` (latin-1), then its real answer. `spawn` starts a child that holds the server's stdout, deaf to
SIGTERM, and says its pid; `crash` exits at once, leaving that child.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

OUT = sys.stdout.buffer
IN = sys.stdin.buffer
TOOLS = [
    {"name": name, "description": name, "inputSchema": {"type": "object"}}
    for name in ("big", "shout", "pid", "stray", "echo", "stray_big", "bad_id", "spawn", "crash")
]
waiting: list[dict] = []  # requests read while a big line was held, answered after it
child: subprocess.Popen[bytes] | None = None


def send(data: bytes) -> None:
    OUT.write(data)
    OUT.flush()


def answer(ident: object, result: dict) -> None:
    send(json.dumps({"result": result, "jsonrpc": "2.0", "id": ident}).encode() + b"\n")  # the id last


def text(ident: object, said: str) -> None:
    answer(ident, {"content": [{"type": "text", "text": said}], "isError": False})


def big(ident: object, size: int, id_at: str, wait: bool) -> None:
    key = json.dumps(ident).encode()
    head, ending = {
        "tail": (b"{", b',"jsonrpc":"2.0","id":' + key + b"}\n"),
        "middle": (b"{", b',"id":' + key + b',"jsonrpc":"2.0"}\n'),
        "kotlin": (b'{"id":' + key + b",", b',"jsonrpc":"2.0"}\n'),
        "sorted": (b'{"id":' + key + b',"jsonrpc":"2.0",', b"}\n"),
        "none": (b"{", b',"jsonrpc":"2.0","id":null}\n'),
    }[id_at]
    body = head + b'"result":{"content":[{"type":"text","text":"' + b"x" * size + b'"}],"isError":false}'
    send(body[: len(body) // 2])
    with open(sys.argv[1], "a") as runs:
        runs.write("big\n")
    line = IN.readline() if wait else b""  # the next request, sent while this line is half written
    if line:
        waiting.append(json.loads(line))
    send(body[len(body) // 2 :] + ending)
    if id_at == "none":
        text(ident, "after an unreadable line")


def call(ident: object, name: str, arguments: dict) -> None:
    if name == "big":
        big(ident, arguments["size"], arguments.get("id_at", "tail"), arguments.get("wait", True))
    elif name == "shout":
        said = {"level": "info", "data": "x" * arguments["size"]}
        send(json.dumps({"method": "notifications/message", "params": said, "jsonrpc": "2.0"}).encode() + b"\n")
        text(ident, "shouted")
    elif name == "pid":
        text(ident, f"pid={os.getpid()} child={child.pid if child else 0}")
    elif name == "stray":
        send(b"npm notice: not JSON\n\xff\xfe\x00 not UTF-8\n")
        send(b'{"jsonrpc":"2.0","id":' + json.dumps(ident).encode() + b',"result":{"content":[')
        send(b'{"type":"text","text":"caf\xe9"}],"isError":false}}\n')
    elif name == "stray_big":
        send(b"DEBUG " + b"y" * arguments["size"] + b"\n")
        text(ident, "after a stray line")
    elif name == "bad_id":
        send(b'{"jsonrpc":"2.0","id":' + arguments["id"].encode("latin-1") + b',"result":{"content":[{"type":"text",')
        send(b'"text":"' + b"x" * arguments["size"] + b'"}],"isError":false}}\n')
        text(ident, "after a bad id")
    elif name == "spawn":
        deaf = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"
        spawned = subprocess.Popen([sys.executable, "-c", deaf])  # inherits stdout, and stays until killed
        text(ident, f"child={spawned.pid}")
    elif name == "crash":
        os._exit(3)
    else:
        text(ident, str(arguments.get("text")))


def handle(request: dict) -> None:
    ident, method = request.get("id"), request.get("method")
    if ident is None:
        return  # a notification
    if method == "initialize":
        version = request["params"]["protocolVersion"]
        answer(
            ident,
            {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "1"}},
        )
    elif method == "tools/list":
        answer(ident, {"tools": TOOLS})
    elif method == "tools/call":
        call(ident, request["params"]["name"], request["params"].get("arguments") or {})
    else:
        send(json.dumps({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": method}}).encode() + b"\n")


def main() -> None:
    global child
    if "--stubborn" in sys.argv or "--child" in sys.argv:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    for line in IN:
        handle(json.loads(line))
        while waiting:
            handle(waiting.pop(0))
    if "--stubborn" in sys.argv:  # stdin closed: stay, deaf to SIGTERM, until killed
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)


if __name__ == "__main__":
    main()
