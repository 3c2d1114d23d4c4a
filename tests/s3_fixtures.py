"""Servers for the object-storage tests, all on 127.0.0.1 and stopped afterwards.

- `moto_s3`: moto's S3 in server mode (a real S3 protocol implementation, with
  signature checks switched on), in this process on a free port.
- `FaultServer`: a small threaded HTTP/1.1 server of our own that serves a folder as
  /BUCKET/KEY and injects what moto cannot: 503 SlowDown bursts, resets mid-body,
  truncated bodies, slow first bytes, a per-request latency.
"""
import contextlib
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REGION = "us-east-1"


class MotoS3:
    def __init__(self, server, endpoint, key_id, secret):
        self.server = server
        self.endpoint = endpoint
        self.key_id = key_id
        self.secret = secret

    def client(self):
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=self.key_id, aws_secret_access_key=self.secret,
                            config=Config(s3={"addressing_style": "path"}))

    @contextlib.contextmanager
    def auth_off(self):
        """moto's signature check rejects every request with a query string (boto3's own
        ListObjectsV2 included, moto 5.1), so listings run with its auth switched off."""
        import requests
        before = requests.post(f"{self.endpoint}/moto-api/reset-auth", data=b"1000000").json()
        try:
            yield
        finally:
            requests.post(f"{self.endpoint}/moto-api/reset-auth",
                          data=str(int(float(before["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"]))).encode())

    def env(self, home, **extra):
        """The environment for `headrace`: only these AWS settings, HOME without ~/.aws."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(HOME=str(home), AWS_ACCESS_KEY_ID=self.key_id,
                   AWS_SECRET_ACCESS_KEY=self.secret, AWS_REGION=REGION,
                   AWS_ENDPOINT_URL=self.endpoint)
        env.update({k: v for k, v in extra.items() if v is not None})
        for k, v in extra.items():
            if v is None:
                env.pop(k, None)
        return env


@pytest.fixture(scope="session")
def moto_s3():
    # Signature and access checks are on after the first 3 requests, which create the
    # IAM user whose keys the tests sign with. Read by moto when it is imported.
    os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"
    from moto.server import ThreadedMotoServer
    import boto3

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    iam = boto3.client("iam", endpoint_url=endpoint, region_name=REGION,
                       aws_access_key_id="AKIABOOTSTRAP0000000", aws_secret_access_key="bootstrap")
    iam.create_user(UserName="headrace")
    iam.put_user_policy(UserName="headrace", PolicyName="all",
                        PolicyDocument='{"Version": "2012-10-17", "Statement": [{"Effect": '
                                       '"Allow", "Action": "*", "Resource": "*"}]}')
    key = iam.create_access_key(UserName="headrace")["AccessKey"]
    try:
        yield MotoS3(server, endpoint, key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        server.stop()


class FaultServer:
    """Serves `root` as /BUCKET/<relative path>, with scripted faults.

    `script[path]` is a list of actions consumed one per request for that path; when
    it is empty the request is served normally. Actions: "503" (SlowDown), "500",
    "reset" (RST after half the body), "truncate" (FIN after half the body),
    ("slow", seconds) (hold the first byte back), "always503", "alwaystruncate".
    `latency` (seconds) holds every response back. Every request is logged.
    """

    def __init__(self, root: Path, bucket: str = "bkt"):
        self.root = Path(root)
        self.bucket = bucket
        self.script = {}
        self.latency = 0.0
        self.log = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                outer.handle(self)

        class Server(ThreadingHTTPServer):
            # The default backlog of 5 drops the SYNs of 32 connections opened at once,
            # and the client's SYN retransmits (1 s, 3 s) would dominate every test.
            request_queue_size = 512

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def requests_for(self, path):
        with self.lock:
            return sum(1 for p in self.log if p == path)

    def next_action(self, path):
        with self.lock:
            self.log.append(path)
            actions = self.script.get(path)
            if not actions:
                return None
            if actions[0] in ("always503", "alwaystruncate"):
                return actions[0]
            return actions.pop(0)

    def handle(self, h):
        path = h.path.split("?", 1)[0]
        action = self.next_action(path)
        if self.latency:
            time.sleep(self.latency)  # the injected latency under test (server side)
        if isinstance(action, tuple) and action[0] == "slow":
            time.sleep(action[1])
        if action in ("503", "always503", "500"):
            code = 500 if action == "500" else 503
            body = (b"<Error><Code>" + (b"InternalError" if code == 500 else b"SlowDown") +
                    b"</Code><Message>Please reduce your request rate.</Message></Error>")
            h.send_response(code)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        prefix = f"/{self.bucket}/"
        file = self.root / path[len(prefix):] if path.startswith(prefix) else None
        if file is None or not file.is_file():
            body = b"<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>"
            h.send_response(404)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        data = file.read_bytes()
        h.send_response(200)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if action in ("reset", "truncate", "alwaystruncate"):
            h.wfile.write(data[: len(data) // 2])
            h.wfile.flush()
            if action == "reset":
                h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                        b"\x01\x00\x00\x00\x00\x00\x00\x00")
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR) if action != "reset" else None
            return
        h.wfile.write(data)


@pytest.fixture
def fault_server(sample_dir):
    server = FaultServer(sample_dir)
    try:
        yield server
    finally:
        server.stop()


def free_port():
    """A port with nothing listening on it (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
