import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.DescribeFeaturesOptions;
import org.apache.kafka.clients.admin.DescribeMetadataQuorumOptions;
import org.apache.kafka.clients.admin.DescribeTransactionsOptions;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.apache.kafka.common.errors.TransactionalIdNotFoundException;

/**
 * Readiness and feature probe for the Kafka nodes that scripts/kafka starts,
 * with Kafka's own Admin client (the jars of the Kafka version under test).
 *
 * <pre>
 *   KafkaProbe ready --bootstrap H:P[,H:P...] [--nodes 1,2,3] [--transactions] [--quorum]
 *                    [--timeout-ms 90000]
 *   KafkaProbe features --bootstrap H:P[,H:P...] [--timeout-ms 15000]
 *   KafkaProbe elect --bootstrap H:P[,H:P...] [--partitions TOPIC:N,...] [--timeout-ms 15000]
 *   KafkaProbe storage-tool -- ARGS... [-- ARGS...]...
 * </pre>
 *
 * elect runs a preferred leader election (electLeaders PREFERRED) of the
 * given partitions, or of every partition: each one's first replica leads
 * again if it is in sync. Prints {"elected":N,"not_needed":N,"failed":[...]};
 * exit 1 when a partition failed (its preferred replica not in sync, say).
 *
 * ready waits, polling in this one JVM until the timeout, for: every broker of
 * --nodes listed (registered and unfenced) by describeCluster, and answering a
 * request sent to it (describeConfigs of itself: a restarted broker only
 * accepts requests once unfenced); the finalized features (metadata.version
 * among them); with --quorum, a metadata quorum leader (describeMetadataQuorum);
 * with --transactions, the transaction coordinator: describeTransactions of the
 * id "krabka-probe" answers (TransactionalIdNotFound counts: nothing is minted).
 *
 * Prints one JSON line on stdout, e.g.
 * {"nodes":[1,2,3],"features":{"metadata.version":27,"transaction.version":2},"elapsed_ms":2345}
 * Exit 0 if ready, 1 (reason on stderr) on timeout, 2 on bad usage. The client's
 * logging goes where the JVM's log4j configuration says; its console is stderr.
 *
 * storage-tool runs kafka.tools.StorageTool once per ARGS group (e.g. "format
 * -t ID -c server.properties"), one after another in this JVM: formatting the
 * nodes of a cluster costs one JVM start instead of one per node. It stops at
 * the first that fails, with its exit code.
 */
public final class KafkaProbe {
    static final String PROBE_ID = "krabka-probe";
    static final long POLL_MS = 200;
    static final long CALL_MS = 10_000;

    private final Admin admin;
    private final long started;
    private final long deadline;
    private String last = "";

    private KafkaProbe(Admin admin, long started, long deadline) {
        this.admin = admin;
        this.started = started;
        this.deadline = deadline;
    }

    public static void main(String[] args) throws Exception {
        PrintStream out = System.out;
        System.setOut(System.err); // stdout carries the result line only
        int code;
        try {
            code = run(args, out);
        } catch (IllegalArgumentException e) {
            System.err.println("KafkaProbe: " + e.getMessage());
            code = 2;
        }
        out.flush();
        System.err.flush();
        System.exit(code);
    }

