// MM2's own OffsetSyncStore (connect-mirror) replaying a list of offset syncs, as a command: the
// reference kmirror.mm2.sync_store is checked against (issue 23). In MM2's package to reach the
// store's test constructor and record handler. Reads stdin lines `s <partition> <upstream> <downstream>`
// (one sync of topic t, in topic order) and `q <partition> <upstream>` (translate now); prints one line
// per query: the downstream offset, or `none` where MM2 emits no checkpoint (no sync, or too old).
package org.apache.kafka.connect.mirror;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.OptionalLong;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;

public class Mm2SyncReplay extends OffsetSyncStore {
    public static void main(String[] args) throws Exception {
        Mm2SyncReplay store = new Mm2SyncReplay();
        store.initializationMustReadToEnd = false;  // MM2's usual start: its checkpoints were readable
        store.readToEnd = true;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        long offset = 0;
        StringBuilder out = new StringBuilder();
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String[] parts = line.trim().split(" ");
            TopicPartition tp = new TopicPartition("t", Integer.parseInt(parts[1]));
            if (parts[0].equals("s")) {
                OffsetSync sync = new OffsetSync(tp, Long.parseLong(parts[2]), Long.parseLong(parts[3]));
                store.handleRecord(new ConsumerRecord<>("syncs", 0, offset++, sync.recordKey(), sync.recordValue()));
            } else if (parts[0].equals("q")) {
                OptionalLong result = store.translateDownstream("g", tp, Long.parseLong(parts[2]));
                out.append(result.isPresent() && result.getAsLong() >= 0 ? Long.toString(result.getAsLong()) : "none");
                out.append('\n');
            }
        }
        System.out.print(out);
    }
}
