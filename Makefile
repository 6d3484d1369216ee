# snapfence: build, test and lint targets. Everything here needs only Go,
# except `make it` (Java 17+ and Maven); `make test` needs no JVM and no
# broker.

GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
PKGS        ?= ./...
# bench: BENCHROUNDS runs of every benchmark at 3 iterations each; the
# table shows medians over the runs. The engine's memory benchmark (1M keys,
# ~40s) runs once.
BENCHROUNDS ?= 5
BENCHFLAGS  ?= -run '^$$' -bench . -benchtime=3x -count=1
ENGINEBENCHFLAGS ?= -run '^$$' -bench '^BenchmarkEngineThroughput$$' -benchtime=3x -count=1
ENGINEMEMFLAGS   ?= -run '^$$' -bench '^BenchmarkEngineMemory$$' -benchtime=1x -count=1

.PHONY: all test race lint fmt-check vet staticcheck demo fuzz bench bench-kafka bench-outputs bench-limit bench-commit bench-warm bench-failover bench-recovery-pause bench-scale bench-deploys bench-scaleout bench-latency it it-cluster it-secure props-long html-check status-page-check chromium failover chaos chaos-short probe

all: lint test

## test: unit, contract and (bounded) property tests; no JVM, no broker.
## The property package takes 5 to 8 min on 2 shared cores (its negative
## controls shrink their traces), close to go test's default 10 min limit
## per package when other packages' tests run beside it: hence 20 min.
test:
	$(GO) test -count=1 -timeout 20m $(PKGS)

## race: the same tests under the race detector.
race:
	$(GO) test -count=1 -race $(PKGS)

## it: the integration tests (build tag `it`) against one real single-node
## Kafka 4.x broker started for the whole run on 127.0.0.1 (it/kafka/broker:
## resolved from Maven Central by mvn, run by java; docs/testing.md). The
## broker is stopped however the tests end; the target fails with them.
## ITPKGS: the packages with integration tests (a file with the `it` build
## tag); the rest ran in `make test` already.
ITPKGS ?= $(sort $(dir $(shell grep -rl --include='*_test.go' '^//go:build it' .)))
it:
	it/kafka/broker classpath
	it/kafka/broker run $(GO) test -count=1 -tags it -p 1 -timeout 30m $(ITPKGS)

## it-cluster: the chaos tests (build tag `it`, named TestCluster*) on a
## replicated Kafka 4.x cluster started for the run on 127.0.0.1
## (it/kafka/cluster: three nodes, each broker and controller, replication
## factor 3, min.insync.replicas 2; docs/testing.md). They skip under
## `make it`, which gives them no cluster. CLUSTERPKGS: the packages with
## such tests.
CLUSTERPKGS ?= ./internal/kafkatest
it-cluster:
	it/kafka/cluster classpath
	it/kafka/cluster run $(GO) test -count=1 -tags it -p 1 -v -run '^TestCluster' $(CLUSTERPKGS)

## it-secure: the secured-cluster tests (build tag `it`, named TestSecured*)
## on a secured Kafka 4.x cluster started for the run on 127.0.0.1
## (SNAPFENCE_KAFKA_SECURE=1 it/kafka/cluster run: TLS with a CA the
## script makes, SASL/SCRAM-SHA-512, the StandardAuthorizer; users admin,
## app, intruder; docs/testing.md, "A secured cluster"). SECURENODES: the
## node count (default 1; 3 works too). They skip under `make it` and `make
## it-cluster`, which give them no secured cluster.
SECUREPKGS  ?= ./engine ./cmd/snapfence
SECURENODES ?= 1
it-secure:
	it/kafka/cluster classpath
	SNAPFENCE_KAFKA_SECURE=1 SNAPFENCE_KAFKA_NODES=$(SECURENODES) it/kafka/cluster run $(GO) test -count=1 -tags it -p 1 -v -timeout 20m -run '^TestSecured' $(SECUREPKGS)

