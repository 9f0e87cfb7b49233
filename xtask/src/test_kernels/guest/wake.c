/* kt-wake GO_FIFO COUNT MS: after the go, waits COUNT times in FUTEX_WAIT with a timeout of ten
 * times MS, each wait woken by a second thread MS milliseconds after it began; prints the time
 * the waiting thread measured itself off the CPU: `truth woken NS`. No wait runs to its timeout,
 * so the daemon counts them all as futex_timed and none as futex_sleep (kt-futex is the
 * opposite). The waker waits for each turn untimed (futex) and naps in nanosleep (sleep): other
 * reasons, so they do not blur the figure. */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>

#include "kt.h"

static int word; /* the waiter's timed wait: 0 while waiting, 1 once woken */
static int turn; /* the waiter's turn number, which starts the waker's nap */
static long ms;

static long futex(int *uaddr, int op, int val, const struct timespec *timeout) {
    return syscall(SYS_futex, uaddr, op, val, timeout, NULL, 0);
}

static void *waker(void *unused) {
    (void)unused;
    int seen = 0;
    for (;;) {
        while (__atomic_load_n(&turn, __ATOMIC_SEQ_CST) == seen) {
            futex(&turn, FUTEX_WAIT_PRIVATE, seen, NULL);
        }
        seen = __atomic_load_n(&turn, __ATOMIC_SEQ_CST);
        struct timespec nap = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&nap, NULL);
        __atomic_store_n(&word, 1, __ATOMIC_SEQ_CST);
        futex(&word, FUTEX_WAKE_PRIVATE, 1, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: kt-wake GO_FIFO COUNT MS\n");
        return 2;
    }
    int count = atoi(argv[2]);
    ms = atol(argv[3]);
    pthread_t thread;
    if (pthread_create(&thread, NULL, waker, NULL) != 0) {
        perror("kt-wake: pthread_create");
        return 1;
    }
    wait_for_go(argv[1]);
    long long total = 0;
    int woken = 0;
    for (int i = 1; i <= count; i++) {
        __atomic_store_n(&word, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&turn, i, __ATOMIC_SEQ_CST);
        futex(&turn, FUTEX_WAKE_PRIVATE, 1, NULL);
        long timeout_ms = 10 * ms;
        struct timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
        struct offcpu start = offcpu_start();
        long ret = futex(&word, FUTEX_WAIT_PRIVATE, 0, &ts);
        total += offcpu_since(start);
        woken += ret == 0;
    }
    printf("truth woken %lld\n", total);
    if (woken != count) {
        /* A wake that came before the wait (EAGAIN) or never (ETIMEDOUT): the figure is off. */
        printf("note kt-wake: %d of %d waits were woken\n", woken, count);
        return 1;
    }
    return 0;
}
