"""The phone's own commands: getprop, setprop, dumpsys, logcat, log, settings, cmd, dmesg.

Run as ``python -S -m harness.virtual.phonetools TOOL ARGS`` by the shims in ``/system/bin``;
``HARNESS_SIM_STATE`` names the phone's state directory. Stdlib-only imports keep each call fast.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.virtual import formats, gpu, logstore, procs
from harness.virtual.config import PhoneConfig

FORCE_FILE = "force-thermal"  # written by `cmd thermalservice override-status N`
LEVELS = "VDIWEFS"


def _state() -> Path:
    return Path(os.environ.get("HARNESS_SIM_STATE", "."))


def _config() -> PhoneConfig:
    return PhoneConfig.load(_state() / "config.json")


def _json(name: str) -> dict[str, Any]:
    try:
        data = json.loads((_state() / name).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _uptime_ms() -> int:
    try:
        boot = float((_state() / "boot_time").read_text())
    except (OSError, ValueError):
        boot = time.time()
    return int((time.time() - boot) * 1000)


def _sessions() -> set[int]:
    text = procs.read_text(str(_state() / "sessions"))
    return {int(w) for w in text.split() if w.isdigit()}


def _props() -> dict[str, str]:
    props = dict(_config().props)
    props.update({k: str(v) for k, v in _json("setprops.json").items()})
    return props


def getprop(args: Sequence[str]) -> int:
    props = _props()
    if not args:
        sys.stdout.write(formats.getprop_listing(props))
    else:
        print(props.get(args[0], args[1] if len(args) > 1 else ""))
    return 0


def setprop(args: Sequence[str]) -> int:
    if len(args) != 2:
        print("usage: setprop NAME VALUE", file=sys.stderr)
        return 1
    data = _json("setprops.json")
    data[args[0]] = args[1]
    (_state() / "setprops.json").write_text(json.dumps(data))
    return 0


def _apps() -> list[dict[str, Any]]:
    """The phone's simulated background apps that are running now (pid not 0)."""
    try:
        data = json.loads((_state() / "apps.json").read_text())
    except (OSError, ValueError):
        return []
    return [a for a in data if isinstance(a, dict) and a.get("pid")]


