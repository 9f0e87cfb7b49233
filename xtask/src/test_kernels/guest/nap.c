/* kt-nap GO_FIFO COUNT MS: after the go, sleeps COUNT times MS milliseconds in nanosleep and
 * prints the time it measured itself off the CPU: `truth sleep NS`. */
#include "kt.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: kt-nap GO_FIFO COUNT MS\n");
        return 2;
    }
    int count = atoi(argv[2]);
    long ms = atol(argv[3]);
    wait_for_go(argv[1]);
    long long total = 0;
    for (int i = 0; i < count; i++) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        struct offcpu start = offcpu_start();
        nanosleep(&ts, NULL);
        total += offcpu_since(start);
    }
    printf("truth sleep %lld\n", total);
    return 0;
}
