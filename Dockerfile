# effectgate gateway image: slim base, numeric non-root user, dependencies in a layer of their own,
# health check through the standard gRPC health service. Lint: `make lint` runs hadolint on it.
#
# The base image is a build argument. The tag below is for reading; a production build pins the
# digest the tag pointed to when it was tested, so a rebuild gets the same bytes:
#   docker build --build-arg BASE_IMAGE=python:3.11-slim@sha256:<digest> .
# (`docker buildx imagetools inspect python:3.11-slim` prints the digest; update it on purpose.)
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG BASE_IMAGE
# The image's version label; `--build-arg VERSION="$(cat VERSION)"` (tests check the default).
ARG VERSION=0.1.0
# pip itself, pinned like everything else (the same version as constraints.txt; tests check it).
ARG PIP_VERSION=26.3
LABEL org.opencontainers.image.title="effectgate" \
      org.opencontainers.image.description="A gRPC gateway that gives AI agents exactly-once side effects" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# 1. Dependencies, from the distributions' metadata alone: this layer is rebuilt only when a
#    pyproject.toml or constraints.txt changes, not when the code does. Every adapter, store and
#    exporter (the `all` extra), at the versions CI tested (constraints.txt).
COPY VERSION pyproject.toml README.md LICENSE constraints.txt /app/
COPY clients/protos/pyproject.toml /app/clients/protos/
COPY clients/python/pyproject.toml /app/clients/python/
COPY scripts/image_requirements.py /app/scripts/
RUN pip install "pip==${PIP_VERSION}" \
    && python /app/scripts/image_requirements.py /tmp/requirements.txt /app \
    && pip install -c /app/constraints.txt -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt \
    && groupadd --system --gid 10001 effectgate \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/effectgate --create-home effectgate

# 2. The three distributions themselves, without touching the dependencies installed above.
COPY clients/protos /app/clients/protos
COPY clients/python /app/clients/python
COPY src /app/src
RUN pip install --no-deps /app/clients/protos /app/clients/python "/app[all]"

# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
WORKDIR /var/lib/effectgate
EXPOSE 50051
# Prometheus text endpoint and the /livez and /readyz probes when [telemetry] prometheus_listen =
# "0.0.0.0:9464"; traces and metrics also go to any OTLP collector named by
# OTEL_EXPORTER_OTLP_ENDPOINT (docs/observability.md, docs/production.md).
EXPOSE 9464
# Mount the config (and TLS files) at /etc/effectgate; secrets come from the environment.
# The health check asks the gRPC health service at EFFECTGATE_HEALTH_TARGET (a gateway listening
# elsewhere than 127.0.0.1:50051 sets it). With TLS, set EFFECTGATE_TLS_CA (and for mTLS
# EFFECTGATE_TLS_CERT / EFFECTGATE_TLS_KEY, a client certificate of your CA;
# EFFECTGATE_TLS_SERVER_NAME when the certificate does not name 127.0.0.1): it speaks TLS / mTLS.
ENV EFFECTGATE_HEALTH_TARGET=127.0.0.1:50051
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["sh", "-c", "exec python -m effectgate.gateway.runtime.healthcheck \"$EFFECTGATE_HEALTH_TARGET\""]
ENTRYPOINT ["effectgate"]
CMD ["--log-format", "json", "serve", "--config", "/etc/effectgate/effectgate.toml"]
