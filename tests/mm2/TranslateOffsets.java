// RemoteClusterUtils.translateOffsets, MM2's own Java client, as a command (issue 23 interop tests).
// Usage: java -cp <connect-mirror-client jars>:. TranslateOffsets <target bootstrap> <source alias> <group>
// Prints one line per partition: <topic> <partition> <offset>, sorted.
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class TranslateOffsets {
    public static void main(String[] args) throws Exception {
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", args[0]);
        Map<TopicPartition, OffsetAndMetadata> out =
            RemoteClusterUtils.translateOffsets(props, args[1], args[2], Duration.ofSeconds(20));
        TreeMap<String, Long> sorted = new TreeMap<>();
        out.forEach((tp, om) -> sorted.put(tp.topic() + " " + tp.partition(), om.offset()));
        sorted.forEach((k, v) -> System.out.println(k + " " + v));
    }
}
