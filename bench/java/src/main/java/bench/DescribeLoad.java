package bench;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

import org.HdrHistogram.Histogram;
import org.HdrHistogram.Recorder;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.errors.TransactionalIdNotFoundException;

/**
 * describe-load: closed-loop load of "is (producerId, epoch) the current token of
 * transactional id ROLE?" answered the way a user would with the plain Java client:
 * one {@code Admin.describeTransactions(List.of(role))} per check.
 *
 * <pre>
 * describe-load --bootstrap HOST:PORT --roles-file FILE --concurrency N --duration SECONDS [--warmup SECONDS]
 *               [--rate CHECKS_PER_SECOND] [--events FILE] [--set ADMIN_KEY=VALUE ...]
 * </pre>
 *
 * FILE: one line per role, {@code <role> <producerId>:<epoch>}; blank lines and lines starting
 * with '#' are skipped. Exactly N checks are outstanding at all times (a semaphore of N permits;
 * the completion callback releases the permit and the issuing thread immediately sends the next
 * check). Prints one JSON line on stdout; logs go to stderr.
 *
 * With {@code --rate R} the load is an open loop instead: one check every 1/R s, whatever the
 * answers (at most N outstanding; the issuer waits for a permit when N are). With
 * {@code --events FILE} every check that completes, warm-up included, is written to FILE as
 * {@code <issued epoch ms> <completed epoch ms> <role> <outcome> [<producerId>:<epoch>]}, outcome
 * one of {@code ok}, {@code mismatch}, {@code vacant}, {@code error:<exception class>}, and the pair
 * described when there was one: what a failure benchmark
 * needs to tell when checks of some roles were correct again. {@code --set key=value} overrides
 * an Admin client setting (repeatable), e.g. {@code --set request.timeout.ms=5000}.
 *
 * Peer cost, on purpose not "optimized": the AdminClient keeps no coordinator cache between
 * calls. Every describeTransactions call builds a fresh AdminApiDriver whose CoordinatorStrategy
 * first sends FindCoordinator(key type TRANSACTION, [role]) to the least loaded broker and only
 * then DescribeTransactions([role]) to the coordinator it named: two round trips per check
 * (concurrent calls are not merged into one request either; each call is its own driver).
 * Run with {@code -Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients.NetworkClient=debug} to
 * see both requests per check.
 */
public final class DescribeLoad {

    /** Phases by completion time: only completions inside MEASURE are counted. */
    private static final int WARMUP = 0;
    private static final int MEASURE = 1;
    private static final int DONE = 2;

    private record Role(String id, long producerId, short epoch) {}

    private final Admin admin;
    private final List<Role> roles;
    private final int concurrency;
    private final Semaphore inFlight;
    private final Recorder recorder = new Recorder(TimeUnit.SECONDS.toNanos(120), 3);
    private final LongAdder matches = new LongAdder();
    private final LongAdder mismatches = new LongAdder();
    private final LongAdder vacant = new LongAdder();
    private final LongAdder errors = new LongAdder();
    private final Map<String, AtomicLong> errorKinds = new ConcurrentHashMap<>();
    private volatile int phase = WARMUP;
    /** Checks per second of the open loop; 0: a closed loop. */
    private final double rate;
    /** Completed checks for --events, or null. */
    private final ConcurrentLinkedQueue<String> events;

    private DescribeLoad(Admin admin, List<Role> roles, int concurrency, double rate, boolean events) {
        this.admin = admin;
        this.roles = roles;
        this.concurrency = concurrency;
        this.inFlight = new Semaphore(concurrency);
        this.rate = rate;
        this.events = events ? new ConcurrentLinkedQueue<>() : null;
    }

