"""Test matrices: load and validate ``matrices/*.yaml``, expand them into cells.

A matrix is the unit a performance engineer edits every week, so a mistake in it must end in one
line naming the file, the key path (``axes.n_ctx[2]``), the bad value and what is allowed, never a
traceback halfway through a night. Expansion follows GitHub Actions matrix semantics (every
combination, minus excludes, plus includes) and is a pure function; docs/matrices.md has the
format and examples.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness import knobs
from harness.artifacts.ladder import LADDER_SIZES, SYNTHETIC_SIZES
from harness.cell import (
    DEFAULT_ENGINE,
    DEVICE_PYTHON_BUILD,
    MAPPED_LOAD_MODES,
    Cell,
)
from harness.errors import ConfigError
from harness.memory import BITS_PER_WEIGHT, ModelCard
from harness.metrics import ADAPTIVE_METRICS

# Axes in expansion order (the last one varies fastest).
AXES = (
    "engine", "build", "model", "quant", *knobs.axes(),
)
REQUIRED_AXES = ("build", "model", "quant", "n_ctx")
#: axes read under an older name too: old name -> the name a matrix now gives (same values)
OLD_AXES = {"device": "compute_device"}
# Values of axes a matrix leaves out (llama.cpp's own defaults where it has one).
AXIS_DEFAULTS: dict[str, Any] = {
    "engine": DEFAULT_ENGINE,
    **knobs.defaults(),
}
WORKLOAD_KEYS = ("n_prompt", "n_gen", "n_depth", "sustained")
SUSTAINED_KEYS = ("duration_s",)
ENERGY_KEYS = ("idle_s",)
ADAPTIVE_KEYS = ("baseline", "metric", "effect", "alpha", "beta", "min_repetitions",
                 "max_repetitions")
TOP_KEYS = (
    "name", "description", "axes", "models", "workload", "repetitions", "cooldown", "timeout",
    "require", "include", "exclude", "energy", "adaptive", "output_check",
)
OUTPUT_CHECK_KEYS = ("tokens", "prompt", "min_agree")
#: the output check's defaults: a prompt every model continues, 16 greedy tokens, half of them
#: to agree (docs/engines.md "Output check")
CHECK_PROMPT = "The capital of France is"
CHECK_TOKENS = 16
CHECK_MAX_TOKENS = 256
CHECK_MAX_PROMPT = 1000
REQUIRED_TOP_KEYS = ("name", "axes", "models", "workload")
# llama.cpp file-type names, largest first (that is how people read a quant ladder).
QUANTS = tuple(sorted(BITS_PER_WEIGHT, key=lambda q: (-BITS_PER_WEIGHT[q], q)))
CARD_KEYS = ("n_layer", "n_head", "n_head_kv", "head_dim", "n_embd", "n_ff", "n_vocab", "n_params")
# A card may state a sliding window: n_swa tokens, every swa_pattern-th layer global.
CARD_OPTIONAL_KEYS = ("n_swa", "swa_pattern")
COOLDOWN_DEFAULTS: dict[str, float] = {
    "max_thermal_status": 1, "max_temperature_c": 40.0, "min_battery_pct": 20, "max_wait_s": 600.0,
}
# What a run can require of a phone before each trial (harness.run.preflight reads them).
REQUIRE_KEYS = ("screen_on", "stay_awake", "charging", "battery_saver", "doze")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


@dataclass(frozen=True)
class ModelSource:
    """Where a matrix's model comes from: the synthetic ladder, or a GGUF path per quant."""

    name: str
    ladder: str | None = None  # one of LADDER_SIZES
    path: str | None = None  # a template with {quant}, relative to the working directory
    card: ModelCard | None = None  # architecture to plan with when the file is absent
    # The same weights in another engine's format: engine name -> a path template ({quant}) of
    # the file that engine is given (MNN's config.json, a .pte, a .litertlm); the whole folder
    # holding it is pushed. The GGUF (ladder or path) or the card still plans the cell.
    engines: tuple[tuple[str, str], ...] = ()
    converted_from: str | None = None  # what those files were made from, in the user's words

    def path_for(self, quant: str) -> Path | None:
        if self.path is None:
            return None
        return Path(self.path.format(quant=quant)).expanduser()

    def engine_path(self, engine: str, quant: str) -> Path | None:
        """The file an engine runs for this model, when it has one of its own format."""
        for name, template in self.engines:
            if name == engine:
                return Path(template.format(quant=quant)).expanduser()
        return None