## lint: gofmt, go vet and staticcheck (pinned, run through `go run`); vet
## and staticcheck with the `it` tag, so they check the integration tests too.
lint: fmt-check vet staticcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet -tags it $(PKGS)

staticcheck:
	$(GO) run $(STATICCHECK) -tags it $(PKGS)

## demo: the main job (the README's first command): kafka-flow#732 on the
## simulated cluster, plain then transactional, with a verdict per invariant.
demo:
	$(GO) run ./cmd/simulate

## html-check: cmd/simulate's HTML page (the default scenario, -html)
## rendered by headless Chromium (Debian's package, installed when
## /usr/bin/chromium is missing: apt, as root) and its screenshot checked by
## internal/pngcheck: its size, not blank, and the fenced red and the ok
## green in it. SCREENSHOT=docs/simulate.png keeps the screenshot there; by
## default it is thrown away, so the tree is left as it was. Then the same
## for the engine's status page (status-page-check), whose screenshot
## STATUSSCREENSHOT=docs/status-page.png keeps.
CHROMIUM     ?= /usr/bin/chromium
CHROMIUMFLAGS = --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
		--disable-background-networking --disable-component-update --disable-sync --hide-scrollbars
HTMLWIDTH    ?= 1400
HTMLHEIGHT   ?= 1800
HTMLCOLORS   ?= -color fenced=d62728:400 -color ok=2e9e44:1500
SCREENSHOT   ?=
STATUSSCREENSHOT ?=
html-check: chromium
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(GO) run ./cmd/simulate -html "$$tmp/simulate.html" > "$$tmp/simulate.txt" || { cat "$$tmp/simulate.txt"; exit 1; }; \
	echo "html-check: $$(wc -c < "$$tmp/simulate.html") bytes of HTML; screenshot at $(HTMLWIDTH)x$(HTMLHEIGHT)" && \
	timeout 120 $(CHROMIUM) $(CHROMIUMFLAGS) \
		--user-data-dir="$$tmp/profile" --window-size=$(HTMLWIDTH),$(HTMLHEIGHT) \
		--screenshot="$$tmp/simulate.png" "file://$$tmp/simulate.html" > "$$tmp/chromium.log" 2>&1 && \
	test -s "$$tmp/simulate.png" || { cat "$$tmp/chromium.log"; echo "html-check: no screenshot"; exit 1; }; \
	$(GO) run ./internal/pngcheck -size $(HTMLWIDTH)x$(HTMLHEIGHT) $(HTMLCOLORS) "$$tmp/simulate.png" && \
	if [ -n "$(SCREENSHOT)" ]; then cp "$$tmp/simulate.png" "$(SCREENSHOT)" && echo "html-check: screenshot written to $(SCREENSHOT)"; fi
	@$(MAKE) --no-print-directory status-page-check SCREENSHOT="$(STATUSSCREENSHOT)"

## status-page-check: the engine's status page (Engine.HealthHandler's
## /), as internal/statuspagedemo leaves it on the simulated cluster (a
## member with a partition running with lag, one stopped by a poison
## record, two standby replicas), rendered by headless Chromium and its
## screenshot checked by internal/pngcheck: its size, not blank, and the
## running green and the stopped red in it. Run alone,
## SCREENSHOT=docs/status-page.png keeps the screenshot there (under
## html-check, STATUSSCREENSHOT does).
STATUSWIDTH  ?= 1200
STATUSHEIGHT ?= 720
STATUSCOLORS ?= -color running=2e9e44:600 -color stopped=d62728:600
status-page-check: chromium
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(GO) run ./internal/statuspagedemo -html "$$tmp/status.html" > "$$tmp/status.txt" || { cat "$$tmp/status.txt"; exit 1; }; \
	echo "status-page-check: $$(wc -c < "$$tmp/status.html") bytes of HTML; screenshot at $(STATUSWIDTH)x$(STATUSHEIGHT)" && \
	timeout 120 $(CHROMIUM) $(CHROMIUMFLAGS) \
		--user-data-dir="$$tmp/profile" --window-size=$(STATUSWIDTH),$(STATUSHEIGHT) \
		--screenshot="$$tmp/status.png" "file://$$tmp/status.html" > "$$tmp/chromium.log" 2>&1 && \
	test -s "$$tmp/status.png" || { cat "$$tmp/chromium.log"; echo "status-page-check: no screenshot"; exit 1; }; \
	$(GO) run ./internal/pngcheck -size $(STATUSWIDTH)x$(STATUSHEIGHT) $(STATUSCOLORS) "$$tmp/status.png" && \
	if [ -n "$(SCREENSHOT)" ]; then cp "$$tmp/status.png" "$(SCREENSHOT)" && echo "status-page-check: screenshot written to $(SCREENSHOT)"; fi

