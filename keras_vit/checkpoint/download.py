"""Downloads into the checkpoint cache: bounded in time, written atomically, checked.

Why not `keras.utils.get_file`: it has no read timeout, so a server that sends its
headers and then stops hangs the caller (a constructor, a trainer, an export) for
ever; and it writes at the final path as the bytes arrive, so an interrupted
download can leave a partial file where a later call trusts it. `fetch` here:

- gives up after `timeout` seconds without progress, while connecting and on every
  read (the argument, else $KERAS_VIT_DOWNLOAD_TIMEOUT, else `DEFAULT_TIMEOUT_S`);
- writes to a hidden temporary file in the destination's folder and renames it into
  place (`os.replace`) only once it is complete: as long as the server's
  Content-Length where it gives one, and of the expected SHA-256 where one is
  given. On any failure the temporary file is deleted, so the destination holds a
  whole, checked file or nothing;
- follows redirects only to the allowed schemes (https alone in production);
- logs one line and, where the `keras_vit` logger writes to a terminal, shows a tqdm
  bar (bytes, rate, ETA), while that logger is at INFO (nothing when it is quieter:
  KERAS_VIT_VERBOSITY=quiet in the programs).

Failures raise `DownloadError` (an OSError) naming the URL, the destination and the
cause. Only the standard library (urllib) does the network side.
"""

import contextlib
import hashlib
import http.client
import logging
import os
import re
import secrets
import sys
import urllib.error
import urllib.parse
import urllib.request

TIMEOUT_ENV = "KERAS_VIT_DOWNLOAD_TIMEOUT"
DEFAULT_TIMEOUT_S = 60.0  # seconds without a byte before a download gives up
HTTPS_ONLY = ("https",)
_CHUNK = 1 << 16
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

logger = logging.getLogger("keras_vit")


class DownloadError(OSError):
    """A file that is neither in the cache nor downloadable as it should be: the
    message names the URL, the cache path and what went wrong."""


def read_timeout(timeout=None):
    """Seconds a download may go without progress: `timeout`, else
    $KERAS_VIT_DOWNLOAD_TIMEOUT, else `DEFAULT_TIMEOUT_S`."""
    where = "timeout"
    if timeout is None:
        where, timeout = TIMEOUT_ENV, os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{where}={timeout!r}: expected a positive number of seconds.")
    return seconds


def fetch(url, path, sha256=None, timeout=None, schemes=HTTPS_ONLY, stream=None):
    """`path`, downloaded from `url` unless it is there already.

    Args:
        url: where the file is; its scheme must be one of `schemes`, and so must
            that of every redirect.
        path: the destination (a cache path, `cache.cache_file`).
        sha256: the file's expected SHA-256 (64 hex digits) or None; when given,
            a cached file is checked too.
        timeout: seconds without progress before giving up (`read_timeout`).
        schemes: URL schemes allowed; ("https",) except in tests against a
            local http server.
        stream: where the progress bar goes (default: where the `keras_vit`
            logger writes, else sys.stderr; a bar only if it is a terminal).
    Returns:
        `path`.
    Raises:
        ValueError: a URL of another scheme, a malformed `sha256` or timeout.
        DownloadError: the server cannot be reached, has no such file, stalls,
            closes early or sends a file of another SHA-256; or a cached file of
            another SHA-256.
    """
    expected = _expected_sha256(sha256, url)
    timeout = read_timeout(timeout)
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in schemes:
        raise ValueError(f"{url!r}: only {_schemes(schemes)} URLs are downloaded.")
    if os.path.exists(path):
        if expected and (found := _file_sha256(path)) != expected:
            raise DownloadError(
                f"{path} (the cached copy of {url}) has SHA-256 {found}, expected "
                f"{expected}: delete it to download the file again."
            )
        return path
    opener = urllib.request.build_opener(_Redirects(schemes))
    _download(opener, url, path, expected, timeout, stream)
    return path


