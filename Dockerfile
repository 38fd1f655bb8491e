# effectgate gateway image: slim base, non-root, health check through the standard gRPC health service.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

COPY clients/protos /app/clients/protos
COPY clients/python /app/clients/python
COPY pyproject.toml README.md LICENSE constraints.txt /app/
COPY src /app/src
# Every adapter, store and exporter (the `all` extra), at the versions CI tested (constraints.txt).
RUN pip install --upgrade pip && pip install -c /app/constraints.txt /app/clients/protos /app/clients/python "/app[all]" \
    && useradd --system --uid 10001 --home-dir /var/lib/effectgate --create-home effectgate

USER effectgate
WORKDIR /var/lib/effectgate
EXPOSE 50051
# Prometheus text endpoint when [telemetry] prometheus_listen = "0.0.0.0:9464"; traces and metrics
# also go to any OTLP collector named by OTEL_EXPORTER_OTLP_ENDPOINT (docs/observability.md).
EXPOSE 9464
# Mount the config (and TLS files) at /etc/effectgate; secrets come from the environment.
# With TLS, set EFFECTGATE_TLS_CA (and for mTLS EFFECTGATE_TLS_CERT / EFFECTGATE_TLS_KEY, a client
# certificate of your CA; EFFECTGATE_TLS_SERVER_NAME when the certificate does not name 127.0.0.1):
# the health check below reads them and speaks TLS / mTLS.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-m", "effectgate.gateway.runtime.healthcheck", "127.0.0.1:50051"]
ENTRYPOINT ["effectgate"]
CMD ["--log-format", "json", "serve", "--config", "/etc/effectgate/effectgate.toml"]
