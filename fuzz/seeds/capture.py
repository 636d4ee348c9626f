#!/usr/bin/env python3
"""Regenerates the seed corpora in this folder from real clients.

Every client talks to a capture listener on 127.0.0.1 (a port the kernel
picks); names such as `allowed.test` are only ever written into requests and
ClientHellos, never resolved. Clients that are not installed are skipped.
Run from anywhere: `python3 fuzz/seeds/capture.py [CORPUS...]` (default: all;
e.g. `tls_peek` alone). The ClientHellos are also written, as captured, to
the engine's tls_peek test fixtures.

Seed layouts follow the fuzz targets' control bytes (see fuzz/README.md):
http_head `[flags][0]` + bytes, tls_peek `[0][0]` + bytes, socks5 `[0]` +
bytes, match_host `[port hi][port lo][mode]` + text; the others are raw.
"""

import http.client
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TLS_FIXTURES = os.path.join(HERE, "..", "..", "engine", "src", "protocol", "tls_peek", "fixtures")
IDLE = 1.2  # seconds of silence that end a capture


def listen():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    return server, server.getsockname()[1]


def capture(run_client, reply=b"", idle=IDLE):
    """Starts a listener, runs `run_client(port)`, returns what it sent."""
    server, port = listen()
    got = bytearray()

    def serve():
        server.settimeout(10)
        try:
            conn, _ = server.accept()
        except OSError:
            return
        conn.settimeout(idle)
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                got.extend(data)
        except socket.timeout:
            pass
        try:
            if reply:
                conn.sendall(reply)
        except OSError:
            pass
        conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        run_client(port)
    except Exception as err:  # a refused or cut connection is expected
        print(f"  client ended: {err!r}")
    thread.join()
    server.close()
    return bytes(got)


