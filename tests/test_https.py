"""HTTPS endpoints: TLS verification against the system store, storage.ca_bundle or
AWS_CA_BUNDLE, through a real TLS server on 127.0.0.1 with a certificate made here."""
import functools
import os
import ssl
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from e2e_util import read_report, run_headrace


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # the default 5 makes parallel connects wait for SYN retries
    daemon_threads = True


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def https_server(tmp_path, sample_dir):
    """Serves sample_dir over HTTPS with a self-signed certificate for 127.0.0.1."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", key, "-out", cert, "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    handler = functools.partial(_QuietHandler, directory=str(sample_dir))
    server = _Server(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}", cert
    server.shutdown()
    server.server_close()


def config_for(path, manifest, model):
    path.write_text(f"""
source: {{manifest: "{manifest}"}}
seed: 1
batch: {{size: 8}}
ops:
  - image.decode: {{}}
  - image.resize: {{shorter_side: 64}}
  - image.center_crop: {{size: 56}}
  - image.normalize: {{}}
  - text.tokenize: {{model: "{model}", max_length: 48}}
execution: {{cpu_threads: 2}}
memory: {{budget_bytes: 64MiB}}
storage: {{max_retries: 1}}
""")
    return path


def digests(headrace_bin, config, tmp_path, *args, env=None):
    report = tmp_path / "r.json"
    run_headrace(headrace_bin, "run", config, "--quiet", "--digests", "--report", report, *args,
                 env=env)
    return read_report(report)


def test_https_with_a_trusted_ca_gives_the_local_batches(https_server, headrace_bin, tmp_path,
                                                         sample_dir):
    base, cert = https_server
    local = digests(headrace_bin, config_for(tmp_path / "local.yaml", sample_dir / "manifest.jsonl",
                                             sample_dir / "tokenizer.model"), tmp_path)
    remote_config = config_for(tmp_path / "https.yaml", f"{base}/manifest.jsonl",
                               f"{base}/tokenizer.model")
    by_key = digests(headrace_bin, remote_config, tmp_path, "--set", f"storage.ca_bundle={cert}")
    assert by_key["batch_digests"] == local["batch_digests"]
    assert by_key["storage"]["http"]["requests"] >= 48 + 2  # media, manifest, model
    env = dict(os.environ, AWS_CA_BUNDLE=str(cert))
    by_env = digests(headrace_bin, remote_config, tmp_path, env=env)
    assert by_env["batch_digests"] == local["batch_digests"]


def test_https_with_an_untrusted_certificate_fails_clearly(https_server, headrace_bin, tmp_path):
    base, _ = https_server
    config = config_for(tmp_path / "https.yaml", f"{base}/manifest.jsonl", f"{base}/tokenizer.model")
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    proc = run_headrace(headrace_bin, "run", config, check=False, env=env)
    assert proc.returncode != 0
    assert "certificate" in proc.stderr.lower()
    assert "manifest.jsonl" in proc.stderr
