# kquota operator image.
#
#   docker build -t kquota:dev .
#   buildah build -t kquota:dev .            # same file, no Docker engine needed
#
# Two stages on the same slim Python base: `build` installs the hash-pinned
# dependencies (requirements.lock, wheels only: nothing is compiled) and kquota
# into a virtualenv; the final stage copies only that virtualenv, so pip, the
# build backend and the source tree never reach the image. The final stage runs
# no command (no RUN), so it needs no shell to build: it is the base, the
# virtualenv and a fixed non-root UID.
#
# BASE must provide python3 (3.11) with the venv module: the official
# python:3.11-slim-bookworm image, or Debian bookworm with python3-venv (what
# the repository's own build check uses, since it builds without a registry).

ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python3 -m venv /opt/kquota
COPY requirements.lock ./
# --require-hashes: every distribution is the one locked; --only-binary: no
# sdist is built, so no compiler is needed (all pins have manylinux wheels).
RUN /opt/kquota/bin/pip install --require-hashes --only-binary=:all: --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY operator/ operator/
# kquota itself, built with the locked setuptools/wheel (no build isolation, no
# index), then the installers are removed from the runtime virtualenv.
RUN /opt/kquota/bin/pip install --no-deps --no-build-isolation --no-index . \
 && /opt/kquota/bin/pip uninstall --yes setuptools wheel pip \
 && /opt/kquota/bin/python -m compileall -q /opt/kquota/lib \
 && /opt/kquota/bin/kquota --version

FROM ${BASE}
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.title="kquota" \
      org.opencontainers.image.description="Kubernetes operator managing Apache Kafka quotas as custom resources" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/kquota/kquota" \
      org.opencontainers.image.documentation="https://github.com/kquota/kquota/blob/main/docs/install.md"
COPY --from=build /opt/kquota /opt/kquota
# A fixed UID/GID (the chart's securityContext uses the same numbers). USER is
# set for Python's getpass (Kopf names its peering identity after the user when
# POD_ID is unset), since the UID has no /etc/passwd entry.
ENV PATH=/opt/kquota/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    USER=kquota \
    HOME=/tmp
USER 65532:65532
# 8080: /healthz (liveness); 9090: /metrics.
EXPOSE 8080 9090
ENTRYPOINT ["/opt/kquota/bin/kquota"]
CMD ["operator"]
