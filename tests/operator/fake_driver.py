"""A stand-in for `kuberl train` under the Ray Jobs API: it serves, on its metrics port, the
Prometheus text a test writes to a file (re-read at every scrape), and runs until it is stopped.
The operator's learner-driven autoscaling reads a real driver's figures the same way.

    python fake_driver.py PORT METRICS_FILE
"""

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PORT, METRICS = int(sys.argv[1]), Path(sys.argv[2])


class Metrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = METRICS.read_bytes() if METRICS.exists() else b""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # quiet: the Jobs API's log is not the test's
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Metrics).serve_forever()
