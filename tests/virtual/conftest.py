"""Small C programs the virtual-phone tests push to a phone (the phone has no python)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.profiles import DeviceProfile, load_profile_file

TEST_DEVICES = Path(__file__).resolve().parent.parent / "data" / "devices"

# Allocates and touches MB megabytes, 4 MB every 20 ms (a real allocation, as an engine loading
# a model), prints its pid first and "allocated" once done, then waits.
HOG = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    long mb = argc > 1 ? atol(argv[1]) : 100;
    printf("%d\n", (int)getpid());
    fflush(stdout);
    for (long i = 0; i < mb; i++) {
        char *p = malloc(1 << 20);
        if (!p) return 2;
        memset(p, 1, 1 << 20);
        if (i % 4 == 3) usleep(20000);
    }
    puts("allocated");
    fflush(stdout);
    sleep(60);
    return 0;
}
"""

# Pins itself to cpu1 the way llama.cpp does (sched_setaffinity or pthread_setaffinity_np, by
# argv[1]), then prints the call's result and the kernel's Cpus_allowed_list of its thread.
AFFINITY = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(1, &set);
    int rc = argc > 1 && strcmp(argv[1], "pthread") == 0
        ? pthread_setaffinity_np(pthread_self(), sizeof set, &set)
        : sched_setaffinity(0, sizeof set, &set);
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%ld/status", (long)syscall(SYS_gettid));
    FILE *status = fopen(path, "r");
    while (status && fgets(line, sizeof line, status)) {
        if (strncmp(line, "Cpus_allowed_list:", 18) == 0) {
            printf("rc=%d allowed=%s", rc, line + 19);
        }
    }
    fflush(stdout);
    sleep(1);
    return 0;
}
"""

# Maps FILE and reads one byte of every page, PASSES times, as an engine with mmap'd weights
# reads them once per token; prints each pass's seconds, then its own VmHWM (kB), the bytes it
# read from storage (/proc/self/io read_bytes) and its major faults.
SCAN = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
static long field(const char *path, const char *key) {
    char line[256];
    long value = -1;
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, strlen(key)) == 0) value = atol(line + strlen(key));
    }
    if (f) fclose(f);
    return value;
}
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return 3;
    volatile unsigned char *m = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return 4;
    unsigned long sum = 0;
    for (int pass = 0; pass < atoi(argv[2]); pass++) {
        double start = now();
        for (off_t off = 0; off < st.st_size; off += 4096) sum += m[off];
        printf("pass %d %.3f\n", pass, now() - start);
        fflush(stdout);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("hwm_kb %ld read_bytes %ld majflt %ld sum %lu\n", field("/proc/self/status", "VmHWM:"),
           field("/proc/self/io", "read_bytes:"), ru.ru_majflt, sum);
    return 0;
}
"""


@pytest.fixture(scope="session")
def phone_programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``{"hog": path, "affinity": path, "scan": path}``: host (x86_64) builds for x86_64
    test phones."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("needs a C compiler")
    out = tmp_path_factory.mktemp("phone-programs")
    built = {}
    for name, source in (("hog", HOG), ("affinity", AFFINITY), ("scan", SCAN)):
        (out / f"{name}.c").write_text(source)
        subprocess.run([compiler, "-O1", "-Wall", "-o", str(out / name), str(out / f"{name}.c"),
                        "-pthread"], check=True)
        built[name] = out / name
    return built


@pytest.fixture
def data_profile() -> Callable[[str], DeviceProfile]:
    """Loads a profile of tests/data/devices: test phones, not phone classes to plan for."""
    return lambda name: load_profile_file(TEST_DEVICES / f"{name}.yaml")
