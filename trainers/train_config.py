"""The config a trainer runs: the first step of `train_lib.run`.

    resolved = configs/common.py's base_config()   every key, with its default
               <- the config file's values
               <- its `<mode>` section ('pretrain' or 'finetune')
               <- the mode's TRAINER_DEFAULTS, for keys still None
               <- the command line's --config.KEY=VALUE, which always win
               <- a renamed key's old name (`RENAMED`), moved to its new name

A command-line key inside the other mode's section (`--config.finetune.X` given to
pretrain.py) is an error naming the key, since it could not take effect. The keys of
`model_overrides` left None are dropped: not set, the model's own value stands.

A renamed key (`RENAMED`: `input.augment`, now `input.crop`) is accepted under its old
name for one release: its value moves to the new key, with a one-line deprecation
warning naming the new key. The command line wins over the config file here too; the
two names given at one level with different values (both on the command line, or both
in the config, the new one away from its default) are kept as they are, and
trainers/config_checks.py refuses the config (`check_renamed`), with exit code 2.

`override_error` names what is wrong with a `--config.KEY` the config has no place for
(an unknown key; a key of a dict model given to a builder name), for trainers/app.py.
"""

import logging

import ml_collections

from keras_vit_configs import common

MODES = tuple(common.TRAINER_DEFAULTS)
# Keys renamed, {old dotted key: new dotted key}: the old one stays in configs/common.py
# as a placeholder (None: not given) for one release.
RENAMED = {"input.augment": "input.crop"}

log = logging.getLogger("trainers")


def _merge(base, values, replace=()):
    """`values` (a dict) into the ConfigDict `base`, recursively (but the keys in
    `replace` whole); new keys added."""
    for key, value in values.items():
        if (
            key not in replace
            and isinstance(value, dict)
            and isinstance(base.get(key), ml_collections.ConfigDict)
        ):
            _merge(base[key], value)
        else:
            base[key] = value


def get(config, dotted):
    """config["a"]["b"] for dotted "a.b"."""
    node = config
    for key in dotted.split("."):
        node = node[key]
    return node


def _set(config, dotted, value):
    *parents, leaf = dotted.split(".")
    node = config
    for key in parents:
        node = node[key]
    node[leaf] = value


def resolve(config, mode, overrides=None):
    """The ConfigDict to train with (module docstring).

    Args:
        config: the config file's ConfigDict (command-line overrides already applied,
            as absl's config flag does).
        mode: 'pretrain' or 'finetune'.
        overrides: {dotted key: value} given on the command line
            (`ml_collections.config_flags.get_override_values`).
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: expected one of {', '.join(MODES)}")
    values = config.to_dict()
    section = values.pop(mode, None) or {}
    for other in MODES:
        values.pop(other, None)
    resolved = common.base_config()
    for other in MODES:
        del resolved[other]
    _merge(resolved, values, replace=("evals",))  # a config's evals are all it runs
    _merge(resolved, section)
    for key, value in common.TRAINER_DEFAULTS[mode].items():
        if resolved.get(key) is None:
            resolved[key] = value
    given = set()
    for dotted, value in (overrides or {}).items():
        head, _, rest = dotted.partition(".")
        if head in MODES:
            if head != mode:
                raise ValueError(
                    f"--config.{dotted}: the {head} section is not used by {mode}; "
                    f"give --config.{rest} instead"
                )
            dotted = rest
        _set(resolved, dotted, value)
        given.add(dotted)
    _fold_renamed(resolved, given)
    for key, value in list(resolved.model_overrides.items()):
        if value is None:
            del resolved.model_overrides[key]
    return resolved


def _fold_renamed(resolved, given):
    """Each old key of RENAMED that is set moved to its new key, with a warning (module
    docstring). `given`: the dotted keys given on the command line, which win over the
    config's; the two names given at one level (both on the command line, or both in
    the config, the new one away from its default) with different values are left as
    they are, for config_checks.check_renamed to refuse."""
    defaults = common.base_config()
    for old, new in RENAMED.items():
        value = get(resolved, old)
        if value is None:
            continue
        current = get(resolved, new)
        if old in given:  # on the command line: over the config's new key
            if new in given and current != value:
                continue  # both on the command line, and they disagree
        elif new in given:  # in the config, the command line's new key over it
            value = current
        elif current not in (value, get(defaults, new)):
            continue  # both in the config, and they disagree
        log.warning("%s is deprecated: use --config.%s=%s", old, new, get(resolved, old))
        _set(resolved, new, value)
        _set(resolved, old, None)


def _keys(node):
    return ", ".join(sorted(node.keys()))


def override_error(config, dotted):
    """Why `--config.<dotted>` cannot be set on `config` (a config file's ConfigDict), as
    one line naming the flag and the fix; None where it can."""
    node, path = config, "config"
    for key in dotted.split("."):
        if isinstance(node, str) and path == "config.model":
            overridable = common.base_config().model_overrides
            fix = f"--config.model=\"{{'variant': '{node}', '{key}': ...}}\" (a dict model)"
            if key in overridable:
                fix = f"--config.model_overrides.{key}"
            return (
                f"--config.{dotted}: config.model is the builder name {node!r}, which has no "
                f"keys; give {fix}"
            )
        if not hasattr(node, "keys"):
            return f"--config.{dotted}: {path} is {node!r}, which has no keys"
        if key not in node.keys():
            hint = f"its keys: {_keys(node)}"
            if path == "config":
                hint = "configs/common.py lists every key"
            elif path == "config.model" and key in common.base_config().model_overrides:
                hint = f"give --config.model_overrides.{key}"
            return f"--config.{dotted}: {path} has no key {key!r} ({hint})"
        node, path = node[key], f"{path}.{key}"
    return None
