"""Checkpoint downloads that cannot be turned against the user (issue 28): a path
made from a URL or hub name stays in the cache, a stalled or interrupted download
leaves no file where a later call would trust it, a wrong SHA-256 is refused.

A local http server on 127.0.0.1 (a thread, joined at the end) stands in for the
network; `download.fetch` is called with schemes=("http",), its test seam: the
registry's downloads are https only.
"""

import hashlib
import http.server
import io
import os
import threading
import time

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoint import cache, download, read_npz, registry

HTTP = ("http",)
SENT_BEFORE_STALL = 100  # bytes the stalling and the interrupted server send
STALL_BOUND_S = 20.0  # the most a stalling handler waits (the fixture releases it at once)


def files_under(root):
    return sorted(
        os.path.relpath(os.path.join(folder, name), root)
        for folder, _, names in os.walk(root)
        for name in names
    )


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    """An empty cache two levels below tmp_path: a path escaping it would land in
    tmp_path, where `files_under` sees it."""
    root = tmp_path / "home" / "cache"
    monkeypatch.setenv(cache.CACHE_ENV, str(root))
    return root


# -- cache paths ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url,named",
    [
        ("https://example.com/a%2F..%2F..%2Fevil.npz", None),  # the issue's
        ("https://example.com/vit_models/../evil.npz", None),
        ("https://example.com/vit_models/%2E%2E/evil.npz", None),
        ("https://example.com/vit_models/./evil.npz", None),
        ("https://example.com/vit_models//evil.npz", None),
        ("https://example.com/%2Fetc%2Fevil.npz", None),
        ("https://example.com/vit_models/..%5C..%5Cevil.npz", None),
        ("https://example.com/vit_models/C:evil.npz", None),
        ("https://example.com/vit_models/evil%00.npz", None),
        ("gs://bucket/../evil.npz", "https://storage.googleapis.com/bucket/../evil.npz"),
    ],
)
def test_crafted_urls_are_refused_naming_the_url(url, named, tmp_path, cache_root, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("a refused URL reached the download")

    monkeypatch.setattr(download, "_download", no_network)
    with pytest.raises(ValueError, match="cannot name a file in the checkpoint cache") as info:
        registry.fetch(registry.resolve(url, "ViT_Ti16"))  # refused by resolve already
    assert repr(named or url) in str(info.value)
    assert files_under(tmp_path) == []


def test_a_url_fragment_gives_the_expected_sha256():
    digest = "ab" * 32
    entry = registry.resolve(f"https://example.com/models/x.npz#sha256={digest.upper()}")
    assert (entry.url, entry.sha256) == ("https://example.com/models/x.npz", digest)
    assert registry.resolve("https://example.com/models/x.npz").sha256 is None
    for fragment in ("sha256=abc", "md5=" + digest, "sha256=" + "g" * 64):
        with pytest.raises(ValueError, match="fragment can only be #sha256=<64 hex digits>"):
            registry.resolve(f"https://example.com/models/x.npz#{fragment}")


def test_the_builder_refuses_the_issues_url(tmp_path, cache_root):
    url = "https://example.com/a%2F..%2F..%2Fevil.npz"
    with keras.StatelessScope(initialize_variables=False):
        with pytest.raises(ValueError, match=r"'a/\.\./\.\./evil\.npz' \(unescaped\)") as info:
            keras_vit.ViT_Ti16(weights=url)
    assert repr(url) in str(info.value)
    assert files_under(tmp_path) == []


def test_cache_file_is_the_rule_for_hub_names_too(tmp_path, cache_root):
    good = cache.cache_file(["org", "repo", "model.npz"], "hub:org/repo")
    assert good == str(cache_root / "keras_vit" / "org" / "repo" / "model.npz")
    for parts, component in [
        (["org", "..", "x.npz"], "'..'"),
        (["org/repo", "x.npz"], "'org/repo'"),
        (["org", "/abs.npz"], "'/abs.npz'"),
        (["org", ""], "''"),
    ]:
        with pytest.raises(ValueError, match=f"'hub:bad'.*{component}"):
            cache.cache_file(parts, "hub:bad")
    # A symbolic link inside the cache that points out of it: refused on the real path.
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (cache_root / "keras_vit").mkdir(parents=True)
    os.symlink(outside, cache_root / "keras_vit" / "linked")
    with pytest.raises(ValueError, match=f"'hub:linked'.*resolves to {outside}"):
        cache.cache_file(["linked", "x.npz"], "hub:linked")


# -- downloads from a local server ----------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.server.requests.append(self.path)
        kind, body = self.server.routes.get(self.path, ("missing", b""))
        if kind == "missing":
            self.send_error(404)
            return
        if kind == "redirect":
            self.send_response(302)
            self.send_header("Location", body)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if kind == "ok":
            self.wfile.write(body)
            return
        self.wfile.write(body[:SENT_BEFORE_STALL])
        self.wfile.flush()
        if kind == "stall":
            self.server.release.wait(STALL_BOUND_S)
        self.close_connection = True  # "short": the connection closes early

    def log_message(self, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = False  # server_close joins the handlers

    def handle_error(self, request, client_address):
        pass  # a client that gave up (broken pipe) is what the tests do on purpose


@pytest.fixture
def server():
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.requests, srv.routes, srv.release = [], {}, threading.Event()
    srv.url = lambda path: f"http://127.0.0.1:{srv.server_address[1]}{path}"
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield srv
    finally:
        srv.release.set()
        srv.shutdown()
        srv.server_close()
        thread.join(STALL_BOUND_S)
        assert not thread.is_alive()


def npz_bytes(seed=0):
    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    np.savez(
        out, **{"embedding/kernel": rng.normal(size=(2, 2, 3, 4)).astype("float32")}, cls=np.ones(4)
    )
    return out.getvalue()


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_stalled_download_fails_within_the_timeout(tmp_path, server, monkeypatch):
    monkeypatch.setenv(download.TIMEOUT_ENV, "1")
    server.routes["/m/stall.npz"] = ("stall", npz_bytes())
    url, path = server.url("/m/stall.npz"), tmp_path / "m" / "stall.npz"
    start = time.monotonic()
    with pytest.raises(download.DownloadError) as info:
        download.fetch(url, str(path), schemes=HTTP)
    elapsed = time.monotonic() - start
    # The read waits the timeout once; the margin is for a loaded 2-core machine.
    assert 1.0 <= elapsed < 1.0 + 4.0
    message = str(info.value)
    assert f"cannot download {url} (no data for 1 s after {SENT_BEFORE_STALL} bytes" in message
    assert download.TIMEOUT_ENV in message and str(path) in message
    assert files_under(tmp_path) == []


def test_an_interrupted_download_leaves_no_file(tmp_path, server):
    body = npz_bytes()
    server.routes["/m/short.npz"] = ("short", body)
    url, path = server.url("/m/short.npz"), tmp_path / "m" / "short.npz"
    with pytest.raises(download.DownloadError) as info:
        download.fetch(url, str(path), timeout=5, schemes=HTTP)
    assert f"closed after {SENT_BEFORE_STALL} of {len(body)} bytes" in str(info.value)
    assert url in str(info.value)
    assert files_under(tmp_path) == []


def test_a_complete_download_is_kept_and_found_again(tmp_path, server, caplog):
    bodies = {"/m/a.npz": npz_bytes(1), "/m/b.npz": npz_bytes(2)}
    for route, body in bodies.items():
        server.routes[route] = ("ok", body)
    terminal, pipe = _Terminal(), io.StringIO()
    with caplog.at_level("INFO", logger="keras_vit"):
        a = download.fetch(
            server.url("/m/a.npz"),
            str(tmp_path / "a.npz"),
            sha256=hashlib.sha256(bodies["/m/a.npz"]).hexdigest(),
            schemes=HTTP,
            stream=terminal,
        )
        b = download.fetch(
            server.url("/m/b.npz"), str(tmp_path / "b.npz"), schemes=HTTP, stream=pipe
        )
        again = download.fetch(server.url("/m/a.npz"), a, schemes=HTTP, stream=pipe)
    assert server.requests == ["/m/a.npz", "/m/b.npz"]  # the cached file needs no request
    assert again == a and files_under(tmp_path) == ["a.npz", "b.npz"]
    for path, seed in ((a, 1), (b, 2)):
        np.testing.assert_array_equal(
            read_npz(path)["embedding/kernel"],
            np.load(io.BytesIO(npz_bytes(seed)))["embedding/kernel"],
        )
    assert "a.npz" in terminal.getvalue() and "B/s" in terminal.getvalue()  # tqdm's bar
    assert pipe.getvalue() == ""  # no bar off a terminal: the log line alone
    lines = [r.getMessage() for r in caplog.records if r.name == "keras_vit"]
    assert lines == [
        f"downloading {server.url(route)} ({len(body):,} bytes) to {tmp_path / name}"
        for (route, body), name in zip(bodies.items(), ("a.npz", "b.npz"))
    ]
    # Quiet (the logger above INFO, as KERAS_VIT_VERBOSITY=quiet makes it): no line, no bar.
    server.routes["/m/c.npz"] = ("ok", npz_bytes(3))
    caplog.clear()
    quiet_terminal = _Terminal()
    with caplog.at_level("WARNING", logger="keras_vit"):
        download.fetch(
            server.url("/m/c.npz"), str(tmp_path / "c.npz"), schemes=HTTP, stream=quiet_terminal
        )
    assert quiet_terminal.getvalue() == "" and caplog.records == []
    assert (tmp_path / "c.npz").read_bytes() == npz_bytes(3)


def test_a_wrong_sha256_is_refused_naming_both(tmp_path, server):
    body = npz_bytes()
    server.routes["/m/x.npz"] = ("ok", body)
    url, path = server.url("/m/x.npz"), str(tmp_path / "x.npz")
    actual, wrong = hashlib.sha256(body).hexdigest(), "0" * 64
    with pytest.raises(download.DownloadError) as info:
        download.fetch(url, path, sha256=wrong, schemes=HTTP)
    assert f"{url} has SHA-256 {actual}, expected {wrong}" in str(info.value)
    assert files_under(tmp_path) == []
    # A cached copy of another SHA-256 is refused too (and left for the user to delete).
    with open(path, "wb") as f:
        f.write(body)
    with pytest.raises(download.DownloadError, match=f"has SHA-256 {actual}, expected {wrong}"):
        download.fetch(url, path, sha256=wrong, schemes=HTTP)
    with pytest.raises(ValueError, match=r"sha256='abc' for .*: expected 64 hexadecimal digits"):
        download.fetch(url, path, sha256="abc", schemes=HTTP)
    assert server.requests == ["/m/x.npz"]


def test_missing_files_redirects_and_schemes(tmp_path, server):
    url, path = server.url("/m/none.npz"), str(tmp_path / "none.npz")
    with pytest.raises(download.DownloadError) as info:
        download.fetch(url, path, schemes=HTTP)
    assert f"cannot download {url} (HTTP 404 Not Found: no such file there)" in str(info.value)
    assert path in str(info.value)
    server.routes["/m/moved.npz"] = ("redirect", "ftp://127.0.0.1/evil.npz")
    with pytest.raises(download.DownloadError, match="redirected to ftp://127.0.0.1/evil.npz"):
        download.fetch(server.url("/m/moved.npz"), path, schemes=HTTP)
    with pytest.raises(ValueError, match=r"'http://127.0.0.1.*': only https:// URLs"):
        download.fetch(url, path)  # production: https only
    assert server.requests == ["/m/none.npz", "/m/moved.npz"]
    assert files_under(tmp_path) == []


@pytest.mark.parametrize("value", ["soon", "0", "-1", "inf"])
def test_a_bad_timeout_is_refused_naming_the_variable(value, monkeypatch):
    monkeypatch.setenv(download.TIMEOUT_ENV, value)
    with pytest.raises(ValueError, match=f"{download.TIMEOUT_ENV}='{value}': expected a positive"):
        download.read_timeout()
    assert download.read_timeout(2) == 2.0