    static int run(String[] args, PrintStream out) throws Exception {
        if (args.length == 0) {
            throw new IllegalArgumentException("usage: KafkaProbe ready|features --bootstrap H:P[,...] [options] | storage-tool -- ARGS...");
        }
        String mode = args[0];
        if (mode.equals("storage-tool")) return storageTool(args, out);
        String bootstrap = null;
        TreeSet<Integer> nodes = new TreeSet<>();
        boolean transactions = false;
        boolean quorum = false;
        long timeoutMs = mode.equals("ready") ? 90_000 : 15_000;
        java.util.Set<TopicPartition> partitions = null;
        for (int i = 1; i < args.length; i++) {
            switch (args[i]) {
                case "--bootstrap": bootstrap = value(args, ++i); break;
                case "--nodes":
                    for (String id : value(args, ++i).split(",")) {
                        if (!id.isBlank()) nodes.add(Integer.parseInt(id.trim()));
                    }
                    break;
                case "--transactions": transactions = true; break;
                case "--quorum": quorum = true; break;
                case "--partitions":
                    partitions = new java.util.HashSet<>();
                    for (String tp : value(args, ++i).split(",")) {
                        int at = tp.lastIndexOf(':');
                        if (at <= 0) throw new IllegalArgumentException("--partitions takes TOPIC:N, got " + tp);
                        partitions.add(new TopicPartition(tp.substring(0, at), Integer.parseInt(tp.substring(at + 1))));
                    }
                    break;
                case "--timeout-ms": timeoutMs = Long.parseLong(value(args, ++i)); break;
                default: throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (bootstrap == null) throw new IllegalArgumentException("--bootstrap is required");
        if (!mode.equals("ready") && !mode.equals("features") && !mode.equals("elect")) {
            throw new IllegalArgumentException("unknown mode " + mode + " (ready, features, elect or storage-tool)");
        }
        if (mode.equals("elect")) return elect(bootstrap, partitions, timeoutMs, out);

        long started = System.currentTimeMillis();
        Admin admin = Admin.create(clientProperties(bootstrap, timeoutMs));
        try {
            KafkaProbe probe = new KafkaProbe(admin, started, started + timeoutMs);
            Map<String, Short> features;
            TreeSet<Integer> seen = nodes;
            try {
                if (mode.equals("ready")) {
                    seen = probe.awaitBrokers(nodes);
                    features = probe.awaitFeatures();
                    if (quorum) probe.awaitQuorum();
                    if (transactions) probe.awaitTransactionCoordinator();
                } else {
                    features = probe.awaitFeatures();
                }
            } catch (Timeout e) {
                System.err.println("KafkaProbe: timed out after " + timeoutMs + " ms " + e.getMessage());
                return 1;
            }
            out.println("{\"nodes\":" + seen + ",\"features\":" + json(features)
                    + ",\"elapsed_ms\":" + (System.currentTimeMillis() - started) + "}");
            return 0;
        } finally {
            admin.close(Duration.ofMillis(500));
        }
    }

    static int elect(String bootstrap, java.util.Set<TopicPartition> partitions, long timeoutMs,
                     PrintStream out) throws Exception {
        Admin admin = Admin.create(clientProperties(bootstrap, timeoutMs));
        try {
            Map<TopicPartition, java.util.Optional<Throwable>> result = admin
                    .electLeaders(ElectionType.PREFERRED, partitions)
                    .partitions().get(timeoutMs, java.util.concurrent.TimeUnit.MILLISECONDS);
            int elected = 0, notNeeded = 0;
            List<String> failed = new ArrayList<>();
            for (Map.Entry<TopicPartition, java.util.Optional<Throwable>> e : result.entrySet()) {
                Throwable error = e.getValue().orElse(null);
                if (error == null) elected++;
                else if (error instanceof ElectionNotNeededException) notNeeded++;
                else failed.add("\"" + e.getKey() + ": " + error.getClass().getSimpleName() + "\"");
            }
            out.println("{\"elected\":" + elected + ",\"not_needed\":" + notNeeded
                    + ",\"failed\":[" + String.join(",", failed) + "]}");
            if (!failed.isEmpty()) System.err.println("KafkaProbe: elect failed for " + failed);
            return failed.isEmpty() ? 0 : 1;
        } finally {
            admin.close(Duration.ofMillis(500));
        }
    }

    static int storageTool(String[] args, PrintStream out) throws Exception {
        // kafka.tools.StorageTool.execute(String[], PrintStream): the same in 3.9 to 4.4;
        // found by reflection so that the probe compiles whatever becomes of it
        java.lang.reflect.Method execute = Class.forName("kafka.tools.StorageTool")
                .getMethod("execute", String[].class, PrintStream.class);
        List<List<String>> runs = new ArrayList<>();
        for (int i = 1; i < args.length; i++) {
            if (args[i].equals("--")) runs.add(new ArrayList<>());
            else if (runs.isEmpty()) throw new IllegalArgumentException("storage-tool: ARGS must follow --");
            else runs.get(runs.size() - 1).add(args[i]);
        }
        for (List<String> run : runs) {
            System.err.println("KafkaProbe: StorageTool " + String.join(" ", run));
            int code;
            try {
                code = (Integer) execute.invoke(null, run.toArray(new String[0]), out);
            } catch (java.lang.reflect.InvocationTargetException e) {
                // StorageTool.main prints such an exception's message and exits 1
                System.err.println(e.getCause());
                code = 1;
            }
            if (code != 0) {
                System.err.println("KafkaProbe: StorageTool exited with code " + code);
                return code;
            }
        }
        return 0;
    }

    static String value(String[] args, int i) {
        if (i >= args.length) throw new IllegalArgumentException(args[i - 1] + " needs a value");
        return args[i];
    }

    static Properties clientProperties(String bootstrap, long timeoutMs) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", PROBE_ID);
        // short timeouts and backoffs: nodes are starting, or restarting on the same ports
        p.put("request.timeout.ms", "3000");
        p.put("default.api.timeout.ms", String.valueOf(Math.max(3000, Math.min(timeoutMs, CALL_MS))));
        p.put("socket.connection.setup.timeout.ms", "2000");
        p.put("socket.connection.setup.timeout.max.ms", "3000");
        p.put("reconnect.backoff.ms", "50");
        p.put("reconnect.backoff.max.ms", "500");
        p.put("retry.backoff.ms", "100");
        p.put("retry.backoff.max.ms", "500");
        p.put("metadata.max.age.ms", "1000");
        return p;
    }

    static final class Timeout extends Exception {
        Timeout(String message) {
            super(message);
        }
    }

    /** Time left for one Admin call, at most CALL_MS; Timeout once the deadline has passed. */
    private int callTimeout(String waitingFor) throws Timeout {
        long left = deadline - System.currentTimeMillis();
        if (left <= 0) throw new Timeout("waiting for " + waitingFor + (last.isEmpty() ? "" : ": " + last));
        return (int) Math.min(left, CALL_MS);
    }

    /** Runs `attempt` until it returns a value (not null), polling every POLL_MS until the deadline. */
    private <T> T poll(String waitingFor, Attempt<T> attempt) throws Timeout, InterruptedException {
        while (true) {
            int timeout = callTimeout(waitingFor);
            try {
                T value = attempt.run(timeout);
                if (value != null) return value;
            } catch (ExecutionException e) {
                Throwable cause = e.getCause() == null ? e : e.getCause();
                last = cause.getClass().getSimpleName() + ": " + cause.getMessage();
            }
            Thread.sleep(POLL_MS);
        }
    }

    /** One progress line on stderr (scripts/kafka keeps it in logs/probe.out). */
    private void done(String what) {
        System.err.println("KafkaProbe: " + what + " at +" + (System.currentTimeMillis() - started) + " ms");
    }

    interface Attempt<T> {
        T run(int timeoutMs) throws ExecutionException, InterruptedException;
    }

    TreeSet<Integer> awaitBrokers(TreeSet<Integer> want) throws Timeout, InterruptedException {
        TreeSet<Integer> listed = poll("brokers " + (want.isEmpty() ? "(any)" : want) + " to be registered and unfenced", timeout -> {
            Collection<Node> nodes = admin.describeCluster(new DescribeClusterOptions().timeoutMs(timeout)).nodes().get();
            TreeSet<Integer> seen = new TreeSet<>();
            for (Node n : nodes) seen.add(n.id());
            if (want.isEmpty() ? !seen.isEmpty() : seen.containsAll(want)) {
                done("describeCluster lists " + seen);
                return seen;
            }
            last = "describeCluster lists " + seen;
            return null;
        });
        for (int id : want) {
            ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(id));
            poll("broker " + id + " to answer requests", timeout ->
                    admin.describeConfigs(List.of(broker), new DescribeConfigsOptions().timeoutMs(timeout)).all().get());
            done("broker " + id + " answers");
        }
        return listed;
    }

