"""The on-device sampler: one shell loop per trial, started with the engine, that writes samples
to a file in the trial's folder; the host reads that file once, after the engine exits.

Why on the phone: a sample taken over adb is a round trip that forks a shell on the phone, and
``dumpsys meminfo <pid>`` makes system_server walk the engine's whole mapping; on a phone both
compete with the engine for the same cores. The loop here is written with mksh builtins and
toybox only, and forks nothing while it runs: it sleeps with ``read -t`` on a FIFO no one writes
(made by the launching shell before the engine starts; a shell without a timed read, such as
dash, falls back to ``sleep``), reads /proc and /sys with
``read``, and appends lines with ``echo`` to an open descriptor. What it reads, each on a tick
of ``tick_s`` (50 ms, which is also how soon it notices the engine's exit; 10 ms in the first
50 ms, and up to 300 ms while the engine's RSS still grows: a tiny model's whole trial can fit
there, 30-50 ms with the test models; 100 ms after ``fast_s``, unless it reads the battery's
power: every tick is a wake-up the phone pays for):

- every tick: the engine's status, as read (the last one read while the engine still had its
  memory is kept: a zombie's has no VmHWM), and its statm's resident pages (the largest is
  kept, in kB once a parsed status shows the page size), with one ``read -N`` each and no
  line parsed; so the kernel's peak is known as it was at most a tick before the exit, and
  the largest RSS as the ticks saw it (statm rather than stat: splitting stat's 52 fields on
  every tick was a tenth of the sampler's CPU);
- every 200 ms for the first ``fast_s`` seconds, then every ``memory_s``: that status parsed
  (VmHWM, VmRSS, VmSwap, Threads), the CPU time and major faults (/proc stat) and the bytes
  read from storage (/proc io: the paging evidence of an engine whose mmap'd weights do not
  fit; cumulative, so the last line before the exit counts) and the phone's pages swapped in
  (/proc/vmstat ``pswpin``: a page back from zram is also a read and a major fault, and is not
  the model's weights; vmstat's 4 KB split into words, 0.35 ms on this host, where mksh's
  ``${x#*pswpin }`` took 3.6 ms), an ``m`` line; its
  smaps_rollup (Pss, Pss_Anon, Pss_File, SwapPss) at most every ``memory_s``, and only when
  VmRSS moved by 1/64 (1.6%) since the last one or ``state_s`` has passed (the rollup makes
  the kernel walk every page the engine maps, on the sampler's time: the costliest read by
  far, 0.4-1.5 ms for 60 MB mapped on this host; on a plateau Pss moves with Rss); the peak
  VmHWM, largest VmRSS and most threads go to ``mem`` when they change, and once more after
  the exit (appended to a descriptor opened once: the last line counts);
- at the first tick and every ``state_s``: the big cluster's clocks, the battery's level and
  temperature (sysfs power_supply) and every readable thermal zone: an ``s`` line (a throttled
  phone shows there as a capped scaling_max_freq and hot zones); every ``status_s`` (0, the
  default: never during the trial; the host reads it before and after) also the framework's
  thermal status from ``dumpsys thermalservice``, the only read that forks (the status exists
  nowhere in sysfs);
- with the memory reads, on a phone with kgsl (Adreno), the engine's GPU memory from
  ``/sys/class/kgsl/kgsl/proc/<pid>/kernel`` and the part of it mapped into the process
  (``gpumem_mapped``: inside its PSS; read before the tick's status and after the PSS, the
  larger kept: buffers freed between those reads, at the engine's teardown, would otherwise
  leave their pages in the RSS or PSS and none in the mapped part), 0 while the engine has
  none (its folder appears with its first allocation; a ``k`` line says the phone has kgsl at
  all), and on every tick its ``kernel_max`` (kgsl's own high-water mark of ``kernel``, so a
  buffer that lived between two ticks is in it; with the largest ``gpumem_mapped`` read when
  it grew, a ``G`` line at the end, after one more read once the engine has exited: kgsl
  removes the folder when the process closes its last kgsl file, at its exit at the latest,
  so that read often finds nothing and the last tick's value stands); on the state ticks the
  GPU's clocks, busy share and thermal level from ``/sys/class/kgsl/kgsl-3d0`` (a ``g``
  line); a phone without them (Mali, OEM builds) has their errors in ``err``;
- every ``dumpsys_s`` (0, the default: never) a ``dumpsys meminfo <pid>`` into its own file;
  a device cell on a phone without kgsl every ``gpu_dumpsys_s`` instead, followed by
  ``dumpsys gpu --gpumem`` (GpuService's per-process GPU memory, Android 12+), each
  output after a ``==dm <uptime>`` or ``==gm <uptime> <pid>`` line;
- with every 2nd ``m`` line of the first ``fast_s`` seconds, then on every state tick, each
  thread's Cpus_allowed_list (the affinity the kernel applied), kept in ``aff`` when it changed;
- with energy on, one battery reading per tick (the ``pwr`` file of ``harness.run.energy``).

At the end it appends its own CPU time (utime, stime and its children's, from its /proc stat,
in clock ticks of 100 Hz: Android's USER_HZ) and writes the phone's uptime to ``t1``. The files it
could not read are probed once at the start (smaps_rollup by opening it only, for ``true``:
a read would walk the engine's whole mapping; not for ``:``, a special builtin, whose failed
redirection ends a POSIX shell), their errors kept in ``err``, and skipped after.
``parse`` turns the file into samples (pure).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.android.readerrors import parse_read_errors
from harness.android.thermal import ThermalZone, read_thermal_zones
from harness.run.energy import BATTERY
from harness.run.state import DeviceState, GpuState, ProcessMemory, mitigating
from harness.run.sustained import Report

CLOCK_TICKS = 100  # USER_HZ: the unit of /proc/<pid>/stat times on Android (and Linux) kernels
TICK_S = 0.05
STEADY_TICK_S = 0.1
SOURCE = "device-sampler"


@dataclass(frozen=True)
class Rates:
    """How often the sampler reads what (seconds); ``every`` turns them into ticks."""

    memory_s: float = 0.5
    state_s: float = 2.0
    status_s: float = 0.0  # dumpsys thermalservice (forks): 0 = only before and after
    dumpsys_s: float = 0.0  # dumpsys meminfo <pid>: 0 = never during the trial
    fast_s: float = 2.0  # memory every tick at first
    tick_s: float = TICK_S
    steady_tick_s: float = STEADY_TICK_S  # after fast_s (with power off)
    big_cpu: int = 0
    power: bool = False
    # a cell on a GPU/NPU: where the phone has no kgsl nodes, its dumpsys meminfo (graphics
    # rows) this often instead (0: never), unless dumpsys_s already asks for it
    gpu_dumpsys_s: float = 0.0

    def every(self, seconds: float) -> int:
        """Ticks between two reads of something read every ``seconds`` (0: never)."""
        if seconds <= 0:
            return 0
        return max(1, round(seconds / self.tick_s))


# The loop, as mksh (and dash) runs it. $1 is the engine's pid (the launching shell's $$, which
# becomes the engine by exec). Placeholders in braces are integers or paths filled by `script`.
_SCRIPT = r"""p=$1; h=0; m=0; th=0; t=0; pa=; eu=; es=; nm=0; ns=0; np=0; ml=0; nt={status}
nd={dumpsys}; nq=0; nr=0; qr=0; y=; wm=; rp=0; mp=0; pk=0; gr=; mf=; rb=; sp=
nl='
'; ws=" 	$nl"
exec 4>>smp 5>>mem
r=; if [ -p nap ] && exec 3<>nap; then
read -t 0.001 -u3 _x 2>/dev/null; [ $? -gt 128 ] && r=1; fi
num() { v=${1% kB}; v=${v##*[!0-9]}; }
if read -r -N 1 _x 2>/dev/null < /proc/self/stat; then
gx() { set -f; IFS=$nl; set -- $x; IFS=$ws; set +f
for l in "$@"; do case $l in VmHWM:*) num "$l"; h=$v;; VmRSS:*) num "$l"; rs=$v;;
VmSwap:*) num "$l"; sw=$v;; Threads:*) num "$l"; th=$v; break;; Pss:*) num "$l"; q1=$v;;
Pss_Anon:*) num "$l"; q2=$v;; Pss_File:*) num "$l"; q3=$v;; SwapPss:*) num "$l"; q4=$v; break;;
esac; done; }
g() { x=; read -r -N 65536 x 2>/dev/null < $1; gx; }
ga() { ca=; x=; read -r -N 65536 x 2>/dev/null < $1; set -f; IFS=$nl; set -- $x; IFS=$ws; set +f
for l in "$@"; do case $l in Cpus_allowed_list:*) ca=${l##*[	 ]}; break;; esac; done; }
tk() { x=; read -r -N 65536 x 2>/dev/null < /proc/$p/status; case $x in *VmHWM:*) y=$x;; esac
x=; read -r -N 256 x 2>/dev/null < /proc/$p/statm; x=${x#* }; rp=${x%% *}; rp=${rp:-0}
gr=; [ "$rp" -gt "$mp" ] && { mp=$rp; gr=1; }; }
sc() { x=; read -r -N 4096 x 2>/dev/null < /proc/$p/stat; x=${x#*') '}; set -f; set -- $x
set +f; [ $# -ge 22 ] && { mf=${10}; eu=${12}; es=${13}; }
[ -n "$I" ] && { x=; read -r -N 512 x 2>/dev/null < $I; case $x in *read_bytes:*)
x=${x#*read_bytes: }; rb=${x%%[!0-9]*};; esac; }
[ -n "$V" ] && { x=; read -r -N 16384 x 2>/dev/null < $V; set -f; set -- $x; set +f
while [ $# -gt 1 ]; do case $1 in pswpin) sp=$2; break;; esac; shift 2; done; }; }
pm() { rs=; sw=; x=$y; [ -n "$x" ] && gx; }
up() { read -r -N 64 u < /proc/uptime; u=${u%% *}; }
else
g() { while read -r kk v _u; do case $kk in VmHWM:) h=$v;; VmRSS:) rs=$v;; VmSwap:) sw=$v;;
Threads:) th=$v; break;; Pss:) q1=$v;; Pss_Anon:) q2=$v;; Pss_File:) q3=$v;;
SwapPss:) q4=$v; break;; esac; done 2>/dev/null < $1; }
ga() { ca=; while read -r kk v; do case $kk in Cpus_allowed_list:) ca=$v; break;; esac
done 2>/dev/null < $1; }
tk() { rs=; sw=; g /proc/$p/status; [ "${rs:-0}" -gt "$m" ] && m=$rs; [ "$th" -gt "$t" ] &&
t=$th; read -r _ _ _ _ _ _ _ _ _ _ _ mf _ eu es _ 2>/dev/null < /proc/$p/stat; }
sc() { [ -n "$I" ] && while read -r kk v; do case $kk in read_bytes:) rb=$v; break;; esac
done 2>/dev/null < $I; [ -n "$V" ] && while read -r kk v; do case $kk in pswpin) sp=$v
break;; esac; done 2>/dev/null < $V; }
pm() { :; }
up() { read -r u _ < /proc/uptime; }
fi
pg() { [ "${rs:-0}" -gt "$m" ] && m=$rs; if [ -n "$rs" ] && [ "$rp" -gt 0 ]; then
case $(( (2 * rs + rp) / (2 * rp) )) in 4) pk=4;; 16) pk=16;; 64) pk=64;; esac; fi
[ $((mp * pk)) -gt "$m" ] && m=$((mp * pk)); }
R=/proc/$p/smaps_rollup; true 2>>err < $R || R=
I=/proc/$p/io; true 2>>err < $I || I=
V=/proc/vmstat; true 2>>err < $V || V=
[ -n "$V" ] && while read -r kk v _u; do case $kk in KernelPageSize:) pk=$v; break;; esac
done 2>/dev/null < /proc/$$/smaps
K=/sys/class/kgsl/kgsl/proc; if [ -d $K ]; then echo "k 1" >&4; else K=; fi
D={dumpsys}; [ -z "$K" ] && [ $D -eq 0 ] && D={gpudm}; nd=$D; M=
[ -z "$K" ] && [ {gpudm} -gt 0 ] && M=1
G=/sys/class/kgsl/kgsl-3d0; read -r _x 2>>err < $G/gpuclk || G=
C=/sys/devices/system/cpu/cpu{cpu}/cpufreq; read -r hw 2>>err < $C/cpuinfo_max_freq || hw=-
read -r _x 2>>err < $C/scaling_cur_freq || C=
B={battery}; read -r _x 2>>err < $B/capacity || B=
Z=; for z in /sys/class/thermal/thermal_zone*; do [ -d "$z" ] || continue; y=
read -r y 2>>err < $z/type && read -r _x 2>>err < $z/temp &&
{ Z="$Z ${z##*/}"; echo "z ${z##*/} $y" >&4; }
done; y=
up; s0=${u%.*}; f0=${u#*.}; e=0
gx=0; gy=0; while [ -d /proc/$p ]; do
g0=0; [ -n "$K" ] && [ $e -ge $nm ] && read -r g0 2>/dev/null < $K/$p/gpumem_mapped
tk
[ -n "$K" ] && { x=0; read -r x 2>/dev/null < $K/$p/kernel_max; [ "${x:-0}" -gt "$gx" ] && {
gx=$x; x=0; read -r x 2>/dev/null < $K/$p/gpumem_mapped; [ "${x:-0}" -gt "$gy" ] && gy=$x; }; }
mt=; if [ $e -ge $nm ]; then mt=1; pm; pg; sc
[ "$th" -gt "$t" ] && t=$th; q1=; q2=; q3=; q4=
if [ -n "$R" ] && [ $e -ge $nq ]; then dr=$(( ${rs:-0} - qr )); [ $dr -lt 0 ] && dr=$((-dr))
if [ $((dr * 64)) -ge "$qr" ] || [ $e -ge $nr ]; then g $R; qr=${rs:-0}; nr=$((e + {state}))
nq=$((e + {mem})); fi; fi
gm=-; gp=-; [ -n "$K" ] && { gm=0; gp=0; read -r gm 2>/dev/null < $K/$p/kernel
read -r gp 2>/dev/null < $K/$p/gpumem_mapped; [ "${g0:-0}" -gt "${gp:-0}" ] && gp=$g0; }
echo "m $u ${rs:--} $h ${q1:--} ${q2:--} ${q3:--} ${q4:--} ${sw:--} $t ${eu:--} ${es:--} \
${mf:--} ${rb:--} ${gm:--} ${gp:--} ${sp:--} $pk" >&4
w="$h $m $t"; [ "$w" = "$wm" ] || { echo "$w" >&5; wm=$w; }
ml=$((ml + 1)); if [ $e -lt {fast} ]; then nm=$((e + 20)); else nm=$((e + {mem})); fi; fi
st=; if [ $e -ge $ns ]; then st=1; ns=$((e + {state})); c1=; c2=; bl=; bt=; ts=
if [ -n "$C" ]; then read -r c1 < $C/scaling_cur_freq; read -r c2 < $C/scaling_max_freq
fi 2>/dev/null
if [ -n "$B" ]; then read -r bl < $B/capacity; read -r bt < $B/temp; fi 2>/dev/null
if [ {status} -gt 0 ] && [ $e -ge $nt ]; then nt=$((e + {status}))
dumpsys thermalservice > ts.txt 2>/dev/null; while read -r a b v _u; do
case "$a $b" in "Thermal Status:") ts=$v; break;; esac; done 2>/dev/null < ts.txt; fi
zs=; for z in $Z; do v=; read -r v 2>/dev/null < /sys/class/thermal/$z/temp; zs="$zs ${v:--}"
done; echo "s $u ${c1:--} ${c2:--} $hw ${bl:--} ${bt:--} ${ts:--}$zs" >&4
if [ -n "$G" ]; then g1=; g2=; g3=; g4=; read -r g1 < $G/gpuclk; read -r g2 < $G/max_gpuclk
read -r g3 _x < $G/gpu_busy_percentage; read -r g4 < $G/thermal_pwrlevel
echo "g $u ${g1:--} ${g2:--} ${g3:--} ${g4:--}" >&4; fi 2>/dev/null
fi
if [ $D -gt 0 ] && [ $e -ge $nd ]; then nd=$((e + D))
{ echo "==dm $u"; dumpsys meminfo $p 2>&1; [ -d /proc/$p ] && echo "==alive"
[ -n "$M" ] && { echo "==gm $u $p"; dumpsys gpu --gpumem 2>&1; }; } >> dm.txt; fi
if [ -n "$st" ] || { [ -n "$mt" ] && [ $e -lt {fast} ] && [ $((ml % 2)) -eq 1 ]; }
then a=; c=0
for s in /proc/$p/task/*/status; do c=$((c+1)); ga $s
[ -n "$ca" ] && case " $a " in *" $ca "*) ;; *) a="$a $ca";; esac; done
[ "$c$a" = "$pa" ] || { pa="$c$a"; echo "$pa" >> aff; }; fi
{power}if [ $e -lt 30 ] && { [ $e -lt 5 ] || [ -n "$gr" ]; }; then d=0.01
elif [ $e -lt {fast} ]; then d={tick}; else d={steady}; fi
if [ -n "$r" ]; then read -t $d -u3 _x; else sleep $d; fi
up; e=$(( (${u%.*} - s0) * 100 + 1${u#*.} - 1$f0 ))
done
pm; pg; [ "$th" -gt "$t" ] && t=$th
w="$h $m $t"; [ "$w" = "$wm" ] || echo "$w" >&5
read -r _ _ _ _ _ _ _ _ _ _ _ _ _ su ss cu cs _ < /proc/$$/stat
echo "c $su $ss $cu $cs" >&4
[ -n "$K" ] && { x=0; read -r x 2>/dev/null < $K/$p/kernel_max; [ "${x:-0}" -gt "$gx" ] &&
gx=$x; echo "G $gx $gy" >&4; }
echo "$u" > t1
"""

# A battery reading every 5 centiseconds: "<uptime> <current_now> <voltage_now> <status>"
# (harness.run.energy reads the file ``pwr``).
_POWER = (
    "if [ $e -ge $np ]; then np=$((e + 5)); c=; v=; s=; read -r c < {battery}/current_now; "
    "read -r v < {battery}/voltage_now; read -r s < {battery}/status; "
    "echo \"$u $c $v $s\" >> pwr; fi 2>/dev/null\n"
)


def _cs(seconds: float) -> int:
    """Seconds as the centiseconds of /proc/uptime, the sampler's clock (0 stays 0)."""
    return max(0, round(seconds * 100))


def script(rates: Rates) -> str:
    """The sampler's shell text for ``rates`` (only integers and fixed paths are put in)."""
    power = _POWER.replace("{battery}", BATTERY) if rates.power else ""
    # battery readings every 50 ms need the tick; without them, a calmer one after fast_s (but
    # never slower than the memory rate asked for)
    steady = float(rates.tick_s if rates.power else
                   max(rates.tick_s, min(rates.steady_tick_s, rates.memory_s)))
    values = {
        "{cpu}": str(int(rates.big_cpu)), "{battery}": BATTERY,
        "{fast}": str(_cs(rates.fast_s)), "{mem}": str(max(1, _cs(rates.memory_s))),
        "{state}": str(_cs(rates.state_s) or 1_000_000_000),
        "{status}": str(_cs(rates.status_s)), "{dumpsys}": str(_cs(rates.dumpsys_s)),
        "{gpudm}": str(_cs(rates.gpu_dumpsys_s)),
        "{tick}": f"{float(rates.tick_s):g}",
        "{steady}": f"{steady:g}",
    }
    text = _SCRIPT.replace("{power}", power)
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def start_command(rates: Rates) -> str:
    """The brace group that starts the sampler from the launching shell, before its exec.

    Its own ``sh -c`` with every stream on /dev/null: mksh keeps copies of the shell's
    stdout/stderr (fds 10/11) in a backgrounded list; a sampler holding them would keep adbd's
    stream open after the engine exits, and the engine would stay an unreaped zombie.
    """
    return f"{{ sh -c {shlex.quote(script(rates))} sample $$ > /dev/null 2>&1 < /dev/null & }}"


# The files the host reads after the trial (the trial's folder is removed after that).
FILES = ("smp", "err", "dm.txt")


@dataclass(frozen=True)
class Tick:
    """One sample: its time since the launch (ms, the phone's clock) and what was read."""

    t_ms: int
    memory: ProcessMemory | None
    state: DeviceState | None
    gpu: GpuState | None = None


@dataclass(frozen=True)
class Sampled:
    ticks: tuple[Tick, ...] = ()
    sampler_cpu_s: float | None = None  # the sampler's own CPU time, its children's included
    engine_cpu_s: float | None = None  # the engine's, at the sampler's last reading of it
    unreadable: tuple[str, ...] = ()
    dumpsys: tuple[tuple[int, str], ...] = ()  # (t_ms, one `dumpsys meminfo` output)
    lines: int = 0
    extra: dict[str, str] = field(default_factory=dict)
    kgsl: bool = False  # the phone has kgsl's per-process GPU memory nodes
    gpu_peak_bytes: int | None = None  # kgsl's kernel_max, as last read (and the largest
    gpu_peak_mapped_bytes: int | None = None  # mapped part): every tick reads it
    gpumem: tuple[tuple[int, int, str], ...] = ()  # (t_ms, engine pid, `dumpsys gpu --gpumem`)


def _int(word: str) -> int | None:
    return int(word) if word.lstrip("-").isdigit() else None


def _ms(uptime: str, t0: float) -> int | None:
    try:
        return max(0, round((float(uptime) - t0) * 1000))
    except ValueError:
        return None


def _memory(words: list[str]) -> ProcessMemory | None:
    """An ``m`` line's fields after its time: rss hwm pss pss_anon pss_file swap_pss swap
    threads utime stime, then (since schema 8) majflt read_bytes, (schema 11) the kgsl GPU
    memory and its mapped part, and (schema 13) the phone's pages swapped in (/proc/vmstat
    pswpin) and the page size in kB (its own smaps' KernelPageSize; 0: not found)."""
    rss, hwm, pss, anon, file_, swap_pss, swap = (_int(w) for w in words[:7])
    if rss is None and pss is None:  # the engine had no mapping left (a zombie): nothing read
        return None
    faults, read = (_int(w) for w in words[10:12]) if len(words) >= 12 else (None, None)
    gpu, mapped = (_int(w) for w in words[12:14]) if len(words) >= 14 else (None, None)
    pages, page_kb = (_int(w) for w in words[14:16]) if len(words) >= 16 else (None, None)
    swap_in = pages * page_kb * 1024 if pages is not None and page_kb else None
    return ProcessMemory(pss_kb=pss, rss_kb=rss, swap_kb=swap_pss if swap_pss is not None
                         else swap, pss_anon_kb=anon, pss_file_kb=file_,
                         vm_hwm_kb=hwm or None, source=SOURCE, major_faults=faults,
                         read_bytes=read, gpu_bytes=gpu, gpu_mapped_bytes=mapped,
                         swap_in_bytes=swap_in)


def _gpu(words: list[str]) -> GpuState:
    """A ``g`` line after its time: gpuclk, max_gpuclk (Hz), busy %, thermal_pwrlevel."""
    cur, top, busy, level = (_int(w) for w in words[:4])
    return GpuState(cur_khz=cur // 1000 if cur is not None else None,
                    max_khz=top // 1000 if top is not None else None,
                    busy_pct=float(busy) if busy is not None else None, pwrlevel=level)


def _state(words: list[str], zones: list[tuple[str, str]]) -> DeviceState:
    cur, cap, hw, level, batt, status = (_int(w) for w in words[:6])
    temps = words[6:]
    found = read_thermal_zones({zone: (kind, temps[i] if i < len(temps) and temps[i] != "-"
                                       else None) for i, (zone, kind) in enumerate(zones)})
    gpu = [z.celsius for z in found if z.celsius is not None and "gpu" in z.type.lower()]
    return DeviceState(
        thermal_status=status, max_temp_c=_hottest(found),
        battery_level=level, battery_temp_c=batt / 10 if batt is not None else None,
        big_cur_khz=cur, big_max_khz=cap, big_hw_max_khz=hw,
        max_gpu_temp_c=max(gpu) if gpu else None)


def _hottest(zones: tuple[ThermalZone, ...]) -> float | None:
    """The hottest real zone (the HAL's sensors are not read on the phone during a trial)."""
    return max((z.celsius for z in zones if z.celsius is not None), default=None)


def throttle_report(ticks: Sequence[Tick]) -> Report | None:
    """The first reading in which the phone reported throttling, and the one before it."""
    readings = sorted(((t.t_ms, t.state) for t in ticks if t.state is not None),
                      key=lambda reading: reading[0])
    for i, (t_ms, state) in enumerate(readings):
        if mitigating(state):
            return Report(t_ms / 1000, readings[i - 1][0] / 1000 if i else None)
    return None


def parse(text: str, t0: float | None, errors: str = "", dumpsys_text: str = "") -> Sampled:
    """The sampler's file (``smp``), the launch's uptime ``t0``, its ``err`` file and
    ``dm.txt``. Lines that do not parse (a line cut by the engine's kill) are skipped."""
    ticks: list[Tick] = []
    zones: list[tuple[str, str]] = []
    first: float | None = t0
    engine_cpu: float | None = None
    sampler_cpu: float | None = None
    lines = 0
    kgsl = False
    peak_gpu: int | None = None
    peak_mapped: int | None = None
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        kind, rest = words[0], words[1:]
        if kind == "k":
            kgsl = True
            continue
        if kind == "G" and len(rest) == 2 and all(w.isdigit() for w in rest):
            peak_gpu, peak_mapped = int(rest[0]), int(rest[1])
            continue
        if kind == "z" and len(rest) >= 2:
            zones.append((rest[0], " ".join(rest[1:])))
            continue
        if kind == "c" and len(rest) == 4 and all(w.isdigit() for w in rest):
            sampler_cpu = sum(int(w) for w in rest) / CLOCK_TICKS
            continue
        if kind not in ("m", "s", "g") or not rest:
            continue
        if first is None:
            try:
                first = float(rest[0])
            except ValueError:
                continue
        t_ms = _ms(rest[0], first)
        if t_ms is None:
            continue
        lines += 1
        if kind == "m" and len(rest) in (11, 13, 15, 17):
            memory = _memory(rest[1:])
            if memory is not None:
                ticks.append(Tick(t_ms, memory, None))
            user, system = _int(rest[9]), _int(rest[10])
            if user is not None and system is not None:
                engine_cpu = (user + system) / CLOCK_TICKS
        elif kind == "s" and len(rest) >= 7:
            ticks.append(Tick(t_ms, None, _state(rest[1:], zones)))
        elif kind == "g" and len(rest) == 5:
            ticks.append(Tick(t_ms, None, None, _gpu(rest[1:])))
    return Sampled(tuple(ticks), sampler_cpu, engine_cpu, parse_read_errors(errors),
                   _dumpsys_outputs(dumpsys_text, first), lines, kgsl=kgsl,
                   gpumem=_gpumem_outputs(dumpsys_text, first),
                   gpu_peak_bytes=peak_gpu, gpu_peak_mapped_bytes=peak_mapped)


_MARKS = ("==dm ", "==gm ")  # the sampler's line before a dumpsys meminfo / gpu output


def _blocks(text: str, t0: float | None, mark: str) -> list[tuple[int, list[str], str]]:
    """``(t_ms, the mark line's other words, output)`` of each output after a ``mark`` line."""
    out: list[tuple[int, list[str], str]] = []
    current: list[str] | None = None
    stamp, words = 0, list[str]()
    for line in [*text.splitlines(), _MARKS[0]]:
        if line.startswith(_MARKS):
            if current is not None:
                out.append((stamp, words, "\n".join(current)))
            current = None
            if line.startswith(mark):
                moment, *words = line[len(mark):].split() or [""]
                stamp = (_ms(moment, t0) or 0) if t0 is not None else 0
                current = []
        elif current is not None:
            current.append(line)
    return out


def _dumpsys_outputs(text: str, t0: float | None) -> tuple[tuple[int, str], ...]:
    return tuple((t_ms, output) for t_ms, _, output in _blocks(text, t0, _MARKS[0]))


def _gpumem_outputs(text: str, t0: float | None) -> tuple[tuple[int, int, str], ...]:
    """``(t_ms, pid, output)`` of each ``dumpsys gpu --gpumem`` the sampler ran."""
    return tuple((t_ms, int(words[0]), output) for t_ms, words, output
                 in _blocks(text, t0, _MARKS[1]) if len(words) == 1 and words[0].isdigit())