## chromium: Debian's chromium at $(CHROMIUM), installed with apt (as
## root) when it is missing.
chromium:
	@if [ ! -x $(CHROMIUM) ]; then \
		echo "installing chromium from the Debian archive"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update && apt-get install -y chromium; \
	fi

## props-long: the property tests for PROPSDURATION (default 10m) of random
## scenarios, with scenarios per minute and the coverage of steps every
## minute (`make test` runs a bounded number: 3000 per property).
PROPSDURATION ?= 10m
props-long:
	$(GO) test -count=1 -v -timeout 0 -run '^TestExplore$$' ./props -props.duration=$(PROPSDURATION)

## fuzz: a short fuzzing run of the snapshot record decoder.
fuzz:
	$(GO) test -run XXX -fuzz FuzzDecodeRecord -fuzztime 30s ./store

## bench: the spec's Experiments A and B and the recovery read, on kfake over
## loopback TCP; the engine's throughput against a bare consume loop and its
## cache's memory against a map; then one table with the ratios
## (docs/benchmarks.md).
bench:
	@out=$$(mktemp) && trap 'rm -f "$$out"' EXIT && \
	for i in $$(seq $(BENCHROUNDS)); do \
		echo "# run $$i of $(BENCHROUNDS)"; \
		$(GO) test $(BENCHFLAGS) ./store/kafka 2>&1 | tee -a "$$out"; \
		$(GO) test $(ENGINEBENCHFLAGS) ./engine 2>&1 | tee -a "$$out"; \
	done && \
	echo "# engine memory, once" && \
	$(GO) test $(ENGINEMEMFLAGS) ./engine 2>&1 | tee -a "$$out" && \
	echo && $(GO) run ./internal/benchtable < "$$out"

## bench-kafka: the store/kafka benchmarks (Experiments A and B, the
## recovery read) against a real Kafka 4.3.1 broker, then the same on kfake,
## each as a table with ratios to its own run's baselines.
KAFKABENCHROUNDS ?= 3
bench-kafka:
	@it/kafka/broker classpath
	@out=$$(mktemp) && fake=$$(mktemp) && trap 'rm -f "$$out" "$$fake"' EXIT && \
	it/kafka/broker run sh -c 'for i in $$(seq $(KAFKABENCHROUNDS)); do $(GO) test $(BENCHFLAGS) ./store/kafka; done' 2>&1 | tee "$$out" && \
	for i in $$(seq $(KAFKABENCHROUNDS)); do $(GO) test $(BENCHFLAGS) ./store/kafka 2>&1 | tee -a "$$fake"; done && \
	echo && echo "# Apache Kafka 4.3.1 (single node, 127.0.0.1)" && $(GO) run ./internal/benchtable < "$$out" && \
	echo && echo "# kfake (same machine, same run)" && $(GO) run ./internal/benchtable < "$$fake"

## bench-outputs: engine's BenchmarkOutputs (build tag `it`): at-least-once
## outputs (Emit) against exactly-once (ExactlyOnce) on a real Kafka 4.3.1
## broker started for the run (it/kafka/broker run), every measurement 3
## times (about 2m10s), then its table: per commit interval and metric, the
## two modes' medians and the ratio exactly-once / at-least-once
## (docs/benchmarks.md, "Exactly-once output").
bench-outputs:
	@it/kafka/broker classpath
	@out=$$(mktemp) && trap 'rm -f "$$out"' EXIT && \
	it/kafka/broker run $(GO) test -tags it -run '^$$' -bench BenchmarkOutputs -benchtime=1x -count=3 ./engine/ 2>&1 | tee "$$out" && \
	echo && $(GO) run ./internal/benchtable < "$$out"

