/*
 * The virtual phone's exec rules, preloaded (LD_PRELOAD) into every process of the phone's shell.
 *
 * A phone runs only binaries of its own ABI. The phone's own userland (mksh, toybox, its tools)
 * is made of host programs outside the phone's root, so it always runs. An ELF that lives under
 * the phone's root (pushed to /data/local/tmp, say) runs only if its e_machine is the phone's:
 * natively when the host has the same machine, else through qemu-user with `-L <phone root>`.
 * Any other ELF fails with ENOEXEC, as the kernel of a phone fails it; mksh then says
 * "not executable: 64-bit ELF file".
 *
 * adbd gives its shell child oom_score_adj -950; the constructor does the same for the shell
 * (children inherit it), when the phone asks for it.
 *
 * The shell user's limits: this host's shell runs as root, so file modes deny nothing. Opens of
 * paths the phone's profile makes unreadable fail with EACCES, and of paths its kernel lacks
 * (smaps_rollup before 4.14) with ENOENT. Rules are globs on device paths, matched against the
 * path as opened, its absolute form, its real path, and those with the phone's root cut off (the
 * phone rewrites device prefixes to sandbox paths before the shell sees them).
 *
 * llama.cpp before its Android fix never applied its CPU mask; with affinity "ignored", the
 * affinity calls of a binary under the phone's root succeed and change nothing.
 *
 * The settings come from the environment at process start and are kept, so a program that
 * clears its environment (env -i) before exec still obeys the phone's rules:
 *   HARNESS_PHONE_ROOT     the phone's root directory on the host
 *   HARNESS_PHONE_MACHINE  the ELF e_machine the phone executes (183 aarch64, 62 x86_64)
 *   HARNESS_PHONE_QEMU     qemu-user binary to run phone binaries with; empty: run natively
 *   HARNESS_PHONE_OOM_ADJ  written to /proc/self/oom_score_adj once, then removed
 *   HARNESS_PHONE_EACCES   newline-separated device-path globs the shell cannot read
 *   HARNESS_PHONE_ENOENT   newline-separated device-path globs that do not exist
 *   HARNESS_PHONE_OTHERS   "denied": another process's smaps, smaps_rollup and io fail with
 *                          EACCES, as the shell lacks ptrace read access to them; a process is
 *                          the phone's when it is in the phone's memory cgroup, or (a phone
 *                          without cgroups) when its environment names this phone's root
 *   HARNESS_PHONE_AFFINITY "ignored": a phone binary's affinity calls change nothing
 *   HARNESS_PHONE_CGROUPS  newline-separated cgroup.procs files the process joins at its start
 *                          (the phone's memory and blkio cgroups; its children inherit them)
 *   HARNESS_PHONE_STOP     where a failed join is written down (the daemon's state folder)
 *
 * The cgroups are joined here, in the shell adbd starts, before it runs anything: every process
 * of the phone then has its memory charged to the phone and its reads throttled as its storage.
 * A shell that cannot join them runs nothing: it says so in one line, writes that line where
 * the daemon finds it and exits 126; the daemon passes the status on and stops the phone. A phone whose memory model is cgroup
 * never runs a process outside its limit.
 */
#undef _FORTIFY_SOURCE
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

typedef int (*execve_fn)(const char *, char *const[], char *const[]);

static char phone_root[PATH_MAX];
static int others_denied;
static int in_cgroups;
static char phone_qemu[PATH_MAX];
static unsigned phone_machine;
static char deny_globs[PATH_MAX];
static char absent_globs[PATH_MAX];
static int affinity_ignored;

static void keep(char *dst, const char *name) {
    const char *value = getenv(name);
    if (value && strlen(value) < PATH_MAX) {
        strcpy(dst, value);
    }
}

/* The running program lives under the phone's root (pushed there), not in its userland. */
static int phone_binary(void) {
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    size_t root_len = strlen(phone_root);
    if (len <= 0 || !root_len) {
        return 0;
    }
    exe[len] = '\0';
    return strncmp(exe, phone_root, root_len) == 0 && exe[root_len] == '/';
}

