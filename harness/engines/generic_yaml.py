"""Loading a generic engine's YAML: every key checked, each mistake one ConfigError naming the
file and the key (``harness.engines.generic`` describes the keys and runs the engine)."""

from __future__ import annotations

import re
import string
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from harness import knobs
from harness.cell import FLASH_ATTN, LOAD_MODES, Cell
from harness.engines.base import DEVICE_FAMILIES, STREAMS, TTFT_DEFINITIONS, device_family
from harness.engines.derived import (
    METRICS,
    Metric,
    aggregate_from_spec,
    captures_from_spec,
    metric_from_spec,
)
from harness.engines.generic import CELL_FIELDS, GenericEngine, render
from harness.errors import ConfigError

FORMATS = ("jsonl", "regex")
_FIELD_TYPES = {f.name: str(f.type) for f in fields(Cell)}
PLACEHOLDERS = ("binary", "binary_dir", "model", "model_dir", "cpu_mask", "device",
                "prompt_file", "output_file", *CELL_FIELDS)
ENV_PLACEHOLDERS = ("binary_dir", "model_dir")
OUTPUT_KEYS = ("format", "stream", "file", "prefix", "captures", "aggregate", "per_repetition",
               "ttft_definition", *METRICS)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TRUE, _FALSE = ("1", "true", "on", "yes"), ("0", "false", "off", "no")


def load_generic_engine(path: Path) -> GenericEngine:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror})") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML ({error})") from None
    return engine_from_dict(data, path)