def failure(url, path, reason):
    """The message of a download that could not be made."""
    return (
        f"cannot download {url} ({reason}). Offline, put the file at {path} "
        "(the cache) and it is used from there."
    )


def _download(opener, url, path, sha256, timeout, stream):
    folder, name = os.path.split(path)
    part = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.part")
    digest, done, total = hashlib.sha256(), 0, None
    try:
        os.makedirs(folder or ".", exist_ok=True)
        with opener.open(url, timeout=timeout) as response:
            total = _content_length(response)
            with open(part, "xb") as out, _progress(url, path, total, stream) as advance:
                while chunk := response.read1(_CHUNK):  # what has arrived, <= _CHUNK
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    advance(len(chunk))
        if total is not None and done != total:
            raise DownloadError(failure(url, path, _closed_early(done, total)))
        if sha256 and digest.hexdigest() != sha256:
            raise DownloadError(
                f"the download of {url} has SHA-256 {digest.hexdigest()}, expected {sha256}: "
                f"it is not kept (nothing is written at {path})."
            )
        os.replace(part, path)
    except DownloadError:
        raise
    except urllib.error.HTTPError as e:
        gone = ": no such file there" if e.code in (403, 404) else ""
        raise DownloadError(failure(url, path, f"HTTP {e.code} {e.reason}{gone}")) from e
    except http.client.IncompleteRead as e:
        raise DownloadError(failure(url, path, _closed_early(done, total))) from e
    except (OSError, ValueError, http.client.HTTPException) as e:  # URLError, timeouts
        reason = getattr(e, "reason", None) or e
        if isinstance(reason, TimeoutError):
            reason = f"no data for {timeout:g} s after {done} bytes; {TIMEOUT_ENV} sets the limit"
        raise DownloadError(failure(url, path, reason)) from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(part)


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects only to the allowed schemes (no https -> http downgrade)."""

    def __init__(self, schemes):
        self.schemes = schemes

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urllib.parse.urlsplit(newurl).scheme not in self.schemes:
            raise urllib.error.HTTPError(
                req.full_url,
                code,
                f"redirected to {newurl}, not an {_schemes(self.schemes)} URL",
                headers,
                fp,
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


@contextlib.contextmanager
def _progress(url, path, total, stream):
    """Yields `advance(bytes)`: a tqdm bar on a terminal, after one log line."""
    if not logger.isEnabledFor(logging.INFO):
        yield lambda n: None
        return
    size = f"{total:,} bytes" if total is not None else "size unknown"
    logger.info("downloading %s (%s) to %s", url, size, path)
    stream = stream or _log_stream()
    bar = None
    if getattr(stream, "isatty", lambda: False)():
        try:
            import tqdm
        except ImportError:  # an optional dependency: the log line is enough
            tqdm = None
        if tqdm is not None:
            bar = tqdm.tqdm(
                total=total,
                desc=os.path.basename(path),
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                file=stream,
                dynamic_ncols=True,
                leave=False,
            )
    try:
        yield bar.update if bar is not None else (lambda n: None)
    finally:
        if bar is not None:
            bar.close()


def _log_stream():
    """Where the `keras_vit` logger writes (the terminal under cli/console.py,
    whose stderr is a filtered pipe), else sys.stderr."""
    handlers = [h for h in logger.handlers if isinstance(h, logging.StreamHandler)]
    return getattr(handlers[0], "stream", None) if handlers else sys.stderr


def _content_length(response):
    value = response.headers.get("Content-Length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _closed_early(done, total):
    return f"the connection closed after {done} of {total} bytes"


def _expected_sha256(sha256, url):
    if sha256 is None:
        return None
    value = str(sha256).strip().lower()
    if not _SHA256.match(value):
        raise ValueError(f"sha256={sha256!r} for {url}: expected 64 hexadecimal digits.")
    return value


def _file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _schemes(schemes):
    return " / ".join(f"{s}://" for s in schemes)
