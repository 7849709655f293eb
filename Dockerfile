# The Shipyard operator image, for users and CI with Docker:
#
#     docker build -t shipyard/operator:0.1.0 .
#
# Without Docker (the local cluster), the same image is made from a root filesystem by
# hack/localcluster/operator_image.py. Both install the package from its wheel with the runtime
# dependencies pinned by hack/operator-image/constraints.txt, carry the static Go runner at
# /runner, run as the non-root user 10001 and start `python3 -m shipyard operator`.

FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/shipyard ./operator/shipyard
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# The static in-pod runner (runner/), carried at /runner: trial pods copy it from this image
# with an init container (`/runner install`, chart value trials.runnerImage, empty = this image).
# Its loader (runner/loader), with which trial pods get the runner from ConfigMaps instead
# (SHIPYARD_RUNNER_FILES=/opt/shipyard/runner: no init container), is built without libc.
FROM golang:1.22 AS runner
WORKDIR /src
COPY runner/go.mod runner/*.go ./
COPY runner/loader ./loader
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /runner . \
 && mkdir -p /opt/shipyard/runner && cp /runner /opt/shipyard/runner/runner \
 && cc -static -nostdlib -Os -ffreestanding -fno-stack-protector \
       -fno-asynchronous-unwind-tables -Wall -Werror -Wl,--build-id=none -s \
       -o /opt/shipyard/runner/loader loader/loader.c

FROM python:3.11-slim
LABEL org.opencontainers.image.title="shipyard-operator" \
      org.opencontainers.image.description="Kubernetes operator that runs Harbor-format agent-evaluation tasks" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY hack/operator-image/constraints.txt /tmp/constraints.txt
COPY --from=wheel /wheels /tmp/wheels
COPY --from=runner /runner /runner
COPY --from=runner /opt/shipyard/runner /opt/shipyard/runner
RUN pip install --no-cache-dir --only-binary=:all: --constraint /tmp/constraints.txt /tmp/wheels/*.whl \
 && rm -rf /tmp/wheels /tmp/constraints.txt \
 && groupadd --gid 10001 shipyard \
 && useradd --uid 10001 --gid 10001 --home-dir /home/shipyard --create-home \
            --shell /usr/sbin/nologin shipyard
USER 10001:10001
WORKDIR /home/shipyard
# kopf's liveness endpoint (see the Helm chart's probes).
EXPOSE 8080
ENTRYPOINT ["python3", "-m", "shipyard"]
CMD ["operator"]