## bench-limit: the end-to-end benchmarks on a real Kafka 4.3.1 broker
## started for the run (it/kafka/broker run), throughput then latency, and
## their tables with the ratios (docs/benchmarks.md, "End to end against
## the limit" and "Latency"). Throughput (engine's BenchmarkLimit, build
## tag `it`): a backlog of 1M input records over 100k keys and 8
## partitions, a per-key sum, one output per input, until the group's
## committed offsets reach the input's end; a bare franz-go
## consume-produce-commit program (the limit) against the engine at least
## once (snapshots + kafkaio.Emitter.StartEmit, PersistInterval and
## CommitInterval 1 s), exactly once (ExactlyOnce, its default 100 ms), at
## least once with kafkaio.Emitter.Emit (for comparison), and Kafka
## Streams 4.3.1 at least once (commit 1 s) and exactly once (100 ms) as
## the peer (it/kstreams, built with mvn), LIMITROUNDS rounds
## interleaved; ratios to the limit, and the transactions per 1M inputs
## against one per partition per commit interval. Latency
## (BenchmarkLatency): each variant's maximum, then each fed at 10%, 50%
## and 90% of its own maximum and of the smallest (the same rates for
## all) for 10 s; p50, p99 and max, and the engine's p99 over Kafka
## Streams' at the same guarantee. About 15 min at 3 rounds. LIMITARGS:
## the benchmarks' own flags, e.g. -limit.cpuprofile=DIR (a CPU profile
## of each throughput op's measured part, as DIR/<variant>-<round>.pprof),
## -limit.commit=D (the at-least-once CommitInterval; 0: the engine's
## default), -limit.records=N, -limit.variants=limit,at-least-once,...,
## -limit.compression=lz4, -latency.rates=0.1,0.5; LATENCY=no for the
## throughput alone (bench-latency runs the latency alone).
LIMITROUNDS ?= 3
LIMITARGS   ?=
LATENCY     ?= yes
bench-limit:
	@it/kafka/broker classpath
	@it/kstreams/app build
	@out=$$(mktemp) && trap 'rm -f "$$out"' EXIT && \
	it/kafka/broker run sh -c '$(GO) test -tags it -run "^$$" -bench "^BenchmarkLimit$$" -benchtime=1x -count=1 -timeout 60m ./engine -args -limit.rounds=$(LIMITROUNDS) $(LIMITARGS) && \
		if [ "$(LATENCY)" = yes ]; then $(GO) test -tags it -run "^$$" -bench "^BenchmarkLatency$$" -benchtime=1x -count=1 -timeout 60m ./engine -args $(LIMITARGS); fi' 2>&1 | tee "$$out" && \
	echo && $(GO) run ./internal/benchtable < "$$out"

## bench-commit: what the commit interval costs and buys, at least once at
## 100 ms, 250 ms, 1 s, 5 s and 1 min and exactly once at 100 ms
## (docs/benchmarks.md, "Commit interval"): a crash one step before a
## commit on the simulated cluster in virtual time
## (BenchmarkCommitIntervalCrash: the outputs it re-emits, how old
## committed reads get), then the throughput on a real Kafka 4.3.1 broker
## started for the run (BenchmarkCommitInterval, build tag `it`: a backlog
## of COMMITRECORDS over 100k keys, committed at once after its last fold),
## COMMITROUNDS rounds interleaved; then one table, ratios to the 1 min
## interval of the same round. About 5 min.
COMMITROUNDS  ?= 5
COMMITRECORDS ?= 2000000
bench-commit:
	@it/kafka/broker classpath
	@out=$$(mktemp) && trap 'rm -f "$$out"' EXIT && \
	$(GO) test -run '^$$' -bench '^BenchmarkCommitIntervalCrash$$' -benchtime=1x -count=1 ./engine 2>&1 | tee "$$out" && \
	it/kafka/broker run $(GO) test -tags it -run '^$$' -bench '^BenchmarkCommitInterval$$' -benchtime=1x -count=1 -timeout 60m ./engine -args -commit.rounds=$(COMMITROUNDS) -limit.records=$(COMMITRECORDS) 2>&1 | tee -a "$$out" && \
	echo && $(GO) run ./internal/benchtable < "$$out"