/* The phone's cgroup could not be joined: say so, leave the note that stops the phone, run
 * nothing. */
static void cgroup_refused(const char *path, int err) {
    char line[PATH_MAX + 256];
    int len = snprintf(line, sizeof line,
                       "virtual phone: cannot join its cgroup %s (%s): the phone stops, since "
                       "its processes would run outside its memory limit\n", path, strerror(err));
    if (len < 0 || (size_t)len >= sizeof line) {
        len = (int)strlen(line);
    }
    if (write(2, line, (size_t)len) < 0) { /* no stderr: the note below still tells */ }
    const char *note = getenv("HARNESS_PHONE_STOP");
    if (note && *note) {
        int fd = open(note, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            if (write(fd, line, (size_t)len) < 0) { /* the line on stderr stands */ }
            close(fd);
        }
    }
    _exit(126);
}

__attribute__((constructor)) static void phone_init(void) {
    const char *machine = getenv("HARNESS_PHONE_MACHINE");
    const char *affinity = getenv("HARNESS_PHONE_AFFINITY");
    keep(phone_root, "HARNESS_PHONE_ROOT");
    keep(phone_qemu, "HARNESS_PHONE_QEMU");
    keep(deny_globs, "HARNESS_PHONE_EACCES");
    keep(absent_globs, "HARNESS_PHONE_ENOENT");
    const char *others = getenv("HARNESS_PHONE_OTHERS");
    others_denied = others && strcmp(others, "denied") == 0;
    phone_machine = machine ? (unsigned)strtoul(machine, NULL, 10) : 0;
    affinity_ignored = affinity && strcmp(affinity, "ignored") == 0 && phone_binary();
    const char *groups = getenv("HARNESS_PHONE_CGROUPS");
    in_cgroups = groups && *groups;
    if (groups && *groups) {
        char pid[24];
        int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
        const char *start = groups;
        while (*start) {
            const char *end = strchrnul(start, '\n');
            char path[PATH_MAX];
            size_t n = (size_t)(end - start);
            if (n > 0 && n < sizeof path) {
                memcpy(path, start, n);
                path[n] = '\0';
                int fd = open(path, O_WRONLY | O_CLOEXEC);
                if (fd < 0) {
                    cgroup_refused(path, errno);
                }
                if (write(fd, pid, (size_t)len) < 0) {
                    int err = errno;
                    close(fd);
                    cgroup_refused(path, err);
                }
                close(fd);
            }
            start = *end ? end + 1 : end;
        }
        unsetenv("HARNESS_PHONE_CGROUPS");
    }
    const char *adj = getenv("HARNESS_PHONE_OOM_ADJ");
    if (adj && *adj) {
        int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            if (write(fd, adj, strlen(adj)) < 0) { /* not allowed here: keep going */ }
            close(fd);
        }
        unsetenv("HARNESS_PHONE_OOM_ADJ");
    }
}

static int real_execve(const char *path, char *const argv[], char *const envp[]) {
    static execve_fn next;
    if (!next) {
        next = (execve_fn)dlsym(RTLD_NEXT, "execve");
    }
    return next(path, argv, envp);
}

enum { RUN_AS_IS, RUN_IN_QEMU, REFUSE };

/* How the phone runs `path`: as is (not the phone's ELF, or native), in qemu, or not at all. */
static int classify(const char *path) {
    char real[PATH_MAX];
    size_t root_len = strlen(phone_root);
    if (!root_len || !phone_machine || !realpath(path, real)) {
        return RUN_AS_IS;  /* not a phone, or execve reports the error itself */
    }
    if (strncmp(real, phone_root, root_len) != 0 || real[root_len] != '/') {
        return RUN_AS_IS;  /* the phone's own userland */
    }
    unsigned char head[20];
    int fd = open(real, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return RUN_AS_IS;
    }
    ssize_t got = read(fd, head, sizeof head);
    close(fd);
    if (got < (ssize_t)sizeof head || memcmp(head, "\177ELF", 4) != 0) {
        return RUN_AS_IS;  /* scripts and data: the kernel decides */
    }
    unsigned machine = (unsigned)head[18] | ((unsigned)head[19] << 8);
    if (head[5] != 1 || machine != phone_machine) {
        return REFUSE;
    }
    return phone_qemu[0] ? RUN_IN_QEMU : RUN_AS_IS;
}

