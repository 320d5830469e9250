# kquota: the two commands a user needs are `make demo` and `make test`.
# Everything they need is installed by the targets below; downloads and builds
# are cached under $(KQUOTA_CACHE) (outside the clone) so only the first run pays.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export KQUOTA_CACHE ?= $(HOME)/.cache/kquota
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# pytest arguments, e.g. `make test PYTEST_ARGS="-k reconcile -x"`
PYTEST_ARGS ?=

.PHONY: help setup venv go-builds system-packages tools lint test test-node test-node-advisor test-unit test-faults test-gitops test-matrix test-k8s-floor test-stress soak demo demo-node crds lock clean

help:
	@echo "make demo   - local Kafka + kube-apiserver + operator + examples, then show status (Ctrl-C stops all)"
	@echo "make demo-node - the same with the operator as pods (the chart) on a single-node cluster (root)"
	@echo "make test   - install everything and run every test (lint, types, layers, unit, integration, e2e)"
	@echo "make test-node - only the tests on the single-node cluster (operator pods from the chart; needs root)"
	@echo "make test-node-advisor - the advisor on the single-node cluster: a local-mode Job, Spark on Kubernetes (driver in a Job, and plan --impact from here) (builds the advisor image; release check)"
	@echo "make test-faults - only the fault suite (broker/API server/operator faults; prints the resilience report)"
	@echo "make test-gitops - only the Flux suite: Flux's source- and kustomize-controller syncing Git repositories of quotas"
	@echo "make test-matrix - the e2e core on every supported Kafka: 4.3, 4.0, 3.9 KRaft and ZooKeeper, 3.0 ZooKeeper (release check)"
	@echo "make test-k8s-floor - CRDs, admission corpus, e2e core and Helm on Kubernetes 1.31, the floor (release check; first build ~15 min)"
	@echo "make soak SEED=1 FAULTS=100 - the seeded chaos soak (report in soak-reports/; replay a failure with its SEED and step; STARVE=1 beside CPU hogs)"
	@echo "make test-stress - the e2e, fault, soak and node suites beside CPU hogs, twice the cores (release check)"
	@echo "make crds   - regenerate crds/ and the Helm chart's copy from the pydantic models"

$(VENV)/.installed: pyproject.toml requirements-msk.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,spark]'
	# AWS MSK IAM's signer, without the resolver (see the file: botocore and kubernetes disagree on python-dateutil).
	$(PY) -m pip install -q --no-deps --require-hashes -r requirements-msk.txt
	touch $@

venv: $(VENV)/.installed

# Debian packages some tests drive for real: Prometheus (scrapes the brokers),
# zsh and fish (the completion scripts are checked by the shells themselves),
# chromium (the advisor's HTML report is opened in a real browser), the
# single node's runtime (harness/node.py): containerd, runc, iptables, the CNI
# plugins, buildah and debootstrap (the images are built here, not pulled), and
# MIT Kerberos (harness/kdc.py): the KDC, kadmin.local, and libkrb5-dev, which
# pip needs to build python-gssapi (the `kerberos` extra).
SYSTEM_COMMANDS := prometheus zsh fish chromium containerd runc iptables buildah debootstrap
system-packages:
	@missing=""; for c in $(SYSTEM_COMMANDS); do command -v $$c >/dev/null || missing="$$missing $$c"; done; \
	[ -x /usr/lib/cni/bridge ] || missing="$$missing containernetworking-plugins"; \
	[ -x /usr/sbin/krb5kdc ] || missing="$$missing krb5-kdc"; \
	[ -x /usr/sbin/kadmin.local ] || missing="$$missing krb5-admin-server"; \
	command -v krb5-config >/dev/null || missing="$$missing libkrb5-dev"; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# python-gssapi (the `kerberos` extra), built against the system's libkrb5-dev: after system-packages.
$(VENV)/.kerberos: pyproject.toml $(VENV)/.installed | system-packages
	$(PY) -m pip install -q -e '.[kerberos]'
	touch $@

# The Go builds start first, in the background, with the system's python3 (harness/gobuilds.py is
# standard library only): the kube-apiserver, helm and the node's binaries compile while pip
# downloads, and `harness prepare` below waits for each under the cache lock they share. With
# GO_BUILDS_FLUX=1 (`make test`), Flux's controllers for tests/gitops build too, at idle priority, on
# CPU nothing else wants while the rest is set up and the suite runs. Logs: $(KQUOTA_CACHE)/logs/go-builds*.log.
GO_BUILDS_FLUX ?=
go-builds:
	@mkdir -p "$(KQUOTA_CACHE)/logs"
	@$(PYTHON) -m harness.gobuilds </dev/null >>"$(KQUOTA_CACHE)/logs/go-builds.log" 2>&1 &
	$(if $(GO_BUILDS_FLUX),@$(PYTHON) -m harness.gobuilds --flux </dev/null >>"$(KQUOTA_CACHE)/logs/go-builds-flux.log" 2>&1 &)

# Kafka jars (Maven Central), the kube-apiserver harness (Go modules), helm (Go modules),
# the node's kubelet, controller-manager and scheduler (Go modules) and its images (buildah).
tools: go-builds venv system-packages $(VENV)/.kerberos
	$(PY) -m harness prepare

setup: tools

