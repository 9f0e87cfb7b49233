/* kt-httpd PORT: a minimal HTTP/1.1 keep-alive server on 127.0.0.1:PORT, one connection at a
 * time. Every request (a GET: headers only) is answered `200 ok` with a Content-Length, so the
 * daemon sees complete exchanges it can count. */
#include "kt.h"

static const char RESPONSE[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok";

/* Answers every complete request on the connection until the client closes it. */
static void serve(int fd) {
    char buf[8192];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(fd, buf + have, sizeof buf - have - 1);
        if (n <= 0) {
            return;
        }
        have += (size_t)n;
        buf[have] = '\0';
        char *end;
        while ((end = strstr(buf, "\r\n\r\n")) != NULL) {
            if (write(fd, RESPONSE, sizeof RESPONSE - 1) != (ssize_t)(sizeof RESPONSE - 1)) {
                return;
            }
            size_t used = (size_t)(end + 4 - buf);
            memmove(buf, buf + used, have - used + 1);
            have -= used;
        }
        if (have == sizeof buf - 1) {
            return; /* a request larger than the buffer: not from our client */
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: kt-httpd PORT\n");
        return 2;
    }
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = loopback(argv[1]);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(listener, 16) != 0) {
        perror("kt-httpd: listen");
        return 1;
    }
    for (;;) {
        int fd = accept(listener, NULL, NULL);
        if (fd >= 0) {
            serve(fd);
            close(fd);
        }
    }
}
