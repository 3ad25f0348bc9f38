package bench;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartitionInfo;

/**
 * layout: where a cluster keeps what the benchmarks fail on purpose.
 *
 * <pre>
 * layout --bootstrap HOSTS --roles-file FILE --topic TOPIC [--elect-preferred] [--wait-isr SECONDS]
 * </pre>
 *
 * Prints one JSON line: {@code {"brokers":{id:"host:port"},"coordinators":{role:id},
 * "leaders":{partition:id},"under_replicated":N}}. A role's coordinator is the broker Kafka's
 * Admin found with FindCoordinator and that answered its describeTransactions; leaders are the
 * partition leaders of TOPIC; under_replicated counts the partitions of TOPIC and of
 * {@code __transaction_state} whose ISR is smaller than their replica set.
 *
 * {@code --wait-isr S} first waits up to S seconds for no partition of those two topics to be
 * under-replicated (a broker that was paused or restarted has caught up); {@code --elect-preferred}
 * then moves every partition's leadership back to its preferred replica (coordinators included)
 * and waits 2 s, so that each failure scenario starts from the same balanced cluster.
 */
public final class Layout {

    private static final String TXN_TOPIC = "__transaction_state";

    public static void main(String[] argv) throws Exception {
        String bootstrap = null;
        String rolesFile = null;
        String topic = null;
        boolean elect = false;
        double waitIsr = 0;
        for (int i = 0; i < argv.length; i++) {
            String a = argv[i];
            switch (a) {
                case "--bootstrap" -> bootstrap = DescribeLoad.value(argv, ++i, a);
                case "--roles-file" -> rolesFile = DescribeLoad.value(argv, ++i, a);
                case "--topic" -> topic = DescribeLoad.value(argv, ++i, a);
                case "--elect-preferred" -> elect = true;
                case "--wait-isr" -> waitIsr = Double.parseDouble(DescribeLoad.value(argv, ++i, a));
                default -> DescribeLoad.fail("layout: unknown argument: " + a + "\nusage: layout --bootstrap HOSTS"
                        + " --roles-file FILE --topic TOPIC [--elect-preferred] [--wait-isr SECONDS]");
            }
        }
        if (bootstrap == null || rolesFile == null || topic == null) {
            DescribeLoad.fail("layout: --bootstrap, --roles-file and --topic are required");
        }
        List<String> roles = new ArrayList<>();
        for (String line : Files.readAllLines(Path.of(rolesFile), StandardCharsets.UTF_8)) {
            line = line.strip();
            if (!line.isEmpty() && !line.startsWith("#")) roles.add(line.split("\\s+")[0]);
        }

        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "bench-layout");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 5_000);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 60_000);
        try (Admin admin = Admin.create(props)) {
            long until = System.nanoTime() + (long) (waitIsr * 1e9);
            int under = underReplicated(admin, topic);
            while (under > 0 && System.nanoTime() < until) {
                TimeUnit.MILLISECONDS.sleep(250);
                under = underReplicated(admin, topic);
            }
            if (elect) {
                try {
                    admin.electLeaders(ElectionType.PREFERRED, null).partitions().get();
                } catch (ExecutionException e) {
                    System.err.println("layout: preferred election: " + e.getCause());
                }
                TimeUnit.SECONDS.sleep(2);
            }

            Map<Integer, String> brokers = new TreeMap<>();
            for (Node n : admin.describeCluster().nodes().get()) brokers.put(n.id(), n.host() + ":" + n.port());
            Map<String, TransactionDescription> described = admin.describeTransactions(roles).all().get();
            Map<Integer, Integer> leaders = new TreeMap<>();
            TopicDescription td = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            for (TopicPartitionInfo p : td.partitions()) {
                leaders.put(p.partition(), p.leader() == null ? -1 : p.leader().id());
            }

            StringBuilder json = new StringBuilder("{\"brokers\":{");
            String sep = "";
            for (var e : brokers.entrySet()) {
                json.append(sep).append('"').append(e.getKey()).append("\":\"").append(e.getValue()).append('"');
                sep = ",";
            }
            json.append("},\"coordinators\":{");
            sep = "";
            for (String role : roles) {
                json.append(sep).append('"').append(role).append("\":").append(described.get(role).coordinatorId());
                sep = ",";
            }
            json.append("},\"leaders\":{");
            sep = "";
            for (var e : leaders.entrySet()) {
                json.append(sep).append('"').append(e.getKey()).append("\":").append(e.getValue());
                sep = ",";
            }
            json.append("},\"under_replicated\":").append(under).append('}');
            System.out.println(json);
        }
    }

    private static int underReplicated(Admin admin, String topic) throws Exception {
        int under = 0;
        for (TopicDescription d : admin.describeTopics(List.of(topic, TXN_TOPIC)).allTopicNames().get().values()) {
            for (TopicPartitionInfo p : d.partitions()) {
                if (p.leader() == null || p.isr().size() < p.replicas().size()) under++;
            }
        }
        return under;
    }
}
