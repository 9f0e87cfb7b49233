/* kt-httpc PORT REQUESTS CONNECTIONS: sends REQUESTS GETs to 127.0.0.1:PORT, one at a time, spread
 * over CONNECTIONS keep-alive connections opened one after the other, and prints how many were
 * answered `200`: `answered N`. */
#include "kt.h"

static const char REQUEST[] = "GET /kt HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/* Reads one response (headers, then Content-Length bytes of body); returns whether it was a 200. */
static int read_response(int fd) {
    char buf[4096];
    size_t have = 0;
    char *end = NULL;
    while (end == NULL) {
        ssize_t n = read(fd, buf + have, sizeof buf - have - 1);
        if (n <= 0) {
            return 0;
        }
        have += (size_t)n;
        buf[have] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    const char *length = strstr(buf, "Content-Length: ");
    size_t body = length != NULL ? (size_t)atol(length + 16) : 0;
    size_t want = (size_t)(end + 4 - buf) + body;
    while (have < want) {
        ssize_t n = read(fd, buf + have, sizeof buf - have - 1);
        if (n <= 0) {
            return 0;
        }
        have += (size_t)n;
    }
    return strncmp(buf, "HTTP/1.1 200", 12) == 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: kt-httpc PORT REQUESTS CONNECTIONS\n");
        return 2;
    }
    int requests = atoi(argv[2]);
    int connections = atoi(argv[3]);
    int answered = 0;
    for (int c = 0; c < connections; c++) {
        int fd = connect_loopback(argv[1]);
        int share = requests / connections + (c < requests % connections);
        for (int i = 0; i < share; i++) {
            if (write(fd, REQUEST, sizeof REQUEST - 1) != (ssize_t)(sizeof REQUEST - 1)) {
                break;
            }
            answered += read_response(fd);
        }
        close(fd);
    }
    printf("answered %d\n", answered);
    return answered == requests ? 0 : 1;
}
