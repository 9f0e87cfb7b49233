/* kt-futex GO_FIFO COUNT MS: after the go, waits COUNT times in FUTEX_WAIT with an MS millisecond
 * timeout on a word nobody wakes, and prints the time it measured itself off the CPU:
 * `truth futex NS`. Each wait runs to its timeout, so the daemon counts it as futex_timed or
 * futex_sleep. */
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>

#include "kt.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: kt-futex GO_FIFO COUNT MS\n");
        return 2;
    }
    int count = atoi(argv[2]);
    long ms = atol(argv[3]);
    wait_for_go(argv[1]);
    static int word;
    long long total = 0;
    int timeouts = 0;
    for (int i = 0; i < count; i++) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        struct offcpu start = offcpu_start();
        long ret = syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
        total += offcpu_since(start);
        timeouts += ret == -1 && errno == ETIMEDOUT;
    }
    printf("truth futex %lld\n", total);
    if (timeouts != count) {
        fprintf(stderr, "kt-futex: %d of %d waits timed out\n", timeouts, count);
        return 1;
    }
    return 0;
}
