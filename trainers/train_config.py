"""The config a trainer runs: the first step of `train_lib.run`.

    resolved = configs/common.py's base_config()   every key, with its default
               <- the config file's values
               <- its `<mode>` section ('pretrain' or 'finetune')
               <- the mode's TRAINER_DEFAULTS, for keys still None
               <- the command line's --config.KEY=VALUE, which always win

A command-line key inside the other mode's section (`--config.finetune.X` given to
pretrain.py) is an error naming the key, since it could not take effect. The keys of
`model_overrides` left None are dropped: not set, the model's own value stands.

`override_error` names what is wrong with a `--config.KEY` the config has no place for
(an unknown key; a key of a dict model given to a builder name), for trainers/app.py.
"""

import ml_collections
from keras_vit_configs import common

MODES = tuple(common.TRAINER_DEFAULTS)


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
    for key, value in list(resolved.model_overrides.items()):
        if value is None:
            del resolved.model_overrides[key]
    return resolved


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