@dataclass(frozen=True)
class Workload:
    n_prompt: int
    n_gen: int
    n_depth: int | str = 0  # tokens already in the context, or "fill": n_ctx - n_prompt - n_gen
    # ``sustained: {duration_s: S}``: generate back to back for S seconds in one launch (0: burst)
    sustained_s: float = 0.0


@dataclass(frozen=True)
class EnergyPolicy:
    """``energy:``: sample the battery's power during each trial and store joules per token.

    ``idle_s`` is how long the idle draw is read just before the launch (it is subtracted).
    """

    enabled: bool = False
    idle_s: float = 2.0


@dataclass(frozen=True)
class OutputCheckPolicy:
    """``output_check:``: once per build, model file and phone, a greedy continuation of
    ``prompt`` by ``tokens`` tokens is compared with llama-cpp-python's on the host; fewer than
    ``min_agree`` leading tokens in common mark that group's trials invalid
    (``harness.run.outputcheck``). ``output_check: false`` turns it off."""

    enabled: bool = True
    tokens: int = CHECK_TOKENS
    prompt: str = CHECK_PROMPT
    min_agree: int = CHECK_TOKENS // 2


@dataclass(frozen=True)
class AdaptivePolicy:
    """``adaptive:``: A/B pairs of each configuration (the ``baseline`` build against each other
    build) are added until the sequential rule (``harness.analysis.sequential``) settles or the
    cap is reached; ``min_repetitions`` are run first, whatever ``repetitions`` says.
    """

    baseline: str
    metric: str = "tg_tps"
    effect: float = 0.05
    alpha: float = 0.01
    beta: float = 0.05
    min_repetitions: int = 5
    max_repetitions: int = 30


@dataclass(frozen=True)
class CooldownPolicy:
    """Wait before a trial until the phone is this cool and charged (or give up after a while)."""

    max_thermal_status: int = 1  # Android thermal status: 0 none .. 6 shutdown
    max_temperature_c: float = 40.0
    min_battery_pct: int = 20
    max_wait_s: float = 600.0


@dataclass(frozen=True)
class Requirements:
    """The phone state a run needs before each trial; None = no requirement.

    A phone that does not meet one (or whose state cannot be read) is not measured: the trial is
    stored as ``precondition_failed`` with the phone and the requirement named.
    """

    screen_on: bool | None = None
    stay_awake: bool | None = None
    charging: bool | None = None  # battery status "charging"
    battery_saver: bool | None = None
    doze: bool | None = None  # deep Doze (IDLE or IDLE_MAINTENANCE)

    def items(self) -> list[tuple[str, bool]]:
        """The requirements that are set, in REQUIRE_KEYS order."""
        return [(key, value) for key in REQUIRE_KEYS
                if (value := getattr(self, key)) is not None]


@dataclass(frozen=True)
class TimeoutPolicy:
    trial_s: float = 600.0


@dataclass(frozen=True)
class Matrix:
    name: str
    description: str
    axes: Mapping[str, tuple[Any, ...]]  # declared axes only, in AXES order, values normalised
    models: Mapping[str, ModelSource]
    workload: Workload
    repetitions: int = 3
    cooldown: CooldownPolicy = field(default_factory=CooldownPolicy)
    timeout: TimeoutPolicy = field(default_factory=TimeoutPolicy)
    require: Requirements = field(default_factory=Requirements)
    include: tuple[Mapping[str, Any], ...] = ()
    exclude: tuple[Mapping[str, Any], ...] = ()
    source: str = "<matrix>"
    energy: EnergyPolicy = field(default_factory=EnergyPolicy)
    adaptive: AdaptivePolicy | None = None
    output_check: OutputCheckPolicy = field(default_factory=OutputCheckPolicy)


# --- validation helpers -------------------------------------------------------------------------


_show = knobs.show


