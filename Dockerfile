# syntax=docker/dockerfile:1
# The roam image: the `roam` binary (every app, `roam launch`, benchmarks) and the Python package,
# built in a Rust stage and copied into a slim runtime that runs as a non-root user.
#
#   docker build -t roam .
#   docker run --rm roam demo
#   docker run --rm roam train mf --mode single
#
# deploy/k8s runs this image as a StatefulSet (docs/launching.md).

FROM rust:1.95-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p roam-cli --bin roam \
    && install -D target/release/roam /out/bin/roam \
    && python3 -m venv /tmp/build-venv \
    && /tmp/build-venv/bin/pip install --quiet "maturin>=1.9.4,<2" \
    && /tmp/build-venv/bin/pip wheel --quiet --no-deps --no-build-isolation -w /out/wheels ./python

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 roam \
    && useradd --system --uid 10001 --gid roam --create-home --home-dir /home/roam roam
COPY --from=build /out/bin/roam /usr/local/bin/roam
COPY --from=build /out/wheels /opt/roam/wheels
# The Python package in its own environment (numpy comes from PyPI as its dependency).
RUN python3 -m venv /opt/roam/venv \
    && /opt/roam/venv/bin/pip install --quiet --no-cache-dir /opt/roam/wheels/roam-*.whl
ENV PATH=/opt/roam/venv/bin:$PATH
USER 10001:10001
WORKDIR /home/roam
# roam's coordinator (rank 0) and its Prometheus metrics.
EXPOSE 29500 9100
ENTRYPOINT ["roam"]
CMD ["demo"]
