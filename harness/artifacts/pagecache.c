/*
 * pagecache: how much of a file is in the page cache, and moving it in or out, for an unrooted
 * phone (stock Android's toybox has no fincore or vmtouch). Built per ABI by
 * harness/artifacts/devicetools.py: glibc statically, or bionic through the NDK's clang.
 *
 *   pagecache resident FILE...   residency now
 *   pagecache evict FILE...      fdatasync + posix_fadvise(POSIX_FADV_DONTNEED), then residency
 *   pagecache warm FILE...       read() the whole file in 1 MiB chunks, then residency
 *
 * Each file prints "<resident_bytes> <file_bytes> <path>". A file that fails prints
 * "pagecache: <path>: <reason>" on stderr and the exit status is 1 once the others are done;
 * bad usage prints the usage line and exits 2.
 *
 * Why it works the way it does:
 * - Residency maps the file (PROT_READ, MAP_SHARED) and asks mincore(). A mapping faults
 *   nothing in; the file is mapped in 64 MiB windows so a 20 GB model needs a 16 KiB vector
 *   (4 KiB pages; 4 KiB with 16 KiB pages), allocated once.
 * - Linux (since 5.0, and its stable 4.x lines) shows the page cache through mincore() only for
 *   files the caller owns or may write; for any other file it says every page is resident
 *   (mm/mincore.c can_do_mincore; seen here as `nobody` on a just-evicted root-owned 0644 file).
 *   Such a file is reported as an error instead of a line that would lie; evict and warm have
 *   still been applied to it. Files the shell user pushed to /data/local/tmp are its own.
 * - Eviction needs no root: posix_fadvise(DONTNEED) works on any descriptor the caller can open.
 *   It drops clean pages only, so the file's dirty pages (a freshly pushed model) are written
 *   back first with fdatasync(), which Linux allows on a read-only descriptor. Pages that another
 *   process has mapped (a running engine) stay; the printed residency says what happened.
 * - Warming uses read(), not mmap, so the pages land in the cache and nothing stays mapped.
 * - mincore() is not POSIX but both glibc (with _DEFAULT_SOURCE) and bionic declare it.
 */
#define _DEFAULT_SOURCE
#define _FILE_OFFSET_BITS 64

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define WINDOW ((off_t)64 << 20) /* bytes mapped at a time: a multiple of every page size */
#define CHUNK (1 << 20)          /* bytes read at a time when warming */

static const char usage[] = "usage: pagecache resident|evict|warm FILE...\n";

static unsigned char *vector;  /* one byte per page of a window */
static long page_size;
static char chunk[CHUNK];

static int fail(const char *path, const char *reason) {
    fprintf(stderr, "pagecache: %s: %s\n", path, reason);
    return -1;
}

/* Resident bytes of the open file, or -1 with errno set. The last page counts only the bytes
 * of the file it holds, so the figure never exceeds the file's size. */
static long long resident_bytes(int fd, off_t size) {
    long long pages = 0;
    int last = 0;
    off_t offset;
    for (offset = 0; offset < size; offset += WINDOW) {
        size_t length = (size_t)(size - offset < WINDOW ? size - offset : WINDOW);
        size_t count = (length + (size_t)page_size - 1) / (size_t)page_size;
        size_t i;
        void *map = mmap(NULL, length, PROT_READ, MAP_SHARED, fd, offset);
        if (map == MAP_FAILED) return -1;
        if (mincore(map, length, vector) != 0) {
            int saved = errno;
            munmap(map, length);
            errno = saved;
            return -1;
        }
        munmap(map, length);
        for (i = 0; i < count; i++) pages += vector[i] & 1;
        last = vector[count - 1] & 1;
    }
    return pages * page_size - (last ? (page_size - size % page_size) % page_size : 0);
}

/* Whether mincore() tells this user the truth about the file (see the top of this file). */
static int observable(const char *path, const struct stat *st) {
    uid_t user = geteuid();
    return user == 0 || st->st_uid == user || access(path, W_OK) == 0;
}

static int evict(int fd) {
    int rc;
    /* Dirty pages survive DONTNEED; a file system that cannot sync has none to write. */
    if (fdatasync(fd) != 0 && errno != EINVAL && errno != EROFS) return -1;
    rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* returns the error, errno untouched */
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return 0;
}

static int warm(int fd) {
    for (;;) {
        ssize_t got = read(fd, chunk, sizeof chunk);
        if (got == 0) return 0;
        if (got < 0 && errno != EINTR) return -1;
    }
}

/* One file: the action, then its residency line. 0 on success, -1 after reporting. */
static int process(const char *action, const char *path) {
    struct stat st;
    long long resident;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return fail(path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        fail(path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        fail(path, S_ISDIR(st.st_mode) ? strerror(EISDIR) : "not a regular file");
        close(fd);
        return -1;
    }
    if ((strcmp(action, "evict") == 0 && evict(fd) != 0)
            || (strcmp(action, "warm") == 0 && warm(fd) != 0)) {
        fail(path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!observable(path, &st)) {
        fail(path, "residency hidden: neither the owner nor allowed to write, the kernel says "
                   "every page is resident");
        close(fd);
        return -1;
    }
    resident = st.st_size > 0 ? resident_bytes(fd, st.st_size) : 0;
    if (resident < 0) {
        fail(path, strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    printf("%lld %lld %s\n", resident, (long long)st.st_size, path);
    return 0;
}

int main(int argc, char **argv) {
    int i, status = 0;
    if (argc < 3 || (strcmp(argv[1], "resident") != 0 && strcmp(argv[1], "evict") != 0
                     && strcmp(argv[1], "warm") != 0)) {
        fputs(usage, stderr);
        return 2;
    }
    page_size = sysconf(_SC_PAGESIZE);
    if (page_size <= 0 || WINDOW % page_size != 0) {
        fputs("pagecache: cannot tell the page size\n", stderr);
        return 1;
    }
    vector = malloc((size_t)(WINDOW / page_size));
    if (vector == NULL) {
        fputs("pagecache: out of memory\n", stderr);
        return 1;
    }
    for (i = 2; i < argc; i++) {
        if (process(argv[1], argv[i]) != 0) status = 1;
        fflush(stdout); /* lines in order with the stderr ones when both go to one stream */
    }
    free(vector);
    return status;
}