    public static void main(String[] argv) throws Exception {
        String bootstrap = null;
        String rolesFile = null;
        int concurrency = 1;
        double duration = 10;
        double warmup = 2;
        double rate = 0;
        String eventsFile = null;
        Properties props = new Properties();
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 10_000);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 15_000);
        for (int i = 0; i < argv.length; i++) {
            String a = argv[i];
            switch (a) {
                case "--bootstrap" -> bootstrap = value(argv, ++i, a);
                case "--roles-file" -> rolesFile = value(argv, ++i, a);
                case "--concurrency" -> concurrency = Integer.parseInt(value(argv, ++i, a));
                case "--duration" -> duration = Double.parseDouble(value(argv, ++i, a));
                case "--warmup" -> warmup = Double.parseDouble(value(argv, ++i, a));
                case "--rate" -> rate = Double.parseDouble(value(argv, ++i, a));
                case "--events" -> eventsFile = value(argv, ++i, a);
                case "--set" -> {
                    String kv = value(argv, ++i, a);
                    int eq = kv.indexOf('=');
                    if (eq <= 0) fail("--set needs KEY=VALUE, got: " + kv);
                    props.put(kv.substring(0, eq), kv.substring(eq + 1));
                }
                case "-h", "--help" -> {
                    usage();
                    return;
                }
                default -> fail("unknown argument: " + a);
            }
        }
        if (bootstrap == null || rolesFile == null) fail("--bootstrap and --roles-file are required");
        if (concurrency < 1) fail("--concurrency must be >= 1");
        if (duration <= 0 || warmup < 0) fail("--duration must be > 0 and --warmup >= 0");
        if (rate < 0) fail("--rate must be >= 0");

        List<Role> roles = readRoles(Path.of(rolesFile));
        if (roles.isEmpty()) fail("no roles in " + rolesFile);

        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.putIfAbsent(AdminClientConfig.CLIENT_ID_CONFIG, "describe-load");
        System.err.println("describe-load: admin settings " + new java.util.TreeMap<>(props));

        try (Admin admin = Admin.create(props)) {
            DescribeLoad load = new DescribeLoad(admin, roles, concurrency, rate, eventsFile != null);
            String json = load.run(warmup, duration);
            if (eventsFile != null) load.writeEvents(Path.of(eventsFile));
            System.out.println(json);
            System.out.flush();
        }
    }

    private void writeEvents(Path file) throws IOException {
        try (BufferedWriter w = Files.newBufferedWriter(file, StandardCharsets.UTF_8)) {
            for (String line : events) {
                w.write(line);
                w.newLine();
            }
        }
    }

    private String run(double warmupSeconds, double durationSeconds) throws InterruptedException {
        System.err.printf(Locale.ROOT, "describe-load: %d roles, concurrency %d, warmup %.1fs, duration %.1fs%s%n",
                roles.size(), concurrency, warmupSeconds, durationSeconds,
                rate > 0 ? String.format(Locale.ROOT, ", open loop at %.1f checks/s", rate) : "");
        long start = System.nanoTime();
        long measureStart = start + (long) (warmupSeconds * 1e9);
        long measureEnd = measureStart + (long) (durationSeconds * 1e9);
        boolean measuring = false;
        int next = 0;
        long period = rate > 0 ? (long) (1e9 / rate) : 0;
        long tick = start;
        // One issuing thread; completions arrive on the admin client's network thread.
        while (true) {
            long now = System.nanoTime();
            if (!measuring && now >= measureStart) {
                // start of the measured window (completions before it were not recorded)
                phase = MEASURE;
                measureStart = now;
                measuring = true;
            }
            if (measuring && now >= measureEnd) break;
            long until = (measuring ? measureEnd : measureStart) - now;
            if (period > 0) {
                // Open loop: wait for the next tick; a late issuer does not burst to catch up.
                if (tick > now) {
                    TimeUnit.NANOSECONDS.sleep(Math.min(tick - now, until));
                    continue;
                }
                tick = now - tick > period ? now + period : tick + period;
            }
            if (!inFlight.tryAcquire(until, TimeUnit.NANOSECONDS)) continue;
            Role role = roles.get(next);
            next = (next + 1) % roles.size();
            issue(role);
        }
        phase = DONE;
        long measureStop = System.nanoTime();
        Histogram h = recorder.getIntervalHistogram();

        // Let the outstanding checks finish (not counted) before the admin client closes.
        if (!inFlight.tryAcquire(concurrency, 30, TimeUnit.SECONDS)) {
            System.err.println("describe-load: some checks still outstanding after 30 s");
        }

        double seconds = (measureStop - measureStart) / 1e9;
        long checks = matches.sum() + mismatches.sum() + vacant.sum() + errors.sum();
        errorKinds.forEach((k, v) -> System.err.println("describe-load: error " + k + " x" + v.get()));
        return String.format(Locale.ROOT,
                "{\"client\":\"java-admin\",\"concurrency\":%d,\"checks\":%d,\"seconds\":%.3f,"
                        + "\"throughput\":%.1f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"mismatches\":%d,\"errors\":%d,"
                        + "\"matches\":%d,\"vacant\":%d,\"p999_ms\":%.3f,\"max_ms\":%.3f}",
                concurrency, checks, seconds, checks / seconds,
                ms(h.getValueAtPercentile(50)), ms(h.getValueAtPercentile(99)),
                mismatches.sum(), errors.sum(), matches.sum(), vacant.sum(),
                ms(h.getValueAtPercentile(99.9)), ms(h.getMaxValue()));
    }

    private void issue(Role role) {
        long t0 = System.nanoTime();
        long issuedMs = System.currentTimeMillis();
        KafkaFuture<TransactionDescription> f;
        try {
            f = admin.describeTransactions(List.of(role.id())).description(role.id());
        } catch (RuntimeException e) {
            complete(role, t0, issuedMs, null, e);
            return;
        }
        f.whenComplete((d, e) -> complete(role, t0, issuedMs, d, e));
    }

    private void complete(Role role, long t0, long issuedMs, TransactionDescription d, Throwable e) {
        long latency = System.nanoTime() - t0;
        try {
            if (events != null) {
                String outcome;
                if (e == null) {
                    outcome = d.producerId() == role.producerId() && d.producerEpoch() == role.epoch()
                            ? "ok" : "mismatch";
                } else {
                    Throwable cause = unwrap(e);
                    outcome = cause instanceof TransactionalIdNotFoundException
                            ? "vacant" : "error:" + cause.getClass().getSimpleName();
                }
                String pair = e == null ? " " + d.producerId() + ":" + d.producerEpoch() : "";
                events.add(issuedMs + " " + System.currentTimeMillis() + " " + role.id() + " " + outcome
                        + pair);
            }
            if (phase != MEASURE) return;
            recorder.recordValue(latency);
            if (e == null) {
                if (d.producerId() == role.producerId() && d.producerEpoch() == role.epoch()) {
                    matches.increment();
                } else {
                    mismatches.increment();
                }
            } else {
                Throwable cause = unwrap(e);
                if (cause instanceof TransactionalIdNotFoundException) {
                    vacant.increment();
                } else {
                    errors.increment();
                    errorKinds.computeIfAbsent(cause.getClass().getSimpleName(), k -> new AtomicLong())
                            .incrementAndGet();
                }
            }
        } finally {
            inFlight.release();
        }
    }

    private static Throwable unwrap(Throwable e) {
        while ((e instanceof CompletionException || e instanceof ExecutionException) && e.getCause() != null) {
            e = e.getCause();
        }
        return e;
    }

    private static double ms(long nanos) {
        return nanos / 1e6;
    }

    private static List<Role> readRoles(Path file) throws IOException {
        List<Role> roles = new ArrayList<>();
        int n = 0;
        for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
            n++;
            line = line.strip();
            if (line.isEmpty() || line.startsWith("#")) continue;
            String[] parts = line.split("\\s+");
            int colon = parts.length == 2 ? parts[1].indexOf(':') : -1;
            if (colon < 0) fail(file + ":" + n + ": expected '<role> <producerId>:<epoch>', got: " + line);
            roles.add(new Role(parts[0],
                    Long.parseLong(parts[1].substring(0, colon)),
                    Short.parseShort(parts[1].substring(colon + 1))));
        }
        return roles;
    }

    static String value(String[] argv, int i, String flag) {
        if (i >= argv.length) fail(flag + " needs a value");
        return argv[i];
    }

    private static void usage() {
        System.err.println("usage: describe-load --bootstrap HOST:PORT --roles-file FILE --concurrency N"
                + " --duration SECONDS [--warmup SECONDS] [--rate CHECKS_PER_SECOND] [--events FILE]"
                + " [--set ADMIN_KEY=VALUE ...]");
    }

    static void fail(String message) {
        System.err.println("describe-load: " + message);
        System.exit(2);
    }
}