def _meminfo(args: Sequence[str]) -> int:
    config = _config()
    targets = [a for a in args if not a.startswith("-")]
    members = procs.session_members(_sessions(), set())
    apps = _apps()
    if not targets:
        rows = []
        for stat in members:
            rollup = formats.kb_fields(procs.read_text(f"/proc/{stat.pid}/smaps_rollup"))
            rows.append((stat.comm, stat.pid, rollup.get("Pss", stat.rss_kb)))
        cached = [(str(a["name"]), int(a["pid"]), int(a["rss_kb"])) for a in apps]
        used = sum(r[2] for r in rows) + sum(c[2] for c in cached)
        free = max(0, config.limit_mb * 1024 - used)
        sys.stdout.write(formats.meminfo_summary(rows, config.ram_mb * 1024, free, _uptime_ms(),
                                                 cached))
        return 0
    target = targets[0]
    app = next((a for a in apps if target in (a["name"], str(a["pid"]))), None)
    if app is not None:
        rss = int(app["rss_kb"])
        rollup = {"Rss": rss, "Pss": rss * 4 // 5, "Anonymous": rss * 3 // 5,
                  "Private_Dirty": rss * 3 // 5, "Private_Clean": rss // 10}
        sys.stdout.write(formats.meminfo_process(int(app["pid"]), str(app["name"]), rollup, {},
                                                 config.sdk, _uptime_ms(),
                                                 swap_title=config.android.meminfo_swap))
        return 0
    chosen = [s for s in members if (target.isdigit() and s.pid == int(target)) or s.comm == target
              or s.comm == target[-15:] or s.comm == target[:15]]
    if not chosen or not config.android.dumpsys_meminfo_native:
        # some builds only know the processes ActivityManager runs: never a native binary
        print(f"No process found for: {target}")
        return 0
    for stat in chosen:
        rollup = formats.kb_fields(procs.read_text(f"/proc/{stat.pid}/smaps_rollup"))
        status = formats.kb_fields(procs.read_text(f"/proc/{stat.pid}/status"))
        sys.stdout.write(formats.meminfo_process(stat.pid, stat.comm, rollup, status,
                                                 config.sdk, _uptime_ms(),
                                                 _graphics_kb(config, stat.pid),
                                                 config.android.meminfo_swap))
    return 0


def _graphics_kb(config: PhoneConfig, pid: int) -> int:
    """What the memtrack HAL reports for ``pid``: its GPU memory as the layer counted it, on a
    phone whose GPU is readable (no memtrack HAL otherwise, as on Mali phones: 0)."""
    if config.gpu is None or not config.gpu.readable:
        return 0
    return (gpu.report_bytes(_state() / gpu.REPORTS, pid) or 0) // 1024


def _thermal_text() -> str:
    state = _json("thermal.json")
    temps = [formats.Temperature(t["name"], int(t["type"]), float(t["value"]), int(t["status"]))
             for t in state.get("temperatures", [])]
    cooling = [formats.Cooling(c["name"], int(c["type"]), int(c["value"]))
               for c in state.get("cooling", [])]
    status = int(state.get("reported_status", state.get("status", 0)))
    layout = _config().android.layouts.get("thermalservice")
    if layout:
        return formats.filled_thermalservice(layout, status, temps, cooling)
    return formats.thermalservice(status, temps, cooling, bool(state.get("forced", False)),
                                  [float(v) for v in state.get("thresholds", [])],
                                  str(state.get("hal", "2.0")))


def _power() -> formats.Power:
    state, live = _json("power.json"), _json("battery.json")
    deep = str(state.get("doze", "ACTIVE"))
    return formats.Power(
        screen_on=bool(state.get("screen_on", True)), plug_type=int(state.get("plug_type", 2)),
        level=int(live.get("level", state.get("level", _config().battery_level))),
        stay_on_setting=int(state.get("stay_on_setting", 0)),
        battery_saver=bool(state.get("battery_saver", False)), deep=deep,
        light=formats.light_idle_state(deep))


def _deviceidle(args: Sequence[str]) -> int:
    power = _power()
    if not args:
        sys.stdout.write(formats.dumpsys_deviceidle(power))
        return 0
    if args[0] == "get" and len(args) > 1:
        answers = {"deep": power.deep, "light": power.light, "force": "false",
                   "screen": str(power.screen_on).lower(),
                   "charging": str(power.plug_type != 0).lower(), "network": "true"}
        if args[1] in answers:
            print(answers[args[1]])
        else:
            print(f"Unknown get option: {args[1]}")
        return 0
    print(f"Unknown command: {args[0]}")
    return 0


def dumpsys(args: Sequence[str]) -> int:
    if not args:
        print("Usage: dumpsys SERVICE [ARGS]", file=sys.stderr)
        return 0
    service, rest = args[0], args[1:]
    if service == "meminfo":
        return _meminfo(rest)
    if service == "thermalservice":
        sys.stdout.write(_thermal_text())
        return 0
    if service == "battery":
        state = _json("thermal.json")
        charging = str(_json("power.json").get("charging", "usb"))
        gauge = _json("battery.json")
        level = int(gauge.get("level", _config().battery_level))
        live = None
        if "charge_counter_uah" in gauge:
            live = formats.Gauge(int(gauge["charge_counter_uah"]), int(gauge["voltage_mv"]),
                                 int(gauge["status_code"]), int(gauge["max_charging_ua"]))
        text = formats.battery(level, float(state.get("battery_c", 25.0)),
                               int(state.get("status", 0)) >= 4, charging, live)
        layout = _config().android.layouts.get("battery")
        sys.stdout.write(formats.filled_fields(layout, text) if layout else text)
        return 0
    if service == "power":
        sys.stdout.write(formats.dumpsys_power(_power(), _uptime_ms()))
        return 0
    if service == "deviceidle":
        return _deviceidle(rest)
    gpu_config = _config().gpu if service == "gpu" else None
    if gpu_config is not None:  # GpuService: its memory dump is all this phone models of it
        held = gpu.holders(_state() / gpu.REPORTS) if gpu_config.gpumem else {}
        sys.stdout.write(formats.dumpsys_gpumem(held, gpu_config.gpumem))
        return 0
    replied = _reply(["dumpsys", *args])
    if replied is not None:
        return replied
    print(f"Can't find service: {service}", file=sys.stderr)
    return 0


def _reply(argv: Sequence[str]) -> int | None:
    """A captured phone's verbatim answer to a command this phone does not model (its
    profile's ``android.replies``); None when there is none."""
    line = " ".join(argv)
    for reply in _config().android.replies:
        if reply.command == line:
            sys.stdout.write(reply.stdout)
            sys.stderr.write(reply.stderr)
            return reply.exit
    return None


def _filters(specs: Sequence[str]) -> Callable[[logstore.LogEntry], bool]:
    rules: dict[str, int] = {}
    for spec in specs:
        tag, _, level = spec.partition(":")
        rules[tag] = LEVELS.index(level.upper()) if level and level.upper() in LEVELS else 0

    def keep(entry: logstore.LogEntry) -> bool:
        minimum = rules.get(entry.tag, rules.get("*", 0))
        return LEVELS.index(entry.level) >= minimum if entry.level in LEVELS else True

    return keep


def logcat(args: Sequence[str]) -> int:
    buffers: list[str] = []
    specs: list[str] = []
    dump = False
    tail: int | None = None
    items = list(args)
    while items:
        arg = items.pop(0)
        if arg == "-c":
            logstore.clear(_state())
            return 0
        if arg == "-d":
            dump = True
        elif arg == "-s":
            specs.append("*:S")
        elif arg in ("-b", "-v", "-t", "-T", "-f", "-r", "-n", "-e", "--pid") and items:
            value = items.pop(0)
            if arg == "-b":
                buffers.extend(value.split(","))
            elif arg in ("-t", "-T"):
                tail = int(value) if value.isdigit() else None
                dump = dump or arg == "-t"
        elif arg.startswith("-b") and len(arg) > 2:
            buffers.extend(arg[2:].split(","))
        elif not arg.startswith("-"):
            specs.append(arg)
    chosen = set(logstore.BUFFERS if "all" in buffers else buffers or logstore.DEFAULT_BUFFERS)
    keep = _filters(specs)

    def show(entry: logstore.LogEntry) -> str:
        return formats.logcat_threadtime(entry.epoch, entry.pid, entry.tid, entry.level,
                                         entry.tag, entry.message)

    ring = _config().android.logcat_ring_lines
    entries = [e for e in logstore.read(_state(), ring) if e.buffer in chosen and keep(e)]
    if tail is not None:
        entries = entries[-tail:] if tail else []
    for entry in entries:
        print(show(entry))
    sys.stdout.flush()
    if dump:
        return 0
    everything = list(logstore.read(_state(), ring))
    last = everything[-1].epoch if everything else 0.0
    shown = {e for e in everything if e.epoch == last}
    while True:  # follow, as logcat without -d does, until the shell is closed
        time.sleep(0.5)
        for entry in logstore.read(_state(), ring):  # the ring may have moved on: go by time
            if entry.epoch < last or entry in shown:
                continue
            if entry.epoch > last:
                last, shown = entry.epoch, set()
            shown.add(entry)
            if entry.buffer in chosen and keep(entry):
                print(show(entry), flush=True)


def log(args: Sequence[str]) -> int:
    tag, level, words = "log", "I", []
    items = list(args)
    while items:
        arg = items.pop(0)
        if arg == "-t" and items:
            tag = items.pop(0)
        elif arg == "-p" and items:
            level = items.pop(0)[:1].upper()
        else:
            words.append(arg)
    # the process that ran `log`: the tool's parent, or the caller the services were told of
    caller = int(os.environ.get("HARNESS_TOOL_CALLER") or os.getppid())
    logstore.append(_state(), "main", level if level in LEVELS else "I", tag, caller,
                    " ".join(words))
    return 0


POWER_SETTINGS = {"global/low_power": "battery-saver",
                  "global/stay_on_while_plugged_in": "stay-on"}


def _request(kind: str, value: object, wait_s: float = 3.0) -> None:
    """Ask the phone's daemon for a change and wait until it has taken it."""
    control = _state() / "control"
    request = control / f"{time.time_ns()}.json"
    tmp = control / f".{request.name}.tmp"
    tmp.write_text(json.dumps({"kind": kind, "value": value}))
    os.replace(tmp, request)
    deadline = time.monotonic() + wait_s
    while request.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def settings(args: Sequence[str]) -> int:
    data = _json("settings.json")
    power = _power()
    derived = {"global/low_power": str(int(power.battery_saver)),
               "global/stay_on_while_plugged_in": str(power.stay_on_setting)}
    if len(args) >= 3 and args[0] == "get":
        key = f"{args[1]}/{args[2]}"
        print(derived.get(key, data.get(key, "null")))
        return 0
    if len(args) >= 4 and args[0] == "put":
        key = f"{args[1]}/{args[2]}"
        if key in POWER_SETTINGS:  # the platform acts on these: battery saver, stay awake
            if not args[3].lstrip("-").isdigit():
                print(f"Invalid value for {args[2]}: {args[3]}", file=sys.stderr)
                return 1
            _request(POWER_SETTINGS[key], args[3])
            return 0
        data[key] = args[3]
        (_state() / "settings.json").write_text(json.dumps(data))
        return 0
    print("usage: settings get|put NAMESPACE KEY [VALUE]", file=sys.stderr)
    return 1


def cmd(args: Sequence[str]) -> int:
    if args[:2] == ["thermalservice", "override-status"] and len(args) == 3:
        (_state() / "control" / f"{time.time_ns()}.json").write_text(
            json.dumps({"kind": "thermal", "value": int(args[2])}))
        return 0
    if args[:2] == ["thermalservice", "reset"]:
        (_state() / "control" / f"{time.time_ns()}.json").write_text(
            json.dumps({"kind": "thermal-release"}))
        return 0
    replied = _reply(["cmd", *args])
    if replied is not None:
        return replied
    print(f"cmd: Can't find service: {args[0] if args else ''}", file=sys.stderr)
    return 20


def dmesg(args: Sequence[str]) -> int:
    """User builds deny the kernel log to the shell user (SELinux, dmesg_restrict)."""
    print("dmesg: klogctl: Permission denied", file=sys.stderr)
    return 1


# What `id` prints for adb's shell on Android 13-15: uid 2000 with the groups adbd gives it
# (system/core/rootdir and adbd's shell service) and the shell domain's context.
SHELL_GROUPS = ("2000(shell),1004(input),1007(log),1011(adb),1015(sdcard_rw),1028(sdcard_r),"
                "1078(ext_data_rw),1079(ext_obb_rw),3001(net_bt_admin),3002(net_bt),3003(inet),"
                "3006(net_bw_stats),3009(readproc),3011(uhid),3012(readtracefs)")
SHELL_CONTEXT = "u:r:shell:s0"


def id_(args: Sequence[str]) -> int:
    """toybox ``id`` as the shell user (the phone's processes run as the host's user)."""
    flags = "".join(a.lstrip("-") for a in args if a.startswith("-"))
    if "u" in flags or "g" in flags:
        print("shell" if "n" in flags else "2000")
        return 0
    print(f"uid=2000(shell) gid=2000(shell) groups={SHELL_GROUPS} context={SHELL_CONTEXT}")
    return 0


# what a stock phone ships (not third-party): `pm list packages -3` leaves them out
PREINSTALLED = ("android", "com.android.", "com.google.android.")


def pm(args: Sequence[str]) -> int:
    """``pm list packages [-3]``: the phone's packages (its background apps), one per line."""
    if list(args[:2]) != ["list", "packages"]:
        print("Unknown command: " + " ".join(args[:2]), file=sys.stderr)
        return 255
    config = _config()
    names = {"android", "com.android.shell", "com.android.systemui",
             *(app.name for app in config.android.apps(config.limit_mb))}
    if "-3" in args[2:]:
        names = {n for n in names if not any(n == p or n.startswith(p) for p in PREINSTALLED)}
    for name in sorted(names):
        print(f"package:{name}")
    return 0


def uname(args: Sequence[str]) -> int:
    """A captured phone's ``uname`` answer verbatim (its kernel is not replayed, only what it
    said of itself), else toybox's of this host's kernel."""
    replied = _reply(["uname", *args])
    if replied is not None:
        return replied
    toybox = shutil.which("toybox")
    if toybox is None:
        print("uname: toybox not found", file=sys.stderr)
        return 127
    done = subprocess.run([toybox, "uname", *args], capture_output=True, text=True, check=False)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


def getenforce(args: Sequence[str]) -> int:
    print("Enforcing")
    return 0


TOOLS: dict[str, Callable[[Sequence[str]], int]] = {
    "getprop": getprop, "setprop": setprop, "dumpsys": dumpsys, "logcat": logcat, "log": log,
    "settings": settings, "cmd": cmd, "dmesg": dmesg, "id": id_, "getenforce": getenforce,
    "pm": pm, "uname": uname,
}


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] not in TOOLS:
        print(f"phonetools: unknown tool {argv[:1]}", file=sys.stderr)
        return 127
    try:
        return TOOLS[argv[0]](list(argv[1:]))
    except (BrokenPipeError, KeyboardInterrupt):
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
