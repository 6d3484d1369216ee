package io.github.snapfence.kstreams;

import java.io.IOException;
import java.io.InputStream;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

import sun.misc.Signal;

/**
 * The workload of snapfence's end-to-end benchmarks (BenchmarkLimit,
 * BenchmarkLatency in engine/) on Kafka Streams, as their measured peer:
 * read the input topic (String keys, values decimal integers as text),
 * keep a per-key sum in a persistent key-value store (RocksDB, logged to
 * a changelog topic: Kafka Streams' defaults), and forward one output per
 * input to the output topic: the same key, the new sum as decimal text,
 * the input's headers (the benchmarks' "sent" header). The Processor API
 * forwards each input's {@code Record} with a new value, so the headers
 * are kept and every input makes exactly one output.
 *
 * <p>Usage (it/kstreams/app run ARGS):
 *
 * <pre>
 *   --bootstrap HOST:PORT[,...]   bootstrap.servers
 *   --input TOPIC                 the input topic
 *   --output TOPIC                the output topic
 *   --application-id ID           application.id: the consumer group, and
 *                                 the prefix of the internal topics
 *                                 (ID-sums-changelog)
 *   --guarantee G                 processing.guarantee: at_least_once or
 *                                 exactly_once_v2
 *   --commit-interval-ms N        commit.interval.ms
 *   --state-dir DIR               state.dir (the caller creates and
 *                                 removes it)
 *   --threads N                   num.stream.threads (default 1)
 *   --expect N                    print "consumed" once N inputs were
 *                                 processed (optional)
 * </pre>
 *
 * <p>Every other setting is Kafka Streams' default. Those that matter for
 * the latency from an input to its output:
 *
 * <ul>
 *   <li>the producer's linger.ms: Kafka Streams overrides the client's
 *       default (5 ms in Kafka 4) with 100 ms, at least once and exactly
 *       once alike (StreamsConfig's producer overrides): an output waits
 *       up to 100 ms for its batch to fill (16 KiB, batch.size) unless a
 *       commit flushes the producer first. At least once, that is most of
 *       an output's latency at moderate rates;
 *   <li>commit.interval.ms (given here): exactly once, outputs become
 *       visible to a read_committed reader when the transaction commits,
 *       so that is the latency's floor (Streams' default there is 100 ms,
 *       30 s at least once, where it only bounds the replay after a
 *       crash);
 *   <li>the record cache (statestore.cache.max.bytes) does not delay
 *       anything here: it sits in front of a store only if the store's
 *       builder enables caching (withCachingEnabled(), the DSL's default,
 *       not the Processor API's), and the processor forwards each output
 *       itself, not on a cache flush;
 *   <li>the consumer's fetch: fetch.min.bytes 1, so a fetch returns as
 *       soon as a record is there; max.poll.records 1000 (Streams'
 *       override) bounds a poll; group.protocol classic.
 * </ul>
 *
 * <p>It prints "running" on stdout when the instance is RUNNING, "first"
 * when it processes its first input, "commit" after each commit of a
 * stream thread that it sees (the thread's commit-total metric, read
 * every 2 ms: the benchmarks read the group's committed offsets then),
 * and "consumed" (with --expect). It closes the instance and exits 0 when
 * its stdin is closed (so it never outlives the process that started it)
 * or on SIGTERM or SIGINT; it exits 1 with a message on stderr after an
 * uncaught exception of a stream thread, on the ERROR state, or if close
 * does not finish in time. Kafka Streams' own logging goes to stderr,
 * warnings and errors only (simplelogger.properties).
 */
public final class SumApp {
    private static final String STORE = "sums";

    private static final AtomicBoolean firstSeen = new AtomicBoolean();
    private static final AtomicLong processed = new AtomicLong();
    private static volatile long expect = -1;

    private SumApp() {}

    /** Sums the deltas of a key and forwards the new sum. */
    static final class SumProcessor implements Processor<String, String, String, String> {
        private ProcessorContext<String, String> context;
        private KeyValueStore<String, Long> sums;

        @Override
        public void init(ProcessorContext<String, String> context) {
            this.context = context;
            this.sums = context.getStateStore(STORE);
        }

        @Override
        public void process(Record<String, String> record) {
            if (!firstSeen.get() && firstSeen.compareAndSet(false, true)) {
                say("first");
            }
            Long sum = sums.get(record.key());
            long next = (sum == null ? 0 : sum) + Long.parseLong(record.value());
            sums.put(record.key(), next);
            context.forward(record.withValue(Long.toString(next)));
            if (processed.incrementAndGet() == expect) {
                say("consumed");
            }
        }
    }

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static void usage(String problem) {
        System.err.println("SumApp: " + problem);
        System.err.println("usage: SumApp --bootstrap HOST:PORT --input TOPIC --output TOPIC --application-id ID"
                + " --guarantee at_least_once|exactly_once_v2 --commit-interval-ms N --state-dir DIR [--threads N] [--expect N]");
        System.exit(2);
    }