## bench-warm: warm restarts: an engine's start until all its
## partitions are recovered, 1M keys of 100 B in 8 partitions
## (transactional), cold (an empty Dir: a full recovery) against warm (its
## own Dir, restarted after 1% of the keys changed through another owner
## while it was down: a delta), WARMROUNDS rounds interleaved (cold, warm,
## cold, ...); on kfake (BenchmarkWarmRestart), then on a real Kafka 4.3.1
## broker started for the run (BenchmarkWarmRestartBroker, build tag
## `it`), then one table per cluster with the ratio warm / cold of the same
## round (docs/benchmarks.md, "Warm restarts"). About 2 min on kfake and 3
## min on the broker at 5 rounds, each with an untimed seed of the 1M keys.
## WARMARGS: the benchmark's own flags, e.g. -warm.cpuprofile=DIR (a CPU
## profile of each op's timed part).
WARMROUNDS ?= 5
WARMARGS   ?=
WARMFLAGS  ?= -run '^$$' -benchtime=1x -count=1 -timeout 60m
bench-warm:
	@it/kafka/broker classpath
	@out=$$(mktemp) && trap 'rm -f "$$out"' EXIT && \
	$(GO) test $(WARMFLAGS) -bench '^BenchmarkWarmRestart$$' ./engine -args -warm.rounds=$(WARMROUNDS) $(WARMARGS) 2>&1 | tee "$$out" && \
	it/kafka/broker run $(GO) test -tags it $(WARMFLAGS) -bench '^BenchmarkWarmRestartBroker$$' ./engine -args -warm.rounds=$(WARMROUNDS) $(WARMARGS) 2>&1 | tee -a "$$out" && \
	echo && $(GO) run ./internal/benchtable < "$$out"

## bench-failover: failover of one partition holding 1M keys of 100 B:
## the active member killed (and its consumer leaving the
## group) until the other member recovered the partition, cold (Standby
## off, an empty Dir: a full recovery) against a standby (Config.Standby,
## its replica caught up: a delta), WARMROUNDS rounds interleaved; the
## members heartbeat every 100 ms (-warm.heartbeat), as a team that wants
## fast failover sets it. On kfake (BenchmarkWarmRestartFailover), then
## on a real Kafka 4.3.1 broker started for the run
## (BenchmarkWarmRestartFailoverBroker, build tag `it`), then one table per
## cluster with the ratio standby / cold of the same round
## (docs/benchmarks.md, "Failover to a standby"). About 1 min on kfake
## and 2 min on the broker at 5 rounds.
bench-failover:
	@it/kafka/broker classpath
	@out=$$(mktemp) && trap 'rm -f "$$out"' EXIT && \
	$(GO) test $(WARMFLAGS) -bench '^BenchmarkWarmRestartFailover$$' ./engine -args -warm.rounds=$(WARMROUNDS) $(WARMARGS) 2>&1 | tee "$$out" && \
	it/kafka/broker run $(GO) test -tags it $(WARMFLAGS) -bench '^BenchmarkWarmRestartFailoverBroker$$' ./engine -args -warm.rounds=$(WARMROUNDS) $(WARMARGS) 2>&1 | tee -a "$$out" && \
	echo && $(GO) run ./internal/benchtable < "$$out"

