"""``/console`` on a real daemon's HTTP port: the committed bundle from package data,
same-origin only, revalidated by ETag, nothing else on disk reachable."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow
ASSETS = Path(__file__).resolve().parents[2] / "src" / "palyra" / "console" / "assets"


def test_the_daemon_serves_the_built_console(tmp_path: Path) -> None:
    with DaemonProcess(tmp_path / "data", env=clean_env()) as daemon:
        base = f"http://127.0.0.1:{daemon.http_port}"
        with httpx.Client(base_url=base) as client:
            for path in ("/console", "/console/"):
                page = client.get(path)
                assert page.status_code == 200, path
                assert page.headers["content-type"].startswith("text/html")
                assert page.content == (ASSETS / "index.html").read_bytes()
            csp = page.headers["content-security-policy"]
            assert "default-src 'none'" in csp and "connect-src 'self'" in csp
            assert "script-src 'self'" in csp and "unsafe" not in csp
            assert page.headers["x-content-type-options"] == "nosniff"
            # Every asset the page names is served from here: no CDN, nothing remote.
            named = re.findall(r'(?:src|href)="([^"]+)"', page.text)
            assert named and all(u.startswith("/console/") or u.startswith("data:") for u in named)
            for url in (u for u in named if u.startswith("/console/")):
                asset = client.get(url)
                assert asset.status_code == 200 and asset.content == (ASSETS / url.rsplit("/", 1)[1]).read_bytes()
            script = client.get("/console/console.js")
            assert script.headers["content-type"].startswith("text/javascript")
            assert len(gzip.compress(script.content, 9)) <= 150 * 1024
            assert "https://" not in script.text.replace("https://www.w3.org", "")
            again = client.get("/console/console.js", headers={"if-none-match": script.headers["etag"]})
            assert again.status_code == 304 and again.content == b""

            for bad in ("/console/nope.js", "/console/..%2fadmin.token", "/console/%2e%2e/pyproject.toml"):
                answer = client.get(bad)
                assert answer.status_code == 404, bad
                assert answer.json()["code"] == "NOT_FOUND"
            # The console adds no API of its own: /v1 still needs credentials.
            assert client.get("/v1/sessions").status_code == 401
