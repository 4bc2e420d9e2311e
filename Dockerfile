# tickswarm as a container: build with the Rust toolchain, run from a small Debian image as a
# non-root user (uid 10001). The load generator needs nothing at run time but libc.
#
#   docker build -t tickswarm .
#   docker run --rm --user "$(id -u):$(id -g)" -v "$PWD/reports:/reports" \
#     -e TICKSWARM_TARGET=staging.example.net:7777 -e TICKSWARM_OUT=/reports/run \
#     tickswarm run /scenarios/quickstart.yaml
#
# Every run option can come from a TICKSWARM_* variable (see docs/reference/environment.md).
# scripts/check_container.sh builds this file and checks the image (docs/guide/containers.md).

FROM rust:1-slim-bookworm AS build
WORKDIR /src
# The `shipped` profile (Cargo.toml): fat LTO, no debug info, symbols stripped.
# Dependencies first, so a source change does not rebuild them. The stub list below must
# name every [[bench]] of Cargo.toml (cargo refuses a manifest whose bench file is missing).
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches \
    && echo 'fn main() {}' > src/main.rs \
    && echo '' > src/lib.rs \
    && for b in cafe_hot_path darkages_decode netsim send_batch; do echo 'fn main() {}' > "benches/$b.rs"; done \
    && cargo build --profile shipped --locked --bin tickswarm
COPY src ./src
COPY templates ./templates
# The protocol pages are the protocol modules' rustdoc (include_str!).
COPY docs/protocols ./docs/protocols
COPY benches ./benches
# touch: the placeholder sources built above are older than the real ones, but be sure.
RUN touch src/main.rs src/lib.rs \
    && cargo build --profile shipped --locked --bin tickswarm

FROM debian:bookworm-slim AS runtime
LABEL org.opencontainers.image.title="tickswarm" \
      org.opencontainers.image.description="Headless load-test and bot-swarm tool for real-time multiplayer game servers" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0"
# A fixed non-root user; the reports folder is theirs so a mounted volume can be written.
RUN useradd --system --uid 10001 --create-home --home-dir /home/tickswarm tickswarm \
    && mkdir -p /reports /scenarios \
    && chown tickswarm /reports
COPY --from=build /src/target/shipped/tickswarm /usr/local/bin/tickswarm
COPY scenarios /scenarios
USER 10001
WORKDIR /reports
ENTRYPOINT ["tickswarm"]
CMD ["--help"]