## bench-recovery-pause: how long the partitions a member runs stop
## folding while a partition newly assigned to it, holding 1M keys of
## 100 B, recovers cold (docs/benchmarks.md, "Recovery pause"). On kfake
## (BenchmarkRecoveryPause), then on a real Kafka 4.3.1 broker started for
## the run (BenchmarkRecoveryPauseBroker, build tag `it`). About 1 min on
## each at 3 rounds.
bench-recovery-pause:
	@it/kafka/broker classpath
	$(GO) test $(WARMFLAGS) -bench '^BenchmarkRecoveryPause$$' ./engine -args -warm.keys=2000000 -warm.rounds=3
	it/kafka/broker run $(GO) test -tags it $(WARMFLAGS) -bench '^BenchmarkRecoveryPauseBroker$$' ./engine -args -warm.keys=2000000 -warm.rounds=3

## bench-scale: what an instance pays per partition it owns:
## goroutines, sockets, Go heap and RSS of one engine owning 16, 64 and 256
## partitions (SCALEPARTS), each partition having committed a transaction;
## on kfake (BenchmarkOwnedPartitions: the in-process cluster's side is
## counted too), then on a real Kafka 4.3.1 broker started for the run
## (BenchmarkOwnedPartitionsBroker: the instance alone). docs/benchmarks.md,
## "Cost per owned partition". About 3 min.
SCALEPARTS ?= 16,64,256
bench-scale:
	@it/kafka/broker classpath
	$(GO) test -run '^$$' -benchtime=1x -count=1 -timeout 30m -bench '^BenchmarkOwnedPartitions$$' ./engine -args -scale.partitions=$(SCALEPARTS)
	it/kafka/broker run $(GO) test -tags it -run '^$$' -benchtime=1x -count=1 -timeout 30m -bench '^BenchmarkOwnedPartitionsBroker$$' ./engine -args -scale.partitions=$(SCALEPARTS)

## failover: it/failover on a real Kafka broker started for the run: two
## engine processes in one group, one SIGKILLed, stopped cleanly (SIGTERM)
## or SIGKILLed and restarted; seconds from the fault until the moved
## partitions are assigned again and folding, per consumer setting (old
## 45s/3s, new defaults 10s/1s, static membership, the consumer protocol).
## FAILOVERFLAGS: e.g. -runs 5 -settings new -faults kill (about 12 min as
## it is).
FAILOVERFLAGS ?= -runs 3
failover:
	@it/kafka/broker classpath
	it/kafka/broker run $(GO) run ./it/failover $(FAILOVERFLAGS)

## bench-deploys: it/failover's deploy matrix on a broker of its own: three
## instances, 8 and 32 input partitions, 1M keys; a rolling restart (each
## instance down 5 s) and a SIGKILL, under the previous defaults, today's,
## and standby replicas by count (docs/benchmarks.md, "Deploys"). ~35 min.
bench-deploys:
	@it/kafka/broker classpath
	it/kafka/broker run $(GO) run ./it/failover -partitions 8,32 -members 3 -settings previous,default,standby,dynamic-standby -faults rolling,kill -runs 2 -keys 1000000 -down 5s

## bench-latency: BenchmarkLatency (build tag it) on a broker of its own:
## the bare franz-go loop, the engine at least once and exactly once, and
## Kafka Streams 4.3.1 at least once and exactly once (it/kstreams, built
## with mvn; the same commit intervals), each fed at 10%, 50% and 90% of
## its own maximum (measured first, in the same run) and of the smallest
## (the same rates for all) for 10 s; p50, p99 and max from an input's
## produce to its output seen by a consumer, then the tables with each
## engine variant's p99 over Kafka Streams' at the same guarantee
## (docs/benchmarks.md, "Latency"; bench-limit runs it too). About 10 min.
## LATENCYARGS: its flags, e.g. -latency.max=limit=500000,... to skip the
## maxima, -latency.rates=0.1,0.5, -latency.variants=limit,exactly-once.
LATENCYARGS ?=
bench-latency:
	@it/kafka/broker classpath
	@it/kstreams/app build
	@out=$$(mktemp) && trap 'rm -f "$$out"' EXIT && \
	it/kafka/broker run $(GO) test -tags it -run '^$$' -bench '^BenchmarkLatency$$' -benchtime=1x -count=1 -timeout 60m ./engine -args $(LATENCYARGS) 2>&1 | tee "$$out" && \
	echo && $(GO) run ./internal/benchtable < "$$out"