class _Checker:
    """Raises ConfigError lines of the form ``FILE: KEY.PATH: problem``."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.source}: {where}: {problem}")

    def mapping(self, value: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(where, f"must be a mapping of keys, got {_show(value)}")
        return value

    def keys(self, data: Mapping[str, Any], where: str, allowed: tuple[str, ...]) -> None:
        for key in data:
            if key not in allowed:
                prefix = f"{where}." if where else ""
                raise self.fail(
                    f"{prefix}{key}", f"unknown key (allowed: {', '.join(allowed)})"
                )

    def integer(self, value: Any, where: str, minimum: int, maximum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            upper = "" if maximum is None else f" and <= {maximum}"
            raise self.fail(
                where, f"{_show(value)} is not an integer (allowed: integers >= {minimum}{upper})"
            )
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
            raise self.fail(where, f"{value} is out of range (allowed: integers {bound})")
        return value

    def number(self, value: Any, where: str, minimum: float) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(
                where, f"{_show(value)} is not a number (allowed: numbers >= {minimum})"
            )
        if value < minimum:
            raise self.fail(where, f"{value} is out of range (allowed: numbers >= {minimum})")
        return float(value)

    def name(self, value: Any, where: str, what: str) -> str:
        if not isinstance(value, str) or not _NAME.match(value):
            raise self.fail(where, f"{_show(value)} is not a valid {what} (allowed: letters, "
                                   "digits and . _ + -, not starting with punctuation)")
        return value


def _choice(check: _Checker, value: Any, where: str, allowed: tuple[str, ...], what: str) -> str:
    if isinstance(value, str):
        for option in allowed:
            if value.lower() == option.lower():
                return option
    raise check.fail(where, f"unknown {what} {_show(value)} (allowed: {', '.join(allowed)})")


def _kv_value(check: _Checker, value: Any, where: str) -> tuple[str, str]:
    """``kv``: one type for K and V, ``K/V``, or ``{type_k: K, type_v: V}`` (the registry's
    type_k and type_v, parts 0 and 1 of this axis)."""
    k_type, v_type = knobs.spec("type_k"), knobs.spec("type_v")
    if isinstance(value, Mapping):
        check.keys(value, where, ("type_k", "type_v"))
        if set(value) != {"type_k", "type_v"}:
            raise check.fail(where, "a KV pair needs both type_k and type_v")
        return (_registered(check, value["type_k"], f"{where}.type_k", knob=k_type),
                _registered(check, value["type_v"], f"{where}.type_v", knob=v_type))
    if isinstance(value, str) and "/" in value:
        k, _, v = value.partition("/")
        return (_registered(check, k, where, knob=k_type),
                _registered(check, v, where, knob=v_type))
    same = _registered(check, value, where, knob=k_type)
    return (same, same)


def _boolean(check: _Checker, value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise check.fail(where, f"{_show(value)} is not a boolean (allowed: true, false)")
    return value


def _engine(check: _Checker, value: Any, where: str) -> str:
    """A built-in engine's name, or the path of a YAML-declared engine (checked by loading it)."""
    from harness.engines import BUILTIN
    from harness.engines.generic_yaml import load_generic_engine

    if isinstance(value, str) and value in BUILTIN:
        return value
    if isinstance(value, str) and value.endswith((".yaml", ".yml")):
        load_generic_engine(Path(value))  # names the file and key when it is wrong
        return value
    raise check.fail(where, f"unknown engine {_show(value)} (allowed: {', '.join(BUILTIN)}, "
                            "or the path of a generic engine's .yaml file)")


def _registered(check: _Checker, value: Any, where: str, *, knob: knobs.Knob) -> Any:
    """A knob of the registry: its own parser, its problem named at the key path."""
    try:
        return knob.parse(value)
    except ValueError as error:
        raise check.fail(where, str(error)) from None


AxisParser = Callable[[_Checker, Any, str], Any]
AXIS_PARSERS: dict[str, AxisParser] = {
    "engine": _engine,
    "build": lambda c, v, w: c.name(v, w, "build name"),
    "model": lambda c, v, w: c.name(v, w, "model name"),
    "quant": lambda c, v, w: _choice(c, v, w, QUANTS, "quant"),
    "kv": _kv_value,
    **{knob.axis: functools.partial(_registered, knob=knob) for knob in knobs.KNOBS
       if knob.part is None},
}
WORKLOAD_PARSERS: dict[str, AxisParser] = {
    "n_prompt": lambda c, v, w: c.integer(v, w, 0),
    "n_gen": lambda c, v, w: c.integer(v, w, 0),
    "n_depth": lambda c, v, w: v if v == "fill" else c.integer(v, w, 0),
    "sustained": lambda c, v, w: _sustained(c, v, w),
}


