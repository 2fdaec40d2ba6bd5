"""The checkpoint cache: where downloaded files live, and the rule that keeps every
path made from a URL or a hub name inside it.

Layout: `<cache_dir()>/keras_vit/<component>/.../<file>`. The components come from
outside (a URL's path, a repository and file name on a hub), so `cache_file` checks
each one after unescaping (`%2F` is a '/'): none may be empty, `.` or `..`, hold a
separator ('/' or '\\') or a NUL, or be absolute or start with a drive ('C:'); and the
joined path, with symbolic links resolved (`os.path.realpath`), must lie under
`<cache_dir()>/keras_vit`. Anything else is refused with a ValueError naming where the
components came from, before a folder is made or a byte downloaded.
"""

import ntpath
import os

CACHE_ENV = "KERAS_VIT_CACHE_DIR"
SUBDIR = "keras_vit"  # our folder under the cache root


def cache_dir():
    """The cache root: $KERAS_VIT_CACHE_DIR, else Keras' home ($KERAS_HOME or
    ~/.keras; /tmp/.keras where that is not writable, as keras.utils.get_file)."""
    root = os.environ.get(CACHE_ENV) or os.environ.get("KERAS_HOME")
    root = os.path.expanduser(root or os.path.join("~", ".keras"))
    if os.path.isdir(root) and not os.access(root, os.W_OK):
        root = os.path.join("/tmp", ".keras")
    return root


def check_component(component, source):
    """`component` (one unescaped folder or file name) if it is safe as one path
    component of the cache, else a ValueError naming `source` (the URL or name it
    came from) and the component."""
    why = None
    if component in ("", ".", ".."):
        why = "empty" if not component else f"'{component}'"
    elif "/" in component or "\\" in component:
        why = "a path with separators"
    elif "\0" in component:
        why = "holding a NUL byte"
    elif os.path.isabs(component) or ntpath.isabs(component) or ntpath.splitdrive(component)[0]:
        why = "an absolute path"
    if why:
        raise ValueError(
            f"{source!r} cannot name a file in the checkpoint cache: its path component "
            f"{component!r} (unescaped) is {why}."
        )
    return component


def cache_file(components, source):
    """The path `<cache_dir()>/keras_vit/<components...>`, each component checked
    (`check_component`) and the real path checked to lie under the cache.

    Args:
        components: folder names then the file name, unescaped (a URL's last
            folder and file name; a hub's repository and file names).
        source: what they came from, for the error message (a URL, a hub name).
    Raises:
        ValueError: an unsafe component, or a path that resolves outside the
            cache (a symbolic link pointing elsewhere).
    """
    components = [check_component(c, source) for c in components]
    if not components:
        raise ValueError(f"{source!r} cannot name a file in the checkpoint cache: no file name.")
    folder = os.path.join(cache_dir(), SUBDIR)
    path = os.path.join(folder, *components)
    root, real = os.path.realpath(folder), os.path.realpath(path)
    if os.path.commonpath([root, real]) != root or real == root:
        raise ValueError(
            f"{source!r} cannot name a file in the checkpoint cache: {path} resolves to "
            f"{real}, outside {root}."
        )
    return path