## bench-scaleout: it/failover's scale-out on a broker of its own: two
## instances running, a third joins; 8 and 32 input partitions, 1M keys,
## under the previous defaults, today's (warm-ups) and standby replicas
## (docs/benchmarks.md, "Scaling out"). ~8 min.
bench-scaleout:
	@it/kafka/broker classpath
	it/kafka/broker run $(GO) run ./it/failover -partitions 8,32 -members 3 -settings previous,default,standby -faults scaleout -runs 2 -keys 1000000

## chaos: it/chaos on a replicated Kafka 4.3.1 cluster started for the run
## (it/kafka/cluster run: three nodes, replication factor 3): three engine
## processes over 16 input partitions fed throughout, exactly-once then
## at-least-once outputs (-mode both), while a schedule drawn from -seed
## (printed at the start) SIGKILLs, stops and SIGSTOPs engine processes
## and SIGKILLs and restarts broker nodes, one fault at a time, each
## followed by its observed recovery; then a verifier checks every key's
## committed state against the exact fold of its inputs, the outputs
## (once under eos), the snapshots' order, hanging transactions and the
## committed offsets, and prints the report (docs/testing.md, "Chaos").
## CHAOSARGS: the tool's flags, e.g. -seed 7 -mode eos -report chaos.json
## (the default size, 21 faults a mode, is about 15 min a mode).
## chaos-short: one mode (eos), 7 faults, under 8 min.
CHAOSARGS      ?=
CHAOSSHORTARGS ?= -mode eos -kills 3 -stops 1 -pauses 1 -broker-kills 1 -broker-restarts 1 -rate 100
chaos:
	@it/kafka/cluster classpath
	@bin=$$(mktemp -d) && trap 'rm -rf "$$bin"' EXIT && $(GO) build -o "$$bin/chaos" ./it/chaos && \
	it/kafka/cluster run "$$bin/chaos" $(CHAOSARGS)

chaos-short:
	@it/kafka/cluster classpath
	@bin=$$(mktemp -d) && trap 'rm -rf "$$bin"' EXIT && $(GO) build -o "$$bin/chaos" ./it/chaos && \
	it/kafka/cluster run "$$bin/chaos" $(CHAOSSHORTARGS) $(CHAOSARGS)

## probe: the fault probe (it/chaos/probe): PROBERUNS runs of it/chaos,
## each on a fresh single-node Kafka (PROBENODES), exactly-once, 3 members
## over 8 input partitions at 2700 records/s for 75 s (~200k records),
## the members aborting hanging transactions (-abort-hanging); then one
## table: hanging transactions met, exact state, outputs a read_committed
## reader saw twice or never, hanging transactions left, the longest time
## an unheld partition folded nothing during a hold. PROBEARGS: the fault
## schedule, e.g. '-broker-kills 3' (broker SIGKILLs under load) or
## '-kills-in-outage 1' (an engine SIGKILLed while the broker is down,
## then both restarted). PROBEOUT: where the reports and logs go.
PROBERUNS  ?= 3
PROBENODES ?= 1
PROBEOUT   ?= probe-out
PROBEBASE  ?= -mode eos -members 3 -partitions 8 -rate 2700 -duration 75s -abort-hanging -kills 0 -stops 0 -pauses 0 -broker-kills 0 -broker-restarts 0
PROBEARGS  ?= -broker-kills 3
probe:
	@it/kafka/cluster classpath
	@bin=$$(mktemp -d) && trap 'rm -rf "$$bin"' EXIT && $(GO) build -o "$$bin/chaos" ./it/chaos && \
	SNAPFENCE_KAFKA_NODES=$(PROBENODES) it/chaos/probe "$$bin/chaos" $(PROBERUNS) $(PROBEOUT) $(PROBEBASE) $(PROBEARGS)
