/* Shared by the fixtures of `cargo xtask test-kernels`: the clock they measure their own ground
 * truth with, the start signal, and the loopback address they serve and connect on. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static inline long long clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Time off the CPU: wall time less this thread's CPU time. Under TCG a wait's on-CPU part (the
 * syscall, the timer set-up, code translated on first use) can be tens of ms: the daemon rightly
 * does not count it as waiting, so the truth must not either. */
struct offcpu {
    long long wall, cpu;
};

static inline struct offcpu offcpu_start(void) {
    return (struct offcpu){clock_ns(CLOCK_MONOTONIC), clock_ns(CLOCK_THREAD_CPUTIME_ID)};
}

static inline long long offcpu_since(struct offcpu start) {
    return (clock_ns(CLOCK_MONOTONIC) - start.wall) - (clock_ns(CLOCK_THREAD_CPUTIME_ID) - start.cpu);
}

/* Blocks in open() until the test opens the FIFO for writing. The wait is neither a sleep nor a
 * futex wait, so it does not blur the figures; and the test starts the work only once the daemon
 * has attached to this process. */
static inline void wait_for_go(const char *fifo) {
    int fd = open(fifo, O_RDONLY);
    if (fd < 0) {
        perror(fifo);
        exit(1);
    }
    close(fd);
}

static inline struct sockaddr_in loopback(const char *port) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return addr;
}

/* A TCP connection to 127.0.0.1:PORT, or the program exits. */
static inline int connect_loopback(const char *port) {
    struct sockaddr_in addr = loopback(port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        perror("connect");
        exit(1);
    }
    return fd;
}
