# syntax=docker/dockerfile:1
#
# The krabka-authority service image.
#
#   docker build -t krabka-authority:0.1.0 .
#   docker run --rm -p 8080:8080 -e KRABKA_BOOTSTRAP_SERVERS=kafka:9092 krabka-authority:0.1.0
#
# Every setting is a KRABKA_* environment variable (docs/operations.md, Configuration).
# The image holds the binary alone: no shell, no package manager.

# ---- build -----------------------------------------------------------------
# The slim Rust image has gcc and libc6-dev, which zstd-sys and lz4-sys
# (C code, via kafka-protocol) need. Bookworm, to match the runtime's glibc.
# The version is the one CI builds with (scripts/image).
FROM rust:1.95.0-slim-bookworm AS builder
WORKDIR /build

# Dependencies first. `cargo fetch` reads the workspace's manifests: the
# root's (its targets have explicit paths, which fetch does not open) and
# the member crates' (crates/, whose inferred library targets must exist)
# and the patched kafka-protocol the root's [patch.crates-io] names
# (vendor/). The registry is a BuildKit cache, shared with the build step: a
# change to the manifests fetches only what is new.
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
COPY vendor ./vendor
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    cargo fetch --locked

# The sources. README.md (crate docs) and openapi/openapi.yaml (served at
# /openapi.yaml) are compiled into the binary with include_str!.
COPY README.md ./
COPY openapi ./openapi
COPY src ./src

# The target directory is a BuildKit cache too: a rebuild after a source
# change recompiles the workspace's crates, not their dependencies. It is not
# part of the layer, so the binary is copied out in the same step. This step
# runs only when a source changed; cargo judges freshness by modification
# times, which COPY keeps from the build context (a file edited while an
# earlier build ran is older than that build's artifacts), so the crates'
# roots are touched first.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/build/target,sharing=locked \
    touch src/lib.rs src/main.rs crates/*/src/lib.rs \
    && cargo build --release --locked --offline --bin krabka-authority \
    && cp target/release/krabka-authority /krabka-authority

# ---- runtime ---------------------------------------------------------------
# glibc and libgcc_s (all the binary links), CA certificates, a nonroot user
# (65532). To pin the exact bytes, append the digest:
#   docker buildx imagetools inspect gcr.io/distroless/cc-debian12:nonroot
FROM gcr.io/distroless/cc-debian12:nonroot

ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="krabka-authority" \
      org.opencontainers.image.description="Kafka-fenced leadership: authority checks, roster views and metrics over HTTP" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot"

COPY --from=builder /krabka-authority /krabka-authority

USER 65532:65532
# /healthz, /readyz, /metrics and the API, all on this one port (KRABKA_LISTEN).
EXPOSE 8080
# SIGTERM drains requests in flight for up to KRABKA_DRAIN_TIMEOUT (10s).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/krabka-authority"]
CMD ["serve"]
