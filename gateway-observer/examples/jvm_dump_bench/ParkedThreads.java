import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.locks.LockSupport;

/**
 * A JVM for `cargo xtask bench jvm-dump`: THREADS threads parked DEPTH frames deep, as a gateway's
 * idle workers and blocked loops are, and a main thread that answers `spin MS` by running Java
 * code for MS ms and printing `gap NS`, the longest time between two of its clock reads: how long
 * a running thread was held (at a safepoint, or off the CPU). Exits when its stdin closes.
 */
public class ParkedThreads {
    public static void main(String[] args) throws Exception {
        int threads = Integer.parseInt(args[0]);
        int depth = Integer.parseInt(args[1]);
        CountDownLatch parked = new CountDownLatch(threads);
        for (int i = 0; i < threads; i++) {
            Thread t = new Thread(() -> descend(depth, parked), "parked-" + i);
            t.setDaemon(true);
            t.start();
        }
        parked.await();
        // Compiled before it measures anything.
        spin(500);
        System.out.println("ready");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) {
            if (line.startsWith("spin ")) {
                System.out.println("gap " + spin(Long.parseLong(line.substring(5).trim())));
            }
        }
        System.exit(0);
    }

    static void descend(int depth, CountDownLatch parked) {
        if (depth > 0) {
            descend(depth - 1, parked);
            return;
        }
        parked.countDown();
        while (true) {
            LockSupport.park();
        }
    }

    /** The longest gap, in ns, between two clock reads over `ms` ms of running. */
    static long spin(long ms) {
        long last = System.nanoTime();
        long end = last + ms * 1_000_000L;
        long max = 0;
        while (last < end) {
            long now = System.nanoTime();
            max = Math.max(max, now - last);
            last = now;
        }
        return max;
    }
}
