"""Files of the data package, local or remote: a path with a scheme (gs://, ram://,
any filesystem tf.io.gfile knows) goes through tf.io.gfile, imported only then; a
local path through os, so that writing a local data directory from arrays needs no
TensorFlow (`tfrecord_file`), and make_tfrecords' worker processes read local files
without TensorFlow's I/O. (keras_vit/run_directory.py does the same for run
directories; the data package cannot import keras_vit, which imports Keras.)"""

import contextlib
import glob as glob_lib
import os
import shutil


def _gfile(path):
    """tf.io.gfile for a path with a scheme, else None."""
    if "://" not in str(path):
        return None
    import tensorflow as tf

    return tf.io.gfile


def exists(path):
    gfile = _gfile(path)
    return gfile.exists(path) if gfile else os.path.exists(path)


def isdir(path):
    gfile = _gfile(path)
    return gfile.isdir(path) if gfile else os.path.isdir(path)


def listdir(path):
    gfile = _gfile(path)
    return [name.rstrip("/") for name in gfile.listdir(path)] if gfile else os.listdir(path)


def makedirs(path):
    gfile = _gfile(path)
    if gfile:
        gfile.makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def glob(pattern):
    gfile = _gfile(pattern)
    return gfile.glob(pattern) if gfile else sorted(glob_lib.glob(pattern))


@contextlib.contextmanager
def _os_errors():
    """tf.io.gfile's errors raised as Python's: FileNotFoundError, or OSError."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.NotFoundError as e:
        raise FileNotFoundError(str(e)) from e
    except tf.errors.OpError as e:
        raise OSError(str(e)) from e


def remove(path):
    """Deletes the file `path`; FileNotFoundError when there is none (any path)."""
    gfile = _gfile(path)
    if gfile:
        with _os_errors():
            gfile.remove(path)
    else:
        os.remove(path)


def rename(source, target):
    """Renames `source` to `target`, replacing a file there."""
    gfile = _gfile(source)
    if gfile:
        gfile.rename(source, target, overwrite=True)
    else:
        os.replace(source, target)


def rmtree(path):
    """Deletes the folder `path` and all it holds; OSError when that fails (any path)."""
    gfile = _gfile(path)
    if gfile:
        with _os_errors():
            gfile.rmtree(path)
    else:
        shutil.rmtree(path)


@contextlib.contextmanager
def open_file(path, mode="r"):
    """`open` for local paths, `tf.io.gfile.GFile` for paths with a scheme."""
    gfile = _gfile(path)
    if gfile:
        with gfile.GFile(path, mode) as f:
            yield f
    else:
        with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f


def read_bytes(path):
    with open_file(path, "rb") as f:
        return f.read()
