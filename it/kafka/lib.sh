# shellcheck shell=bash
# The sourcing script sets prog and uses the variables set here.
# shellcheck disable=SC2034,SC2154
# Shared by it/kafka/broker and it/kafka/cluster (sourced, not run): the
# classpath of Kafka's jars resolved through Maven, free ports, process
# checks and the java command line of a server. The sourcing script sets
# prog (its name, the prefix of its messages) first.

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=$root/.cache/kafka
cpfile=$cache/classpath
start_timeout=${SNAPFENCE_KAFKA_START_TIMEOUT:-60}
stop_grace=${SNAPFENCE_KAFKA_STOP_GRACE:-20}
# java_heap: the heap flags of a server's JVM.
java_heap=(-Xms256m -Xmx1g)

die() {
	echo "$prog: $*" >&2
	exit 1
}

need_java() {
	command -v java >/dev/null 2>&1 ||
		die "java not found on PATH: the Kafka broker needs a Java 17+ runtime (e.g. apt-get install openjdk-17-jre-headless)"
	local spec
	spec=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = //p')
	case $spec in
	1.* | [0-9] | 1[0-6]) die "java on PATH is version $spec; Kafka 4 needs 17 or newer" ;;
	esac
}

need_mvn() {
	command -v mvn >/dev/null 2>&1 ||
		die "mvn not found on PATH: Maven resolves the Kafka broker from Maven Central (e.g. apt-get install maven)"
}

# classpath_ok: the classpath file is newer than the pom and every jar in
# it is still in the local repository.
classpath_ok() {
	[[ -s $cpfile && $cpfile -nt $here/pom.xml ]] || return 1
	local jar jars
	IFS=: read -r -a jars <"$cpfile"
	for jar in "${jars[@]}"; do
		[[ -f $jar ]] || return 1
	done
}

cmd_classpath() {
	need_java
	if classpath_ok; then
		return 0
	fi
	need_mvn
	mkdir -p "$cache"
	echo "$prog: resolving Kafka's classpath with Maven (the first run downloads ~80 MB into ~/.m2)" >&2
	if ! mvn -q -B -f "$here/pom.xml" dependency:build-classpath \
		-Dmdep.outputFile="$cpfile.$$" >"$cache/mvn.log" 2>&1; then
		cat "$cache/mvn.log" >&2
		rm -f "$cpfile.$$"
		die "mvn dependency:build-classpath failed (log above, also in $cache/mvn.log)"
	fi
	# The SLF4J binding must match the log4j the broker pulls, or the broker
	# may log nothing; pom.xml pins both versions.
	local core impl
	core=$(tr : '\n' <"$cpfile.$$" | sed -n 's|.*/log4j-core-\([^/]*\)\.jar$|\1|p')
	impl=$(tr : '\n' <"$cpfile.$$" | sed -n 's|.*/log4j-slf4j-impl-\([^/]*\)\.jar$|\1|p')
	[[ -n $core && $core == "$impl" ]] || {
		rm -f "$cpfile.$$"
		die "log4j-core ($core) and log4j-slf4j-impl ($impl) differ: set log4j.version in $here/pom.xml to the broker's log4j"
	}
	mv "$cpfile.$$" "$cpfile"
}

# listening PORT: something accepts TCP connections on 127.0.0.1:PORT.
listening() {
	timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# free_port [EXCEPT...]: a port on 127.0.0.1 that nothing listens on and
# that is none of EXCEPT, below the usual ephemeral range (32768+) so no
# outgoing connection holds it.
free_port() {
	local p n x taken
	for ((n = 0; n < 100; n++)); do
		p=$((20000 + RANDOM % 12000))
		taken=
		for x in "$@"; do
			[[ $p != "$x" ]] || taken=1
		done
		[[ -z $taken ]] || continue
		listening "$p" || {
			echo "$p"
			return 0
		}
	done
	die "found no free port on 127.0.0.1"
}

# kafka_uuid: a random Kafka Uuid (16 random bytes, URL-safe base64, no
# padding), as `kafka-storage.sh random-uuid` makes, without a JVM start.
kafka_uuid() {
	local id
	while :; do
		id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
		# Kafka never hands out an id starting with '-' (it reads as a flag),
		# nor the reserved all-zero one.
		[[ $id == -* || $id == AAAAAAAAAAAAAAAAAAAAA[AQ] ]] || break
	done
	echo "$id"
}

# cluster_id: a random cluster id.
cluster_id() {
	kafka_uuid
}

# alive PID: the process exists and is not a zombie.
alive() {
	[[ -r /proc/$1/stat ]] || {
		kill -0 "$1" 2>/dev/null
		return
	}
	local state
	state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
	[[ -n $state && $state != Z && $state != X ]]
}

# ours PID DIR: PID is the broker started for DIR (guards against a reused
# pid).
ours() {
	[[ -r /proc/$1/cmdline ]] || return 0
	tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "kafka.Kafka $2/server.properties"
}

log_tail() {
	local f
	for f in "$1/logs/stdout.log" "$1/logs/server.log"; do
		[[ -s $f ]] || continue
		echo "--- last lines of $f (without the config dumps)" >&2
		grep -v '^[[:space:]]' "$f" | tail -n 40 >&2
	done
}

# set_java_cmd DIR: the java command line (less the main class) for DIR's
# broker, in the array java_cmd.
set_java_cmd() {
	java_cmd=(java "${java_heap[@]}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20
		-Djava.awt.headless=true
		-Dlog4j2.configurationFile="$here/log4j2.xml"
		-Dkafka.logs.dir="$1/logs"
		-cp "$(cat "$cpfile")")
}

# stop_server DIR WHAT: SIGTERM the server of DIR (WHAT names it in
# messages: broker, node), SIGKILL after the grace period; returns once it
# has exited. DIR without a pid file: nothing to do.
stop_server() {
	local dir=$1 what=$2 pid
	[[ -f $dir/pid ]] || return 0
	pid=$(cat "$dir/pid")
	dir=$(cd "$dir" && pwd)
	if alive "$pid" && ! ours "$pid" "$dir"; then
		echo "$prog: pid $pid is not the $what of $dir (it exited and the pid was reused); leaving it" >&2
	elif alive "$pid"; then
		kill -TERM "$pid" 2>/dev/null || true
		local deadline=$((SECONDS + stop_grace))
		while alive "$pid" && ((SECONDS < deadline)); do
			sleep 0.2
		done
		if alive "$pid"; then
			echo "$prog: the $what in $dir ignored SIGTERM for ${stop_grace}s; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
			deadline=$((SECONDS + 10))
			while alive "$pid"; do
				((SECONDS < deadline)) || die "the $what in $dir (pid $pid) survived SIGKILL"
				sleep 0.1
			done
		fi
	fi
	rm -f "$dir/pid"
}

kafka_version() {
	sed -n 's|.*<kafka.version>\(.*\)</kafka.version>.*|\1|p' "$here/pom.xml"
}