def engine_from_dict(data: Any, where: Path | str) -> GenericEngine:
    """The engine a YAML mapping declares; a ConfigError names ``where`` and the key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with name, argv and output")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: key 'name' must be a non-empty string")
    template = _template(data.get("argv"), where)
    fmt, metrics, output = _output(data.get("output"), template, where)
    engine = GenericEngine(
        name, template, fmt, metrics, _allowed(data.get("supports") or {}, where),
        _file_name(data.get("tool", ""), "tool", where, "a file name under the build's bin/"),
        family=_text(data.get("family", ""), "family", where),
        devices=_devices(data.get("devices"), template, where),
        model_files=_model_files(data.get("model_files", []), where),
        env=_env(data.get("env") or {}, where), values=_values(data.get("values") or {}, where),
        **output)
    _check_prompt_file(data.get("prompt_file"), engine, where)
    return engine


def _template(template: Any, where: Path | str) -> tuple[str, ...]:
    if not isinstance(template, list) or not template or not all(
        isinstance(item, str | int | float) for item in template
    ):
        raise ConfigError(f"{where}: key 'argv' must be a non-empty list of strings")
    items = tuple(str(item) for item in template)
    for item in items:
        for placeholder in _placeholders(item, "argv", where):
            if placeholder not in PLACEHOLDERS:
                raise ConfigError(f"{where}: key 'argv' uses {{{placeholder}}}; known: "
                                  f"{', '.join(PLACEHOLDERS)}")
    return items


def _placeholders(text: str, key: str, where: Path | str) -> list[str]:
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as error:
        raise ConfigError(f"{where}: key {key!r} has a bad placeholder ({error})") from None
    return [placeholder for _, placeholder, _, _ in parsed if placeholder is not None]


def _output(output: Any, template: tuple[str, ...], where: Path | str) -> tuple[
        str, dict[str, Metric], dict[str, Any]]:
    """(format, metrics, the other GenericEngine fields the output mapping sets)."""
    if not isinstance(output, dict):
        raise ConfigError(f"{where}: key 'output' must be a mapping with format and metrics")
    fmt = output.get("format")
    if fmt not in FORMATS:
        raise ConfigError(f"{where}: key 'output.format' must be one of {', '.join(FORMATS)}")
    unknown = sorted(set(output) - set(OUTPUT_KEYS), key=str)
    if unknown:
        raise ConfigError(f"{where}: key 'output.{unknown[0]}' is unknown; use "
                          f"{', '.join(OUTPUT_KEYS)}")
    captures = captures_from_spec(output.get("captures") or {}, fmt, where)
    metrics = {
        metric: metric_from_spec(output[metric], f"output.{metric}", fmt, where, captures)
        for metric in METRICS if metric in output
    }
    if not metrics:
        raise ConfigError(f"{where}: key 'output' maps none of {', '.join(METRICS)}")
    stream, output_file = _stream(output, template, where)
    aggregate = aggregate_from_spec(output.get("aggregate"), fmt, where)
    per_repetition = output.get("per_repetition", aggregate is None)
    if not isinstance(per_repetition, bool):
        raise ConfigError(f"{where}: key 'output.per_repetition' must be true or false")
    prefix = output.get("prefix", "")
    if not isinstance(prefix, str) or (prefix and fmt != "jsonl"):
        raise ConfigError(f"{where}: key 'output.prefix' must be a string, with format jsonl")
    definition = output.get("ttft_definition")
    if definition is not None and definition not in TTFT_DEFINITIONS:
        raise ConfigError(f"{where}: key 'output.ttft_definition' must be one of "
                          f"{', '.join(TTFT_DEFINITIONS)}")
    return fmt, metrics, {"captures": captures, "stream": stream, "output_file": output_file,
                          "prefix": prefix, "aggregate": aggregate,
                          "per_repetition": per_repetition, "ttft_definition": definition}


def _stream(output: dict[str, Any], template: tuple[str, ...],
            where: Path | str) -> tuple[str, str | None]:
    stream = output.get("stream", "stdout")
    if stream not in STREAMS:
        raise ConfigError(f"{where}: key 'output.stream' must be one of {', '.join(STREAMS)}, "
                          f"not {stream!r}")
    name = output.get("file")
    if stream != "file":
        if name is not None:
            raise ConfigError(f"{where}: key 'output.file' is read only with stream: file")
        if any("{output_file}" in item for item in template):
            raise ConfigError(f"{where}: key 'argv' uses {{output_file}} but output.stream is "
                              f"{stream}, not file")
        return stream, None
    if name is None:
        raise ConfigError(f"{where}: key 'output.file' is needed with stream: file (the file "
                          "the tool writes, relative to its working directory)")
    return stream, _relative(name, "output.file", where)


def _text(value: Any, key: str, where: Path | str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: key {key!r} must be a string")
    return value


def _file_name(value: Any, key: str, where: Path | str, what: str) -> str:
    if not isinstance(value, str) or "/" in value:
        raise ConfigError(f"{where}: key {key!r} must be {what}")
    return value


def _relative(value: Any, key: str, where: Path | str) -> str:
    """A path relative to a folder, that stays in it."""
    if not isinstance(value, str) or not value or value.startswith("/") or ".." in value.split(
            "/") or "{" in value:
        raise ConfigError(f"{where}: key {key!r} must be a relative file name without '..' "
                          f"(got {value!r})")
    return value


def _model_files(data: Any, where: Path | str) -> tuple[str, ...]:
    if not isinstance(data, list):
        raise ConfigError(f"{where}: key 'model_files' must be a list of file names")
    return tuple(_relative(item, f"model_files.{i}", where) for i, item in enumerate(data))


def _devices(data: Any, template: tuple[str, ...], where: Path | str) -> dict[str, str]:
    uses = any("{device}" in item for item in template)
    if data is None:
        if uses:
            raise ConfigError(f"{where}: key 'devices' is needed: argv uses {{device}}")
        return {}
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{where}: key 'devices' must map device families or names to the "
                          "tool's backend words")
    if not uses:
        raise ConfigError(f"{where}: key 'devices' is declared but argv has no {{device}}")
    devices = {}
    for key, word in data.items():
        if not isinstance(key, str) or (key not in DEVICE_FAMILIES and device_family(key) is None):
            raise ConfigError(f"{where}: key 'devices.{key}' is not a device family "
                              f"({', '.join(DEVICE_FAMILIES)}) or a device name of one")
        if not isinstance(word, str | int) or isinstance(word, bool) or str(word) == "":
            raise ConfigError(f"{where}: key 'devices.{key}' must be the tool's word (a string)")
        devices["cpu" if knobs.is_cpu(key) else key] = str(word)
    return devices


def _env(data: Any, where: Path | str) -> dict[str, str]:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: key 'env' must map variable names to strings")
    env = {}
    for name, value in data.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ConfigError(f"{where}: key 'env.{name}' is not a valid environment variable "
                              "name (letters, digits, _; not starting with a digit)")
        if not isinstance(value, str):
            raise ConfigError(f"{where}: key 'env.{name}' must be a string, not {value!r}")
        for placeholder in _placeholders(value, f"env.{name}", where):
            if placeholder not in ENV_PLACEHOLDERS:
                raise ConfigError(f"{where}: key 'env.{name}' uses {{{placeholder}}}; known: "
                                  f"{', '.join(ENV_PLACEHOLDERS)}")
        env[name] = value
    return env


def _values(data: Any, where: Path | str) -> dict[str, dict[str, str]]:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: key 'values' must map cell fields to value maps")
    maps = {}
    for key, words in data.items():
        if key not in CELL_FIELDS:
            raise ConfigError(f"{where}: key 'values.{key}' is not a cell field")
        if not isinstance(words, dict):
            raise ConfigError(f"{where}: key 'values.{key}' must map the field's values to the "
                              "tool's words")
        maps[key] = {_value_key(key, value, where): _word_text(word, f"values.{key}", where)
                     for value, word in words.items()}
    return maps


def _value_key(key: str, value: Any, where: Path | str) -> str:
    """A value map's key as ``_render`` spells the cell's value. YAML reads bare on/off/yes/no
    as booleans: for a text field (flash_attn) they mean on/off."""
    if _FIELD_TYPES[key] == "bool":
        text = str(value).lower()
        if text in _TRUE or text in _FALSE:
            return "1" if text in _TRUE else "0"
        raise ConfigError(f"{where}: key 'values.{key}' maps {value!r}; {key} is true or false")
    text = ("on" if value else "off") if isinstance(value, bool) else str(value)
    known = {"flash_attn": FLASH_ATTN, "load_mode": LOAD_MODES}.get(key)
    if known is not None and text not in known:
        raise ConfigError(f"{where}: key 'values.{key}' maps {text!r}; {key} is one of "
                          f"{', '.join(known)}")
    return text


def _word_text(word: Any, key: str, where: Path | str) -> str:
    if isinstance(word, bool) or not isinstance(word, str | int | float):
        raise ConfigError(f"{where}: key {key!r} must map to strings (quote true/false)")
    return str(word)


def _check_prompt_file(value: Any, engine: GenericEngine, where: Path | str) -> None:
    """``prompt_file: false`` says the tool cannot take a prompt file; true that it must."""
    if value is None:
        return
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: key 'prompt_file' must be true or false")
    if value != engine.wants_prompt_file:
        raise ConfigError(f"{where}: key 'prompt_file' is {str(value).lower()} but argv "
                          f"{'uses' if engine.wants_prompt_file else 'has no'} {{prompt_file}}")


def _allowed(data: Any, where: Path | str) -> dict[str, tuple[str, ...]]:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: key 'supports' must map cell fields to lists of values")
    allowed = {}
    for key, values in data.items():
        if key not in CELL_FIELDS:
            raise ConfigError(f"{where}: key 'supports.{key}' is not a cell field")
        if not isinstance(values, list):
            raise ConfigError(f"{where}: key 'supports.{key}' must be a list")
        allowed[key] = tuple(render(value) for value in values)
    return allowed
