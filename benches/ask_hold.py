#!/usr/bin/env python3
"""Ask mode at scale (docs/ask.md): what a held connection costs the engine,
and how long a decision takes to reach every held connection.

Starts `crackbox proxy serve` (the binary given) on loopback with SOURCES
ask-mode sources (127.0.0.2 onwards, empty allowlists) and an echo upstream,
then:
1. opens CONNECTIONS CONNECTs to the upstream spread over the sources (one
   pending request per source, every connection held), waits until
   /v1/pending counts them all, and samples the engine's RSS;
2. decides every request `once` and times from the first decision until
   every held connection has read its 200 (the first byte through);
3. proves each tunnel with an echo and samples the RSS again with every
   connection an idle tunnel, for the same figure per idle tunnel.

Loopback only; bounded in count and time. Every process runs at the hard
fd limit; the engine needs two fds per connection once they are through.

    cargo build --release --bin crackbox
    python3 benches/ask_hold.py target/release/crackbox --connections 10000
"""

import argparse
import json
import os
import resource
import selectors
import socket
import subprocess
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def echo_server():
    """A selectors echo server on loopback in a child process (its sockets
    count against its own fd limit); its port and pid."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    listener.setblocking(False)
    listener_port = listener.getsockname()[1]
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)

    def serve():
        while True:
            for key, _ in sel.select():
                if key.fileobj is listener:
                    try:
                        conn, _ = listener.accept()
                    except BlockingIOError:
                        continue
                    conn.setblocking(False)
                    sel.register(conn, selectors.EVENT_READ)
                    continue
                conn = key.fileobj
                try:
                    data = conn.recv(65536)
                except (BlockingIOError, ConnectionError):
                    continue
                if not data:
                    sel.unregister(conn)
                    conn.close()
                else:
                    conn.sendall(data)

    pid = os.fork()
    if pid == 0:
        serve()
    listener.close()
    return listener_port, pid


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def engine_pid(serve_pid):
    deadline = time.time() + 10
    while time.time() < deadline:
        for task in os.listdir(f"/proc/{serve_pid}/task"):
            with open(f"/proc/{serve_pid}/task/{task}/children") as children:
                pids = children.read().split()
            if pids:
                return int(pids[0])
        time.sleep(0.05)
    raise RuntimeError("no engine child")


def admin_get(admin, path):
    with urllib.request.urlopen(f"http://{admin}{path}", timeout=10) as answer:
        return json.load(answer)


def admin_post(admin, path, body):
    request = urllib.request.Request(
        f"http://{admin}{path}", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("--connections", type=int, default=10000)
    parser.add_argument("--sources", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    upstream, echo_pid = echo_server()
    proxy = f"127.0.0.1:{free_port()}"
    admin = f"127.0.0.1:{free_port()}"
    sources = [f"127.0.0.{2 + n}" for n in range(args.sources)]
    command = [
        args.binary, "proxy", "serve", "--listen", proxy, "--admin", admin,
        "--transparent", "", "--threads", str(args.threads),
        "--allow-private-destinations", "--ask-timeout", "600",
        "--max-connections-per-source", str(args.connections),
        "--max-connections-total", str(args.connections * 2),
    ]
    for n, source in enumerate(sources):
        command += ["--register", f"{source}=held-{n}:;mode=ask"]
    env = dict(os.environ, CRACKBOX_LOG="warn")
    daemon = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        while True:
            try:
                if admin_get(admin, "/health")["status"] == "ok":
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("daemon not healthy")
            time.sleep(0.1)
        engine = engine_pid(daemon.pid)
        time.sleep(0.5)
        base = rss_kib(engine)
        host, port = proxy.split(":")
        target = f"localhost:{upstream}"
        held = []
        for n in range(args.connections):
            sock = socket.socket()
            sock.bind((sources[n % len(sources)], 0))
            sock.connect((host, int(port)))
            sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
            held.append(sock)
        deadline = time.time() + 120
        while True:
            pending = admin_get(admin, "/v1/pending")["pending"]
            waiting = sum(p["waiting"] for p in pending)
            if waiting == args.connections:
                break
            if time.time() > deadline:
                raise RuntimeError(f"only {waiting} held")
            time.sleep(0.2)
        time.sleep(1)
        held_rss = rss_kib(engine)
        started = time.monotonic()
        for request in pending:
            admin_post(admin, f"/v1/pending/{request['id']}", {"decision": "once"})
        decided = time.monotonic()
        for sock in held:
            sock.settimeout(60)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(4096)
                if not chunk:
                    raise RuntimeError("closed before its 200")
                head += chunk
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(head[:80])
        through = time.monotonic()
        for n, sock in enumerate(held):
            sock.sendall(n.to_bytes(8, "big"))
            got = b""
            while len(got) < 8:
                got += sock.recv(8 - len(got))
            if got != n.to_bytes(8, "big"):
                raise RuntimeError("echo differs")
        time.sleep(1)
        tunnel_rss = rss_kib(engine)
        n = args.connections
        print(f"connections {n} from {len(sources)} sources ({len(pending)} pending requests), {args.threads} core threads")
        print(f"engine RSS: {base} KiB idle, {held_rss} KiB held, {tunnel_rss} KiB as idle tunnels")
        print(f"per held connection: {(held_rss - base) / n:.2f} KiB")
        print(f"per idle tunnel:     {(tunnel_rss - base) / n:.2f} KiB")
        print(f"decisions posted in {(decided - started) * 1000:.1f} ms; "
              f"every held connection had its 200 {(through - started) * 1000:.1f} ms after the first decision")
        for sock in held:
            sock.close()
    finally:
        daemon.terminate()
        daemon.wait(timeout=20)
        os.kill(echo_pid, 9)
        os.waitpid(echo_pid, 0)


if __name__ == "__main__":
    main()