def run(args, timeout=15, env=None, stdin=None):
    if shutil.which(args[0]) is None:
        raise RuntimeError(f"{args[0]} not installed")
    subprocess.run(args, timeout=timeout, env=env, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
DENY = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def proxy_env(port):
    env = dict(os.environ)
    for key in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        env[key] = f"http://127.0.0.1:{port}"
    env["no_proxy"] = env["NO_PROXY"] = ""
    return env


def http_requests():
    """Requests as proxy clients send them to a forward proxy."""
    body = b"name=value&x=" + b"y" * 200
    clients = {
        "curl_get": lambda p: run(["curl", "-s", "-x", f"http://127.0.0.1:{p}", "http://allowed.test/path?q=1"]),
        "curl_post": lambda p: run(
            ["curl", "-s", "-x", f"http://127.0.0.1:{p}", "-d", body.decode(), "http://api.allowed.test:8080/submit"]
        ),
        "curl_chunked": lambda p: run(
            [
                "curl", "-s", "-x", f"http://127.0.0.1:{p}", "-H", "Transfer-Encoding: chunked",
                "--data-binary", "@-", "http://allowed.test/upload",
            ],
            stdin=b"first part\nsecond part\n" * 8,
        ),
        "curl_connect": lambda p: run(
            ["curl", "-s", "-p", "-x", f"http://127.0.0.1:{p}", "http://allowed.test:443/"]
        ),
        "curl_websocket": lambda p: run(
            [
                "curl", "-s", "-x", f"http://127.0.0.1:{p}", "-H", "Connection: Upgrade", "-H", "Upgrade: websocket",
                "-H", "Sec-WebSocket-Version: 13", "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                "http://ws.allowed.test/chat",
            ]
        ),
        "curl_proxy_auth": lambda p: run(
            ["curl", "-s", "-x", f"http://user:secret@127.0.0.1:{p}", "-H", "X-Trace: 1", "http://[::1]:8080/ipv6"]
        ),
        "wget_get": lambda p: run(["wget", "-q", "-O", "/dev/null", "-t", "1", "http://allowed.test/file.txt"], env=proxy_env(p)),
        "python_urllib": lambda p: urllib.request.build_opener(
            urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{p}"})
        ).open("http://allowed.test/pypi/simple/", timeout=5).read(),
        "python_http_client_connect": lambda p: python_tunnel(p),
        "node_http": lambda p: run(["node", "-e", NODE_HTTP.replace("PORT", str(p))]),
    }
    seeds = {}
    for name, client in clients.items():
        print(f"http_head/{name}")
        reply = DENY if "connect" in name else OK
        seeds[name] = capture(client, reply)
    return seeds


def python_tunnel(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.set_tunnel("allowed.test", 443, headers={"User-Agent": "python-http.client"})
    conn.request("GET", "/")


NODE_HTTP = """
const http = require('http');
const req = http.request({host: '127.0.0.1', port: PORT, method: 'POST', path: 'http://allowed.test/node?x=1',
  headers: {Host: 'allowed.test', 'Content-Type': 'application/json'}}, res => res.resume());
req.on('error', () => {});
req.write(JSON.stringify({hello: 'world'}));
req.end();
"""


def http_responses():
    """Response heads and bodies from real servers on loopback."""
    seeds = {}
    root = tempfile.mkdtemp()
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write("<html><body>crackbox seed</body></html>\n")
    server = subprocess.Popen(
        ["python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory", root, "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        line = server.stdout.readline()
        port = int(line.split(" port ")[1].split()[0])
        seeds["python_http_server_200"] = fetch_raw(port, b"GET /index.html HTTP/1.1\r\nHost: a.test\r\n\r\n")
        seeds["python_http_server_404"] = fetch_raw(port, b"GET /missing-dir HTTP/1.0\r\n\r\n")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(root)
    if shutil.which("node"):
        node = subprocess.Popen(["node", "-e", NODE_SERVER], stdout=subprocess.PIPE, text=True)
        try:
            port = int(node.stdout.readline())
            seeds["node_chunked"] = fetch_raw(port, b"GET /chunked HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
            seeds["node_101"] = fetch_raw(
                port, b"GET /ws HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
            )
        finally:
            node.terminate()
            node.wait()
    return seeds


NODE_SERVER = """
const http = require('http');
const server = http.createServer((req, res) => {
  res.setHeader('Content-Type', 'text/plain');
  res.setHeader('Trailer', 'X-Checksum');
  res.write('first chunk\\n');
  res.write('second chunk\\n');
  res.addTrailers({'X-Checksum': 'abc'});
  res.end();
});
server.on('upgrade', (req, socket) => {
  socket.end('HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n\\r\\n');
});
server.listen(0, '127.0.0.1', () => console.log(server.address().port));
"""


def fetch_raw(port, request):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(request)
        got = bytearray()
        conn.settimeout(1.0)
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                got.extend(data)
        except socket.timeout:
            pass
    return bytes(got)


def client_hellos():
    """ClientHellos from TLS clients, cut off before any reply."""
    def openssl(extra):
        return lambda p: run(["openssl", "s_client", "-connect", f"127.0.0.1:{p}", *extra], stdin=b"")

    long_name = ".".join(["l" + "a" * 60] * 3) + ".example.test"
    clients = {
        "openssl_sni": openssl(["-servername", "allowed.test"]),
        "openssl_tls12": openssl(["-servername", "api.allowed.test", "-tls1_2"]),
        "openssl_tls13_alpn": openssl(["-servername", "h2.allowed.test", "-tls1_3", "-alpn", "h2,http/1.1"]),
        "openssl_no_sni": openssl(["-noservername"]),
        "openssl_long_name": openssl(["-servername", long_name]),
        "openssl_fragmented": openssl(
            ["-servername", "frag.allowed.test", "-max_send_frag", "512", "-alpn", ",".join(f"proto{i:03}" for i in range(120))]
        ),
        "curl_https": lambda p: run(
            ["curl", "-s", "-k", "--max-time", "3", "--resolve", f"curl.allowed.test:{p}:127.0.0.1", f"https://curl.allowed.test:{p}/"]
        ),
        "python_ssl": lambda p: python_hello(p),
        "node_tls": lambda p: run(["node", "-e", NODE_TLS.replace("PORT", str(p))], timeout=5),
    }
    seeds = {}
    for name, client in clients.items():
        print(f"tls_peek/{name}")
        seeds[name] = capture(client, idle=0.8)
    return seeds


def python_hello(port):
    context = ssl.create_default_context()
    with socket.create_connection(("127.0.0.1", port), timeout=3) as raw:
        context.wrap_socket(raw, server_hostname="py.allowed.test")


NODE_TLS = """
const tls = require('tls');
const s = tls.connect({host: '127.0.0.1', port: PORT, servername: 'node.allowed.test', rejectUnauthorized: false});
s.on('error', () => {});
setTimeout(() => process.exit(0), 2000);
"""


def wire_frames():
    def frame(message):
        payload = json.dumps(message, separators=(",", ":")).encode()
        return struct.pack(">I", len(payload)) + payload

    registration = {"ip": "10.0.0.2", "id": "agent-1", "allowlist": ["github.com", "*.pypi.org:443", "[2001:db8::1]"]}
    report = {
        "decisions": [{"id": "agent-1", "reason": None, "count": 5}, {"id": "", "reason": "unregistered", "count": 1}],
        "active_tunnels": 2,
        "bytes_up": 1024,
        "bytes_down": 65536,
        "denials": [
            {"time_ms": 1764450000000, "ip": "10.0.0.2", "id": "agent-1", "host": "evil.test", "port": 443,
             "reason": "not-allowed"}
        ],
        "generation": 7,
    }
    hello = frame({"type": "hello", "protocol": 1, "role": "control"})
    return {
        "hello": hello,
        "handshake_and_snapshot": hello
        + frame({"type": "snapshot", "generation": 7, "registrations": [registration]}),
        "ack": frame({"type": "ack", "generation": 7}),
        "stats": frame({"type": "stats_request", "request": 3})
        + frame({"type": "stats", "request": 3, "report": report}),
    }


def admin_bodies():
    return {
        "register": json.dumps({"ip": "10.0.0.2", "id": "agent-1", "allowlist": ["github.com", "*.pypi.org"]}).encode(),
        "register_ports_ips": json.dumps(
            {"ip": "::ffff:10.0.0.3", "id": "ci job #7",
             "allowlist": ["Example.COM.", "example.com:443", "203.0.113.7:8443", "[2001:DB8::1]", "xn--bcher-kva.example"]},
            indent=2,
        ).encode(),
        "register_deny_all": b'{"ip":"2001:db8::5","id":"deny","allowlist":[]}',
        "register_escapes": b'{"ip":"10.0.0.4","id":"\\u00e9t\\u00e9 \\"q\\"","allowlist":["a.test"]}',
        "unregister": b'{"ip":"10.0.0.2"}',
        "unregister_mapped": b' {"ip" : "::FFFF:10.0.0.2"}\n',
    }


def allowlists():
    return {
        "entries": b"github.com\n*.githubusercontent.com\npypi.org:443\n[2001:db8::1]:8443\n203.0.113.7\n_dmarc.Example.COM.",
        "rejected": b"*\n10.0.0.0/8\n-bad.test\nb\xc3\xbccher.test\nexample.com:0\n[fe80::1%25eth0]",
    }


def match_hosts():
    def seed(port, mode, text):
        return struct.pack(">HB", port, mode) + text

    return {
        "subdomain": seed(443, 0, b"github.com\n*.pypi.org:443\napi.github.com"),
        "prefixed": seed(443, 1, b"example.test:443\n*.wild.test\na.b."),
        "ip_literal": seed(80, 0, b"[2001:db8::1]\n203.0.113.7:80\n[2001:DB8:0::1]"),
        "evil_suffix": seed(8080, 0, b"example.com\nevilexample.com"),
    }


def socks_capture(run_client):
    """A SOCKS5 server that answers like crackbox (username/password chosen
    when offered, so the credentials are captured too, then success), runs
    `run_client(port)` and returns every byte the client sent."""
    server, port = listen()
    got = bytearray()

    def read(conn, n):
        data = b""
        while len(data) < n:
            more = conn.recv(n - len(data))
            if not more:
                raise EOFError
            data += more
        got.extend(data)
        return data

    def serve():
        server.settimeout(10)
        try:
            conn, _ = server.accept()
        except OSError:
            return
        conn.settimeout(IDLE)
        try:
            _, count = read(conn, 2)
            methods = read(conn, count)
            if 2 in methods:
                conn.sendall(b"\x05\x02")
                read(conn, 1)
                read(conn, read(conn, 1)[0])
                read(conn, read(conn, 1)[0])
                conn.sendall(b"\x01\x00")
            else:
                conn.sendall(b"\x05\x00")
            _, _, _, kind = read(conn, 4)
            read(conn, {1: 4, 4: 16}.get(kind) or read(conn, 1)[0])
            read(conn, 2)
            conn.sendall(b"\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00")
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                got.extend(data)
        except (OSError, EOFError):
            pass
        conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        run_client(port)
    except Exception as err:  # a cut connection is expected
        print(f"  client ended: {err!r}")
    thread.join()
    server.close()
    return bytes(got)


def socks_handshakes():
    """Handshakes as SOCKS5 clients send them: curl (names, addresses,
    credentials) and OpenBSD netcat (a name, an IPv6 address, early bytes)."""
    def curl(*args):
        return lambda port: run(["curl", "-s", "-m", "5", *args[:-1], args[-1].format(port=port)])

    def nc(host, target_port, stdin=b""):
        return lambda port: run(
            ["nc", "-N", "-w", "3", "-X", "5", "-x", f"127.0.0.1:{port}", host, target_port], stdin=stdin
        )

    clients = {
        "curl_socks5h_name": curl("http://allowed.test:8080/", "--socks5-hostname", "127.0.0.1:{port}"),
        "curl_socks5_ipv4": curl("http://203.0.113.7/", "--socks5", "127.0.0.1:{port}"),
        "curl_credentials": curl("https://allowed.test/", "--proxy", "socks5h://user:secret@127.0.0.1:{port}"),
        "nc_name_with_banner": nc("allowed.test", "22", b"SSH-2.0-OpenSSH_9.2\r\n"),
        "nc_ipv6": nc("2001:db8::1", "5432"),
    }
    return {name: socks_capture(client) for name, client in clients.items()}


def write(target, seeds, prefix=b"", folder=None, suffix=""):
    folder = folder or os.path.join(HERE, target)
    os.makedirs(folder, exist_ok=True)
    for name, data in seeds.items():
        if not data:
            print(f"  {target}/{name}: nothing captured, skipped")
            continue
        with open(os.path.join(folder, name + suffix), "wb") as f:
            f.write(prefix + data)


def tls_peek():
    hellos = client_hellos()
    write("tls_peek", hellos, prefix=b"\x00\x00")
    write("tls_peek", hellos, folder=TLS_FIXTURES, suffix=".bin")


CORPORA = {
    "http_head": lambda: (
        write("http_head", http_requests(), prefix=b"\x00\x00"),
        write("http_head", http_responses(), prefix=b"\x00\x00"),
    ),
    "tls_peek": tls_peek,
    "wire": lambda: write("wire", wire_frames()),
    "admin_body": lambda: write("admin_body", admin_bodies()),
    "allowlist": lambda: write("allowlist", allowlists()),
    "match_host": lambda: write("match_host", match_hosts()),
    "socks5": lambda: write("socks5", socks_handshakes(), prefix=b"\x00"),
}


def main():
    wanted = sys.argv[1:] or list(CORPORA)
    unknown = [name for name in wanted if name not in CORPORA]
    if unknown:
        sys.exit(f"unknown corpus {', '.join(unknown)}; known: {', '.join(CORPORA)}")
    for name in wanted:
        CORPORA[name]()


if __name__ == "__main__":
    main()