    public static void main(String[] args) throws InterruptedException {
        Map<String, String> opts = new HashMap<>();
        opts.put("threads", "1");
        for (int i = 0; i < args.length; i += 2) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                usage("bad argument " + args[i]);
            }
            opts.put(args[i].substring(2), args[i + 1]);
        }
        for (String k : new String[] {"bootstrap", "input", "output", "application-id", "guarantee", "commit-interval-ms", "state-dir"}) {
            if (!opts.containsKey(k)) {
                usage("--" + k + " is missing");
            }
        }
        if (opts.containsKey("expect")) {
            expect = Long.parseLong(opts.get("expect"));
        }

        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, opts.get("bootstrap"));
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, opts.get("application-id"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, opts.get("guarantee"));
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, opts.get("commit-interval-ms"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, opts.get("state-dir"));
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, opts.get("threads"));

        Topology topology = new Topology();
        topology.addSource("input", Serdes.String().deserializer(), Serdes.String().deserializer(), opts.get("input"));
        topology.addProcessor("sum", SumProcessor::new, "input");
        // Persistent (RocksDB), logged to ID-sums-changelog, no caching:
        // the builder's defaults.
        topology.addStateStore(Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(STORE), Serdes.String(), Serdes.Long()), "sum");
        topology.addSink("output", opts.get("output"), Serdes.String().serializer(), Serdes.String().serializer(), "sum");

        KafkaStreams streams = new KafkaStreams(topology, props);
        CountDownLatch done = new CountDownLatch(1);
        AtomicReference<String> failure = new AtomicReference<>();
        streams.setUncaughtExceptionHandler(e -> {
            failure.compareAndSet(null, "uncaught exception: " + e);
            done.countDown();
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING && !running.getAndSet(true)) {
                say("running");
            }
            if (now == KafkaStreams.State.ERROR) {
                failure.compareAndSet(null, "the instance is in the ERROR state");
                done.countDown();
            }
        });
        Signal.handle(new Signal("TERM"), s -> done.countDown());
        Signal.handle(new Signal("INT"), s -> done.countDown());
        Thread stdin = new Thread(() -> {
            InputStream in = System.in;
            byte[] buf = new byte[512];
            try {
                while (in.read(buf) >= 0) {
                    // the input is ignored: only its end counts
                }
            } catch (IOException e) {
                // a broken stdin ends the app as its end does
            }
            done.countDown();
        }, "stdin");
        stdin.setDaemon(true);
        stdin.start();

        streams.start();
        Thread commits = new Thread(() -> watchCommits(streams), "commits");
        commits.setDaemon(true);
        commits.start();

        done.await();
        boolean closed = streams.close(Duration.ofSeconds(60));
        String failed = failure.get();
        if (failed == null && !closed) {
            failed = "close did not finish within 60s";
        }
        if (failed != null) {
            System.err.println("SumApp: " + failed);
            System.exit(1);
        }
        System.exit(0);
    }

    private static final AtomicBoolean running = new AtomicBoolean();

    /**
     * Prints "commit" whenever the stream threads' commit-total metrics
     * (summed) grow: a commit finished (at least once, the consumer's
     * commitSync; exactly once, the transaction's commit).
     */
    static void watchCommits(KafkaStreams streams) {
        Map<MetricName, Metric> totals = new HashMap<>();
        double last = 0;
        int threads = -1;
        try {
            while (true) {
                Thread.sleep(2);
                if (streams.state() != KafkaStreams.State.RUNNING && streams.state() != KafkaStreams.State.REBALANCING) {
                    if (streams.state().hasCompletedShutdown() || streams.state() == KafkaStreams.State.PENDING_SHUTDOWN) {
                        return;
                    }
                    continue;
                }
                int n = streams.metadataForLocalThreads().size();
                if (n != threads || totals.isEmpty()) { // the threads' metrics, looked up again when their number changes
                    totals.clear();
                    for (Map.Entry<MetricName, ? extends Metric> e : streams.metrics().entrySet()) {
                        MetricName m = e.getKey();
                        if (m.name().equals("commit-total") && m.group().equals("stream-thread-metrics")) {
                            totals.put(m, e.getValue());
                        }
                    }
                    threads = n;
                }
                double sum = 0;
                for (Metric m : totals.values()) {
                    Object v = m.metricValue();
                    if (v instanceof Double d) {
                        sum += d;
                    }
                }
                if (sum > last) {
                    last = sum;
                    say("commit");
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