int execve(const char *path, char *const argv[], char *const envp[]) {
    int how = classify(path);
    if (how == REFUSE) {
        errno = ENOEXEC;
        return -1;
    }
    if (how == RUN_AS_IS) {
        return real_execve(path, argv, envp);
    }
    size_t argc = 0;
    char *const *given = argv;  /* Linux takes a NULL argv, whatever glibc's header says */
    while (given && given[argc]) {
        argc++;
    }
    char **args = calloc(argc + 10, sizeof *args);
    if (!args) {
        errno = ENOMEM;
        return -1;
    }
    size_t n = 0;
    args[n++] = phone_qemu;
    args[n++] = "-L";
    args[n++] = phone_root;
    args[n++] = "-U";
    args[n++] = "LD_PRELOAD";
    args[n++] = "-0";
    args[n++] = argc ? argv[0] : (char *)path;
    args[n++] = (char *)path;
    for (size_t i = 1; i < argc; i++) {
        args[n++] = argv[i];
    }
    args[n] = NULL;
    int rc = real_execve(phone_qemu, args, envp);
    int saved = errno;
    free(args);
    errno = saved;
    return rc;
}

int execv(const char *path, char *const argv[]) {
    return execve(path, argv, environ);
}

/* glibc's execvp calls its internal execve, past this library: search PATH here instead. */
int execvpe(const char *file, char *const argv[], char *const envp[]) {
    if (!*file) {
        errno = ENOENT;
        return -1;
    }
    if (strchr(file, '/')) {
        return execve(file, argv, envp);
    }
    const char *search = getenv("PATH");
    if (!search) {
        search = "/system/bin";
    }
    char candidate[PATH_MAX];
    int denied = 0;
    size_t file_len = strlen(file);
    for (const char *start = search;;) {
        const char *end = strchrnul(start, ':');
        size_t len = (size_t)(end - start);
        if (len + file_len + 2 <= sizeof candidate) {
            if (len) {
                memcpy(candidate, start, len);
                candidate[len] = '/';
                memcpy(candidate + len + 1, file, file_len + 1);
            } else {
                memcpy(candidate, file, file_len + 1);
            }
            execve(candidate, argv, envp);
            if (errno == EACCES) {
                denied = 1;
            } else if (errno != ENOENT && errno != ENOTDIR) {
                return -1;
            }
        }
        if (!*end) {
            break;
        }
        start = end + 1;
    }
    errno = denied ? EACCES : ENOENT;
    return -1;
}

int execvp(const char *file, char *const argv[]) {
    return execvpe(file, argv, environ);
}

/* ----- the shell user's limits on files -------------------------------------------------- */

static int in_globs(const char *globs, const char *path) {
    char glob[PATH_MAX];
    for (const char *start = globs; *start;) {
        const char *end = strchrnul(start, '\n');
        size_t len = (size_t)(end - start);
        if (len && len < sizeof glob) {
            memcpy(glob, start, len);
            glob[len] = '\0';
            if (fnmatch(glob, path, 0) == 0) {
                return 1;
            }
        }
        if (!*end) {
            break;
        }
        start = end + 1;
    }
    return 0;
}

/* A file read whole with the raw syscalls (not the hooks); its length, or -1. */
static ssize_t read_raw(const char *path, char *buf, size_t size) {
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    size_t have = 0;
    ssize_t got = 0;
    while (have < size && (got = read(fd, buf + have, size - have)) > 0) {
        have += (size_t)got;
    }
    close(fd);
    return got < 0 ? -1 : (ssize_t)have;
}

