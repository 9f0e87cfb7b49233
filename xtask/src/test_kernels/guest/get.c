/* kt-get PORT PATH: GET http://127.0.0.1:PORT/PATH and print the body; exits 0 only on a 200.
 * Debian's busybox-static wget crashes (a static glibc resolver), and nc leaves the status to
 * parse in shell. */
#include "kt.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: kt-get PORT PATH\n");
        return 2;
    }
    int fd = connect_loopback(argv[1]);
    char request[512];
    int n = snprintf(request, sizeof request, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", argv[2]);
    if (n <= 0 || (size_t)n >= sizeof request || write(fd, request, (size_t)n) != n) {
        return 1;
    }
    /* HTTP/1.0: the server closes after the response, so read to the end. */
    size_t cap = 1 << 16, have = 0;
    char *buf = malloc(cap + 1);
    ssize_t got;
    while (buf != NULL && (got = read(fd, buf + have, cap - have)) > 0) {
        have += (size_t)got;
        if (have == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
    }
    if (buf == NULL) {
        return 1;
    }
    buf[have] = '\0';
    char *body = strstr(buf, "\r\n\r\n");
    if (body != NULL) {
        fputs(body + 4, stdout);
    }
    return strncmp(buf, "HTTP/1.1 200", 12) == 0 || strncmp(buf, "HTTP/1.0 200", 12) == 0 ? 0 : 1;
}
