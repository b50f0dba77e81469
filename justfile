# EchoStore for Rust: the everyday recipes. `just --list` shows them.

# Run every test, the cluster and TLS suites included (provisions a private valkey-server on first use).
test:
    cargo test --workspace --all-features

# Formatting check and clippy with warnings as errors.
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets -- -D warnings

# The criterion benches (L1 hit, L2 GET, herd, wake-up, peers); figures go in docs/benchmarks.md.
bench:
    cargo bench -p echostore-benches

# The stampede race readout against an embedded Valkey; pass flags, e.g. `just race --losers stale`.
race *ARGS:
    cargo run --release -p echostore-cli -- race {{ARGS}}

# A private Valkey for manual experiments, until Ctrl-C.
valkey:
    cargo run --release -p echostore-cli -- valkey

# What Valkey holds for one id (envelope, PTTL, lock), e.g. `just inspect users 42 --valkey redis://host:6379`.
inspect *ARGS:
    cargo run --release -p echostore-cli -- inspect {{ARGS}}

# Invalidate one id everywhere (DEL value and lock, as Table::invalidate), e.g. `just purge users 42`.
purge *ARGS:
    cargo run --release -p echostore-cli -- purge {{ARGS}}

# The consistency model checked across 3 worker processes (docs/consistency.md); pass flags, e.g.
# `just check --faults all` or `just check --valkey redis://host:6379`.
check *ARGS:
    cargo run --release -p echostore-cli -- check {{ARGS}}

# The same for five minutes with every fault in turn: the long run.
check-long *ARGS:
    cargo run --release -p echostore-cli -- check --faults all --seconds 300 {{ARGS}}

# What CI runs.
ci:
    bash .ci/run

# A million distinct ids through one table: L1 stays bounded; prints peak RSS per backend.
storm *ARGS:
    cargo run --release -p echostore-benches --bin storm -- {{ARGS}}

# Valkey's cost per write against tracking connections, BCAST vs default tracking (docs/scale.md);
# writes docs/scale/measured.csv and its plots. Pass flags, e.g. `just scale-bench --conns 1,64,512 --seconds 5`.
scale-bench *ARGS:
    cargo run --release -p echostore-benches --bin scale_bench -- {{ARGS}}