lint: venv
	$(VENV)/bin/ruff check operator harness tests bench deploy
	$(VENV)/bin/ruff format --check operator harness tests bench deploy
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Two pytest-xdist workers: most of the suite waits on brokers, API servers and operators rather than
# computing, so two at once fit the 2 cores and keep a cold run inside its budget (README). Each
# worker has its own kube-apiserver and broker; a module's tests stay on one worker (--dist loadfile),
# so a module's fixtures start once. Only tests/node/test_node.py starts a node in `make test`.
# tests/gitops (Flux) is scheduled last: its controllers build in the background meanwhile (go-builds).
TEST_WORKERS ?= 2
test: GO_BUILDS_FLUX = 1
test: setup lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=40 $(PYTEST_ARGS)

# The tests on the single node (tests/node, marker `node`; also part of `make test`).
test-node: setup
	$(PY) -m pytest -m node tests/node --durations=10 $(PYTEST_ARGS)

# The advisor on the node (tests/node/test_advisor_job.py): kquota advise as a local-mode Job, and on Spark
# on Kubernetes with executors as pods (driver in a Job; kquota plan --impact with the driver here), each
# against local mode's answer. Builds the advisor image (Dockerfile.advisor); opt-in, a release check
# (docs/advisor.md, "Running on Kubernetes").
test-node-advisor: setup
	KQUOTA_NODE_ADVISOR=1 $(PY) -m pytest -m node tests/node/test_advisor_job.py --durations=10 $(PYTEST_ARGS)

test-unit: venv
	$(PY) -m pytest -m unit $(PYTEST_ARGS)

# The fault suite alone (also part of `make test`); prints the resilience report.
test-faults: setup
	$(PY) -m pytest -m faults $(PYTEST_ARGS)

# The Flux suite alone (tests/gitops, marker `gitops`; also part of `make test`): Flux's source-controller
# and kustomize-controller, built from their Go modules, syncing Git repositories of quotas, and
# docs/gitops.md's walkthrough. The build comes first, in the foreground, outside pytest's timeout.
test-gitops: setup
	$(PY) -m harness prepare --flux
	$(PY) -m pytest -m gitops tests/gitops --durations=10 $(PYTEST_ARGS)

# The e2e core on every supported Kafka version and mode (tests/e2e/test_kafka_versions.py).
# `make test` runs its 3.9 ZooKeeper case only; this is the release check (README, "Supported versions").
test-matrix: setup
	KQUOTA_KAFKA_MATRIX=all $(PY) -m pytest -m kafka_matrix tests/e2e/test_kafka_versions.py $(PYTEST_ARGS)

# The Kubernetes floor (README, "Supported versions"): the tests marked k8s_floor (CRD install, the
# admission corpus, the e2e core, Helm install) on an API server built from k8s.io/kubernetes 1.31
# (harness/kube-apiserver-1.31/). `make test` runs the same tests on 1.35; this is the release check.
# The build comes first, outside pytest's per-test timeout (first build ~15 min on 2 busy cores; then cached).
test-k8s-floor: setup
	$(PY) -m harness prepare --kube-version 1.31
	KQUOTA_KUBE_VERSION=1.31 $(PY) -m pytest -m k8s_floor tests/e2e --durations=10 $(PYTEST_ARGS)

# The seeded chaos soak (harness/soak/): a random GitOps history of SEED with FAULTS faults,
# invariants checked after each; the same SEED replays the same history. KINDS narrows the faults;
# BREAK=n freezes the operator at step n on purpose (the soak must report it). BROKERS=3: a 3-broker
# KRaft cluster, TopicQuotas in the history, and the leader-moved and controller-killed faults.
# STARVE=1: beside CPU hogs, twice as many as the cores (harness/starve.py).
SEED ?= 1
FAULTS ?= 100
KINDS ?=
BREAK ?=
BROKERS ?=
STARVE ?=
soak: setup
	$(if $(STARVE),$(PY) -m harness starve --) $(PY) -m harness soak --seed $(SEED) --faults $(FAULTS) $(if $(KINDS),--kinds $(KINDS)) $(if $(BREAK),--break-at $(BREAK)) $(if $(BROKERS),--brokers $(BROKERS))

# The e2e, fault, soak and node suites on a starved machine: CPU hogs, twice as many as the cores,
# run beside them (harness/starve.py). A release check like test-matrix, not part of `make test`
# (it runs those suites again, slower); docs/testing.md records its runs. Two workers as in `make test`:
# the left keys of issue #33 showed up in exactly that shape (two workers on a busy machine), and one
# worker would take several hours beside the hogs.
STRESS_MARKERS ?= e2e or faults or soak or node
STRESS_WORKERS ?= 2
test-stress: setup
	$(PY) -m harness starve -- $(PY) -m pytest -m "$(STRESS_MARKERS)" -n $(STRESS_WORKERS) --dist loadfile --durations=20 $(PYTEST_ARGS)

crds: venv
	$(PY) -m kquota.crdgen
	$(PY) deploy/values_schema.py

# Regenerate the image's pinned runtime dependencies (requirements.lock).
lock: venv
	$(PY) -m pip install -q pip-tools==7.6.2
	$(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --build-deps-for=wheel -o requirements.lock pyproject.toml

demo: setup
	$(PY) -m harness demo

# The same demo with the operator as pods from the chart on a single-node cluster (needs root).
demo-node: setup
	$(PY) -m harness demo --node

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info operator/*.egg-info