/* The memory cgroup line of /proc/<pid>/cgroup (v1 "N:memory:/path", else v2 "0::/path"). */
static int memory_cgroup(const char *proc, char *out, size_t size) {
    char buf[8192];
    ssize_t len = read_raw(proc, buf, sizeof buf - 1);
    if (len <= 0) {
        return -1;
    }
    buf[len] = '\0';
    const char *line = strstr(buf, ":memory:");
    if (line) {
        while (line > buf && line[-1] != '\n') {
            line--;
        }
    } else {
        line = strncmp(buf, "0::", 3) == 0 ? buf : strstr(buf, "\n0::");
        if (!line) {
            return -1;
        }
        line += *line == '\n';
    }
    size_t n = strcspn(line, "\n");
    if (n >= size) {
        return -1;
    }
    memcpy(out, line, n);
    out[n] = '\0';
    return 0;
}

/* /proc/<pid>/{smaps,smaps_rollup,io} of a process that is not the phone's: outside the
 * phone's memory cgroup, or (no cgroups) one whose environment does not name this phone's
 * root. What cannot be told (a process gone, an environment not read) is not refused here. */
static int foreign_process_file(const char *path) {
    int pid = 0, used = 0;
    char needle[PATH_MAX + 32], buf[65536];
    if (!others_denied || sscanf(path, "/proc/%d/%n", &pid, &used) != 1 || used == 0) {
        return 0;
    }
    const char *name = path + used;
    if (pid == (int)getpid() || (strcmp(name, "smaps_rollup") && strcmp(name, "smaps")
                                 && strcmp(name, "io"))) {
        return 0;
    }
    if (in_cgroups) {  /* the kernel's own record: no read of the process's memory */
        char mine[PATH_MAX], theirs[PATH_MAX];
        snprintf(buf, sizeof buf, "/proc/%d/cgroup", pid);
        if (memory_cgroup("/proc/self/cgroup", mine, sizeof mine) == 0
                && memory_cgroup(buf, theirs, sizeof theirs) == 0) {
            return strcmp(mine, theirs) != 0;
        }
        return 0;
    }
    snprintf(needle, sizeof needle, "/proc/%d/environ", pid);
    ssize_t have = read_raw(needle, buf, sizeof buf);
    if (have <= 0) {
        return 0;
    }
    int len = snprintf(needle, sizeof needle, "HARNESS_PHONE_ROOT=%s", phone_root) + 1;
    return memmem(buf, (size_t)have, needle, (size_t)len) == NULL;
}

/* The errno the phone fails this path with (matched as device path and host path), or 0. */
static int path_rule(const char *path) {
    char absolute[PATH_MAX], real[PATH_MAX];
    const char *forms[3] = {path, NULL, NULL};
    size_t root_len = strlen(phone_root);
    if (!path || (!deny_globs[0] && !absent_globs[0] && !others_denied)) {
        return 0;
    }
    if (path[0] != '/' && getcwd(absolute, sizeof absolute)
            && strlen(absolute) + strlen(path) + 2 <= sizeof absolute) {
        strcat(strcat(absolute, "/"), path);
        forms[1] = absolute;
    }
    if (realpath(path, real)) {
        forms[2] = real;
    }
    for (int i = 0; i < 3; i++) {
        const char *form = forms[i];
        if (!form) {
            continue;
        }
        if (root_len && strncmp(form, phone_root, root_len) == 0 && form[root_len] == '/') {
            form += root_len;  /* the device path of a sandbox file */
        }
        if (in_globs(absent_globs, form)) {
            return ENOENT;
        }
        if (foreign_process_file(form)) {
            return EACCES;
        }
        /* a policy denies what exists: a path the phone lacks is absent (ENOENT) as ever */
        if (forms[2] && (in_globs(deny_globs, form)
                         || (form != forms[i] && in_globs(deny_globs, forms[i])))) {
            return EACCES;
        }
    }
    return 0;
}

