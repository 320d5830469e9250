"""The HTML report's plots, each a matplotlib figure rendered to a base64 PNG (None when there is nothing to draw)."""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode()


def plot_usage_vs_quota(report: Mapping[str, Any], resource: str, top_n: int) -> str | None:

    rows = [e for e in report["entities"] if e["resource"] == resource]
    rows = sorted(rows, key=lambda e: -(e["p99"] or 0))[:top_n]
    if not rows:
        return None
    rows.reverse()
    labels = [e["entity"] for e in rows]
    scale, unit = (1.0, "%") if resource == "request" else (2.0**20, "MiB/s")
    fig = Figure(figsize=(9, 0.35 * len(rows) + 1.5))
    ax = fig.subplots()
    y = range(len(rows))
    ax.barh(y, [(e["p99"] or 0) / scale for e in rows], color="#4c78a8", label="p99 usage")
    ax.scatter([(e["max"] or 0) / scale for e in rows], y, color="#f58518", marker="|", s=200, label="max usage")
    ax.scatter(
        [(e["quota"] or 0) / scale for e in rows], y, color="#e45756", marker="D", s=30, label="recommended quota"
    )
    ax.set_yticks(list(y), labels=labels, fontsize=8)
    ax.set_xlabel(f"{resource} ({unit}, per broker)")
    ax.set_title(f"{resource}: usage against the recommended quota, top {len(rows)} by p99")
    ax.legend(loc="lower right", fontsize=8)
    data = _png(fig)
    return data


def distribution_figure(report: Mapping[str, Any], resource: str) -> Any | None:
    """The histogram of per-entity p99s, with each population's default and outlier fence labelled once.

    A fence belongs to one population (kind and resource): each gets one legend entry naming its
    kind, as the defaults do, so two fences are never two identical "outlier fence" entries.
    """

    values = [e["p99"] for e in report["entities"] if e["resource"] == resource and e["p99"] and e["p99"] > 0]
    if not values:
        return None
    scale, unit = (1.0, "%") if resource == "request" else (2.0**20, "MiB/s")
    data = np.array(values) / scale
    fig = Figure(figsize=(8, 3.5))
    ax = fig.subplots()
    lo, hi = float(data.min()), float(data.max())
    if hi > lo * 1.01:
        ax.hist(data, bins=list(np.geomspace(lo, hi * 1.001, min(40, max(5, len(data))))), color="#4c78a8")
        ax.set_xscale("log")
    else:
        ax.hist(data, bins=5, color="#4c78a8")
    for d in report["recommendations"]:
        if d["resource"] == resource and d["is_default"]:
            ax.axvline(d["quota"] / scale, color="#e45756", linestyle="--", label=f"default ({d['kind']})")
    fences: dict[str, float] = {}
    for e in report["entities"]:
        if e["resource"] == resource and e.get("fence"):
            fences.setdefault(e["kind"], e["fence"])
    styles = (":", "-.", (0, (1, 3)))
    for (kind, fence), style in zip(sorted(fences.items()), styles * len(fences), strict=False):
        ax.axvline(fence / scale, color="#72b7b2", linestyle=style, label=f"outlier fence ({kind})")
    ax.set_xlabel(f"per-entity p99 ({unit})")
    ax.set_ylabel("entities")
    ax.set_title(f"{resource}: distribution of per-entity p99 ({len(values)} entities)")
    ax.legend(fontsize=8)
    return fig


def plot_distribution(report: Mapping[str, Any], resource: str) -> str | None:
    fig = distribution_figure(report, resource)
    return None if fig is None else _png(fig)


def plot_capacity(report: Mapping[str, Any]) -> str | None:

    rows = [r for r in report["capacity"] if r["resource"] in ("produce", "fetch")]
    if not rows:
        return None
    rows.sort(key=lambda r: (r["resource"], r["broker"]))
    labels = [f"{r['broker']}\n{r['resource']}" for r in rows]
    x = np.arange(len(rows))
    scale = 2.0**20
    fig = Figure(figsize=(max(6, 0.9 * len(rows) + 2), 4))
    ax = fig.subplots()
    ax.bar(x - 0.2, [(r["committed"] or 0) / scale for r in rows], 0.4, label="sum of quotas", color="#e45756")
    ax.bar(x + 0.2, [(r["observed_peak"] or 0) / scale for r in rows], 0.4, label="observed peak", color="#4c78a8")
    caps = [(r["capacity"] or 0) / scale for r in rows]
    if any(caps):
        ax.scatter(x, caps, marker="_", s=900, color="black", label="broker capacity")
    ax.set_xticks(x, labels=labels, fontsize=8)
    ax.set_ylabel("MiB/s")
    ax.set_title("Per-broker capacity: committed quotas and observed peak")
    ax.legend(fontsize=8)
    out = _png(fig)
    return out


def plot_topics(report: Mapping[str, Any], top_n: int) -> str | None:

    rows = sorted(report.get("topics", []), key=lambda r: -(r["in_p99"] or 0))[:top_n]
    if not rows:
        return None
    scale = 2.0**20
    x = np.arange(len(rows))
    fig = Figure(figsize=(max(6, 0.8 * len(rows) + 2), 4))
    ax = fig.subplots()
    ax.bar(x - 0.2, [(r["in_p99"] or 0) / scale for r in rows], 0.4, label="produce p99", color="#4c78a8")
    ax.bar(x + 0.2, [(r["out_p99"] or 0) / scale for r in rows], 0.4, label="fetch p99", color="#72b7b2")
    ax.scatter(x - 0.2, [r["produce_budget"] / scale for r in rows], marker="D", color="#e45756", label="budget")
    ax.scatter(x + 0.2, [r["consume_budget"] / scale for r in rows], marker="D", color="#e45756")
    ax.set_xticks(x, labels=[r["topic"] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("MiB/s (all brokers)")
    ax.set_title("Topics: total rate p99 and suggested TopicQuota budget")
    ax.legend(fontsize=8)
    out = _png(fig)
    return out
