# kquota operator image.
#
#   docker build -t kquota:dev .
#   buildah build -t kquota:dev .            # same file, no Docker engine needed
#
# Two stages on the same slim Python base: `build` installs the hash-pinned
# dependencies and kquota into a virtualenv; the final stage copies only that
# virtualenv, so pip, the compiler, the build backend and the source tree never
# reach the image. The final stage runs no command (no RUN), so it needs no
# shell to build: it is the base, the virtualenv and a fixed non-root UID.
#
# Every SASL mechanism works with this image (#34 added GSSAPI and AWS MSK IAM;
# before, the image had neither and such clusters said so in their status):
# - GSSAPI: python-gssapi has no Linux wheel on PyPI, so the build stage
#   compiles its hash-checked sdist (requirements-kerberos.txt) against MIT krb5
#   with gcc and libkrb5-dev from Debian's apt, pinned below. The MIT Kerberos
#   runtime libraries it links (libgssapi-krb5-2 and its dependencies, from the
#   same pinned krb5 build) are copied into the virtualenv's lib/krb5, and the
#   gssapi modules carry that directory as their RPATH: the final stage needs no
#   apt (and so no RUN and no shell), does not depend on what the base has, and
#   no LD_LIBRARY_PATH changes what any other program loads.
# - AWS MSK IAM: AWS's signer and the AWS SDK, wheels from requirements-msk.txt,
#   installed --no-deps as the Makefile does (botocore declares python-dateutil<3,
#   kubernetes 37 needs >=3; see that file). Imported only by clusters using it.
#
# BASE must provide python3 (3.11) with the venv module, on Debian bookworm (the
# build stage uses its apt): the official python:3.11-slim-bookworm image, or
# Debian bookworm with python3-venv (what the repository's own build check uses,
# since it builds without a registry).

ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
# Debian bookworm's versions of what compiles python-gssapi. A Debian point
# release that supersedes one makes apt fail here (pass the new version as a
# --build-arg, or update it): the build never silently takes another. libc6-dev
# and, where the base's python3 is Debian's, its headers (libpython3.X-dev) are
# pinned to the exact versions of the base's libc6 and python3 they must match.
ARG KRB5_VERSION=1.20.1-2+deb12u5
ARG GCC_VERSION=4:12.2.0-3
ARG GCC12_VERSION=12.2.0-14+deb12u1
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN set -eu; \
    headers=""; \
    if [ ! -e "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ]; then \
      libpython="libpython$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"; \
      headers="$libpython-dev=$(dpkg-query -W -f='${Version}' "$libpython-stdlib")"; \
    fi; \
    apt-get update -qq; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "gcc=$GCC_VERSION" "gcc-12=$GCC12_VERSION" "libc6-dev=$(dpkg-query -W -f='${Version}' libc6)" \
      "libkrb5-dev=$KRB5_VERSION" $headers >/dev/null; \
    rm -rf /var/lib/apt/lists/*
WORKDIR /src
RUN python3 -m venv /opt/kquota
COPY requirements.lock ./
# --require-hashes: every distribution is the one locked; --only-binary: no
# sdist is built (all pins have manylinux wheels).
RUN /opt/kquota/bin/pip install --require-hashes --only-binary=:all: --no-deps -r requirements.lock
# GSSAPI: Cython (hash-checked wheel) first, then gssapi's sdist built with it
# and the locked setuptools, without build isolation (so no build requirement
# is fetched unhashed); Cython is removed after. -rpath with --disable-new-dtags
# writes DT_RPATH, which the loader also uses for the libraries libgssapi_krb5
# itself needs (libkrb5, libk5crypto, ...); DT_RUNPATH would not be inherited.
# -s strips the modules' debug information (9 MB to about 3, as in a wheel).
# The six packages' libraries (and their copyright files) go to lib/krb5, and
# ldd must resolve every gssapi module's MIT libraries there.
COPY requirements-kerberos-build.txt requirements-kerberos.txt ./
RUN set -eu; \
    /opt/kquota/bin/pip install --require-hashes --only-binary=:all: --no-deps -r requirements-kerberos-build.txt; \
    LDFLAGS="-Wl,-rpath,/opt/kquota/lib/krb5 -Wl,--disable-new-dtags -Wl,-s" \
      /opt/kquota/bin/pip install --require-hashes --only-binary=:all: --no-binary=gssapi --no-deps \
      --no-build-isolation -r requirements-kerberos.txt; \
    /opt/kquota/bin/pip uninstall --yes cython; \
    mkdir -p /opt/kquota/lib/krb5/copyright; \
    for package in libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1; do \
      dpkg -L "$package" | grep -E '/lib[^/]+\.so[.0-9]*$' | xargs cp -a -t /opt/kquota/lib/krb5; \
      cp "/usr/share/doc/$package/copyright" "/opt/kquota/lib/krb5/copyright/$package"; \
    done; \
    modules=$(find /opt/kquota/lib/python3*/site-packages/gssapi -name '*.so'); \
    if ldd $modules | grep -E 'not found|lib(gssapi_krb5|krb5|k5crypto|krb5support|com_err|keyutils)\.so' \
         | grep -v '=> /opt/kquota/lib/krb5/'; then echo 'gssapi: MIT krb5 not resolved in lib/krb5' >&2; exit 1; fi
# AWS MSK IAM: wheels only, hash-checked, --no-deps (requirements-msk.txt says why).
COPY requirements-msk.txt ./
RUN /opt/kquota/bin/pip install --require-hashes --only-binary=:all: --no-deps -r requirements-msk.txt
COPY pyproject.toml README.md ./
COPY operator/ operator/
# kquota itself, built with the locked setuptools/wheel (no build isolation, no
# index), then the installers are removed from the runtime virtualenv.
RUN /opt/kquota/bin/pip install --no-deps --no-build-isolation --no-index . \
 && /opt/kquota/bin/pip uninstall --yes setuptools wheel pip \
 && /opt/kquota/bin/python -m compileall -q /opt/kquota/lib \
 && /opt/kquota/bin/kquota --version \
 && /opt/kquota/bin/python -c 'import gssapi, aws_msk_iam_sasl_signer'

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