/* openat's path relative to a directory descriptor, as an absolute path when it can be. */
static const char *at_path(int dirfd, const char *path, char *buf, size_t size) {
    char link[64];
    if (!path || path[0] == '/' || dirfd == AT_FDCWD) {
        return path;
    }
    snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
    ssize_t len = readlink(link, buf, size - 1);
    if (len <= 0 || (size_t)len + strlen(path) + 2 > size) {
        return path;
    }
    buf[len] = '\0';
    return strcat(strcat(buf, "/"), path);
}

#define NEXT(type, name) \
    static type next; \
    if (!next) { \
        next = (type)dlsym(RTLD_NEXT, name); \
    }

#define REFUSE_IF_RULED(path, fail) \
    do { \
        int rule = path_rule(path); \
        if (rule) { \
            errno = rule; \
            return fail; \
        } \
    } while (0)

static mode_t open_mode(int flags, va_list args) {
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(args, mode_t) : 0;
}

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef FILE *(*fopen_fn)(const char *, const char *);
typedef int (*access_fn)(const char *, int);
typedef int (*faccessat_fn)(int, const char *, int, int);

int open(const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = open_mode(flags, args);
    va_end(args);
    NEXT(open_fn, "open");
    REFUSE_IF_RULED(path, -1);
    return next(path, flags, mode);
}

int open64(const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = open_mode(flags, args);
    va_end(args);
    NEXT(open_fn, "open64");
    REFUSE_IF_RULED(path, -1);
    return next(path, flags, mode);
}

int __open_2(const char *path, int flags) {
    return open(path, flags);
}

int __open64_2(const char *path, int flags) {
    return open64(path, flags);
}

int openat(int dirfd, const char *path, int flags, ...) {
    char buf[PATH_MAX];
    va_list args;
    va_start(args, flags);
    mode_t mode = open_mode(flags, args);
    va_end(args);
    NEXT(openat_fn, "openat");
    REFUSE_IF_RULED(at_path(dirfd, path, buf, sizeof buf), -1);
    return next(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    char buf[PATH_MAX];
    va_list args;
    va_start(args, flags);
    mode_t mode = open_mode(flags, args);
    va_end(args);
    NEXT(openat_fn, "openat64");
    REFUSE_IF_RULED(at_path(dirfd, path, buf, sizeof buf), -1);
    return next(dirfd, path, flags, mode);
}

int __openat_2(int dirfd, const char *path, int flags) {
    return openat(dirfd, path, flags);
}

int __openat64_2(int dirfd, const char *path, int flags) {
    return openat64(dirfd, path, flags);
}

FILE *fopen(const char *path, const char *how) {
    NEXT(fopen_fn, "fopen");
    REFUSE_IF_RULED(path, NULL);
    return next(path, how);
}

FILE *fopen64(const char *path, const char *how) {
    NEXT(fopen_fn, "fopen64");
    REFUSE_IF_RULED(path, NULL);
    return next(path, how);
}

int access(const char *path, int how) {
    NEXT(access_fn, "access");
    REFUSE_IF_RULED(path, -1);
    return next(path, how);
}

int faccessat(int dirfd, const char *path, int how, int flags) {
    char buf[PATH_MAX];
    NEXT(faccessat_fn, "faccessat");
    REFUSE_IF_RULED(at_path(dirfd, path, buf, sizeof buf), -1);
    return next(dirfd, path, how, flags);
}

/* ----- affinity ------------------------------------------------------------------------- */

typedef int (*setaffinity_fn)(pid_t, size_t, const cpu_set_t *);
typedef int (*thread_affinity_fn)(pthread_t, size_t, const cpu_set_t *);

int sched_setaffinity(pid_t pid, size_t size, const cpu_set_t *mask) {
    NEXT(setaffinity_fn, "sched_setaffinity");
    return affinity_ignored ? 0 : next(pid, size, mask);
}

int pthread_setaffinity_np(pthread_t thread, size_t size, const cpu_set_t *mask) {
    NEXT(thread_affinity_fn, "pthread_setaffinity_np");
    return affinity_ignored ? 0 : next(thread, size, mask);
}
