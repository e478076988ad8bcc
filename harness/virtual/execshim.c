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
 * The settings come from the environment at process start and are kept, so a program that
 * clears its environment (env -i) before exec still obeys the phone's rules:
 *   HARNESS_PHONE_ROOT     the phone's root directory on the host
 *   HARNESS_PHONE_MACHINE  the ELF e_machine the phone executes (183 aarch64, 62 x86_64)
 *   HARNESS_PHONE_QEMU     qemu-user binary to run phone binaries with; empty: run natively
 *   HARNESS_PHONE_OOM_ADJ  written to /proc/self/oom_score_adj once, then removed
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

typedef int (*execve_fn)(const char *, char *const[], char *const[]);

static char phone_root[PATH_MAX];
static char phone_qemu[PATH_MAX];
static unsigned phone_machine;

static void keep(char *dst, const char *name) {
    const char *value = getenv(name);
    if (value && strlen(value) < PATH_MAX) {
        strcpy(dst, value);
    }
}

__attribute__((constructor)) static void phone_init(void) {
    const char *machine = getenv("HARNESS_PHONE_MACHINE");
    keep(phone_root, "HARNESS_PHONE_ROOT");
    keep(phone_qemu, "HARNESS_PHONE_QEMU");
    phone_machine = machine ? (unsigned)strtoul(machine, NULL, 10) : 0;
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
    while (argv && argv[argc]) {
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
    if (!file || !*file) {
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