def _seconds(check: _Checker, value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 \
            or value != value or value == float("inf"):
        raise check.fail(where, f"{_show(value)} is not a positive number of seconds")
    return float(value)


def _sustained(check: _Checker, value: Any, where: str) -> float:
    """``{duration_s: S}`` -> S; ``0``/``false`` (in include rules) -> a burst cell."""
    if value in (0, False):
        return 0.0
    data = check.mapping(value, where)
    check.keys(data, where, SUSTAINED_KEYS)
    if "duration_s" not in data:
        raise check.fail(where, "missing key 'duration_s' (seconds of back-to-back generation)")
    return _seconds(check, data["duration_s"], f"{where}.duration_s")


# --- sections -----------------------------------------------------------------------------------


def _current_names(check: _Checker, data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``data`` with its keys of an old axis name under the current one (``OLD_AXES``)."""
    for old, new in OLD_AXES.items():
        if old in data and new in data:
            raise check.fail(where, f"gives both {old} and {new} ({old} is the old name of "
                                    f"{new}): keep {new} only")
    return {OLD_AXES.get(key, key): value for key, value in data.items()}


def _spelled(data: Mapping[str, Any], axis: str) -> str:
    """The axis as the file names it (an old name, ``OLD_AXES``, in an older matrix)."""
    return next((old for old, new in OLD_AXES.items() if new == axis and old in data), axis)


def _parse_axes(check: _Checker, raw: Any) -> dict[str, tuple[Any, ...]]:
    given = check.mapping(raw, "axes")
    data = _current_names(check, given, "axes")
    check.keys(data, "axes", AXES)
    for axis in REQUIRED_AXES:
        if axis not in data:
            required = ", ".join(REQUIRED_AXES)
            raise check.fail("axes", f"missing axis '{axis}' (required: {required})")
    axes: dict[str, tuple[Any, ...]] = {}
    for axis in AXES:
        if axis not in data:
            continue
        values = data[axis]
        where = f"axes.{_spelled(given, axis)}"
        if not isinstance(values, list):
            values = [values]  # a single value is a one-value axis
        if not values:
            raise check.fail(where, "empty list (an axis needs at least one value)")
        parsed = [AXIS_PARSERS[axis](check, v, f"{where}[{i}]") for i, v in enumerate(values)]
        axes[axis] = tuple(dict.fromkeys(parsed))  # repeated values add nothing
    if "mmap" in axes and "load_mode" in axes:
        raise check.fail("axes.load_mode", "declare mmap or load_mode, not both (load_mode "
                                           "mmap is mmap true, none is mmap false)")
    if "cache" in axes:
        _check_cache_engines(check, axes.get("engine", ()))
    return axes


def _check_cache_engines(check: _Checker, engines: tuple[Any, ...]) -> None:
    """A cache knob needs an engine that reads the model file the harness evicts or warms."""
    from harness.engines import BUILTIN
    from harness.engines.generic_yaml import load_generic_engine

    for name in engines:
        if name in BUILTIN:
            continue
        engine = load_generic_engine(Path(name))
        if not engine.uses("model"):
            raise check.fail("axes.cache", engine.cache_problem())


def _parse_card(check: _Checker, raw: Any, where: str) -> ModelCard:
    data = check.mapping(raw, where)
    check.keys(data, where, CARD_KEYS + CARD_OPTIONAL_KEYS)
    values: dict[str, int] = {}
    for key in CARD_OPTIONAL_KEYS:
        if key in data:
            values[key] = check.integer(data[key], f"{where}.{key}", 0)
    for key in CARD_KEYS:
        if key not in data:
            raise check.fail(where, f"missing key '{key}' (a card needs: {', '.join(CARD_KEYS)})")
        value = data[key]
        if key == "n_params" and isinstance(value, str | float) and not isinstance(value, bool):
            with contextlib.suppress(ValueError):  # PyYAML reads 1.24e9 as a string
                value = int(float(value))
        values[key] = check.integer(value, f"{where}.{key}", 1)
    return ModelCard(**values)


def _parse_models(check: _Checker, raw: Any) -> dict[str, ModelSource]:
    data = check.mapping(raw, "models")
    if not data:
        raise check.fail("models", "empty mapping (declare each model of axes.model)")
    models: dict[str, ModelSource] = {}
    for name, spec in data.items():
        where = f"models.{name}"
        check.name(name, where, "model name")
        spec = check.mapping(spec, where)
        check.keys(spec, where, ("ladder", "path", "card", "engines", "converted_from"))
        if ("ladder" in spec) == ("path" in spec):
            raise check.fail(where, "give exactly one source: ladder "
                                      f"({', '.join(LADDER_SIZES)}) or path")
        engines = _parse_engine_files(check, spec.get("engines"), f"{where}.engines")
        converted = spec.get("converted_from")
        if converted is not None and (not isinstance(converted, str) or not converted.strip()):
            raise check.fail(f"{where}.converted_from", f"{_show(converted)} is not a text "
                             "saying what the engines' files were made from")
        if "ladder" in spec:
            if "card" in spec:
                raise check.fail(f"{where}.card", "a ladder model needs no card (its files exist)")
            ladder = _choice(check, spec["ladder"], f"{where}.ladder", LADDER_SIZES, "ladder size")
            models[name] = ModelSource(name=name, ladder=ladder, engines=engines,
                                       converted_from=converted)
            continue
        template = _path_template(check, spec["path"], f"{where}.path")
        card = _parse_card(check, spec["card"], f"{where}.card") if "card" in spec else None
        models[name] = ModelSource(name=name, path=template, card=card, engines=engines,
                                   converted_from=converted)
    return models


def _path_template(check: _Checker, template: Any, where: str) -> str:
    if not isinstance(template, str) or not template:
        raise check.fail(where, f"{_show(template)} is not a path template")
    try:
        template.format(quant="Q4_K_M")
    except (KeyError, IndexError, ValueError) as error:
        raise check.fail(
            where, f"{_show(template)} is not a valid template ({error!s}; the "
            "only placeholder is {quant}, write {{ and }} for literal braces)"
        ) from error
    return template


def _parse_engine_files(check: _Checker, raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    """``engines: {mnn-llm-bench: models/qwen-mnn-{quant}/config.json, ...}``: per engine, the
    file of the same weights in that engine's format."""
    if raw is None:
        return ()
    data = check.mapping(raw, where)
    found = []
    for engine, template in data.items():
        if not isinstance(engine, str) or not engine:
            raise check.fail(where, f"{_show(engine)} is not an engine name")
        found.append((engine, _path_template(check, template, f"{where}.{engine}")))
    return tuple(found)


def _parse_workload(check: _Checker, raw: Any) -> Workload:
    data = check.mapping(raw, "workload")
    check.keys(data, "workload", WORKLOAD_KEYS)
    for key in ("n_prompt", "n_gen"):
        if key not in data:
            raise check.fail("workload", f"missing key '{key}'")
    values = {k: WORKLOAD_PARSERS[k](check, data[k], f"workload.{k}") for k in data}
    if values["n_prompt"] + values["n_gen"] == 0:
        raise check.fail("workload", "n_prompt and n_gen are both 0 (nothing to measure)")
    if values.get("sustained") and not values["n_gen"]:
        raise check.fail("workload.sustained", "a sustained workload generates: n_gen must be > 0")
    sustained = values.pop("sustained", 0.0)
    return Workload(**values, sustained_s=sustained)


def _parse_energy(check: _Checker, raw: Any) -> EnergyPolicy:
    if raw is None or raw is False:
        return EnergyPolicy()
    if raw is True:
        return EnergyPolicy(enabled=True)
    data = check.mapping(raw, "energy")
    check.keys(data, "energy", ENERGY_KEYS)
    idle = _seconds(check, data["idle_s"], "energy.idle_s") if "idle_s" in data else 2.0
    return EnergyPolicy(enabled=True, idle_s=idle)


def _parse_output_check(check: _Checker, raw: Any) -> OutputCheckPolicy:
    if raw is None or raw is True:
        return OutputCheckPolicy()
    if raw is False:
        return OutputCheckPolicy(enabled=False)
    data = check.mapping(raw, "output_check")
    check.keys(data, "output_check", OUTPUT_CHECK_KEYS)
    tokens = (check.integer(data["tokens"], "output_check.tokens", 1, CHECK_MAX_TOKENS)
              if "tokens" in data else CHECK_TOKENS)
    min_agree = (check.integer(data["min_agree"], "output_check.min_agree", 1, tokens)
                 if "min_agree" in data else max(1, tokens // 2))
    prompt = data.get("prompt", CHECK_PROMPT)
    if not isinstance(prompt, str) or not prompt.strip():
        raise check.fail("output_check.prompt", f"{_show(prompt)} is not a non-empty string")
    if prompt.startswith("-") or "\0" in prompt or len(prompt) > CHECK_MAX_PROMPT:
        raise check.fail("output_check.prompt", f"{_show(prompt)}: a prompt may not start with "
                                                f"'-' (the generator would read it as an "
                                                f"option), hold NUL or exceed "
                                                f"{CHECK_MAX_PROMPT} characters")
    return OutputCheckPolicy(enabled=True, tokens=tokens, prompt=prompt, min_agree=min_agree)


def _fraction(check: _Checker, value: Any, where: str, upper: float) -> float:
    number = check.number(value, where, 0)
    if not 0 < number < upper:
        raise check.fail(where, f"{number} is out of range (allowed: numbers in (0, {upper:g}))")
    return number


def _parse_adaptive(check: _Checker, raw: Any,
                    axes: Mapping[str, tuple[Any, ...]]) -> AdaptivePolicy | None:
    if raw is None:
        return None
    data = check.mapping(raw, "adaptive")
    check.keys(data, "adaptive", ADAPTIVE_KEYS)
    builds = axes.get("build", ())
    if "baseline" not in data:
        raise check.fail("adaptive", "missing key 'baseline' (the build the others are "
                                     "compared with)")
    baseline = data["baseline"]
    if baseline not in builds or len(builds) < 2:
        raise check.fail("adaptive.baseline", f"{_show(baseline)} must be one of at least two "
                         f"builds in axes.build (builds: {', '.join(map(str, builds)) or 'none'})")
    metric = _choice(check, data.get("metric", "tg_tps"), "adaptive.metric", ADAPTIVE_METRICS,
                     "metric")
    low = check.integer(data.get("min_repetitions", 5), "adaptive.min_repetitions", 3, 100)
    high = check.integer(data.get("max_repetitions", 30), "adaptive.max_repetitions", low, 200)
    return AdaptivePolicy(
        baseline=str(baseline), metric=metric,
        effect=_fraction(check, data.get("effect", 0.05), "adaptive.effect", 1.0),
        alpha=_fraction(check, data.get("alpha", 0.01), "adaptive.alpha", 0.5),
        beta=_fraction(check, data.get("beta", 0.05), "adaptive.beta", 0.5),
        min_repetitions=low, max_repetitions=high)


def _parse_cooldown(check: _Checker, raw: Any) -> CooldownPolicy:
    data = check.mapping(raw, "cooldown")
    check.keys(data, "cooldown", tuple(COOLDOWN_DEFAULTS))
    return CooldownPolicy(
        max_thermal_status=check.integer(
            data.get("max_thermal_status", 1), "cooldown.max_thermal_status", 0, 6
        ),
        max_temperature_c=check.number(
            data.get("max_temperature_c", 40.0), "cooldown.max_temperature_c", 1
        ),
        min_battery_pct=check.integer(
            data.get("min_battery_pct", 20), "cooldown.min_battery_pct", 0, 100
        ),
        max_wait_s=check.number(data.get("max_wait_s", 600.0), "cooldown.max_wait_s", 0),
    )


def _parse_timeout(check: _Checker, raw: Any) -> TimeoutPolicy:
    data = check.mapping(raw, "timeout")
    check.keys(data, "timeout", ("trial_s",))
    return TimeoutPolicy(trial_s=check.number(data.get("trial_s", 600.0), "timeout.trial_s", 1))


def _parse_require(check: _Checker, raw: Any) -> Requirements:
    data = check.mapping(raw, "require")
    check.keys(data, "require", REQUIRE_KEYS)
    return Requirements(**{key: _boolean(check, value, f"require.{key}")
                           for key, value in data.items()})


def _parse_rules(
    check: _Checker,
    raw: Any,
    kind: str,
    axes: Mapping[str, tuple[Any, ...]],
    models: Mapping[str, ModelSource],
) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(raw, list):
        raise check.fail(kind, f"must be a list of mappings, got {_show(raw)}")
    rules = []
    allowed = tuple(axes) if kind == "exclude" else AXES + WORKLOAD_KEYS
    for i, rule in enumerate(raw):
        where = f"{kind}[{i}]"
        given = check.mapping(rule, where)
        rule = _current_names(check, given, where)
        if not rule:
            raise check.fail(where, "empty rule (name at least one axis)")
        parsed: dict[str, Any] = {}
        for key, value in rule.items():
            at = f"{where}.{_spelled(given, key)}"
            if key not in allowed:
                what = "axes of this matrix" if kind == "exclude" else "allowed"
                names = ", ".join(allowed)
                raise check.fail(at, f"unknown axis ({what}: {names})")
            parser = AXIS_PARSERS.get(key) or WORKLOAD_PARSERS[key]
            parsed[key] = parser(check, value, at)
            if kind == "exclude" and parsed[key] not in axes[key]:
                raise check.fail(
                    at,
                    f"{_show(value)} is not a value of axis {key} "
                    f"(values: {', '.join(_show_value(v) for v in axes[key])})",
                )
            if key == "model" and parsed[key] not in models:
                raise check.fail(
                    f"{where}.model", f"model {_show(value)} is not declared in models"
                )
        rules.append(parsed)
    return tuple(rules)


def _show_value(value: Any) -> str:
    if isinstance(value, tuple):
        return value[0] if value[0] == value[1] else f"{value[0]}/{value[1]}"
    return str(value).lower() if isinstance(value, bool) else str(value)


# --- public API ---------------------------------------------------------------------------------


def parse_matrix(data: Any, source: str) -> Matrix:
    """Validate an already-parsed YAML document; ``source`` names it in error messages."""
    check = _Checker(source)
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: a matrix must be a mapping of keys, got {_show(data)}")
    check.keys(data, "", TOP_KEYS)
    for key in REQUIRED_TOP_KEYS:
        if key not in data:
            raise ConfigError(f"{source}: missing key '{key}' (required: "
                              f"{', '.join(REQUIRED_TOP_KEYS)})")
    name = check.name(data["name"], "name", "matrix name")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise check.fail("description", f"{_show(description)} is not a string")
    axes = _parse_axes(check, data["axes"])
    models = _parse_models(check, data["models"])
    for i, model in enumerate(axes["model"]):
        if model not in models:
            raise check.fail(f"axes.model[{i}]", f"model {_show(model)} is not declared in models "
                                                 f"(declared: {', '.join(models)})")
    matrix = Matrix(
        name=name,
        description=description,
        axes=axes,
        models=models,
        workload=_parse_workload(check, data["workload"]),
        repetitions=check.integer(data.get("repetitions", 3), "repetitions", 1),
        cooldown=_parse_cooldown(check, data.get("cooldown", {})),
        timeout=_parse_timeout(check, data.get("timeout", {})),
        require=_parse_require(check, data.get("require", {})),
        include=_parse_rules(check, data.get("include", []), "include", axes, models),
        exclude=_parse_rules(check, data.get("exclude", []), "exclude", axes, models),
        source=source,
        energy=_parse_energy(check, data.get("energy")),
        adaptive=_parse_adaptive(check, data.get("adaptive"), axes),
        output_check=_parse_output_check(check, data.get("output_check")),
    )
    cells = expand(matrix)
    if not cells:
        raise ConfigError(f"{source}: exclude removes every combination (nothing to run)")
    _check_engine_files(check, models, cells)
    return matrix


def _check_engine_files(check: _Checker, models: Mapping[str, ModelSource],
                        cells: Sequence[Cell]) -> None:
    """A model's file for an engine must be for an engine its cells run (a typo runs nothing)."""
    for model_name, model_source in models.items():
        engines = list(dict.fromkeys(c.engine for c in cells if c.model == model_name))
        for engine, _ in model_source.engines:
            if engine not in engines:
                raise check.fail(f"models.{model_name}.engines.{engine}",
                                 f"no cell of model {model_name} runs engine {_show(engine)} "
                                 f"(its engines: {', '.join(engines)}): name one of them")


def load_matrix(path: Path | str) -> Matrix:
    """Read and validate a matrix file (``ConfigError`` with one line on any mistake)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror or error})") from error
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not a text file ({error.reason})") from error
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(error, "problem", None) or "syntax error"
        raise ConfigError(f"{path}:{line} not valid YAML ({problem})") from error
    return parse_matrix(data, str(path))


def _matches(combo: Mapping[str, Any], rule: Mapping[str, Any]) -> bool:
    return all(key in combo and combo[key] == value for key, value in rule.items())


def expand(matrix: Matrix) -> list[Cell]:
    """Every combination of the axes, minus excludes, plus includes, as cells.

    Order is deterministic: the cartesian product in ``AXES`` order (last axis fastest), then
    combinations added by includes in rule order. Identical cells are kept once.
    """
    names = list(matrix.axes)
    combos: list[dict[str, Any]] = [
        dict(zip(names, values, strict=True))
        for values in itertools.product(*(matrix.axes[n] for n in names))
    ]
    combos = [c for c in combos if not any(_matches(c, rule) for rule in matrix.exclude)]
    base = list(combos)
    for index, rule in enumerate(matrix.include):
        original = {k: v for k, v in rule.items() if k in matrix.axes}
        extra = {k: v for k, v in rule.items() if k not in matrix.axes}
        hits = [c for c in base if _matches(c, original)]
        for combo in hits:
            combo.update(extra)
        if not hits:
            missing = [n for n in names if n not in rule]
            if missing:
                raise ConfigError(
                    f"{matrix.source}: include[{index}]: matches no combination, so it adds one, "
                    f"but leaves axis '{missing[0]}' unset (a new combination sets every axis of "
                    f"the matrix: {', '.join(names)})"
                )
            combos.append(dict(rule))
    cells: dict[str, Cell] = {}
    for combo in combos:
        cell = _to_cell(_resolved(combo, matrix), matrix)
        cells.setdefault(cell.cell_id, cell)
    return list(cells.values())


def _resolved(combo: Mapping[str, Any], matrix: Matrix) -> Mapping[str, Any]:
    """``n_gpu_layers: half`` as a count of the combination's model's layers."""
    if combo.get("n_gpu_layers") != "half":
        return combo
    source = matrix.models[combo["model"]]
    try:
        layers = knobs.resolve_gpu_layers("half", model_layers(source, combo.get("quant")))
    except ValueError as error:
        raise ConfigError(f"{matrix.source}: axes.n_gpu_layers: model {source.name}: "
                          f"{error}") from None
    return {**combo, "n_gpu_layers": layers}


def model_layers(source: ModelSource, quant: str | None) -> int | None:
    """The repeating layers of a matrix's model: its card, its ladder's spec, or its file."""
    if source.card is not None:
        return source.card.n_layer
    if source.ladder in SYNTHETIC_SIZES:
        from harness.artifacts.testmodels import spec_for

        return spec_for(source.ladder).n_layer
    path: Path | None = source.path_for(quant) if quant else None
    if source.ladder is not None and quant:
        from harness.artifacts.ladder import default_cache_root
        from harness.artifacts.realmodel import ladder_paths

        path = ladder_paths(default_cache_root()).get(quant)
    if path is None or not path.is_file():
        return None
    from harness.artifacts.gguf_info import read_model_info

    return read_model_info(path).n_layer


def _to_cell(combo: Mapping[str, Any], matrix: Matrix) -> Cell:
    values = {**AXIS_DEFAULTS, **combo}
    if values["load_mode"]:  # a load mode says whether the weights are mapped
        values["mmap"] = values["load_mode"] in MAPPED_LOAD_MODES
    workload = matrix.workload
    engine = values["engine"]
    return Cell(
        engine=engine,
        # llama-cpp-python runs the device's own install, whatever builds the matrix names
        build=DEVICE_PYTHON_BUILD if engine == "llama-cpp-python" else values["build"],
        model=values["model"],
        quant=values["quant"],
        n_prompt=values.get("n_prompt", workload.n_prompt),
        n_gen=values.get("n_gen", workload.n_gen),
        n_depth=_depth(values.get("n_depth", workload.n_depth), values, workload),
        repetitions=matrix.repetitions,
        sustained_s=float(values.get("sustained", workload.sustained_s)),
        **{knob.name: knobs.axis_value(values, knob) for knob in knobs.KNOBS if knob.attribute},
        extra=tuple((knob.name, knobs.axis_value(values, knob)) for knob in knobs.KNOBS
                    if not knob.attribute),
    )


def _depth(depth: int | str, values: Mapping[str, Any], workload: Workload) -> int:
    """``fill`` puts the workload at the end of a full context, so the cell's n_ctx is what
    the engine allocates (llama-bench sizes its context as depth + prompt + generated)."""
    if depth != "fill":
        return int(depth)
    used = values.get("n_prompt", workload.n_prompt) + values.get("n_gen", workload.n_gen)
    return max(int(values["n_ctx"]) - used, 0)
