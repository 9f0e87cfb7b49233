/* kt-loop GO_FIFO BLOCKS MS: an event loop for the daemon to find by itself and name when it
 * blocks. Its thread, named kt-evloop, idles in epoll_wait (50 ms timeout) on an eventfd: a
 * healthy loop. After the go, the main thread writes the eventfd; the loop then sleeps MS ms in
 * nanosleep in each of its next BLOCKS iterations (a blocking call on the loop), idles again, and
 * prints `loop-blocked FROM UNTIL`: when its first block began and its last ended, in
 * CLOCK_REALTIME ns, the clock of the daemon's alert timestamps. It runs until killed, so the
 * alert resolves on a live, healthy loop. */
#include <pthread.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>

#include "kt.h"

#define IDLE_TIMEOUT_MS 50

static int events;
static int blocks;
static long ms;

static void block_iterations(int epoll) {
    struct epoll_event ready;
    long long from = clock_ns(CLOCK_REALTIME);
    for (int i = 0; i < blocks; i++) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        epoll_wait(epoll, &ready, 1, IDLE_TIMEOUT_MS);
    }
    long long until = clock_ns(CLOCK_REALTIME);
    printf("loop-blocked %lld %lld\n", from, until);
    fflush(stdout); /* the test waits for this line while the loop runs on */
}

static void *event_loop(void *unused) {
    (void)unused;
    prctl(PR_SET_NAME, "kt-evloop");
    int epoll = epoll_create1(0);
    struct epoll_event interest = {.events = EPOLLIN};
    if (epoll < 0 || epoll_ctl(epoll, EPOLL_CTL_ADD, events, &interest) != 0) {
        perror("kt-loop: epoll");
        exit(1);
    }
    for (;;) {
        struct epoll_event ready;
        uint64_t go;
        if (epoll_wait(epoll, &ready, 1, IDLE_TIMEOUT_MS) != 1) {
            continue; /* idle: nothing came within the timeout */
        }
        if (read(events, &go, sizeof go) == (ssize_t)sizeof go) {
            block_iterations(epoll);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: kt-loop GO_FIFO BLOCKS MS\n");
        return 2;
    }
    blocks = atoi(argv[2]);
    ms = atol(argv[3]);
    events = eventfd(0, 0);
    pthread_t thread;
    if (events < 0 || pthread_create(&thread, NULL, event_loop, NULL) != 0) {
        perror("kt-loop: start");
        return 1;
    }
    wait_for_go(argv[1]);
    uint64_t one = 1;
    if (write(events, &one, sizeof one) != (ssize_t)sizeof one) {
        perror("kt-loop: eventfd");
        return 1;
    }
    pthread_join(thread, NULL);
    return 0;
}