    Map<String, Short> awaitFeatures() throws Timeout, InterruptedException {
        return poll("the finalized features", timeout -> {
            Map<String, FinalizedVersionRange> finalized = admin.describeFeatures(
                    new DescribeFeaturesOptions().timeoutMs(timeout)).featureMetadata().get().finalizedFeatures();
            if (!finalized.containsKey("metadata.version")) {
                last = "finalized features " + finalized.keySet() + " (no metadata.version yet)";
                return null;
            }
            Map<String, Short> levels = new TreeMap<>();
            finalized.forEach((name, range) -> levels.put(name, range.maxVersionLevel()));
            done("finalized features " + levels);
            return levels;
        });
    }

    void awaitQuorum() throws Timeout, InterruptedException {
        poll("a metadata quorum leader", timeout -> {
            int leader = admin.describeMetadataQuorum(new DescribeMetadataQuorumOptions().timeoutMs(timeout))
                    .quorumInfo().get().leaderId();
            last = "no leader";
            if (leader < 0) return null;
            done("metadata quorum leader " + leader);
            return leader;
        });
    }

    void awaitTransactionCoordinator() throws Timeout, InterruptedException {
        poll("the transaction coordinator", timeout -> {
            try {
                admin.describeTransactions(List.of(PROBE_ID), new DescribeTransactionsOptions().timeoutMs(timeout))
                        .all().get();
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TransactionalIdNotFoundException)) throw e;
            }
            done("transaction coordinator answers");
            return Boolean.TRUE;
        });
    }

    static String json(Map<String, Short> features) {
        List<String> items = new ArrayList<>();
        features.forEach((name, level) -> items.add("\"" + name.replace("\\", "\\\\").replace("\"", "\\\"") + "\":" + level));
        return "{" + String.join(",", items) + "}";
    }
}
