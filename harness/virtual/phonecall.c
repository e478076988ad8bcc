/*
 * phonecall SOCKET TOOL [ARG...]: one of the virtual phone's system-service tools (dumpsys,
 * getprop, logcat, ...) as a call to the phone's services process (harness/virtual/zygote.py).
 *
 * On a phone, `dumpsys` is a small binary that asks a service in system_server over binder. Here
 * the services are one Python process per phone with the tools already imported; for each call
 * it forks a child that answers on this process's own stdin, stdout and stderr, passed to it
 * over a Unix socket (SCM_RIGHTS), and then writes the tool's exit status back. A Python process
 * started per call took about 90 ms, most of a trial's time around its engine; this takes a few.
 *
 * SOCKET is an abstract socket name (no file: a phone's folder can be deeper than sun_path).
 * The request is one message: a 4-byte length, this process's parent pid (the caller a tool
 * such as `log` names), then TOOL and its arguments, each NUL-terminated. The answer is the exit
 * status as 4 bytes; none (the child died) is exit 1. Exit 255: the services do not answer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int send_all(int sock, const char *data, size_t size) {
    while (size > 0) {
        ssize_t sent = send(sock, data, size, MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        data += sent;
        size -= (size_t)sent;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: phonecall SOCKET TOOL [ARG...]\n");
        return 2;
    }
    const char *tool = argv[2];
    struct sockaddr_un address;
    memset(&address, 0, sizeof address);
    address.sun_family = AF_UNIX;
    size_t name = strlen(argv[1]);
    if (name + 1 > sizeof address.sun_path) {
        fprintf(stderr, "%s: services socket name too long\n", tool);
        return 255;
    }
    memcpy(address.sun_path + 1, argv[1], name); /* abstract: a leading NUL */
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0 || connect(sock, (struct sockaddr *)&address,
                            (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + name)) != 0) {
        fprintf(stderr, "%s: the phone's services do not answer (%s)\n", tool, strerror(errno));
        return 255;
    }
    size_t payload = 0;
    for (int i = 2; i < argc; i++) payload += strlen(argv[i]) + 1;
    size_t total = 8 + payload;
    char *message = malloc(total);
    if (message == NULL) return 255;
    uint32_t length = (uint32_t)payload;
    int32_t parent = (int32_t)getppid();
    memcpy(message, &length, 4);
    memcpy(message + 4, &parent, 4);
    char *at = message + 8;
    for (int i = 2; i < argc; i++) {
        size_t size = strlen(argv[i]) + 1;
        memcpy(at, argv[i], size);
        at += size;
    }
    /* the first part carries our three standard streams */
    int fds[3] = {0, 1, 2};
    char control[CMSG_SPACE(sizeof fds)];
    memset(control, 0, sizeof control);
    struct iovec first = {.iov_base = message, .iov_len = 8};
    struct msghdr header = {.msg_iov = &first, .msg_iovlen = 1, .msg_control = control,
                            .msg_controllen = sizeof control};
    struct cmsghdr *rights = CMSG_FIRSTHDR(&header);
    rights->cmsg_level = SOL_SOCKET;
    rights->cmsg_type = SCM_RIGHTS;
    rights->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(rights), fds, sizeof fds);
    ssize_t sent;
    do {
        sent = sendmsg(sock, &header, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    if (sent != 8 || send_all(sock, message + 8, payload) != 0) {
        fprintf(stderr, "%s: could not reach the phone's services (%s)\n", tool, strerror(errno));
        return 255;
    }
    free(message);
    int32_t status = 0;
    size_t got = 0;
    while (got < sizeof status) {
        ssize_t n = recv(sock, (char *)&status + got, sizeof status - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 1; /* the tool died without a status */
        got += (size_t)n;
    }
    return (int)(status & 0xff);
}
