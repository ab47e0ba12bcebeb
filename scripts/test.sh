#!/usr/bin/env bash
# The test command: formatting, lints, build, the Rust suite (unit tests,
# end-to-end tests against target/debug/tarn via librdkafka, and the
# differential test against Apache Kafka), the Python client suite
# (confluent-kafka, kafka-python, aiokafka, kcat, kafkajs from tests/node,
# and Apache Kafka's own command-line tools), the Go client suite
# (franz-go and sarama, tests/go) and the Java client suite (tests/java,
# Maven; once per kafka-clients line, Maven downloading the clients).
#
# On a fresh Debian machine, run as root, it installs what it needs first:
# kcat, chromium (for the console test), python3-venv, a C toolchain, Node.js,
# Java and Maven from apt when missing, the pinned Python clients into .venv,
# kafkajs with npm, and Apache Kafka's jars from Maven Central; the Go modules
# pinned in tests/go/go.sum come through the Go module proxy (Go itself must
# be there). Every step's failure fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "system packages"
missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v make >/dev/null 2>&1 || missing+=(make)
# The web console is tested in headless Chromium (tests/python/test_console.py).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]] || missing+=(fonts-dejavu-core)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
# kafkajs runs on Node.js (tests/node, tests/python/test_kafkajs.py).
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
# Apache Kafka's tools (scripts/kafka.sh) run on Java; Maven resolves them.
command -v java >/dev/null 2>&1 || missing+=(default-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
# The Go suite (tests/go) needs Go 1.21 or later on PATH (or in
# /usr/local/go): it fetches the toolchain tests/go/go.mod asks for through
# the module proxy if it is older. Debian 12's golang-go (1.19) cannot, so it
# is not installed from apt; the Go step fails with a message instead.
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    export PATH="/usr/local/go/bin:$PATH"
fi
# The partition tests put cluster nodes in network namespaces (iproute2's ip).
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    missing+=(python3-venv)
fi
if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "missing packages: ${missing[*]}; install them or run as root" >&2
        exit 1
    fi
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
else
    echo "kcat, cc, make, python3 venv, chromium, node, npm, java, mvn, ip: present"
fi

step "python venv (.venv)"
if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt

step "node clients (npm ci in tests/node)"
(cd tests/node && npm ci --no-audit --no-fund)

step "cargo fmt --all --check"
cargo fmt --all --check

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo build --workspace"
cargo build --workspace

step "Apache Kafka's jars from Maven Central (scripts/kafka.sh: the reference broker and Kafka's tools)"
scripts/kafka.sh classpath

step "cargo test --workspace --no-fail-fast"
cargo test --workspace --no-fail-fast

step "pytest tests/python"
TARN_BIN=target/debug/tarn .venv/bin/python -m pytest -q tests/python

step "go: gofmt, go vet, go test in tests/go (franz-go, sarama)"
tarn_bin="$PWD/target/debug/tarn"
if ! command -v go >/dev/null 2>&1; then
    echo "go not found: tests/go needs Go 1.21 or later on PATH (see tests/go/go.mod)" >&2
    exit 1
fi
(
    cd tests/go
    # go.sum is the pin: fail rather than update it.
    export GOFLAGS="-mod=readonly${GOFLAGS:+ $GOFLAGS}"
    unformatted=$(gofmt -l .)
    if [[ -n $unformatted ]]; then
        echo "gofmt would change: $unformatted" >&2
        exit 1
    fi
    go vet ./...
    TARN_BIN="$tarn_bin" go test -count=1 -timeout 10m ./...
)

# Each kafka-clients line the Java suite covers; Surefire prints a summary
# per run, and any failing test fails the script.
for kafka_version in 4.4.0 3.9.1; do
    step "java client suite: kafka-clients $kafka_version (mvn test in tests/java)"
    (cd tests/java && TARN_BIN="$PWD/../../target/debug/tarn" mvn -B -ntp test -Dkafka.version="$kafka_version")
done

step "fuzz: short seeded pass of every target (cargo-fuzz)"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
fuzz/ci.sh
