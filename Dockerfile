# `decider serve` in a container: built in the Rust image, run from a slim Debian image as a
# non-root user, with a health check on /health (503 while the model loads, 200 once ready).
#
#   docker build -t decider .                              # ndarray (CPU)
#   podman build --format docker -t decider .              # Podman: keeps the HEALTHCHECK
#   docker build -t decider --build-arg FEATURES=candle .  # more backends: decider-cli's features
#   docker run -p 8000:8000 -v /srv/models/decider-2b:/model:ro decider
#
# Every flag of `decider serve` is also a DECIDER_* variable (`docker run -e DECIDER_THREADS=8`).
# Deployment notes and a Kubernetes example: docs/deploy.md.

# The Rust of the build: the workspace's rust-version or later.
ARG RUST_VERSION=1.92
FROM rust:${RUST_VERSION}-bookworm AS build
ARG FEATURES=""
WORKDIR /src
COPY . .
RUN cargo install --path crates/cli --locked --root /out ${FEATURES:+--features "$FEATURES"}

FROM debian:bookworm-slim
# ca-certificates: Hub downloads (`--model owner/name`) over TLS; curl: the health check.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --create-home --home-dir /home/decider decider
COPY --from=build /out/bin/decider /usr/local/bin/decider
USER decider
ENV DECIDER_MODEL=/model \
    DECIDER_ADDR=0.0.0.0:8000 \
    HF_HOME=/home/decider/.cache/huggingface
EXPOSE 8000
# A model of tens of GB takes minutes to load: the start period covers it.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10m --retries=3 \
    CMD curl -fsS http://127.0.0.1:8000/health || exit 1
ENTRYPOINT ["decider", "serve"]
