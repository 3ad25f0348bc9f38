package bench;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * mint-roles: make COUNT transactional ids PREFIX0..PREFIX{COUNT-1} exist on the broker, each with
 * a current (producerId, epoch) token, and write them as a roles file for describe-load.
 *
 * <pre>
 * mint-roles --bootstrap HOST:PORT --count N --prefix P --out FILE [--parallel K]
 * </pre>
 *
 * Each id gets its own KafkaProducer with transactional.id set; initTransactions() registers
 * it with the transaction coordinator (bumping the epoch if the id already existed), then the
 * producer is closed (closing does not change the token). The tokens are then read back with
 * describeTransactions (batched here, this is setup, not the measured path) and written as
 * {@code <role> <producerId>:<epoch>} lines.
 */
public final class MintRoles {

    private static final int DESCRIBE_BATCH = 200;

    public static void main(String[] argv) throws Exception {
        String bootstrap = null;
        String prefix = null;
        String out = null;
        int count = -1;
        int parallel = 8;
        for (int i = 0; i < argv.length; i++) {
            String a = argv[i];
            switch (a) {
                case "--bootstrap" -> bootstrap = DescribeLoad.value(argv, ++i, a);
                case "--count" -> count = Integer.parseInt(DescribeLoad.value(argv, ++i, a));
                case "--prefix" -> prefix = DescribeLoad.value(argv, ++i, a);
                case "--out" -> out = DescribeLoad.value(argv, ++i, a);
                case "--parallel" -> parallel = Integer.parseInt(DescribeLoad.value(argv, ++i, a));
                default -> DescribeLoad.fail("mint-roles: unknown argument: " + a
                        + "\nusage: mint-roles --bootstrap HOST:PORT --count N --prefix P --out FILE [--parallel K]");
            }
        }
        if (bootstrap == null || prefix == null || out == null || count < 1 || parallel < 1) {
            DescribeLoad.fail("mint-roles: --bootstrap, --count (>= 1), --prefix and --out are required");
        }

        List<String> ids = new ArrayList<>(count);
        for (int i = 0; i < count; i++) ids.add(prefix + i);

        long t0 = System.nanoTime();
        ExecutorService pool = Executors.newFixedThreadPool(parallel);
        try {
            List<Future<?>> done = new ArrayList<>();
            for (String id : ids) {
                final String b = bootstrap;
                done.add(pool.submit(() -> initTransactions(b, id)));
            }
            for (Future<?> f : done) f.get();
        } finally {
            pool.shutdown();
        }
        System.err.printf("mint-roles: initTransactions for %d ids in %.1f s%n", count, (System.nanoTime() - t0) / 1e9);

        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "mint-roles");
        StringBuilder lines = new StringBuilder();
        try (Admin admin = Admin.create(props)) {
            for (int from = 0; from < ids.size(); from += DESCRIBE_BATCH) {
                List<String> batch = ids.subList(from, Math.min(ids.size(), from + DESCRIBE_BATCH));
                Map<String, TransactionDescription> described = admin.describeTransactions(batch).all().get();
                for (String id : batch) {
                    TransactionDescription d = described.get(id);
                    lines.append(id).append(' ').append(d.producerId()).append(':').append(d.producerEpoch()).append('\n');
                }
            }
        }
        write(Path.of(out), lines.toString());
        System.err.printf("mint-roles: wrote %d roles to %s%n", count, out);
    }

    private static void initTransactions(String bootstrap, String transactionalId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "mint-roles-" + transactionalId);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 30_000);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
        }
    }

    private static void write(Path path, String text) throws IOException {
        Path parent = path.toAbsolutePath().getParent();
        if (parent != null) Files.createDirectories(parent);
        Files.writeString(path, text, StandardCharsets.UTF_8);
    }
}
