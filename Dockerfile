# effectgate gateway image, built in stages: `build` installs the gateway into a virtualenv at
# /opt/effectgate with a pinned pip kept outside it; the final stage is the slim base, a numeric
# non-root user and that virtualenv alone (no pip, no source tree, no build back-end, no caches).
# `sbom` writes the CycloneDX bill of materials of the same virtualenv. Lint: `make lint` runs
# hadolint; `make image` builds it (docs/deploy.md).
#
# The base image is a build argument. The tag below is for reading; a production build pins the
# digest the tag pointed to when it was tested, so a rebuild gets the same bytes:
#   docker build --build-arg BASE_IMAGE=python:3.11-slim@sha256:<digest> .
# (`docker buildx imagetools inspect python:3.11-slim` prints the digest; update it on purpose.)
#
# pip's configuration (an index, a proxy's CA) reaches the installing RUNs as build secrets, mounted
# for that RUN alone and never in a layer: `--secret id=pip.conf,src=FILE` (read through
# PIP_CONFIG_FILE) and `--secret id=pip-cert,src=CA_BUNDLE` (named by that file's `cert =`).
# Without them pip uses its defaults.
ARG BASE_IMAGE=python:3.11-slim
# pip itself, pinned like everything else (the same version as constraints.txt; tests check it).
ARG PIP_VERSION=26.3

FROM ${BASE_IMAGE} AS build
ARG PIP_VERSION
# pip's download cache is a cache mount (kept by the builder between builds, in no layer).
ENV PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CONFIG_FILE=/run/secrets/pip.conf \
    PIP_CACHE_DIR=/var/cache/pip
WORKDIR /src

# 1. Dependencies, from the distributions' metadata alone: this layer is rebuilt only when a
#    pyproject.toml or constraints.txt changes, not when the code or the README does. Every adapter, store and
#    exporter (the `all` extra), at the versions CI tested (constraints.txt), from wheels only.
#    The gateway's virtualenv gets no pip: the pip of /opt/pip installs into it (`--python`).
COPY pyproject.toml constraints.txt /src/
COPY clients/protos/pyproject.toml /src/clients/protos/
COPY clients/python/pyproject.toml /src/clients/python/
COPY scripts/image_requirements.py /src/scripts/
RUN --mount=type=secret,id=pip.conf --mount=type=secret,id=pip-cert --mount=type=cache,target=/var/cache/pip \
    python -m venv /opt/pip \
    && /opt/pip/bin/pip install --quiet "pip==${PIP_VERSION}" \
    && python -m venv --without-pip /opt/effectgate \
    && python scripts/image_requirements.py /tmp/requirements.txt /src \
    && /opt/pip/bin/pip --python /opt/effectgate/bin/python install --quiet --only-binary :all: \
       -c constraints.txt -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# 2. The three distributions, built with the pinned back-end (constraints-build.txt) and installed
#    without touching the dependencies above, under a prefix of their own: the final stage copies
#    them in a layer of their own, so a code change ships a small layer.
COPY VERSION README.md LICENSE constraints-build.txt /src/
COPY clients/protos /src/clients/protos
COPY clients/python /src/clients/python
COPY src /src/src
RUN --mount=type=secret,id=pip.conf --mount=type=secret,id=pip-cert --mount=type=cache,target=/var/cache/pip \
    /opt/pip/bin/pip --python /opt/effectgate/bin/python install --quiet --no-deps \
       --build-constraint constraints-build.txt --prefix /opt/effectgate-app \
       ./clients/protos ./clients/python ".[all]"

# The CycloneDX generator in a virtualenv of its own, from constraints-build.txt alone: a layer a
# code change does not rebuild (installed after the code, it was installed again on every build).
FROM ${BASE_IMAGE} AS sbom-tool
ARG PIP_VERSION
ENV PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CONFIG_FILE=/run/secrets/pip.conf \
    PIP_CACHE_DIR=/var/cache/pip
COPY constraints-build.txt /src/
RUN --mount=type=secret,id=pip.conf --mount=type=secret,id=pip-cert --mount=type=cache,target=/var/cache/pip \
    python -m venv /opt/sbom \
    && /opt/sbom/bin/pip install --quiet "pip==${PIP_VERSION}" \
    && /opt/sbom/bin/pip install --quiet -c /src/constraints-build.txt cyclonedx-bom

# The bill of materials of the installed environment, from its distributions' metadata
# (`make image` exports it with `--target sbom-file --output`).
FROM build AS sbom
COPY --from=sbom-tool /opt/sbom /opt/sbom
RUN cp -a /opt/effectgate-app/. /opt/effectgate/ \
    && /opt/sbom/bin/cyclonedx-py environment --output-reproducible \
       --output-format JSON --output-file /effectgate.cdx.json /opt/effectgate/bin/python

FROM scratch AS sbom-file
COPY --from=sbom /effectgate.cdx.json /

FROM ${BASE_IMAGE}
ARG BASE_IMAGE
# The image's version label; `--build-arg VERSION="$(cat VERSION)"` (tests check the default).
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="effectgate" \
      org.opencontainers.image.description="A gRPC gateway that gives AI agents exactly-once side effects" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/effectgate/bin:$PATH
RUN groupadd --system --gid 10001 effectgate \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/effectgate --create-home effectgate
# The dependencies (changed by a pyproject.toml or constraints.txt), then the gateway's own code.
COPY --from=build /opt/effectgate /opt/effectgate
COPY --from=build /opt/effectgate-app /opt/effectgate

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
# The check is a Python process: on a busy node its start alone has taken over 3 s (a check past
# its timeout counts as a failure), so it gets 10 s; three failures in a row make it unhealthy.
ENV EFFECTGATE_HEALTH_TARGET=127.0.0.1:50051
HEALTHCHECK --interval=15s --timeout=10s --start-period=10s --retries=3 \
    CMD ["sh", "-c", "exec python -m effectgate.gateway.runtime.healthcheck \"$EFFECTGATE_HEALTH_TARGET\""]
ENTRYPOINT ["effectgate"]
CMD ["--log-format", "json", "serve", "--config", "/etc/effectgate/effectgate.toml"]
